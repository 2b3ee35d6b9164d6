"""restartlab preflight on this machine.

- Each unsafe case is refused before anything is submitted, with exit 2. One line names what, where
  (file:line: key) and what to do.
- The parts it asks are asked for real: the job's setup lines, its Python, its launcher. A small
  file system (a tmpfs) holds the bytes.
- The queue limits against the real OpenPBS server and the private Slurm are in
  tests/test_preflight_clusters.py.
- `status` and `cancel` go by the experiment's scheduler or the id's form, never Slurm for PBS."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from restartlab import scenario
from restartlab.job import preflight, probe, sizing, storage
from restartlab.schedulers import pbs as pbs_mod, slurm as slurm_mod
from restartlab.schedulers.base import ToolMissing
from restartlab.contracts import layout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LOCAL = os.path.join(REPO, "scenarios", "systems", "local.yaml")
PBS = os.path.join(REPO, "scenarios", "systems", "pbs.yaml")
NO_TORCH = "/usr/bin/python3"  # Debian's Python: no torch, no restartlab (the venv is made from it)


def scen(tmp_path, body, extends=LOCAL, name="s.yaml"):
    p = tmp_path / name
    body = textwrap.dedent(body)
    if "phases:" not in body:
        body += "phases: [{name: base, checkpoint: none}, {name: sync, checkpoint: sync}]\n"
    p.write_text(f"extends: {extends}\nname: t\nexpt_root: {tmp_path / 'expt'}\n" + body)
    return str(p)


def check(path, sets=(), run=None, probe_fn=None, env=None, scheduler=None):
    sc, where = scenario.load_located(path, list(sets))
    kw = {"run": run} if run else {}
    return preflight.Preflight(sc, where, scheduler, probe=probe_fn or probe.run,
                               environ=env or os.environ, **kw).check()


def found(findings, level=preflight.ERROR, check_=None):
    return [f.text for f in findings if f.level == level and (check_ is None or f.check == check_)]


def line_of(path, text):
    return next(i for i, x in enumerate(open(path).read().splitlines(), 1) if text in x)


def rl(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


# ------------------------------------------------------------------ recorded scheduler output
QSTAT_QF = """Queue: dbg
    queue_type = Execution
    total_jobs = 0
    state_count = Transit:0 Queued:0 Held:0 Waiting:0 Running:0 Exiting:0 Begun
\t:0 
    resources_max.nodect = 2
    resources_max.walltime = 01:00:00
    resources_min.nodect = 1
    resources_min.walltime = 00:05:00
    enabled = True

"""  # OpenPBS 23.06.06 (tests/pbs_cluster.py's server), qstat -Qf dbg after qmgr set its limits: no `started` line


def test_recorded_queue_answers_parse():
    q = pbs_mod.parse_queue(QSTAT_QF, "dbg")
    assert (q.enabled, q.started, q.min_nodes, q.max_nodes, q.min_walltime, q.max_walltime) == \
        (True, False, 1, 2, 300, 3600)
    part = ("PartitionName=small AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
            "DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=1 "
            "MaxTime=1-00:30:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=rl[1-3] PriorityJobFactor=1 "
            "PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF "
            "State=DRAIN TotalCPUs=12 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) "
            "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED")  # Slurm 22.05's scontrol show partition -o
    q = slurm_mod.partition_limits(slurm_mod.parse_partitions(part)["small"])
    assert (q.enabled, q.started, q.max_nodes, q.max_walltime, q.total_nodes) == (True, False, 1, 88200, 3)
    assert slurm_mod.slurm_time("INFINITE") is None and slurm_mod.slurm_time("30:00") == 1800
    assert probe.launcher_kind("HYDRA build details:\n    Version: 4.1") == "hydra"
    assert probe.launcher_kind("mpiexec (Open MPI) 4.1.4\n") == "openmpi"
    assert probe.launcher_kind("slurm-wlm 22.05.8\n") == "srun"  # Debian 12's srun --version
    assert probe.launcher_kind("mpiexec version 1.2.12\n") is None  # what is not one of those: taken for PALS
    # Lustre's manual's layout of `lfs quota -u`. There is no Lustre here: the parser is all that is tested.
    lq = ("Disk quotas for usr bob (uid 1000):\n     Filesystem  kbytes   quota   limit   grace   files   quota"
          "   limit   grace\n     /lus/flare  1048576*      0 1000000       -     12       0       0       -\n")
    assert storage.parse_lfs_quota(lq) == (1048576 * 1024, 1000000 * 1024)


def fake_queue(text):
    """A PBS server whose only queue is `text`'s (qstat -Qf), its default."""
    def run(argv):
        if argv[:2] == ["qstat", "-Bf"]:
            return 0, "Server: srv\n    default_queue = dbg\n", ""
        if argv == ["qstat", "-Qf"]:
            return 0, text, ""
        raise AssertionError(argv)
    return run


