"""Accounting on synthetic metrics with known answers (kill right after a save, a kill before
any checkpoint, off-by-one cases), and one real `restartlab run` checked against its raw files."""
import json
import os
import signal
import subprocess
import sys

import pytest

from restartlab import collect, killer
from tests.helpers import job_tag, wait_for


def write_attempt(phase_dir, k, launch, rows, end, completed=False):
    d = os.path.join(phase_dir, "attempts", str(k))
    os.makedirs(d)
    with open(os.path.join(d, "metrics-0.jsonl"), "w") as f:
        for ts, m in rows:
            f.write(json.dumps({"timestamp": ts, "rank": 0, "metrics": m}) + "\n")
        f.write("garbage {not json\n")
    with open(os.path.join(d, "attempt.json"), "w") as f:
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
    with open(os.path.join(ph, "injections.jsonl"), "w") as f:
        for t in (107.5, 122.5, 130.5):
            f.write(json.dumps({"time": t, "killed": 2}) + "\n")
    p = collect.load_phase("sync", phase_dir=ph)
    ev = collect.failures(p)
    assert [(e["step_at_kill"], e["resumed_from"], e["lost_steps"]) for e in ev] == [(7, 0, 7), (10, 10, 0), (14, 10, 4)]
    # kill right after the save at 10: attempt 3 resumes at 10 -> the save is not lost
    assert list(p.saves["train/ckpt_save_seconds"]) == [2.0]
    # downtime = first step of the next attempt - kill time
    assert ev[0]["downtime_s"] == pytest.approx(113.0 - 107.5)
    assert ev[2]["downtime_s"] == pytest.approx(135.0 - 130.5)
    # recompute: steps 12..14 recomputed after the first one (11, inside downtime): 3 s
    assert ev[2]["recompute_s"] == pytest.approx(3.0)
    assert ev[2]["restart_s"] == 5.0
    s = collect.summarize_phase(p)
    assert s["lost_steps"] == 11 and s["kills"] == 3 and s["attempts"] == 4
    assert s["wall_s"] == pytest.approx(50.0)
    # productive: only kept steps (1..10 of attempt 2, 11..20 of attempt 4), 1 s each
    assert s["productive_s"] == pytest.approx(20.0)
    assert s["ettr"] == pytest.approx(20.0 / 50.0)
    assert any("skipped a malformed line" in w and ":8:" in w for w in p.warnings)


def test_overhead_adds_up_with_residual():
    base = {"wall_s": 20.0}
    ph = {"wall_s": 50.0, "downtime_s": 14.0, "recompute_s": 3.0, "save_stall_s": 2.0}
    o = collect.overhead(ph, base)
    assert o["measured_s"] == 30.0 and o["residual_s"] == pytest.approx(11.0)
    # background interference is a named part; each phase is taken net of its first start-up
    base = {"wall_s": 20.0, "first_start_s": 4.0}  # a cold first launch
    ph = dict(ph, interference_s=1.5, first_start_s=1.0)
    o = collect.overhead(ph, base)
    assert o["measured_s"] == pytest.approx((50.0 - 1.0) - (20.0 - 4.0))
    assert o["residual_s"] == pytest.approx(33.0 - 14.0 - 3.0 - 2.0 - 1.5)
    assert o["interference_s"] == 1.5


