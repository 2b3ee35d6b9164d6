"""Your trainer, not ours: a program restartlab has never seen.
It is examples/plain/train.py, with no torch and no restartlab. Its ranks take RANK from the
torchrun-style variables that restartlab maps from the launcher's. It is configured only through
trainer.program with the generic adapter, under real mpiexec ranks and real SIGKILLs. Two verbs
run it:
- `restartlab run`: kills, relaunches, the report's lost steps and its survival verdict.
- `restartlab fuzz`: a program that saves atomically survives (exit 0). One that writes in place
  and loads the highest checkpoint unchecked is a finding (exit 1)."""
import json
import os
import subprocess
import sys

import pytest

from restartlab.contracts import layout
from tests.helpers import cleanup_tag, job_tag, shared_run

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAIN = os.path.join(ROOT, "scenarios", "examples", "plain.yaml")


def restartlab(*args, timeout=500):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture
def expt(tmp_path):
    d = str(tmp_path / "expt")
    yield d
    if os.path.exists(layout.Expt(d).job_script):
        cleanup_tag(job_tag(d))


def baseline_of(tmp_path_factory, scen):
    """An experiment holding only `scen`'s baseline phase, run once per test session.
    The tests that compare against it take it (run/fuzz --baseline-from). It is the same command,
    so the same baseline."""
    def make(d):
        try:
            r = restartlab("run", scen, "--expt-dir", d, "--plain",
                           "--set", "phases=[{name: baseline, checkpoint: none}]")
        finally:
            if os.path.exists(layout.Expt(d).job_script):
                cleanup_tag(job_tag(d))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return shared_run(tmp_path_factory, "baseline-" + os.path.basename(scen).split(".")[0], make)


def _summary(d):
    with open(layout.Expt(d).summary) as f:
        return {s["phase"]: s for s in json.load(f)["phases"]}


# The restart phase relaunches warm. Its subject is the framework's resume, not the cold start, and
# the pool imports torch and the framework once. The relaunches are forks of the pool, and still exact.
WARM = ("--set", "phases.1.warm=true")


def _warm_ranks(d, phase="restart"):
    return [json.load(open(a.record))["warm_ranks"] for a in layout.Expt(d).phase(phase).attempts()]


def _ckpts(d, phase):
    return sorted(os.listdir(layout.Expt(d).phase(phase).ckpts))