def no_probe(*a, **k):  # the environment is not this test's subject (test_the_jobs_python_...)
    return probe.Probe(False, "not asked")


@pytest.mark.parametrize("sets,want", [
    (["job.nodes=3"], "queue dbg: it takes at most 2 nodes, the job asks for 3 node(s)"),
    (["job.nodes=2", "job.spare_nodes=1"], "at most 2 nodes, the job asks for 3 node(s) (2 + 1 spare)"),
    (["job.walltime=02:00:00"], "queue dbg: its walltime limit is 01:00:00, job.walltime is 02:00:00"),
    (["job.walltime=60s", "relaunch.walltime_margin=10s"], "its shortest walltime is 00:05:00, job.walltime is 00:01:00"),
    ([], "queue dbg: it is not started: a job would wait in it and never run"),
])
def test_a_job_the_queue_would_reject_or_hold_is_refused_with_the_limit(tmp_path, sets, want):
    path = scen(tmp_path, "job: {walltime: '00:30:00'}\n", extends=PBS)
    text = QSTAT_QF
    if sets:
        text = text.replace("    enabled = True\n", "    enabled = True\n    started = True\n")
    f = check(path, sets, run=fake_queue(text), probe_fn=no_probe)
    errs = found(f, check_="queue")
    # where: the key of the queue (no queue given: the file's job mapping), and the server's own answer
    assert any(want in e and "(qstat -Qf dbg)" in e and e.startswith(f"{path}:4: job.queue") for e in errs), errs


def test_an_unknown_queue_is_refused(tmp_path):
    path = scen(tmp_path, "job: {queue: nosuch}\n", extends=PBS)
    errs = found(check(path, run=fake_queue(QSTAT_QF), probe_fn=no_probe), check_="queue")
    assert errs == [f"{path}:4: job.queue: queue 'nosuch' does not exist on this server (qstat -Qf: dbg): "
                    "name one of its queues, or job.queue: auto"], errs


def test_no_query_tool_is_a_warning_not_a_guess(tmp_path):
    def run(argv):
        raise ToolMissing(f"`{argv[0]}` is not on PATH")
    f = check(scen(tmp_path, "", extends=PBS), run=run, probe_fn=no_probe)
    assert found(f, preflight.WARNING, "queue") == ["`qstat` is not on PATH: the queue's limits were not checked "
                                                    "(not a pbs login node?)"]


@pytest.fixture
def small_fs(tmp_path):
    """A real 2 MiB file system (tmpfs) where the experiment will be written."""
    d = tmp_path / "small"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)], capture_output=True, text=True)
    if r.returncode:
        from tests.conftest import _missing
        _missing(f"cannot mount a tmpfs (needs root): {r.stderr.strip()}")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def test_checkpoints_that_cannot_fit_are_refused_with_the_bytes(tmp_path, small_fs):
    body = "trainer: {model: tiny, train_iters: 120, save_interval: 10, keep: 0}\n"
    path = scen(tmp_path, body)
    f = check(path, [f"expt_root={small_fs}/expt"], probe_fn=no_probe)
    per = sizing.checkpoint_bytes(scenario.load(path))
    assert per == 139584 * 12  # the tiny model's fp32 parameters and AdamW's two moments
    (err,) = found(f, check_="bytes")
    assert err.startswith(f"{path}:{line_of(path, 'trainer:')}: trainer.keep: the run keeps up to 20.1 MB of "
                          "checkpoints (sync: 12 x 1.7 MB (12 saves (every 10 of 120 steps), keep 0: every one kept)"), err
    assert f"but 2.1 MB free at {small_fs}: free space, keep fewer (trainer.keep), or write elsewhere" in err, err
    # one checkpoint of 1.7 MB fits, but takes more than half of what is free: a warning
    f = check(path, [f"expt_root={small_fs}/expt", "trainer.train_iters=10", "phases=[{name: s, checkpoint: sync}]"],
              probe_fn=no_probe)
    (w,) = found(f, preflight.WARNING, "bytes")
    assert not found(f, check_="bytes") and "more than 50% of the 2.1 MB free at" in w, w


