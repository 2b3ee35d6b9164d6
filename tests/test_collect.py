"""Accounting on synthetic metrics with known answers, and one real `restartlab run`.

The synthetic cases include a kill right after a save, a kill before any checkpoint, and off-by-one
cases. The real run is checked against its raw files."""
import argparse
from dataclasses import asdict, replace
import json
import os
import pathlib
import signal
import subprocess
import sys

import psutil
import pytest

from restartlab.analysis import collect, report
from restartlab.runtime import killer
from restartlab.contracts import layout, live
from restartlab.contracts.jobruns import JobRun, NodeChange
from restartlab.contracts.phase_summary import FailureEvent, PhaseSummary
from restartlab.contracts.typed_json import to_dict
from tests.helpers import assert_each_file_read_once, counted_opens, job_tag, report_args, run_story, wait_for


def write_attempt(phase_dir, k, launch, rows, end, completed=False, garbage=True):
    att = layout.Phase(phase_dir).attempt(k)
    os.makedirs(att.path)
    with open(att.metrics(0), "w") as f:
        for ts, m in rows:
            f.write(json.dumps({"timestamp": ts, "rank": 0, "metrics": m}) + "\n")
        if garbage:
            f.write("garbage {not json\n")
    with open(att.record, "w") as f:
        json.dump({"launch_ts": launch, "end_ts": end, "exit_code": 0 if completed else 9,
                   "completed": completed}, f)


def steps(first, last, t0, dt=1.0, resumed=None, extra=None):
    out = []
    for i, s in enumerate(range(first, last + 1)):
        m = {"train/iter": s, "train/loss": 1.0, "train/dt": dt}
        if i == 0 and resumed is not None:
            m.update({"train/resumed_from": resumed, "train/restart_seconds": 5.0})
        m.update((extra or {}).get(s, {}))
        out.append((t0 + (i + 1) * dt, m))
    return out


def test_accounting_known_answers(tmp_path):
    ph = str(tmp_path / "sync")
    # attempt 1: steps 1..7, killed at t=108 before any checkpoint (lost = 7 - 0)
    write_attempt(ph, 1, 100.0, steps(1, 7, 100.0), 108.0)
    # attempt 2: fresh start (resumed 0), steps 1..10 save at 10 (2 s), killed right after it
    save = {10: {"train/ckpt_save_seconds": 2.0}}
    write_attempt(ph, 2, 110.0, steps(1, 10, 112.0, extra=save), 123.0)
    # attempt 3: resumes at 10, steps 11..14, killed at t=131 (lost = 14 - 10 = 4)
    write_attempt(ph, 3, 124.0, steps(11, 14, 126.0, resumed=10), 131.0)
    # attempt 4: resumes at 10 again, finishes at 20
    rows = steps(11, 20, 134.0, resumed=10) + [(150.0, {"train/iter": 20, "train/params_crc": "x"})]
    write_attempt(ph, 4, 132.0, rows, 150.0, completed=True)
    with open(layout.Phase(ph).injections, "w") as f:
        for t in (107.5, 122.5, 130.5):
            f.write(json.dumps({"time": t, "killed": 2}) + "\n")
    p = collect.load_phase("sync", phase_dir=ph)
    ev = collect.failure_events(p)
    assert [(e.step_at_kill, e.resumed_from, e.lost_steps) for e in ev] == [(7, 0, 7), (10, 10, 0), (14, 10, 4)]
    # kill right after the save at 10: attempt 3 resumes at 10 -> the save is not lost
    assert list(p.saves["train/ckpt_save_seconds"]) == [2.0]
    # downtime = first step of the next attempt - kill time
    assert ev[0].downtime_s == pytest.approx(113.0 - 107.5)
    assert ev[2].downtime_s == pytest.approx(135.0 - 130.5)
    # recompute: steps 12..14 recomputed after the first one (11, inside downtime): 3 s
    assert ev[2].recompute_s == pytest.approx(3.0)
    assert ev[2].restart_s == 5.0
    s = collect.summarize_phase(p)
    assert s.lost_steps == 11 and s.kills == 3 and s.attempts == 4
    assert s.wall_s == pytest.approx(50.0)
    # productive: only kept steps (1..10 of attempt 2, 11..20 of attempt 4), 1 s each
    assert s.productive_s == pytest.approx(20.0)
    assert s.ettr == pytest.approx(20.0 / 50.0)
    assert any("skipped a malformed line" in w and ":8:" in w for w in p.warnings)


