"""The frameworks most training jobs run on, for real (#51).
They are the Hugging Face Trainer (transformers 5.25.0, examples/transformers/train.py) and
DeepSpeed (0.19.8, ZeRO-2, examples/deepspeed/train.py). Each runs on CPU over gloo, two ranks under
real mpiexec and real SIGKILLs, through their adapters. `restartlab run` with kills resumes exactly.
What their checkpoints do not survive is a finding, forced on purpose. For example, after a kill
inside a Trainer's save, every relaunch crashes on the torn checkpoint its documented resume picks.
A scenario naming one of them where the program's Python lacks it is refused before anything runs."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest

from restartlab.contracts import layout
from tests.helpers import job_tag
# the same `restartlab` runner, experiment fixture and summary reader as the other frameworks' tests
from tests.test_your_trainer import WARM, _summary, _warm_ranks, baseline_of, expt, restartlab  # noqa: F401 (expt: a fixture)

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF = os.path.join(ROOT, "scenarios", "examples", "transformers.yaml")
DS = os.path.join(ROOT, "scenarios", "examples", "deepspeed.yaml")


def need(module):
    """The framework, or a skip.
    Under RESTARTLAB_REQUIRE_ALL=1 (CI, which installs both) a missing one is a failure.
    `pytest -k "transformers or deepspeed"` must run the real packages there, none skipped."""
    if importlib.util.find_spec(module) is not None:  # found, not imported: the ranks import it
        return
    if os.environ.get("RESTARTLAB_REQUIRE_ALL") == "1":
        pytest.fail(f"{module} is not installed (RESTARTLAB_REQUIRE_ALL=1: not skipping)", pytrace=False)
    pytest.skip(f"{module} is not installed (make test installs it)")


def _output(d, attempt, phase="restart"):
    with open(layout.Expt(d).phase(phase).attempt(attempt).output, errors="replace") as f:
        return f.read()


def test_transformers_trainer_through_run_resumes_exactly(expt, tmp_path_factory):
    """Two kills, each after a save (checkpoint-15, checkpoint-25).
    The Trainer's own resume (get_last_checkpoint) takes the newest and says so in its log. Every
    step's loss equals the baseline's at full precision. The example prints them from a
    TrainerCallback, since the Trainer's own lines round to 4 digits. Its RNG, optimizer and data
    position are restored (the state line).

    The relaunches are warm: forks of a pool that imported torch and transformers. Before a forked
    rank took its own OMP_NUM_THREADS, they ran the pool's 2 threads against the baseline's 1. Then
    the loss left the baseline's at step 27 (3 of 3 runs). It has been exact since (3 of 3)."""
    need("transformers")
    # the Trainer's baseline, run once for the tests that compare against it (--baseline-from)
    r = restartlab("run", HF, "--expt-dir", expt, "--plain", *WARM, "--baseline-from", baseline_of(tmp_path_factory, HF))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _warm_ranks(expt) == [0, 2, 2]
    v = _summary(expt)["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"], v
    assert v["survived"] and v["baseline"] == "loss identical to the baseline's at all 30 steps both logged", v
    for x, step in zip(v["restarts"][1:], (15, 25)):
        assert x["resumed_from"] == step, x
        assert "Resuming training from checkpoint with epoch 0 and global step %d" % step in _output(expt, x["attempt"])
        st = x["state"]
        assert not st["forgot"] and {"params", "opt_state", "opt_step", "lr", "rng_torch", "batch"} <= set(st["equal"]), st
    # its saves' stalls, estimated from its "Saving model checkpoint to" lines (it logs no length)
    ph = _summary(expt)["restart"]
    assert ph["saves_estimated"] >= 2 and ph["saves_estimated"] == ph["save"]["ckpt_save_seconds"]["count"], ph["save"]