def test_a_default_keep_cannot_fill_a_file_system_by_itself():
    sc = scenario.load(os.path.join(REPO, "scenarios", "agpt2b.yaml"))
    (sync, asyn) = sizing.phase_bytes(sc)
    assert sc.trainer.keep == 3 and sync.saves == 20 and sync.kept == 4  # not 20 x 23.8 GB a phase
    assert round(sync.per_save / 1e9, 1) == 23.8 and sizing.node_hours(sc) == 4.0


def test_experiments_under_home_on_a_site_with_project_space_are_a_warning(tmp_path):
    home = tmp_path / "home"
    (home / "clone").mkdir(parents=True)
    path = scen(tmp_path, "site: {name: ALCF Testsite, project_root: '/lus/proj/{account}'}\n"
                "job: {account: P1}\n")
    env = dict(os.environ, HOME=str(home))
    f = check(path, [f"expt_root={home}/clone/expt"], probe_fn=no_probe, env=env)
    (w,) = found(f, preflight.WARNING, "where")
    assert w.startswith(f"--set expt_root: {home}/clone/expt is under $HOME ({home}); the run keeps up to ") and \
        w.endswith("ALCF Testsite's project space is /lus/proj/{account}: set expt_root: /lus/proj/{account}/restartlab"), w


def test_the_account_a_site_requires(tmp_path):
    path = scen(tmp_path, "site: {name: ALCF Testsite, account_required: true}\njob: {walltime: '00:10:00'}\n")
    (err,) = found(check(path, probe_fn=no_probe), check_="account")
    assert err.startswith(f"{path}:5: job.account: ALCF Testsite charges every job to a project"), err
    assert not found(check(path, ["job.account=P1"], probe_fn=no_probe), check_="account")
    # every shipped ALCF profile requires it, and names its project space by it
    for site in ("aurora", "sunspot", "polaris"):
        sc = scenario.load(os.path.join(REPO, "scenarios", "systems", f"{site}.yaml"), ["phases=[{name: a}]"])
        assert sc.site.account_required and "{account}" in sc.expt_root, site


