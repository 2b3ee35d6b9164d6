"""Rendered job scripts: golden structure per scheduler, bash -n and shellcheck for every example,
and hostile values that must arrive verbatim and execute nothing."""
import os
import pathlib
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from restartlab.contracts import layout
from restartlab.job import render
from restartlab import scenario
from restartlab.job.render import RenderError

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(os.path.dirname(HERE), "scenarios")
# every scenario shipped (scenarios/*.yaml and scenarios/examples/*.yaml), listed, never hand-kept
EXAMPLES = sorted(os.path.relpath(str(p), SCEN)[:-len(".yaml")]
                  for d in (SCEN, *(os.path.join(SCEN, x) for x in ("examples", "aurora", "polaris")))
                  for p in pathlib.Path(d).glob("*.yaml"))
# the bundled trainer's (the hostile values go into its options)
BUNDLED = [n for n in EXAMPLES if not scenario.load(os.path.join(SCEN, f"{n}.yaml")).trainer.program]
HOSTILE = ["$(touch PWNED)", "`touch PWNED`", "a'b", 'a"b', "two words", "line\nbreak; touch PWNED", "a,b"]


def rendered(name, sched, sets=(), expt="/expt/x"):
    sc = scenario.load(os.path.join(SCEN, f"{name}.yaml"), list(sets))
    return render.render(sc, sched, expt)


def test_pbs_header_golden():
    text, _ = rendered("agpt2b", "pbs", ["job.account=proj", "job.queue=prod"])
    head = [l for l in text.splitlines() if l.startswith("#PBS")]
    assert head == ["#PBS -N agpt2b", "#PBS -A proj", "#PBS -q prod",
                    "#PBS -l select=2:ncpus=208:mpiprocs=12", "#PBS -l walltime=02:00:00",
                    "#PBS -l place=scatter", "#PBS -l filesystems=home:gila", "#PBS -k doe", "#PBS -j oe",
                    "#PBS -o /expt/x/"]


def test_slurm_header_golden():
    text, _ = rendered("local", "slurm", ["job.nodes=2", "job.queue=debug"])
    head = [l for l in text.splitlines() if l.startswith("#SBATCH")]
    assert head == ["#SBATCH --job-name=local", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
                    "#SBATCH --time=00:30:00", "#SBATCH --partition=debug", "#SBATCH --output=/expt/x/job-%j.out",
                    "#SBATCH --open-mode=append"]


