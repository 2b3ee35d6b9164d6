"""Scenario schema: malformed scenarios name file, line and key; extends and --set."""
import os
import pathlib
import subprocess
import sys

import pytest

from restartlab import scenario
from restartlab.scenario import ScenarioError

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(os.path.dirname(HERE), "scenarios")

GOOD = """\
extends: systems/local.yaml
name: t
trainer:
  train_iters: 20
phases:
  - name: sync
    checkpoint: sync
failures:
  schedule:
    at_steps: [10]
"""

# (yaml text, expected line, expected fragment)
BAD = [
    ("name: t\njob:\n  walltme: 1h\nphases: [{name: a}]\n", 3, "job.walltme: unknown key (did you mean 'walltime'?)"),
    ("name: t\nphases: [{name: a}]\ntrainr: {}\n", 3, "trainr: unknown key (did you mean 'trainer'?)"),
    ("name: t\njob:\n  nodes: two\nphases: [{name: a}]\n", 3, "job.nodes: expected an integer"),
    ("name: t\njob:\n  walltime: forever\nphases: [{name: a}]\n", 3, "job.walltime: expected a duration"),
    ("name: t\nlaunch:\n  launcher: mpirun\nphases: [{name: a}]\n", 3, "launch.launcher: 'mpirun' is not one of"),
    ("name: t\ntrainer:\n  model: gpt2\nphases: [{name: a}]\n", 3, "trainer.model: 'gpt2' is not one of"),
    ("name: t\nphases:\n  - name: a\n    checkpoint: maybe\n", 4, "phases[0].checkpoint: 'maybe' is not one of"),
    ("name: t\nphases:\n  - checkpoint: sync\n", 3, "phases[0].name: required key is missing"),
    ("name: t\nphases:\n  - name: a b\n", 3, "phases[0].name: 'a b': use letters"),
    ("name: t\nphases: [{name: a}, {name: a}]\n", 2, "duplicate phase name"),
    ("name: t\nphases: []\n", 2, "phases: at least one phase"),
    ("name: t\nfailures:\n  schedule:\n    every: 10s\n    at_steps: [5]\nphases: [{name: a}]\n", 5,
     "failures.schedule.at_steps: give exactly one of every, at_steps, every_steps, mtbf, fuzz (got every from "),
    ("name: t\nfailures:\n  kind: some-nodes\nphases: [{name: a}]\n", 3, "failures.kind: 'some-nodes'"),
    ("name: t\ntrainer:\n  tp: 3\nlaunch:\n  ranks_per_node: 4\nphases: [{name: a}]\n", 3, "trainer.tp: 3 does not divide"),
    ("name: t\ntrainer:\n  dp_replicate: 3\nlaunch:\n  ranks_per_node: 4\nphases: [{name: a}]\n", 3,
     "trainer.dp_replicate: 3 does not divide the 4 data-parallel ranks"),
    ("name: t\njob:\n  nodes: 4\ntrainer:\n  dp_replicate: 4\nlaunch:\n  ranks_per_node: 1\n"
     "relaunch:\n  on_node_loss: shrink\nphases: [{name: a}]\n", 5,
     "trainer.dp_replicate: 4 replicas do not divide the data-parallel ranks of a job shrunk to 1 node"),
    ("name: t\nrelaunch:\n  max_attemps: 3\nphases: [{name: a}]\n", 3, "relaunch.max_attemps: unknown key (did you mean 'max_attempts'?)"),
    ("name: t\nfailures:\n  schedule:\n    at_steps: [5000]\nphases: [{name: a}]\n", 4,
     "beyond the last step (trainer.train_iters: 100"),
    ("name: t\nrelaunch:\n  warm: maybe\nphases: [{name: a}]\n", 3, "relaunch.warm: expected true or false"),
    ("name: t\nphases:\n  - name: a\n    warm: 3\n", 4, "phases[0].warm: expected true or false"),
    ("name: t\nlaunch:\n  env: [A, B]\nphases: [{name: a}]\n", 3, "launch.env: expected a mapping"),
    ("name: t\njob:\n  account: \"a\\nb\"\nphases: [{name: a}]\n", 3, "job.account: a scheduler directive value cannot contain a newline"),
    ("name: t\nphases: [{name: a\n", 3, "invalid YAML"),
    ("name: t\njob:\n  walltime: 00:05:00\nrelaunch:\n  walltime_margin: 10m\nphases: [{name: a}]\n", 5,
     "relaunch.walltime_margin: must be shorter than job.walltime (600s >= 300s)"),
    ("name: t\nphases:\n  - name: base\n    checkpoint: none\n    failures:\n      schedule: {at_steps: [5]}\n", 5,
     "saves no checkpoints"),
]


@pytest.mark.parametrize("text,line,frag", BAD, ids=[b[2][:30] for b in BAD])
def test_malformed_scenarios_name_file_line_key(tmp_path, text, line, frag):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(p))
    msg = str(e.value)
    assert f"{p}:{line}:" in msg and frag in msg, msg