def test_a_plain_program_through_run(expt):
    r = restartlab("run", PLAIN, "--expt-dir", expt, "--plain")  # its baseline too: the one test that runs it here
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(expt)
    assert s["baseline"]["completed"] and s["restart"]["completed"]
    ev = s["restart"]["failures"]
    assert len(ev) == 2 and all(e["injected"] for e in ev)
    phase = layout.Expt(expt).phase("restart")
    for e in ev:  # resumed from the newest complete checkpoint at its launch; lost = last step - that
        with open(phase.attempt(e["attempt"] + 1).at_launch) as f:
            snap = json.load(f)
        assert e["resumed_from"] == snap["newest_complete"] and e["resumed_from"] % 5 == 0
        assert e["lost_steps"] == e["step_at_kill"] - e["resumed_from"] >= 0
        assert e["step_at_kill"] >= {1: 12, 2: 27}[e["attempt"]]  # gated: the kill waits for the step's checkpoint
    saves = s["restart"]["save"]["ckpt_save_seconds"]
    assert saves["count"] >= 8 and saves["median"] >= 0.3  # the program's save lines, booked (0.3 s each)
    assert s["restart"]["save_stall_s"] == pytest.approx(saves["total"])
    v = s["restart"]["survival"]
    assert v["survived"] and v["finished"] and "loss identical to the baseline's at all 40 steps" in v["baseline"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"]
    with open(layout.Expt(expt).report) as f:
        report = f.read()
    assert report.index("## Did it survive?") < report.index("## Phases")
    with open(phase.attempt(1).output) as f:
        out = f.read()
    assert "rank 0/2 local 0" in out and "rank 1/2 local 1" in out  # torchrun-style variables, mapped
    # restartlab never removes a checkpoint of the program's: every save of the last attempt is there
    assert {"ckpt-35", "ckpt-40"} <= set(_ckpts(expt, "restart"))


def test_a_program_that_crashes_at_exit_after_its_last_step_is_finished_not_relaunched(expt):
    """#63.5: rank 1 dies of SIGABRT after the last step (as a Trainer script that never destroys its
    process group does, gloo's threads aborting at exit). The training is finished: the phase completes
    after that one attempt, and the verdict names the crash at exit as a finding. Before, it was a crash:
    each relaunch resumed at the final checkpoint, had nothing to train, crashed at exit again, and the
    relaunch budget ran out."""
    r = restartlab("run", PLAIN, "--expt-dir", expt, "--plain", "--set",
                   'phases=[{name: restart, checkpoint: sync, failures: false, '
                   'args: [--save-every, "5", --abort-at-exit, "1"]}]')
    s = _summary(expt)["restart"]
    assert s["completed"] and s["attempts"] == 1, (s, r.stdout[-2000:], r.stderr[-2000:])
    rec = json.load(open(layout.Expt(expt).phase("restart").attempt(1).record))
    assert rec["completed"] and rec["exit_code"] != 0 and rec["rank_exit"]["rank"] == "1", rec
    assert "attempt 1 reached the last step, then exited" in open(layout.Expt(expt).job_out).read()
    v = s["survival"]
    assert v["finished"] and [x["outcome"] for x in v["restarts"]] == ["exit_crash"], v
    f, = v["findings"]
    assert f.startswith("attempt 1: started from step 0; then finished (step 40) and crashed at exit, SIGABRT "
                        "(signal 6) in rank 1 on ") and ", the first rank to end" in f, v
    # the phase completed: `restartlab run` exits 0 as for any finished run; the verdict is not "survived"
    assert r.returncode == 0 and not v["survived"], r.stdout[-2000:]


@pytest.mark.parametrize("log", ["{attempt_dir}/metrics.jsonl", "{phase_dir}/progress.csv"])
def test_progress_from_a_file_the_program_appends_to(expt, tmp_path, log):
    """trainer.program.progress_file instead of the output: a JSONL file per attempt, or one CSV
    the program appends to across attempts. What an earlier attempt wrote is skipped at each
    launch. Booked again, it would make the relaunch look like a fresh start, and the report would
    count its steps twice. The verdicts are the output's: resumed from the newest complete
    checkpoint, loss identical to the baseline's."""
    fields = "{step: train/iter, loss: train/loss}" if log.endswith(".jsonl") else "{loss: train_loss}"
    sc = tmp_path / "file-progress.yaml"
    sc.write_text(f"""extends: {PLAIN}
trainer:
  program:
    command: [python, {os.path.join(ROOT, "examples", "plain", "train.py")}, --ckpt, "{{ckpt_dir}}", --steps, "40"]
    progress: null
    progress_file: "{log}"
    progress_fields: {fields}
phases:
  - {{name: baseline, checkpoint: none, args: [--log-file, "{log}"]}}
  - {{name: restart, checkpoint: sync, args: [--save-every, "5", --log-file, "{log}"]}}
""")
    r = restartlab("run", str(sc), "--expt-dir", expt, "--plain")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(expt)
    assert s["baseline"]["completed"] and s["restart"]["completed"]
    v = s["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"], v
    assert all("inferred" not in x["text"] for x in v["restarts"])  # the resume line still counts
    assert v["survived"] and "loss identical to the baseline's at all 40 steps" in v["baseline"], v
    phase = layout.Expt(expt).phase("restart")
    for e in s["restart"]["failures"]:  # each relaunch's rows start after its checkpoint, none repeated
        with open(phase.attempt(e["attempt"] + 1).metrics(0)) as f:
            rows = [json.loads(line)["metrics"] for line in f]
        iters = [m["train/iter"] for m in rows if "train/loss" in m]  # the progress rows (not saves)
        assert iters[0] == e["resumed_from"] + 1 and iters == sorted(set(iters)), iters


def _fuzz(expt, *more):
    return _fuzz_scenario(PLAIN, expt, *more)


def test_fuzz_a_program_that_saves_atomically_survives(expt, tmp_path_factory):
    base = baseline_of(tmp_path_factory, PLAIN)
    r, data = _fuzz(expt, "--kills", "4", "--seed", "3", "--baseline-from", base)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert data["verdict"]["survived"] and len(data["kills"]) >= 2
    assert "identical" in data["verdict"]["baseline"]  # against the baseline taken from `base`, not run here
    assert f"baseline baseline taken from {base}" in r.stdout
    assert layout.Expt(expt).phase("baseline").reused_from() == base
    assert "survived every one" in r.stdout and "| kill | attempt | struck |" in r.stdout


def test_fuzz_finds_a_program_that_loads_torn_checkpoints(expt):
    # every kill aimed inside a save; a save takes 1 s, so the kill lands inside it
    r, data = _fuzz(expt, "--kills", "2", "--seed", "1", "--save-share", "1", "--no-baseline",
                    "--set", 'phases.1.args=[--save-every, "5", --save, torn, --save-time, "1"]')
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert any(k["where"] == "save" for k in data["kills"])
    bad = {x["outcome"] for x in data["verdict"]["restarts"]}
    assert bad & {"incomplete", "load_crash"}, data["verdict"]
    assert data["verdict"]["findings"] and "finding(s)" in r.stdout


def test_a_program_whose_progress_is_never_seen(expt):
    r = restartlab("run", PLAIN, "--expt-dir", expt, "--plain",
                   "--set", r"trainer.program.progress=iteration (?P<step>\d+)",
                   "--set", "relaunch.startup_timeout=3s", "--set", "relaunch.max_attempts=1",
                   "--set", 'phases=[{name: baseline, checkpoint: none, args: [--step-time, "1"]}]')
    assert r.returncode == 1
    with open(layout.Expt(expt).job_out) as f:
        assert "no progress seen" in f.read()
    with open(layout.Expt(expt).report) as f:
        assert "check trainer.program.progress" in f.read()


def test_fuzz_bad_input_exits_2(tmp_path):
    r = restartlab("fuzz", PLAIN, "--phase", "nope", "--expt-dir", str(tmp_path / "x"))
    assert r.returncode == 2 and "no phase named 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = restartlab("fuzz", PLAIN, "--phase", "baseline", "--expt-dir", str(tmp_path / "x"))
    assert r.returncode == 2 and "saves no checkpoints" in r.stderr
    r = restartlab("fuzz", PLAIN, "--kills", "0")
    assert r.returncode == 2 and "--kills: must be >= 1" in r.stderr
    r = restartlab("fuzz", PLAIN, "--no-baseline", "--baseline-from", str(tmp_path))
    assert r.returncode == 2 and "--no-baseline and --baseline-from: choose one" in r.stderr
    r = restartlab("fuzz", PLAIN, "--baseline-from", str(tmp_path), "--expt-dir", str(tmp_path / "y"))
    assert r.returncode == 2 and "not an experiment directory" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "y")  # refused before the experiment is made