def test_young_daly():
    yd = collect.young_daly(2.0, 10.0, 3600.0)
    assert yd["young_s"] == pytest.approx((2 * 2 * 3600) ** 0.5)
    assert yd["daly_s"] == pytest.approx((2 * 2 * 3610) ** 0.5 - 2)


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
    s = json.load(open(tmp_path / "rep" / "summary.json"))
    assert s["phases"][0]["steps"] == 5


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_real_restartlab_run(tmp_path):
    """A minimal scenario end to end: real mpiexec ranks, real kills, relaunch loop, report."""
    d = tmp_path / "expt"
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                        "--set", "trainer.train_iters=30", "--set", "failures.schedule.at_steps=[12]",
                        "--set", "phases=[{name: baseline, checkpoint: none}, {name: async, checkpoint: async}]",
                        "--set", "trainer.save_interval=5"],
                       capture_output=True, text=True, timeout=560)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.load(open(d / "summary.json"))
    ph = {p["phase"]: p for p in s["phases"]}
    a = ph["async"]
    inj = [json.loads(l) for l in open(d / "async" / "injections.jsonl")]
    assert a["kills"] == len(inj) == 1 and inj[0]["killed"] >= 2
    assert a["attempts"] == 2 and a["completed"] and ph["baseline"]["kills"] == 0
    # the report's numbers against the raw files
    ev = a["failures"][0]
    resumed = [l for l in open(d / "async" / "attempts" / "2" / "output.log") if "RESUMED from step=" in l]
    assert resumed and int(resumed[0].split("step=")[1]) == ev["resumed_from"] >= 10
    rows1 = [json.loads(l)["metrics"] for l in open(d / "async" / "attempts" / "1" / "metrics-0.jsonl")]
    last = max(m["train/iter"] for m in rows1 if "train/loss" in m)
    assert ev["step_at_kill"] == last and ev["lost_steps"] == last - ev["resumed_from"]
    assert ev["downtime_s"] > ev["restart_s"] > 0
    assert os.path.exists(d / "report.md") and os.path.exists(d / "progress.png")
    # steps beside a background save are told apart from the others (the interference figure)
    i = a["interference"]
    assert i and i["busy_steps"] >= 1 and i["idle_steps"] >= 1 and i["busy_dt_s"] > 0 and i["idle_dt_s"] > 0, i
    flagged = [m for m in rows1 if m.get("train/ckpt_inflight")]
    assert flagged and all(m["train/iter"] > 5 for m in flagged)  # none before the first save
    assert ph["baseline"]["interference"] is None
    assert killer.find_tagged(job_tag(d)) == []  # nothing of the job outlives it


def test_progress_trace_is_bounded_and_spans_the_attempt():
    a = collect.Attempt(1, "unused", trace_cap=500)
    for it in range(1, 100_001):
        a.add_trace(float(it), it)
    assert 500 <= len(a.trace) < 2 * 500
    its = [it for _, it in a.trace]
    assert its[0] == 1 and its == sorted(its) and its[-1] > 100_000 - 2 * a.trace_stride


def test_ctrl_c_stops_everything_and_leaves_a_readable_experiment(tmp_path):
    """Ctrl-C as a terminal sends it: SIGINT to `restartlab run`'s foreground process group,
    in the middle of the sync phase. Everything the run started carries PBS_JOBID=<its pid>.local
    (job script, injector, mpiexec, ranks): none of it may survive, and the report still reads."""
    d = tmp_path / "expt"
    p = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                          "--set", "trainer.train_iters=400", "--set", "failures.schedule.at_steps=[300]"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        metrics = d / "sync" / "attempts" / "1" / "metrics-0.jsonl"
        wait_for(lambda: metrics.exists() and metrics.stat().st_size > 0, 240, "the sync phase's first rows")
        mine = f"PBS_JOBID={p.pid}.local"
        assert len(killer.find_by_env(mine)) >= 4  # the check below is not vacuous: script, injector, ranks
        os.killpg(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out[-3000:]
    assert "interrupted" in out and str(d) in out
    wait_for(lambda: not killer.find_by_env(mine), 15, "every process of the run to be gone")
    assert killer.find_tagged(job_tag(d)) == []
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", str(d), "--no-plots"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "missing phases: async" in r.stderr
    s = json.load(open(d / "summary.json"))
    assert {ph["phase"] for ph in s["phases"]} == {"baseline", "sync"}
    assert next(ph for ph in s["phases"] if ph["phase"] == "baseline")["completed"]