def test_an_attempt_cut_short_with_its_job_is_placed_by_its_launch_record(tmp_path):
    """PBS requeued the job while attempt 2 trained, say because its node was lost.

    Attempt 2 left steps and its launch record, but no attempt record. Its launch record says which
    run of the job it was in. So the time to the job's second run (attempt 3) is found. It is a
    failure's time, not a chain's hand-over (#65):
    - It was ended by the scheduler: no rank's death is known.
    - Its downtime runs from attempt 2's last sign of life to attempt 3's first step.
    - It counts in the phase's wall time."""
    ph = str(tmp_path / "sync")
    write_attempt(ph, 1, 100.0, steps(1, 7, 100.0), 108.0, garbage=False)
    write_attempt(ph, 2, 110.0, steps(1, 5, 112.0), 0.0, garbage=False)
    write_attempt(ph, 3, 200.0, steps(1, 10, 202.0) + [(213.0, {"train/iter": 10, "train/params_crc": "x"})],
                  213.0, completed=True, garbage=False)
    for k, start in ((1, 90.0), (2, 90.0), (3, 190.0)):
        att = layout.Phase(ph).attempt(k)
        with open(att.record) as f:
            rec = json.load(f)
        rec.update(job="42.head", job_start=start)
        with open(att.record, "w") as f:
            json.dump(rec, f)
        with open(att.launched, "w") as f:
            json.dump({"attempt": k, "launch_ts": rec["launch_ts"], "job": "42.head", "job_start": start}, f)
    os.remove(layout.Phase(ph).attempt(2).record)  # cut short with its job: no record of its end
    # what the job script's job-run line wrote for each run (runtime/jobrun.py), Slurm's words
    with open(layout.Expt(str(tmp_path)).job_runs, "w") as f:
        f.write(JobRun("42.head", 90.0, "slurm", run=1, hosts=("n1", "n2")).to_json() + "\n")
        f.write(JobRun("42.head", 190.0, "slurm", run=2, started=190.0, hosts=("n1", "n3"), requeued=150.0,
                       eligible=185.0, nodes=(NodeChange("n2", "down*", 140.0, "Not responding"),)).to_json() + "\n")
    p = collect.load_phase("sync", phase_dir=ph)
    # its missing record is explained by the rerun: no warning (the report's between-runs line tells it)
    assert not any("no readable attempt record" in str(w) for w in p.warnings), p.warnings
    assert collect.handovers(p) == []
    ev = collect.failure_events(p)
    assert [e.attempt for e in ev] == [1, 2]
    e = ev[1]
    # the files it left are dated now, outside its span (110 .. 200): no evidence; its last step is
    assert e.detected_by == "scheduler" and p.attempts[1].evidence == (117.0, "its last step"), e
    assert p.attempts[2].first_ts >= 202.0 and e.downtime_s == pytest.approx(p.attempts[2].first_ts - 117.0), e
    r = e.rerun
    assert (r.end_ts, r.run_start, r.between_runs_s) == (117.0, 190.0, 73.0), r
    assert (r.requeued_at, r.eligible_at, r.scheduler) == (150.0, 185.0, "slurm"), r
    # the nodes: each run's record names them (the attempts do not: the scheduler chose them)
    assert e.recovery == "the job's next run: n1, n3 (n3 for n2)" and e.hosts_before == ["n1", "n2"], e
    # detected when the scheduler set the node down (140), the gap from there
    assert e.detection_s == pytest.approx(140.0 - 117.0) and e.launch_gap_s == pytest.approx(200.0 - 140.0), e
    text = report.rerun_text(e)
    assert "Slurm requeued job 42.head at " in text and "n2 down* since " in text and "(Not responding)" in text, text
    assert "eligible to run again at " in text and "73 s between the runs" in text, text
    s = collect.summarize_phase(p)
    assert s.wall_s == pytest.approx(213.0 - 100.0) and s.queue_wait_s == 0, s.wall_s
    # The issue's own case. A fault at 115.5 stops a rank. The watchdog decides at 140; its marker is
    # written before any teardown. Then the job's run ends under it and the scheduler requeues the job.
    with open(layout.Phase(ph).injections, "w") as f:
        f.write(json.dumps({"time": 115.5, "killed": 1, "kind": "hang", "signal": "STOP"}) + "\n")
    hang = layout.Phase(ph).attempt(2).hang
    open(hang, "w").close()
    os.utime(hang, (140.0, 140.0))
    td = layout.Phase(ph).attempt(2).teardown_log  # its stop went on until 150 (a node it could not reach)
    with open(td, "w") as f:
        f.write("restartlab teardown: TERM ... unreachable: n2\n")
    os.utime(td, (150.0, 150.0))
    p = collect.load_phase("sync", phase_dir=ph)
    e = collect.failure_events(p)[1]
    assert e.detected_by == "watchdog" and e.rerun.stopped_at == 140.0, e
    # detected at the decision, the gap from there to the next run's launch (200); the downtime from the fault
    assert e.detection_s == pytest.approx(140.0 - 115.5) and e.launch_gap_s == pytest.approx(200.0 - 140.0), e
    assert e.downtime_s == pytest.approx(p.attempts[2].first_ts - 115.5), e
    assert report.rerun_text(e).startswith("the watchdog decided to stop attempt 2 at "), report.rerun_text(e)
    assert p.attempts[1].end_ts == 150.0, p.attempts[1].evidence  # its last sign of life: the stop's log
    os.remove(hang)
    os.remove(td)
    os.remove(layout.Phase(ph).attempt(2).launched)  # without it, nothing tells the runs apart
    p = collect.load_phase("sync", phase_dir=ph)
    assert [e.rerun for e in collect.failure_events(p)] == [None, None]
    assert any("2: no readable attempt record" in str(w) for w in p.warnings), p.warnings