@pytest.mark.parametrize("target", ["sunspot-expt", "aurora-expt", "polaris-expt"])
def test_make_site_expt_without_an_account_is_refused(target):
    r = subprocess.run(["make", "-s", "-o", ".venv/.installed", target, "ACCOUNT="], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ACCOUNT=<your ALCF project> is required" in r.stderr, r.stdout + r.stderr
    assert "restartlab submit" not in r.stdout  # nothing ran


PROG = """trainer:
  program:
    command: {cmd}
    progress: 'step (?P<step>\\d+)'
    checkpoints: '{{ckpt_dir}}/c-(?P<step>\\d+)'
    steps: 10
phases: [{{name: a, checkpoint: none}}]
"""


@pytest.mark.parametrize("cmd,want", [  # the last two need the job's environment asked (PATH, the module)
    ("[python, train.py]", "'train.py' is relative, and ranks run in their attempt directory "
     "(<expt>/<phase>/attempts/<k>), where it is not: write {scenario_dir}/train.py"),
    ("[python, /nowhere/train.py]", "/nowhere/train.py: no such file"),
    ("[python, /path/to/Megatron-LM/pretrain_gpt.py]", "'/path/to/Megatron-LM/pretrain_gpt.py' is the shipped "
     "example's placeholder: put the real path"),
    ("[./run.sh]", "'./run.sh' is relative, and ranks run in their attempt directory"),
    ("[no-such-trainer-rl, --x]", "'no-such-trainer-rl' is not on the job's PATH (after launch.setup): give its path"),
    ("[python, -m, no_such_module_rl]", "python -m no_such_module_rl: no module 'no_such_module_rl' for that Python"),
])
def test_a_program_the_ranks_would_not_find(tmp_path, cmd, want):
    (tmp_path / "train.py").write_text("print('step 1')\n")
    path = scen(tmp_path, PROG.format(cmd=cmd))
    asks = "no-such-trainer" in cmd or "-m," in cmd
    errs = found(check(path, probe_fn=None if asks else no_probe), check_="program")
    at = f"{path}:{line_of(path, 'command:')}: trainer.program.command: "
    assert any(e.startswith(at) and want in e for e in errs), errs


def test_a_program_found_as_the_ranks_find_it(tmp_path):
    (tmp_path / "train.py").write_text("print('step 1')\n")
    f = check(scen(tmp_path, PROG.format(cmd='[python, "{scenario_dir}/train.py"]')))
    assert not preflight.errors(f), [x.line() for x in f]
    assert found(f, preflight.OK, "program") == [str(tmp_path / "train.py")]



def test_a_program_given_as_inline_code_is_not_taken_for_a_script(tmp_path):
    """`python -c CODE` is inline code, not a script (contracts/pycmd reads the command).

    The code was once taken for a relative script's path and refused ("'import x' is relative ...").
    `python -u -W ignore script` still finds the script after the interpreter's options."""
    f = check(scen(tmp_path, PROG.format(cmd='[python, -c, "print(1)"]')), probe_fn=no_probe)
    assert found(f, check_="program") == [], [x.line() for x in f]  # no error of the program's
    assert found(f, preflight.OK, "program") == ["python -c: the program is inline code (no file to check)"]
    (tmp_path / "train.py").write_text("print('step 1')\n")
    f = check(scen(tmp_path, PROG.format(cmd='[python, -u, -W, ignore, "{scenario_dir}/train.py"]')), probe_fn=no_probe)
    assert found(f, preflight.OK, "program") == [str(tmp_path / "train.py")], [x.line() for x in f]


def test_submit_refuses_a_framework_the_programs_python_lacks_after_the_setup_lines(tmp_path):
    """`submit`'s preflight asks the program's Python, after launch.setup, for the adapter's
    framework (as `run` and `fuzz` refuse it here): Debian's Python has no deepspeed."""
    (tmp_path / "train.py").write_text("print('step 1')\n")
    body = PROG.format(cmd=f'[{NO_TORCH}, "{{scenario_dir}}/train.py"]').replace("  program:\n", "  program:\n    adapter: deepspeed\n")
    path = scen(tmp_path, body)
    errs = found(check(path), check_="program")
    assert errs == [f"{path}:{line_of(path, 'command:')}: trainer.program.command: {NO_TORCH}, the program's Python "
                    "(after launch.setup), cannot import deepspeed (the deepspeed adapter's framework): pip install "
                    "'restartlab[deepspeed]' for it, which keeps the torch that is there"], errs
    # the job's Python (this venv's: make test installs the frameworks) has it
    ok = scen(tmp_path, body.replace(NO_TORCH, sys.executable), name="ok.yaml")
    assert not found(check(ok), check_="program")


def test_a_command_of_yours_is_looked_up_never_run(tmp_path):
    marker = tmp_path / "ran"
    prog = tmp_path / "train.sh"
    prog.write_text(f"#!/bin/sh\ntouch {marker}\n")
    prog.chmod(0o755)
    path = scen(tmp_path, PROG.format(cmd=f"[train.sh, --steps, '10']"))
    f = check(path, [f"launch.setup=['export PATH={tmp_path}:$PATH']"])
    assert not found(f, check_="program") and not marker.exists(), [x.line() for x in f]
    (err,) = found(check(path), check_="program")  # without the setup line it is not on the job's PATH
    assert "'train.sh' is not on the job's PATH (after launch.setup): give its path" in err and not marker.exists()


def test_the_jobs_python_and_its_device_support_after_the_setup_lines(tmp_path):
    path = scen(tmp_path, "trainer: {device: cpu}\n")
    errs = found(check(path, [f"launch.python={NO_TORCH}"]), check_="python")
    assert errs == [f"--set launch.python: the job's Python {NO_TORCH} cannot import restartlab (the job's supervisor "
                    "runs in it): install restartlab for it, or set launch.python",
                    f"--set launch.python: the job's Python {NO_TORCH} cannot import torch (ModuleNotFoundError: No "
                    "module named 'torch'): the trainer needs it; load the site's PyTorch in launch.setup (module "
                    "load frameworks)"], errs
    # this machine's torch is a CPU build: a scenario asking for cuda or xpu is refused, naming the key
    for dev, what in (("cuda", "was built without CUDA"), ("xpu", "has no XPU support")):
        (err,) = found(check(path, [f"trainer.device={dev}"]), check_="python")
        assert err.startswith(f"--set trainer.device: {dev}, but the job's Python's torch ") and what in err, err
    (ok,) = found(check(path), preflight.OK, "python")
    assert "torch " in ok and "(CPU only)" in ok
    # a setup line that fails fails the job too: named with the setup key
    f = check(path, ["launch.setup=['cd /', 'echo nope >&2; exit 7']"])
    (err,) = found(f, check_="python")
    assert err.startswith("--set launch.setup: the setup lines failed (exit 7): nope"), err
    # and what could not be asked after them is said, not left out
    (skip,) = found(f, preflight.WARNING, "skipped")
    assert skip.startswith("the job's Python (torch, restartlab), the launcher (mpiexec): not checked, because the "
                           "setup lines failed"), skip
    assert not found(f, preflight.OK, "launcher")


def test_the_launcher_is_of_the_kind_the_scenario_says(tmp_path):
    path = scen(tmp_path, "")
    (err,) = found(check(path, ["launch.launcher=openmpi"]), check_="launcher")
    assert err.startswith(f"{path}:1: launch.mpiexec: launch.launcher is openmpi, but ") and \
        "is MPICH's Hydra (--version: 'HYDRA build details:')" in err, err
    (err,) = found(check(path, ["launch.mpiexec=/nowhere/mpiexec"]), check_="launcher")
    assert err.startswith("--set launch.mpiexec: '/nowhere/mpiexec' is not found after launch.setup"), err
    assert found(check(path), preflight.OK, "launcher")[0].endswith("mpiexec: hydra")


def test_preflight_cli_one_line_each_exit_2_no_traceback(tmp_path):
    path = scen(tmp_path, "site: {name: X, account_required: true}\n" + PROG.format(cmd="[python, train.py]"))
    r = rl("preflight", path)
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout, r.stderr
    errs = [x for x in r.stdout.splitlines() if x.startswith("preflight: error: ")]
    assert len(errs) == 2 and r.stdout.splitlines()[-1] == "preflight: 2 error(s), 0 warning(s): nothing submitted", \
        r.stdout
    r = rl("preflight", scen(tmp_path, "", name="ok.yaml"))
    assert r.returncode == 0, r.stdout + r.stderr


def stub_tools(tmp_path, names, out=""):
    """A PATH of scheduler commands that log their argv and print `out`, then this Python's tools."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    log = tmp_path / "calls"
    for n in names:
        (d / n).write_text(f"#!/bin/sh\necho \"{n} $*\" >> {log}\nprintf '%s' {json.dumps(out)}\n")
        (d / n).chmod(0o755)
    return dict(os.environ, PATH=f"{d}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin"), log


def test_submit_runs_preflight_first_and_submits_nothing_on_an_error(tmp_path):
    # pbsdsh is on PATH, so the fan-out check passes on a machine with no OpenPBS installed. Without
    # it, this test passed only where the PBS tier's cluster had installed /opt/pbs before it ran.
    env, log = stub_tools(tmp_path, ["qsub", "qstat", "pbsdsh"], "0.srv\n")
    path = scen(tmp_path, "site: {name: X, account_required: true}\n", extends=PBS)
    r = rl("submit", path, env=env)
    assert r.returncode == 2 and "preflight: error: account: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "expt").exists()
    assert "qsub" not in (log.read_text() if log.exists() else "")
    r = rl("submit", path, "--set", "job.account=P1", env=env)
    assert r.returncode == 0, r.stderr
    expt = r.stdout.split("experiment ", 1)[1].strip()
    assert "preflight: 0 error(s)" in open(layout.Expt(expt).preflight).read()


def test_status_and_cancel_go_by_the_experiments_scheduler_or_the_ids_form(tmp_path):
    env, log = stub_tools(tmp_path, ["qstat", "qdel", "sacct", "squeue", "scancel"])
    r = rl("status", "1234567.aurora-pbs", env=env)
    assert log.read_text().split()[0] == "qstat", log.read_text()  # never sacct for a PBS id
    log.unlink()
    # an experiment submitted to PBS: its scheduler, and every job of its chain
    d = tmp_path / "e"
    d.mkdir()
    expt = layout.Expt(str(d))
    open(expt.scenario, "w").write("scheduler: pbs\nphases: [{name: a}]\n")
    open(expt.jobid, "w").write("12.srv\n")
    r = rl("cancel", str(d), env=env)
    assert log.read_text().splitlines() == ["qdel 12.srv"], (log.read_text(), r.stderr)
    # a local experiment: no scheduler asked
    log.unlink()
    open(expt.scenario, "w").write("scheduler: local\nphases: [{name: a}]\n")
    r = rl("status", str(d), env=env)
    assert r.returncode == 0 and "\tunknown\ta local run (restartlab run)" in r.stdout and not log.exists(), r.stdout
    r = rl("cancel", str(d), env=env)
    assert r.returncode == 2 and "a local experiment (restartlab run) has no batch job" in r.stderr
    # a bare number with both on PATH is ambiguous: said, not guessed
    r = rl("status", "42", env=env)
    assert r.returncode == 2 and "pass --scheduler" in r.stderr and not log.exists()


def test_validation_points_at_the_key_in_the_file_where_it_belongs(tmp_path):
    _, where = scenario.load_located(os.path.join(REPO, "scenarios", "agpt2b.yaml"))
    assert where(("job", "account")).endswith("agpt2b.yaml:5")  # a missing key: the file's own job mapping
    assert where(("launch", "mpiexec")).endswith("agpt2b.yaml:1")  # never the profile's first line
    assert where(("job", "queue")).endswith("systems/sunspot.yaml:" + str(line_of(
        os.path.join(REPO, "scenarios", "systems", "sunspot.yaml"), "queue: workq")))
    # a kill past the end of a program of yours names the key the user wrote
    path = scen(tmp_path, PROG.format(cmd="[python, x.py]").replace("phases: [{name: a, checkpoint: none}]",
                "failures: {schedule: {at_steps: [50]}}\nphases: [{name: a}]"))
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.load(path)
    assert f"step 50 is beyond the last step (trainer.program.steps: 10, {path}:{line_of(path, 'steps: 10')})" \
        in str(e.value), str(e.value)


def test_validate_every_shipped_scenario_as_the_help_says():
    r = subprocess.run(f"{sys.executable} -m restartlab.cli validate scenarios/*.yaml scenarios/examples/*.yaml",
                       shell=True, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_the_smoke_job_here_ready_and_with_one_thing_broken(tmp_path):
    """restartlab run --smoke: the smoke job's checks on this machine.

    The clusters' runs are in test_site_readiness.py. With torch broken for the ranks, the report
    names it and the host. The job does not wait out the group's timeout for a rank that cannot join."""
    path = scen(tmp_path, "")
    r = rl("run", "--smoke", path, "--plain")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# restartlab smoke job: READY" in r.stdout and r.stdout.count("\nok   ") == 10, r.stdout
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    # The broken ranks linger 3 s at exit (atexit). So the launcher is surely still running when
    # the job decides whether to try the kill. That is the interleaving a fresh-clone CI run hit by
    # chance.
    (shadow / "__init__.py").write_text("import atexit, time\natexit.register(time.sleep, 3)\n"
                                        "raise ImportError('torch is broken on purpose')\n")
    r = rl("run", "--smoke", path, "--plain", "--set", f"launch.env={{PYTHONPATH: {shadow.parent}}}")
    assert r.returncode == 1, r.stdout + r.stderr
    host = __import__("socket").gethostname()
    assert "# restartlab smoke job: NOT READY" in r.stdout, r.stdout
    assert "FAIL torch     torch ? on 0 rank(s)" in r.stdout and \
        f"rank 0 on {host}: ImportError: torch is broken on purpose" in r.stdout and f"[on {host}]" in r.stdout, r.stdout
    assert "ok   fanout" in r.stdout and "FAIL kill      not tried: rank(s) [0, 1] failed before the hold" in r.stdout \
        and "killers" not in r.stdout, r.stdout