def test_cli_exit_code_2_and_message(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(BAD[0][0])
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "validate", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "did you mean 'walltime'" in r.stderr


def test_extends_and_set(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(GOOD)
    sc = scenario.load(str(p), ["trainer.train_iters=30", "phases.0.checkpoint=async", "job.account=proj"])
    assert sc.scheduler == "local"                      # from systems/local.yaml
    assert sc.trainer.train_iters == 30
    assert sc.phases[0].checkpoint == "async"
    assert sc.job.account == "proj"
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(p), ["trainer.train_iter=30"])
    assert "--set trainer.train_iter" in str(e.value) and "did you mean 'train_iters'" in str(e.value)


def test_error_in_parent_names_parent_file(tmp_path):
    (tmp_path / "parent.yaml").write_text("job:\n  nodez: 2\n")
    (tmp_path / "child.yaml").write_text("extends: parent.yaml\nphases: [{name: a}]\n")
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(tmp_path / "child.yaml"))
    assert f"{tmp_path / 'parent.yaml'}:2: job.nodez" in str(e.value)


@pytest.mark.parametrize("name", sorted(os.path.relpath(str(p), SCEN)[:-len(".yaml")] for d in ("", "examples")
                                         for p in pathlib.Path(SCEN, d).glob("*.yaml")))
def test_examples_validate(name):
    scenario.load(os.path.join(SCEN, f"{name}.yaml"))


def test_trainer_data_is_relative_to_the_scenario_and_must_exist(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "text.bin").write_bytes(b"\0" * 200)
    p = tmp_path / "sub" / "s.yaml"
    p.write_text("name: t\ntrainer:\n  data: text.bin\nphases: [{name: a}]\n")
    sc = scenario.load(str(p))
    assert sc.trainer.data == str(tmp_path / "sub" / "text.bin")
    p.write_text("name: t\ntrainer:\n  data: missing.bin\nphases: [{name: a}]\n")
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(p))
    assert f"{p}:3: trainer.data: " in str(e.value) and "missing.bin: no such file" in str(e.value)


def test_set_extends_swaps_the_site_profile():
    """--set extends=FILE replaces the scenario's own `extends`.

    Here scenarios/local.yaml extends systems/local.yaml. The result has the new profile's scheduler
    and launcher, and keeps the scenario's own keys. Nothing is left of the old profile."""
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["extends=systems/slurm.yaml", "job.nodes=2"])
    assert (sc.scheduler, sc.launch.launcher) == ("slurm", "srun")
    assert sc.trainer.train_iters == 120 and sc.job.nodes == 2
    local = scenario.load(os.path.join(SCEN, "local.yaml"))
    assert (local.scheduler, local.launch.launcher) == ("local", "hydra")
    with pytest.raises(scenario.ScenarioError, match="--set: extends: 'systems/nope.yaml' not found"):
        scenario.load(os.path.join(SCEN, "local.yaml"), ["extends=systems/nope.yaml"])


def test_an_experiments_copy_keeps_its_scenario_dir_for_baseline_reuse(tmp_path):
    """An experiment's copy of its scenario keeps its scenario dir, for baseline reuse.

    run/fuzz --baseline-from render the other experiment's copy of its scenario again, and compare
    the baseline's command. Every shipped example finds its program through {scenario_dir}. That
    program must come out where it ran, not beside the copy. The copy names its source."""
    from restartlab.job import experiment, reuse
    from restartlab.contracts import layout
    plain = os.path.join(os.path.dirname(HERE), "scenarios", "examples", "plain.yaml")
    sc = scenario.load(plain)
    _, theirs = experiment.create(sc, "local", expt_dir=str(tmp_path / "a"))
    os.makedirs(theirs.phases[0].dir)
    pathlib.Path(layout.Phase(theirs.phases[0].dir).completed).touch()  # as if it had finished
    assert scenario.load(layout.Expt(str(tmp_path / "a")).scenario, resolved=True).source == plain
    _, mine, _ = experiment.render_script(scenario.load(plain), "local", str(tmp_path / "b"))
    assert list(reuse.check(mine, str(tmp_path / "a"))) == ["baseline"]
    _, other, _ = experiment.render_script(scenario.load(plain, ['phases.0.args=[--steps, "30"]']), "local",
                                           str(tmp_path / "c"))
    with pytest.raises(reuse.ReuseError, match="ran another command"):
        reuse.check(other, str(tmp_path / "a"))
    # relaunch.on_node_loss spares: each experiment's launch names its own host file (review: the spec
    # comparison once refused every such reuse for it)
    spares = ["relaunch.on_node_loss=spares", "job.spare_nodes=1"]
    _, theirs = experiment.create(scenario.load(plain, spares), "local", expt_dir=str(tmp_path / "d"))
    os.makedirs(theirs.phases[0].dir)
    pathlib.Path(layout.Phase(theirs.phases[0].dir).completed).touch()
    _, mine, _ = experiment.render_script(scenario.load(plain, spares), "local", str(tmp_path / "e"))
    assert mine.phases[0].launch.count(str(tmp_path / "e")) == 1  # its host file
    assert list(reuse.check(mine, str(tmp_path / "d"))) == ["baseline"]
    _, mine, _ = experiment.render_script(scenario.load(plain, spares + ["launch.env.X=1"]), "local",
                                          str(tmp_path / "f"))
    with pytest.raises(reuse.ReuseError, match="launched otherwise"):  # the same program, other ranks' env
        reuse.check(mine, str(tmp_path / "d"))