def test_overhead_adds_up_with_residual():
    base = PhaseSummary(phase="b", wall_s=20.0, completed=True)
    ph = PhaseSummary(phase="s", wall_s=50.0, downtime_s=14.0, recompute_s=3.0, save_stall_s=2.0, completed=True)
    o = collect.overhead(ph, base)
    assert o.measured_s == 30.0 and o.residual_s == pytest.approx(11.0)
    # a phase (or baseline) that did not reach its last step: its wall time compares with nothing
    assert collect.overhead(replace(ph, completed=False), base) is None
    assert collect.overhead(ph, replace(base, completed=False)) is None
    # background interference is a named part; each phase is taken net of its first start-up
    base = PhaseSummary(phase="b", wall_s=20.0, first_start_s=4.0, completed=True)  # a cold first launch
    ph = replace(ph, interference_s=1.5, first_start_s=1.0)
    o = collect.overhead(ph, base)
    assert o.measured_s == pytest.approx((50.0 - 1.0) - (20.0 - 4.0))
    assert o.residual_s == pytest.approx(33.0 - 14.0 - 3.0 - 2.0 - 1.5)
    assert o.interference_s == 1.5


def test_step_time_drift_is_named_and_leaves_the_residual_alone():
    """A phase whose every step ran 10% slower (a noisy neighbour) than the baseline's: that
    time is the drift column, not the residual."""
    base = PhaseSummary(phase="b", wall_s=100.0, step_dt_s=1.0, steps=100, completed=True)
    ph = PhaseSummary(phase="s", wall_s=125.0, downtime_s=10.0, recompute_s=3.0, save_stall_s=2.0, interference_s=0.0,
                      step_dt_s=1.1, steps=100, completed=True)
    o = collect.overhead(ph, base)
    assert o.drift_s == pytest.approx(10.0) and o.residual_s == pytest.approx(0.0)


def test_baseline_is_the_phase_without_checkpoints_whatever_its_name(tmp_path):
    """Rename the baseline: the overhead column still finds it (by checkpoint: none)."""
    from restartlab.analysis import report
    d = tmp_path / "expt"
    for name, t0 in (("ref", 100.0), ("sync", 300.0)):
        write_attempt(str(d / name), 1, t0, steps(1, 10, t0), t0 + 11, completed=True)
    with open(layout.Expt(d).scenario, "w") as f:
        f.write("phases: [{name: ref, checkpoint: none}, {name: sync, checkpoint: sync}]\n")
    a = argparse.Namespace(expt_dir=str(d), baseline=None, sync=None, async_=None, expect=None, mtbf=3600.0)
    _, summaries, _, _, _ = report.build(a)
    by = {s.phase: s for s in summaries}
    assert [s.phase for s in summaries] == ["ref", "sync"]  # the scenario's order
    assert by["ref"].overhead is None and by["sync"].overhead.measured_s == pytest.approx(0.0)