def test_an_unmodified_trainer_script_gets_its_steps_and_full_verdict(expt):
    """#63.6: the Trainer as it comes, with no callback printing a step and no `progress` in the scenario.
    The steps are rank 0's optimizer steps from the training-state probe. The loss comes from its
    own {'loss': '5.399', ...} lines (4 significant digits). Two kills land, gated on checkpoint-15's
    and checkpoint-25's completion. The program waits after those saves (--hold-at), so the kill
    lands there however loaded the machine is. The relaunches resume from them, numbered by the
    Trainer's own resume line. The verdict is whole: every step's loss is compared (said rounded),
    and the state at each resume is equal."""
    need("transformers")
    r = restartlab("run", HF, "--expt-dir", expt, "--plain", "--set", "trainer.program.progress=null",
                   "--set", 'phases=[{name: baseline, checkpoint: none, args: [--no-step-lines]}, '
                   '{name: restart, checkpoint: sync, args: [--save-steps, "5", --no-step-lines, --hold-at, "15,25"]}]')
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert not re.search(r"\bstep \d+ loss", _output(expt, 1)), _output(expt, 1)[-2000:]  # no progress line printed
    ph = _summary(expt)["restart"]
    v = ph["survival"]
    assert ph["completed"] and ph["kills"] == 2, ph
    assert [(x["outcome"], x["resumed_from"]) for x in v["restarts"]] == [("first", 0), ("newest", 15),
                                                                          ("newest", 25)], v
    assert v["survived"] and v["baseline"] == ("loss identical to the baseline's at all 30 steps both logged (the "
                                               "losses of the program's own log lines, as rounded as it prints "
                                               "them)"), v
    for x in v["restarts"][1:]:
        st = x["state"]
        assert not st["forgot"] and {"params", "opt_state", "opt_step", "lr", "rng_torch", "batch"} <= set(st["equal"]), st


def test_transformers_killed_inside_a_save_crash_loops_and_the_verdict_says_why(expt):
    """The kill is aimed inside the save of checkpoint-10, with checkpoint-5 complete.
    The model is wide enough that a save takes a while. The torn folder has no trainer_state.json.
    get_last_checkpoint takes it anyway (the highest number), and every relaunch crashes in
    start-up. The verdict names the folder the program chose, why it is not complete, and the
    exception from its output. It also names the checkpoint that would have been safe, and the
    crash loop. The phase never finishes: exit 1. The relaunches are warm (forks of a pool that
    imported torch and transformers). A crash loop of forked ranks is told as one of cold ones."""
    need("transformers")
    r = restartlab("fuzz", HF, "--expt-dir", expt, "--plain", "--kills", "1", "--save-share", "1",
                   "--after-complete", "--no-baseline", "--window", "60s", *WARM,
                   "--set", 'phases.1.args=[--save-steps, "5", --width, "1024"]')
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(expt).fuzz_summary) as f:
        data = json.load(f)
    (kill,) = data["kills"]
    assert kill["where"] == "save" and kill["newest_complete_seen"] is not None, kill
    (torn,) = kill["saving"]
    good = kill["newest_complete_seen"]
    torn_path = os.path.join(layout.Expt(expt).phase("restart").path, "ckpts", torn)
    crashes = [f for f in data["verdict"]["findings"] if f.startswith("attempt ")]
    assert len(crashes) >= 3, data["verdict"]  # every relaunch the fuzz's budget allows
    for f in crashes:
        assert f"the program would load {torn_path} (step {torn.split('-')[1]}, NOT complete by its rule " \
               "file:trainer_state.json+torchzips+hfrngs (no trainer_state.json" in f and "a save that did not finish" in f, f
        assert ("ValueError: Can't find a valid checkpoint at" in f or
                "No such file or directory" in f and "trainer_state.json" in f), f
        assert f"loading the newest complete checkpoint, step {good} (" in f and "would have been safe" in f, f
    assert any(f.startswith("crash loop: 3 attempts in a row died before a step") for f in data["verdict"]["findings"])
    assert not data["verdict"]["finished"], data["verdict"]


def test_deepspeed_through_run_resumes_exactly(expt):
    """Two kills after saves.
    load_checkpoint takes the tag `latest` names (global_step15, then global_step25). Every step's
    loss equals the baseline's. ZeRO-2's optimizer shards, the step count and the learning rate
    come back (the state line)."""
    need("deepspeed")
    r = restartlab("run", DS, "--expt-dir", expt, "--plain")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = _summary(expt)["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"], v
    assert v["survived"] and v["baseline"] == "loss identical to the baseline's at all 30 steps both logged", v
    for x in v["restarts"][1:]:
        st = x["state"]
        assert not st["forgot"] and {"params", "opt_state", "opt_step", "lr", "rng_torch"} <= set(st["equal"]), st
    with open(os.path.join(layout.Expt(expt).phase("restart").path, "ckpts", "latest")) as f:
        assert f.read().strip() == "global_step30"
    ph = _summary(expt)["restart"]  # its saves' stalls, estimated from DeepSpeed's line as each starts
    assert ph["saves_estimated"] >= 2 and ph["saves_estimated"] == ph["save"]["ckpt_save_seconds"]["count"], ph["save"]