# ---------------------------------------------------------------- Hugging Face Accelerate (1.15.0)
ACCEL = os.path.join(ROOT, "scenarios", "examples", "accelerate.yaml")


def test_accelerate_through_run(expt):
    pytest.importorskip("accelerate")  # make test installs it (setup.cfg [frameworks])
    r = restartlab("run", ACCEL, "--expt-dir", expt, "--plain", *WARM)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(expt)
    v = s["restart"]["survival"]
    assert v["survived"] and "loss identical to the baseline's at all 40 steps" in v["baseline"], v
    assert _warm_ranks(expt) == [0, 2, 2]  # Accelerate 1.15 restarts warm (forked from the pool), exactly
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"]
    for e in s["restart"]["failures"]:
        assert e["resumed_from"] % 5 == 0 and e["lost_steps"] == e["step_at_kill"] - e["resumed_from"] >= 0
    # checkpoint_<K> counts saves: the adapter's step for it is (K + 1) x save_every
    phase = layout.Expt(expt).phase("restart")
    with open(phase.attempt(3).at_launch) as f:
        snap = json.load(f)
    assert snap["will_load"]["path"].endswith(f"checkpoint_{snap['newest_complete'] // 5 - 1}")


def test_accelerate_total_limit_1_loses_work_when_a_save_is_killed(expt):
    """With total_limit=1 Accelerate deletes its only good checkpoint before it writes the next one:
    a kill inside that save leaves none (or a torn one that load_state picks). Reported, not hidden."""
    pytest.importorskip("accelerate")
    r, data = _fuzz_scenario(ACCEL, expt, "--kills", "1", "--save-share", "1", "--after-complete", "--no-baseline",
                             "--window", "60s",
                             "--set", 'phases.1.args=[--save-every, "5", --total-limit, "1", --width, "4096"]')
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert data["kills"][0]["where"] == "save" and data["kills"][0]["newest_complete_seen"] is not None
    assert any("saved work lost" in f for f in data["verdict"]["findings"]), data["verdict"]