def test_report_and_simulate_share_the_restart_cost(tmp_path):
    """The report and `simulate --from` share one R and one Young-Daly.

    R is detection + relaunch gap + restart. The same run gets the same interval from both."""
    from restartlab.analysis import simulate
    ev = [FailureEvent(attempt=1, detected_by="launcher", restart_s=4.0, launch_gap_s=0.01, detection_s=0.3, kind="kill"),
          FailureEvent(attempt=2, detected_by="launcher", restart_s=6.0, launch_gap_s=0.03, detection_s=0.5, kind="kill")]
    summary = {"phases": [
        {"phase": "b", "checkpoint": "none", "steps": 10, "productive_s": 10.0, "failures": [],
         "save": {}, "finalize": {}},
        {"phase": "s", "checkpoint": "sync", "steps": 10, "productive_s": 11.0, "failures": [asdict(e) for e in ev],
         "save": {"ckpt_save_seconds": {"median": 2.0}}, "finalize": {}}]}
    path = layout.Expt(str(tmp_path)).summary
    with open(path, "w") as f:
        json.dump(summary, f)
    r = collect.phase_restart_cost(ev)
    assert r == pytest.approx(5.0 + 0.02 + 0.4)
    report_yd = collect.young_daly(2.0, r, 3600.0)
    costs = simulate.costs_from_summary(str(path))
    assert costs.step_s == pytest.approx(1.0)  # from the phase with checkpoint: none
    sim_yd = simulate.young_daly(costs, simulate.Failures(mtbf_s=3600.0), "sync")
    assert sim_yd.daly_s == pytest.approx(report_yd.daly_s)


def test_detection_is_a_registry_key():
    a = collect.AttemptData(1, "x")
    assert collect.detected_by(a) == "launcher"
    a.hang = True
    assert collect.detected_by(a) == "watchdog" and "hang_timeout" in collect.DETECTIONS["watchdog"].text
    a.preempted = True
    assert collect.detected_by(a) == "trainer"


def test_report_exit_status_comes_from_typed_problems(tmp_path):
    """A warning that merely mentions the word is information; a Malformed input is exit 2."""
    d = tmp_path / "expt"
    write_attempt(str(d / "sync"), 1, 100.0, steps(1, 5, 100.0), 106.0, completed=True)
    # write_attempt adds a garbage line: a malformed input
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", str(d), "--no-plots"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "malformed input(s) skipped" in r.stderr
    assert isinstance(collect.load_phase("sync", phase_dir=str(d / "sync")).warnings[0], live.Malformed)
    clean = tmp_path / "clean"
    write_attempt(str(clean / "malformed-name"), 1, 100.0, steps(1, 5, 100.0), 106.0, completed=True, garbage=False)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", str(clean), "--no-plots"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_crash_line_is_the_programs_not_a_note_of_restartlab():
    """CI (stop 68): ezpz's FSDP+TP program crashed in gloo. The crash line quoted was the probe's
    note, written just before: "restartlab: whole-state fingerprints not taken: ValueError: ..."."""
    tail = ("[1] restartlab: whole-state fingerprints not taken: ValueError: strided sharding: not compared whole\n"
            "restartlab: rank hooks off: OSError: no such file\n"
            "[1] step 5 loss 2.3\n"
            "[1] RuntimeError: [enforce fail at gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes\n"
            "[0] RuntimeError: Connection closed by peer\n")
    assert collect.error_line(tail).startswith("RuntimeError: [enforce fail at gloo")
    assert collect.error_line(tail.split("[1] step")[0]) is None


def test_young_daly():
    yd = collect.young_daly(2.0, 10.0, 3600.0)
    assert yd.young_s == pytest.approx((2 * 2 * 3600) ** 0.5)
    assert yd.daly_s == pytest.approx((2 * 2 * 3610) ** 0.5 - 2)