def test_body_structure():
    text, ctx = rendered("agpt2b", "pbs")
    assert text.count("\nrl_phase --phase ") == 3
    for p in ("baseline", "sync", "async"):
        assert f"rl_phase --phase {p} --phase-dir /expt/x/{p}" in text
    # the control flow is the supervisor's: no attempt loop in the script
    code = [line.split("#")[0].strip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    for loop in ("while", "for", "until", "do", "done"):
        assert not any(line.split()[:1] == [loop] for line in code if line), f"a {loop} loop in the job script"
    assert "restartlab.cli supervise" in text and "record-attempt" not in text
    # the job tag reaches the ranks through the launcher only, never the script's environment
    assert f"--env RESTARTLAB_JOB_TAG={ctx.tag}" in text
    assert "export RESTARTLAB_JOB_TAG" not in text
    assert "--async-ckpt" in text and "--at-steps 500,1000,1500" in text.replace("'", "")
    assert 'restartlab.cli report "$RL_EXPT_DIR"' in text


@pytest.mark.parametrize("sched", ["pbs", "slurm", "local"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_bash_n_and_shellcheck(tmp_path, name, sched):
    text, _ = rendered(name, sched)
    p = pathlib.Path(layout.Expt(tmp_path).job_script)
    p.write_text(text)
    assert subprocess.run(["bash", "-n", str(p)]).returncode == 0
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed (apt-get install shellcheck; .ci/run installs it)")
    r = subprocess.run(["shellcheck", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("sched", ["pbs", "slurm"])
@pytest.mark.parametrize("sets", [[], ["launch.env.HF_TOKEN=${HF_TOKEN}", "launch.env.WANDB_API_KEY=v-8f3e1"]],
                         ids=["chain", "chain+secrets"])
def test_bash_n_and_shellcheck_with_chain_and_secrets(tmp_path, sched, sets):
    """The optional parts no example has: relaunch.chain's continuation (its line once joined
    the `fi` after it) and the by-name checks of launch.env secrets."""
    text, _ = rendered("agpt2b", sched, ["relaunch.chain=2", *sets])
    p = pathlib.Path(layout.Expt(tmp_path).job_script)
    p.write_text(text)
    assert subprocess.run(["bash", "-n", str(p)]).returncode == 0
    assert "restartlab.cli chain" in text
    assert ("--pass-env HF_TOKEN,WANDB_API_KEY" in text.replace("'", "")) == bool(sets)
    assert "v-8f3e1" not in text  # the value: not in the script
    r = subprocess.run(["shellcheck", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def _stub(path, body):
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.slow
@pytest.mark.parametrize("sched", ["pbs", "slurm", "local"])
@pytest.mark.parametrize("name", BUNDLED)
def test_hostile_values_execute_nothing(tmp_path, name, sched):
    """Hostile strings in trainer args, rank env, stage dir, python path and experiment dir.
    The script runs under bash with stub launchers, and nothing is executed. Each value reaches
    the launcher's argv byte for byte."""
    work = tmp_path / "work"
    work.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv.log"
    # stub launchers / python: log every argument on its own NUL-terminated record
    body = f'for a in "$@"; do printf "%s\\0" "$a" >> {log}; done\nexit 0\n'
    # The launcher stub also plays a trainer that finished (rank 0's final row in the attempt
    # directory it starts in). So the supervisor completes each phase in one attempt.
    finish = ('it=""; prev=""; for a in "$@"; do [ "$prev" = --train-iters ] && it=$a; prev=$a; done\n'
              '[ -z "$it" ] || printf \'{"timestamp": 0, "rank": 0, "metrics": {"train/iter": %s, '
              '"train/loss": 0, "train/params_crc": 0}}\\n\' "$it" >> ' + layout.metrics_name(0) + '\n')
    for tool in ("mpiexec", "srun"):
        _stub(bindir / tool, finish + body)
    _stub(bindir / "scontrol", "hostname\n")
    pydir = tmp_path / "py $(touch PWNED) `x` 'q\""
    pydir.mkdir()
    fakepy = pydir / "python"
    # restartlab's own tools (the supervisor, the report) run for real; the ranks' python is a stub
    _stub(fakepy, f'if [ "$1 $2" = "-m restartlab.cli" ]; then exec {shlex.quote(sys.executable)} "$@"; fi\n' + body)
    sets = [f"launch.python={fakepy}", "launch.setup=[]", "collection.plots=false"]
    sc = scenario.load(os.path.join(SCEN, f"{name}.yaml"), sets)
    sc.trainer.extra_args = list(HOSTILE)
    # srun --export cannot carry commas (refused at render time, tested below)
    sc.launch.env = {f"V{i}": h for i, h in enumerate(HOSTILE)
                     if sc.launch.launcher != "srun" or "," not in h}
    sc.phases[0].stage_dir = "/tmp/st $(touch PWNED)"
    expt = str(tmp_path / "ex $(touch PWNED) `touch PWNED` 'a\"b")
    text, _ = render.render(sc, sched, expt)
    script = pathlib.Path(layout.Expt(tmp_path).job_script)
    script.write_text(text)
    nodefile = tmp_path / "nodes"
    nodefile.write_text("h0\n")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PBS_NODEFILE=str(nodefile),
               SLURM_JOB_NODELIST="h0", SLURM_JOB_ID="1")
    r = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not list(work.rglob("PWNED*")) and not list(tmp_path.rglob("PWNED*")), "a hostile value executed"
    seen = log.read_bytes().split(b"\0")
    for h in HOSTILE:
        assert h.encode() in seen, f"{h!r} did not reach the launcher verbatim"
    assert os.path.isdir(expt)


def test_newline_in_directive_is_refused():
    sc = scenario.load(os.path.join(SCEN, "local.yaml"))
    with pytest.raises(RenderError):
        render.render(sc, "slurm", "/tmp/a\nb")


def test_srun_refuses_comma_in_env_value():
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["launch.launcher=srun", "launch.env.X=a,b"])
    with pytest.raises(RenderError) as e:
        render.render(sc, "slurm", "/expt/x")
    assert "launch.env.X" in str(e.value)


GOLDEN = os.path.join(HERE, "data", "golden")


@pytest.mark.parametrize("name,sched,sets", [
    ("local", "local", []), ("agpt2b", "pbs", []), ("debug", "slurm", []),
    # each machine's scenario as docs/alcf.md has its users render it
    ("aurora/agpt2b", "pbs", ["job.account=MYPROJ"]), ("polaris/agpt2b", "pbs", ["job.account=MYPROJ"])])
def test_rendered_script_golden(name, sched, sets):
    """The whole job script, byte for byte (the tag, this python and the checkout's path
    normalised). A change to the script shows here as a diff to review; regenerate with
    RESTARTLAB_REGEN_GOLDEN=1 pytest tests/test_render.py -k golden."""
    text, ctx = rendered(name, sched, sets)
    text = text.replace(ctx.tag, "TAG").replace(ctx.python, "PYTHON").replace(os.path.dirname(HERE), "ROOT")
    path = os.path.join(GOLDEN, f"{name.replace('/', '-')}.{sched}.sh")
    if os.environ.get("RESTARTLAB_REGEN_GOLDEN"):
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        assert text == f.read(), f"{path} differs from the rendered script (regenerate if the change is meant)"


def test_a_job_script_is_visible_whole_or_not_at_all(tmp_path, monkeypatch):
    """Whoever polls for an experiment's job script (a test waiting for its tag, a watcher, `run`
    itself) must never read half of one. Every write the creation makes is stopped at. At each, the
    job script is either absent or whole and executable, with its resolved scenario whole beside it.
    The bad interleaving (the file made empty, then filled) is at a write. So it is checked there,
    on purpose, not left to a poller's luck."""
    import builtins
    from restartlab.job import experiment
    expt = layout.Expt(str(tmp_path / "expt"))
    sc = scenario.load(os.path.join(SCEN, "local.yaml"))
    seen, real_open = [], builtins.open

    def look():
        if os.path.exists(expt.job_script):
            with real_open(expt.job_script) as f:
                script = f.read()
            beside = pathlib.Path(expt.scenario).read_text() if os.path.exists(expt.scenario) else None
            seen.append((script, os.access(expt.job_script, os.X_OK), beside))

    class Watched:
        def __init__(self, f):
            self._f = f

        def write(self, data):
            look()
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            self._f.__enter__()
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

    def watched_open(path, mode="r", *args, **kw):
        f = real_open(path, mode, *args, **kw)
        return Watched(f) if str(path).startswith(expt.root) and set(mode) & set("wa") else f

    monkeypatch.setattr(builtins, "open", watched_open)
    experiment.create(sc, "local", expt_dir=expt.root)
    look()
    monkeypatch.undo()
    whole = seen[-1]  # what creation left (its job tag is new each time: compared with itself)
    assert "#!" in whole[0] and whole[1] and "phases" in whole[2], whole
    assert all(s == whole for s in seen), [(len(s[0]), s[1], s[2] and len(s[2])) for s in seen]
    assert not [p for p in os.listdir(expt.root) if ".tmp" in p]