@pytest.mark.parametrize("scen,module", [(HF, "transformers"), (DS, "deepspeed")])
def test_a_framework_the_programs_python_lacks_is_refused_before_anything_runs(tmp_path, scen, module):
    """The program's Python cannot import the adapter's framework.
    Here it is the machine's own, which the suite's venv extends but which has neither framework.
    `run` and `fuzz` say so with the file, line and key, and exit 2. There is no traceback, and
    they make no experiment."""
    bare = "/usr/bin/python3"
    probe = subprocess.run([bare, "-c", f"import importlib.util as u; print(u.find_spec('{module}') is None)"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        pytest.skip(f"{bare} has {module}: no Python without it here")
    path = tmp_path / "mine.yaml"
    path.write_text(f"extends: {scen}\ntrainer:\n  program:\n    command: [{bare}, train.py]\n")
    for verb in ("run", "fuzz"):
        d = str(tmp_path / verb)
        r = restartlab(verb, str(path), "--expt-dir", d, "--plain", timeout=120)
        assert r.returncode == 2, (verb, r.stdout[-2000:], r.stderr[-2000:])
        assert f"{path}:4: trainer.program.command: {bare}, the program's Python, cannot import {module} " \
               f"(the {module} adapter's framework)" in r.stderr, r.stderr
        assert f"restartlab[{module}]" in r.stderr and "Traceback" not in r.stderr + r.stdout
        assert not os.path.exists(d)



def _fuzz_with_rank_1_slowed(scen, expt, *more, crashes=3, baseline=None, warm=False):
    """`restartlab fuzz` with rank 1's torch.save files held half-written for 3 s.
    The one kill is aimed up to 2 s into a save (seed 1). `more` options are added. The baseline is
    taken from the experiment `baseline` names, only when one is given. The relaunches are warm when
    asked: forks of a pool that imported torch and the framework. The kill lands in attempt 1,
    which is cold either way. The fuzz exits 1 on its finding.

    Returns the kill's row, the checkpoint dir, and the findings on attempts. There is one finding
    per relaunch the fuzz's budget allows, at least `crashes`."""
    r = restartlab("fuzz", scen, "--expt-dir", expt, "--plain", "--kills", "1", "--seed", "1", "--save-share", "1",
                   "--after-complete", "--window", "60s", "--save-jitter", "2s",
                   "--set", "failures.slow_writes.rank=1", "--set", "failures.slow_writes.seconds=3s",
                   *more, *(WARM if warm else ()), *(("--baseline-from", baseline) if baseline else ("--no-baseline",)))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(expt).fuzz_summary) as f:
        data = json.load(f)
    (kill,) = data["kills"]
    found = [f for f in data["verdict"]["findings"] if f.startswith("attempt ")]
    assert len(found) >= crashes, data["verdict"]
    return kill, os.path.join(layout.Expt(expt).phase("restart").path, "ckpts"), found


def test_transformers_trainer_state_lands_before_another_ranks_rng_state(expt):
    """The Trainer's rank 0 writes trainer_state.json last of its own files, with no barrier for the
    other ranks' rng_state_<r>.pth. Rank 1's writes are slowed (each torch.save file held
    half-written for 3 s), and the kill is aimed late in a save. It lands while checkpoint-10 holds
    trainer_state.json and a cut-short rng_state_1.pth. Every relaunch's get_last_checkpoint takes
    it, and rank 1's torch.load of its RNG state fails. The verdict names the file cut short under
    the adapter's rule (file:trainer_state.json+torchzips+hfrngs), the exception, and checkpoint-5."""
    need("transformers")
    kill, ckpts, crashes = _fuzz_with_rank_1_slowed(HF, expt, warm=True)
    assert kill["where"] == "save" and kill["saving"] == ["checkpoint-10"] and kill["newest_complete_seen"] == 5, kill
    assert os.path.exists(os.path.join(ckpts, "checkpoint-10", "trainer_state.json"))  # rank 0 had finished
    for f in crashes:
        assert f"the program would load {ckpts}/checkpoint-10 (step 10, NOT complete by its rule " \
               "file:trainer_state.json+torchzips+hfrngs (rng_state_1.pth cut short" in f, f
        # torch.load of the half file in _load_rng_state: OSError (seen, the half of 14405 bytes), or
        # the zip reader's own error for another cut
        assert "OSError: [Errno 22] Invalid argument" in f or "PytorchStreamReader failed reading zip archive" in f, f
        assert f"loading the newest complete checkpoint, step 5 ({ckpts}/checkpoint-5), would have been safe" in f, f
    out = _output(expt, 1)
    assert f"restartlab: slow write: {ckpts}/checkpoint-10/rng_state_1.pth held half-written" in out, out[-2000:]


def test_transformers_rank_late_to_its_rng_state_resumes_with_that_ranks_rng_forgotten(expt, tmp_path_factory):
    """The same race with rank 1 late to begin its file (failures.slow_writes.hold: before, 3 s).
    The kill lands while checkpoint-10 holds everything rank 0 writes, trainer_state.json included,
    and no rng_state_1.pth. The relaunch resumes from it without an error. The Trainer's
    _load_rng_state says "Didn't find an RNG file for process 1" at INFO, which a replica does not
    print by default. From then on rank 1's dropout draws differ. The verdict names each link:
    - the checkpoint was not complete by the adapter's rule (hfrngs: training_args.bin counts 2
      processes);
    - the resume did not restore torch's RNG on rank 1;
    - the loss left the baseline."""
    need("transformers")
    kill, ckpts, found = _fuzz_with_rank_1_slowed(HF, expt, "--set", "failures.slow_writes.hold=before", crashes=2,
                                             baseline=baseline_of(tmp_path_factory, HF), warm=True)
    assert kill["where"] == "save" and kill["saving"] == ["checkpoint-10"] and kill["newest_complete_seen"] == 5, kill
    held = set(os.listdir(os.path.join(ckpts, "checkpoint-10")))
    assert {"trainer_state.json", "rng_state_0.pth"} <= held and "rng_state_1.pth" not in held, held
    assert "attempt 2: resumed from step 10, whose checkpoint was not complete at the launch (rng_state_1.pth not " \
           "there (2 processes' RNG states))" in found, found
    assert "attempt 2: the resume at step 11 did not restore torch's CPU RNG on rank 1 of 2" in found, found
    with open(layout.Expt(expt).fuzz_summary) as f:
        findings = json.load(f)["verdict"]["findings"]
    assert any(f.startswith("diverged from the baseline at step 11 ") for f in findings), findings
    assert "Resuming training from checkpoint with epoch 0 and global step 10" in _output(expt, 2)
    assert f"restartlab: slow write: {ckpts}/checkpoint-10/rng_state_1.pth not begun for 3 s" in _output(expt, 1)


def test_deepspeed_latest_names_a_tag_whose_shards_are_not_all_written(expt):
    """DeepSpeed's rank 0 writes `latest` after its own files and before the barrier that waits for
    the other ranks' shards. Rank 1's writes are slowed (failures.slow_writes: each torch.save file
    held half-written for 3 s). The kill is aimed 1.5 s into a save (--save-jitter, seed 1). It
    lands while `latest` already names global_step10 and rank 1's shard is cut short. Every
    relaunch's load_checkpoint takes that tag and crashes reading the shard. The verdict names it:
    `latest` names the tag, the shard cut short, the exception, and global_step5, which would have
    been safe."""
    need("deepspeed")
    kill, ckpts, crashes = _fuzz_with_rank_1_slowed(DS, expt)
    assert kill["where"] == "save" and "global_step10" in kill["saving"] and kill["newest_complete_seen"] == 5, kill
    for f in crashes:
        assert f"the program would load {ckpts}/global_step10 (step 10, NOT complete by its rule " \
               "pointer:latest+torchzips+dsshards (latest names it, but zero_pp_rank_1_mp_rank_00_optim_states.pt cut " \
               "short" in f, f
        assert "PytorchStreamReader failed reading zip archive" in f, f
        assert f"loading the newest complete checkpoint, step 5 ({ckpts}/global_step5), would have been safe" in f, f
    # the slowed writer is rank 1's, and it said so at each of its saves
    out = _output(expt, 1)
    assert f"restartlab: slow write: {ckpts}/global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt held half-written" \
        in out and "zero_pp_rank_0_mp_rank_00_optim_states.pt held" not in out


HF_ARGS = '"{scenario_dir}/../../examples/transformers/train.py", --output-dir, "{ckpt_dir}", --steps, "30", --step-time, "0.1"'
DS_ARGS = '"{scenario_dir}/../../examples/deepspeed/train.py", --ckpt, "{ckpt_dir}", --steps, "30", --step-time, "0.1"'
# Each launcher as its users run it, one per node. The port the supervisor chose ($MASTER_PORT) is
# passed on where the launcher takes it as an option. deepspeed's launch sets MASTER_PORT from its own.
LAUNCHERS = {
    # torch 2.13's torchrun: its workers in sessions of their own
    "torchrun": (HF, "transformers", '[python, -m, torch.distributed.run, --standalone, --nproc_per_node, "2", '
                 + HF_ARGS + "]", True),
    # accelerate 1.15's launch runs torchrun's agent in its own process: the same sessions
    "accelerate": (HF, "transformers", '[bash, -c, "exec python -m accelerate.commands.launch --multi_gpu --num_processes 2 '
                   '--num_machines 1 --main_process_port \\"$MASTER_PORT\\" --mixed_precision no --dynamo_backend no '
                   '\\"$0\\" \\"$@\\"", ' + HF_ARGS + "]", True),
    # deepspeed 0.19.8's runner starts deepspeed.launcher.launch, which starts the workers: one session
    "deepspeed": (DS, "deepspeed", '[bash, -c, "exec python -m deepspeed.launcher.runner --num_accelerators 2 '
                  '--master_port \\"$MASTER_PORT\\" \\"$0\\" \\"$@\\"", ' + DS_ARGS + "]", False),
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_launcher_in_the_command_its_workers_die_with_it(expt, launcher):
    """The program launched as its users launch it, one per node under mpiexec.
    The launchers are torchrun, accelerate launch and the deepspeed runner. Killing the launcher
    must end its workers with the attempt, whatever it does with sessions. The kill is a SIGKILL by
    PID, of the child of the rank's exit recorder, found by the run's tag. torchrun and accelerate
    start the workers in sessions of their own. Before the fix those workers trained on to the last
    step after their agent was killed, holding the launch open (Hydra waits for its ranks' output
    to close). The deepspeed runner's launch.py outlives the runner with its workers. The rank's
    exit recorder (runtime/rankexit.py) is their subreaper: it adopts and kills them. The relaunch
    resumes from the newest complete checkpoint. Mutation: no PR_SET_CHILD_SUBREAPER -> the
    torchrun workers reach step 30 (this fails)."""
    scen, module, cmd, own_sessions = LAUNCHERS[launcher]
    need(module)
    import psutil
    from restartlab.runtime import killer
    from tests.helpers import rows, wait_for
    p = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "run", scen, "--expt-dir", expt, "--plain",
                          "--set", "trainer.program.command=" + cmd, "--set", "launch.ranks_per_node=1",
                          "--set", "phases=[{name: restart, checkpoint: sync, args: [%s, \"5\"], failures: false}]"
                          % ("--save-steps" if scen == HF else "--save-every")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        first = layout.Expt(expt).phase("restart").attempt(1)
        wait_for(lambda: os.path.exists(first.path) and any(m.get("train/iter", 0) >= 12 for m in rows(first.metrics(0))),
                 240, "the first attempt's step 12")
        procs = [psutil.Process(x) for x in killer.find_by_env(f"{killer.TAG_VAR}={job_tag(expt)}")]
        recorder, = [q for q in procs if "restartlab.runtime.rankexit" in q.cmdline()]
        agent, = recorder.children()
        # the workers: the launcher's descendants that run the program and start nothing themselves
        workers = [q for q in agent.children(recursive=True) if not q.children()
                   and any(x.endswith("train.py") for x in q.cmdline()[1:3])]
        assert len(workers) == 2, [(q.pid, q.ppid(), q.cmdline()) for q in agent.children(recursive=True)]
        assert all((os.getsid(w.pid) == w.pid) == own_sessions for w in workers), [os.getsid(w.pid) for w in workers]
        agent.kill()
        killed_at = time.time()
        wait_for(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers), 30,
                 "the orphaned workers' end")
        gone_after = time.time() - killed_at
        out, _ = p.communicate(timeout=400)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out[-3000:]
    # they ended with their launcher, not at the last step: the rank's exit recorder adopted and killed them
    assert gone_after < 10, gone_after
    last = max(m.get("train/iter", 0) for m in rows(first.metrics(0)))
    assert last < 30, last
    with open(first.output, errors="replace") as f:
        assert "process(es) running (its launcher's workers, or their helpers): killed" in f.read()
    v = _summary(expt)["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]][:2] == ["crash", "newest"] and v["finished"], v