def test_report_names_missing_phase_and_reads_ezpz_globs(tmp_path):
    f = tmp_path / "ezpz-sync-0.jsonl"
    f.write_text("".join(json.dumps({"timestamp": 100 + i, "rank": 0, "metrics": {"train/iter": i, "train/loss": 1.0,
                                                                                  "train/dt": 1.0}}) + "\n"
                         for i in range(1, 6)))
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", "--sync", str(f),
                        "--baseline", str(tmp_path / "nope*.jsonl"), "--out", str(tmp_path / "rep"), "--no-plots"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "missing phases: baseline" in r.stderr
    s = json.load(open(layout.Expt(tmp_path / "rep").summary))
    assert s["phases"][0]["steps"] == 5


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_real_restartlab_run(tmp_path):
    """A minimal scenario end to end: real mpiexec ranks, real kills, relaunch loop, report.

    Then a sync variant of it reuses its baseline (run --baseline-from)."""
    d = tmp_path / "expt"
    # The watchdog stops a start-up that hangs after 150 s, with the ranks' stacks in its output.
    # In CI (2026-12-02) the async phase's second attempt hung like that: 520 s without a step.
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                        "--set", "trainer.train_iters=30", "--set", "failures.schedule.at_steps=[12]",
                        "--set", "phases=[{name: baseline, checkpoint: none}, {name: async, checkpoint: async}]",
                        "--set", "trainer.save_interval=5", "--set", "relaunch.startup_timeout=150s"],
                       capture_output=True, text=True, timeout=560)
    assert r.returncode == 0, run_story(d, r)
    s = json.load(open(layout.Expt(d).summary))
    ph = {p["phase"]: p for p in s["phases"]}
    a = ph["async"]
    inj = [json.loads(l) for l in open(layout.Expt(d).phase("async").injections)]
    assert a["kills"] == len(inj) == 1 and inj[0]["killed"] >= 2
    assert a["attempts"] == 2 and a["completed"] and ph["baseline"]["kills"] == 0, run_story(d)
    # the report's numbers against the raw files
    ev = a["failures"][0]
    resumed = [l for l in open(layout.Expt(d).phase("async").attempt(2).output) if "RESUMED from step=" in l]
    assert resumed and int(resumed[0].split("step=")[1]) == ev["resumed_from"] >= 10
    rows1 = [json.loads(l)["metrics"] for l in open(layout.Expt(d).phase("async").attempt(1).metrics(0))]
    last = max(m["train/iter"] for m in rows1 if "train/loss" in m)
    assert ev["step_at_kill"] == last and ev["lost_steps"] == last - ev["resumed_from"]
    assert ev["downtime_s"] > ev["restart_s"] > 0
    assert os.path.exists(layout.Expt(d).report) and os.path.exists(d / "progress.png")
    # Where the kill landed: the newest complete save it found, from the injector's record. Then what
    # a failure at a random time loses here: saves come every 5 steps, as the launches found them.
    assert ev["gate"] == "complete" and ev["newest_complete_at_kill"] == inj[0]["newest_complete"] >= 10
    assert ev["steps_after_save"] == last - inj[0]["newest_complete"]
    exp = a["expected_loss"]
    assert exp["save_interval_steps"] == 5 and exp["per_failure"] == 2 + exp["complete_lag_steps"]
    text = open(layout.Expt(d).report).read()
    assert "- **async**: " in text and "waited for a step's `.complete` and landed just after a save" in text, text
    # steps beside a background save are told apart from the others (the interference figure)
    i = a["interference"]
    assert i and i["busy_steps"] >= 1 and i["idle_steps"] >= 1 and i["busy_dt_s"] > 0 and i["idle_dt_s"] > 0, i
    flagged = [m for m in rows1 if m.get("train/ckpt_inflight")]
    assert flagged and all(m["train/iter"] > 5 for m in flagged)  # none before the first save
    assert ph["baseline"]["interference"] is None
    assert killer.find_tagged(job_tag(d)) == []  # nothing of the job outlives it
    # one report of a real experiment opens each of its files once (issue 35: the read model)
    with counted_opens() as opens:
        again = report.build(report_args(d))[1]
    assert_each_file_read_once(str(d), opens, [layout.Expt(d).phase(p).attempt(k).metrics(0)
                                               for p, k in (("baseline", 1), ("async", 1), ("async", 2))])
    assert [to_dict(x.survival) for x in again] == [x["survival"] for x in s["phases"]]
    # a replay of the baseline is refused: it saves nothing, so there is no failure to replay
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "simulate", "--replay", str(d), "--phase", "baseline"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "saves no checkpoints" in r.stderr, r.stderr

    # A sync variant of the same scenario takes that baseline instead of running it again
    # (restartlab run --baseline-from). The baseline is copied, not run. The sync phase is judged
    # against it.
    common = ["--set", "trainer.train_iters=30", "--set", "failures.schedule.at_steps=[12]",
              "--set", "phases=[{name: baseline, checkpoint: none}, {name: sync, checkpoint: sync}]",
              "--set", "trainer.save_interval=5", "--set", "collection.plots=false"]

    def run(expt, *more):
        return subprocess.run([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(expt), "--plain",
                               "--baseline-from", str(d), *common, *more], capture_output=True, text=True, timeout=560)
    d2 = tmp_path / "sync-variant"
    r = run(d2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"baseline baseline taken from {d}" in r.stdout
    with open(layout.Expt(d2).job_out) as f:
        assert f"phase baseline: recorded in {d} (restartlab run --baseline-from): not run again" in f.read()
    src, copy = layout.Expt(d).phase("baseline").attempt(1), layout.Expt(d2).phase("baseline").attempt(1)
    for name in ("metrics", "output", "record"):  # the recorded attempt, byte for byte
        path = (lambda a: a.metrics(0)) if name == "metrics" else (lambda a: getattr(a, name))
        with open(path(src), "rb") as f1, open(path(copy), "rb") as f2:
            assert f1.read() == f2.read(), name
    s2 = {p["phase"]: p for p in json.load(open(layout.Expt(d2).summary))["phases"]}
    assert s2["baseline"]["reused_from"] == str(d) and s2["sync"]["reused_from"] is None
    v = s2["sync"]["survival"]
    assert v["survived"] and "loss identical to the baseline's at all 30 steps" in v["baseline"], v
    with open(layout.Expt(d2).report) as f:
        assert f"Phase baseline was not run in this experiment: it is the baseline recorded in {d}" in f.read()
    # refused, before anything exists: another command (the seed), and a baseline that did not finish
    r = run(tmp_path / "other-seed", "--set", "trainer.seed=7")
    assert r.returncode == 2 and "ran another command" in r.stderr and "(after --seed)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "other-seed").exists()
    os.remove(layout.Expt(d).phase("baseline").completed)
    r = run(tmp_path / "unfinished")
    assert r.returncode == 2 and "that baseline did not finish" in r.stderr and not (tmp_path / "unfinished").exists()


def test_progress_trace_is_bounded_and_spans_the_attempt():
    a = collect.AttemptData(1, "unused", trace_cap=500)
    for it in range(1, 100_001):
        a.add_trace(float(it), it)
    assert 500 <= len(a.trace) < 2 * 500
    its = [it for _, it in a.trace]
    assert its[0] == 1 and its == sorted(its) and its[-1] > 100_000 - 2 * a.trace_stride


@pytest.mark.multirank
def test_ctrl_c_stops_everything_and_leaves_a_readable_experiment(tmp_path):
    """Ctrl-C as a terminal sends it: SIGINT to `restartlab run`'s foreground process group,
    in the middle of the sync phase. Everything the run started carries RESTARTLAB_LOCAL_JOBID=<its pid>.local
    (job script, injector, mpiexec, ranks): none of it may survive, and the report still reads.
    A local run carries the local scheduler's job id, never a batch system's variables."""
    d = tmp_path / "expt"
    p = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                          "--set", "trainer.train_iters=100", "--set", "failures.schedule.at_steps=[80]",
                          # 0.1 s a step (a test-only delay point). The sync phase is still running at
                          # the Ctrl-C. Its ranks, and the baseline's before them, sleep instead of computing.
                          "--set", 'launch.env={RESTARTLAB_DELAY: "step:*:*:0.1"}'],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         # a foreground job at a terminal: SIGINT as default. The suite may run as a
                         # background job of a shell without job control, whose children inherit
                         # SIGINT ignored (bash does that to `cmd &`): then no Ctrl-C reaches anyone
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    mine = f"RESTARTLAB_LOCAL_JOBID={p.pid}.local"
    try:
        metrics = pathlib.Path(layout.Expt(d).phase("sync").attempt(1).metrics(0))
        wait_for(lambda: metrics.exists() and metrics.stat().st_size > 0, 240, "the sync phase's first rows")
        seen = killer.find_by_env(mine)
        assert len(seen) >= 5, [killer._cmdline(psutil.Process(x)) for x in seen]  # not vacuous: script, supervisor, injector, ranks
        for pid in killer.find_by_env(mine):
            env = psutil.Process(pid).environ()
            assert not any(k.startswith("PBS_") for k in env if k not in os.environ), (pid, env)
        os.killpg(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            for pid in killer.find_by_env(mine):  # the job script runs in its own session: by PID
                os.kill(pid, signal.SIGKILL)
    assert p.returncode == 130, out[-3000:]
    assert "interrupted" in out and str(d) in out
    wait_for(lambda: not killer.find_by_env(mine), 15, "every process of the run to be gone")
    assert killer.find_tagged(job_tag(d)) == []
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", str(d), "--no-plots"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "missing phases: async" in r.stderr
    s = json.load(open(layout.Expt(d).summary))
    assert {ph["phase"] for ph in s["phases"]} == {"baseline", "sync"}
    assert next(ph for ph in s["phases"] if ph["phase"] == "baseline")["completed"]