def _fuzz_scenario(path, expt, *more):
    r = restartlab("fuzz", path, "--expt-dir", expt, "--plain", *more)
    fz = layout.Expt(expt).fuzz_summary
    return r, (json.load(open(fz)) if os.path.exists(fz) else None)


# ---------------------------------------------------------------- a plain DCP program (torch 2.13)
DCP = os.path.join(ROOT, "scenarios", "examples", "dcp.yaml")


def test_a_plain_dcp_program_through_run_is_exact(expt):
    """dcp.save into step-N (.metadata last), and the highest step-N holding .metadata loaded.
    It runs through the generic adapter with the dcp completion rule. Both kills resumed from the
    newest complete checkpoint, and the losses equal the baseline's bit for bit."""
    r = restartlab("run", DCP, "--expt-dir", expt, "--plain", *WARM)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = _summary(expt)["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest", "newest"], v
    assert v["survived"] and v["baseline"] == "loss identical to the baseline's at all 40 steps both logged", v
    assert _warm_ranks(expt) == [0, 2, 2]
    # simulate --replay takes the program's save interval from its checkpoints (its own --save-every 5)
    r = restartlab("simulate", "--replay", expt, "--phase", "restart", "--no-plot", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert (rep["interval_steps"], rep["steps"], rep["failures"]) == (5, 40, 2) and rep["simulated_ettr"] > 0


def test_fuzz_kills_a_dcp_program_inside_its_saves(expt):
    """Every kill is aimed at a save made while a complete checkpoint exists.
    Such a save is a step-N folder without .metadata yet, seen by polling the checkpoint dir. The
    kills that land there leave a torn step-N behind. The next attempt skips it for the newest one
    that holds .metadata. The program survives every kill: exit 0.

    The window is wide. It bounds how long a kill waits for a save to aim at: two windows from the
    launch, then it strikes anywhere. A cold start under load took past the scenario's 2 x 4 s
    before the second save (CI, 2 workers: all three kills struck at start-up or between saves).
    The relaunches are warm: the subject is the save, and a fork of the pool starts in a fraction
    of a cold start's CPU."""
    r, data = _fuzz_scenario(DCP, expt, "--kills", "3", "--seed", "1", "--save-share", "1", "--after-complete",
                             "--no-baseline", "--window", "30s", *WARM,
                             "--set", 'phases.1.args=[--save-every, "5", --width, "262144"]')
    assert r.returncode == 0 and data, r.stdout[-3000:] + r.stderr[-3000:]
    inside = [k for k in data["kills"] if k["where"] == "save"]
    assert inside, data["kills"]
    phase = layout.Expt(expt).phase("restart")
    for k in inside:
        (torn,) = k["saving"]
        with open(phase.attempt(k["attempt"] + 1).at_launch) as f:
            snap = json.load(f)
        assert [int(torn.split("-")[1]), False] in snap["checkpoints"], (k, snap)  # left torn by the kill
        assert k["next"] == "newest" and k["newest_complete"] is not None, k
    assert data["verdict"]["survived"] and data["verdict"]["finished"], data["verdict"]


# ---------------------------------------------------------------- PyTorch Lightning (2.6.6)
LIGHTNING = os.path.join(ROOT, "scenarios", "examples", "lightning.yaml")


def test_lightning_through_run_resumes_last_and_diverges_mid_epoch(expt, tmp_path_factory):
    """ModelCheckpoint(save_last=True) + fit(ckpt_path="last") under mpiexec (DDP, gloo).
    Every relaunch loads last.ckpt. Its step is read from inside it, and the resume line names its
    path. It is the newest complete checkpoint, or one save older when the kill fell between the
    step file and last.ckpt. Lightning writes them in that order, and the gated kill fires as the
    step file lands.

    The gated kills strike as step 15's and step 30's files land. So a relaunch resumes from 15 or
    10, then from 30 or 25: mid-epoch (not a multiple of 10) or at an epoch's end. Lightning 2.6.6
    does not restore a plain DataLoader's position mid-epoch. It warns so, for exactly the
    mid-epoch resumes. The CI run of a735c03 resumed from 10 then 30: no warning, and its check of
    attempt 2 alone failed.

    The losses after the resumes are not the baseline's either way. A mid-epoch resume replays the
    epoch's batches from its start. The second resume from an epoch's end meets the epoch count
    shown in test_lightning_epoch_end_saves_diverge_after_the_second_resume. The report says where
    they diverged."""
    pytest.importorskip("lightning")  # make test installs it (setup.cfg [frameworks])
    r = restartlab("run", LIGHTNING, "--expt-dir", expt, "--plain", *WARM, "--baseline-from",
                   baseline_of(tmp_path_factory, LIGHTNING))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(expt)
    v = s["restart"]["survival"]
    assert _warm_ranks(expt)[1:] and set(_warm_ranks(expt)[1:]) == {2}  # Lightning 2.6 restarts warm
    outcomes = [x["outcome"] for x in v["restarts"]]
    assert v["finished"] and outcomes[0] == "first" and set(outcomes[1:]) <= {"newest", "older"}, v
    assert all("5 step(s) lost beyond necessity" in x["text"] for x in v["restarts"] if x["outcome"] == "older")
    assert all("inferred" not in x["text"] for x in v["restarts"])  # the resume line named last.ckpt
    phase = layout.Expt(expt).phase("restart")
    resumes = []
    for k in range(2, len(v["restarts"]) + 1):
        with open(phase.attempt(k).at_launch) as f:
            snap = json.load(f)
        assert snap["will_load"]["path"].endswith("last.ckpt")
        assert snap["will_load"]["step"] in (snap["newest_complete"], snap["newest_complete"] - 5)
        with open(phase.attempt(k).output) as f:
            warned = "resuming from a checkpoint that ended before the epoch ended" in f.read()
        step = snap["will_load"]["step"]
        assert warned == (step % 10 != 0), (k, step, warned)  # the warning exactly for a mid-epoch resume
        resumes.append(step)
    assert len(resumes) == 2, resumes
    diverged = [f for f in v["findings"] if f.startswith("diverged from the baseline at step")]
    assert diverged and int(diverged[0].split()[6]) > resumes[0], (resumes, v)
    assert {e["resumed_from"] for e in s["restart"]["failures"]} <= {5 * k for k in range(1, 9)}


def test_lightning_epoch_end_saves_diverge_after_the_second_resume(expt, tmp_path_factory):
    """Saves every 10 steps in 10-batch epochs: every checkpoint is at an epoch's last batch.
    The first resume (from step 20) is exact. But the epoch Lightning 2.6.6 runs after that resume
    is not counted in its epoch_progress (ready = started = 2 while it trains epoch 2). So
    step30.ckpt restores with the DistributedSampler set to epoch 2. The second resume replays
    epoch 2's shuffle where the baseline trains on epoch 3's. Measured here: the step-31 loss,
    0.0076387702 against 0.0599828213, is epoch 2's first batch under step 30's weights, computed
    apart. Kills on the step seen (25, 35), far from any save."""
    pytest.importorskip("lightning")
    r = restartlab("run", LIGHTNING, "--expt-dir", expt, "--plain",
                   "--baseline-from", baseline_of(tmp_path_factory, LIGHTNING), *WARM,
                   "--set", 'phases.1.args=[--save-every, "10"]', "--set", "failures.schedule.at_steps=[25, 35]",
                   "--set", "failures.gate=none")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = _summary(expt)["restart"]["survival"]
    assert [(x["outcome"], x["resumed_from"]) for x in v["restarts"]] == [("first", 0), ("newest", 20), ("newest", 30)]
    assert v["baseline"].startswith("diverged from the baseline at step 31 (loss "), v
    phase = layout.Expt(expt).phase("restart")
    with open(phase.attempt(3).output) as f:
        assert "resuming from a checkpoint that ended before the epoch ended" not in f.read()  # no warning given


def test_lightning_fuzz_never_loads_a_torn_checkpoint(expt):
    """Lightning's save goes through a temp file renamed into place.
    Here $TMPDIR and the checkpoints share /tmp. A kill never leaves a torn last.ckpt, and no
    restart crashes while loading. No save shows in the checkpoint dir, since the temp file is in
    $TMPDIR. So a kill aimed at a save strikes as a checkpoint lands complete unseen: the step file,
    before last.ckpt. On a later save that resumes one save older (allowed here). On the first one
    Lightning starts over from step 0 (the next test makes it happen on purpose). That is allowed
    only with that reason. The relaunches are warm (forks of a pool that imported torch and
    Lightning)."""
    pytest.importorskip("lightning")
    r, data = _fuzz_scenario(LIGHTNING, expt, "--kills", "3", "--seed", "2", "--window", "4s", "--no-baseline", *WARM,
                             "--set", 'phases.1.args=[--save-every, "5", --width, "1024"]')
    assert r.returncode in (0, 1) and data, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(data["kills"]) >= 2
    restarts = data["verdict"]["restarts"]
    assert not {x["outcome"] for x in restarts} & {"incomplete", "load_crash", "startup_crash", "lost"}, data["verdict"]
    assert all("(its own rule, selects: last, found nothing to load)" in x["text"]
               for x in restarts if x["outcome"] == "fresh"), data["verdict"]
    assert data["verdict"]["finished"]


def test_lightning_kill_between_the_first_step_file_and_last_ckpt_starts_over(expt):
    """Lightning writes the step file (step5.ckpt), then last.ckpt, and fit(ckpt_path="last") looks
    at last*.ckpt only. A kill between the two on the first save leaves a complete step5.ckpt and
    no last.ckpt. The restart starts over from step 0 with only a warning. The example's fault
    point (--pause-before-last) holds that gap open. So the gated kill at step 5 strikes inside it
    on purpose (it fires as step5.ckpt lands complete). restartlab reports the lost save as a
    finding that names the program's rule."""
    pytest.importorskip("lightning")
    r = restartlab("run", LIGHTNING, "--expt-dir", expt, "--plain", "--set", "failures.schedule.at_steps=[5]",
                   "--set", 'phases=[{name: restart, checkpoint: sync, args: [--save-every, "5", '
                   '--pause-before-last, "2"]}]')
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = _summary(expt)["restart"]["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "fresh"], v
    assert v["restarts"][1]["text"] == ("started over from step 0 although step 5 was complete (its own rule, "
                                        "selects: last, found nothing to load)")
    assert not v["survived"] and v["finished"]
    phase = layout.Expt(expt).phase("restart")
    with open(phase.attempt(2).at_launch) as f:
        snap = json.load(f)
    assert snap["checkpoints"] == [[5, True]] and snap["will_load"] is None
    with open(phase.attempt(2).output) as f:
        assert 'ckpt_path="last") is set, but there is no last checkpoint available' in f.read()


def test_a_checkpoint_pattern_that_matches_nothing_falls_back_to_the_step(expt):
    """The gated injector cannot see a complete checkpoint through a wrong pattern.
    It says so once, and strikes when the step is seen instead of waiting for ever."""
    r = restartlab("run", PLAIN, "--expt-dir", expt, "--plain", "--set",
                   r"trainer.program.checkpoints={ckpt_dir}/model-(?P<step>\d+)\.bin",
                   "--set", 'phases=[{name: restart, checkpoint: sync, args: [--save-every, "5"]}]')
    with open(layout.Expt(expt).phase("restart").injector_log) as f:
        log = f.read()
    assert log.count("nothing matches the checkpoint pattern") == 1, log
    assert sum(1 for line in log.splitlines() if "(step seen)" in line) == 2, log
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_the_bundled_trainer_through_fuzz_is_bit_exact(expt):
    """The bundled trainer through the same verb (the restartlab adapter: step-N/.complete, its own
    metrics rows). Kills are aimed inside async saves made while a complete checkpoint exists.
    Every restart loads the newest complete one. The loss and the final parameters equal the
    baseline's."""
    r = restartlab("fuzz", os.path.join(ROOT, "scenarios", "fuzz.yaml"), "--phase", "async", "--kills", "3",
                   "--seed", "1", "--after-complete", "--expt-dir", expt, "--plain",
                   "--set", "launch.ranks_per_node=2", "--set", "trainer.train_iters=36")
    fz = layout.Expt(expt).fuzz_summary
    assert r.returncode == 0 and os.path.exists(fz), r.stdout[-3000:] + r.stderr[-3000:]
    data = json.load(open(fz))
    assert len(data["kills"]) >= 2 and data["verdict"]["survived"]
    assert "final parameters identical (crc)" in data["verdict"]["baseline"]
