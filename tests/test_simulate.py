"""restartlab simulate: known answers of the model, seeding, and the command line's errors.

It also checks the model against a real `restartlab run` of the local scenario. The run's own
measured costs and failure times must give its measured ETTR within 3%."""
import json
import math
import pathlib
import subprocess
import sys

import pytest

from restartlab.contracts import layout
from restartlab.analysis import simulate as sim

COSTS = dict(step_s=1.0, sync_stall_s=10.0, async_stall_s=1.0, async_durable_s=20.0, restart_s=300.0,
             gap_s=5.0, detection_s={"kill": 30.0})


def rl(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_no_failures_ettr_is_step_over_step_plus_stall():
    """No failures: ETTR = step time / (step time + stall per step), for both modes.

    In async mode the stall is the stage. A background shorter than the cycle costs nothing."""
    c = sim.Costs(step_s=0.5, sync_stall_s=2.0, async_stall_s=0.1, async_durable_s=3.0)
    never = sim.Failures(1e15)
    r = sim.sweep(c, never, [10, 40], ("sync", "async"), days=30, replicas=4)
    for mode, stall in (("sync", 2.0), ("async", 0.1)):
        for row in r[mode].rows:
            expect = 0.5 / (0.5 + stall / row.interval_steps)
            assert row.ettr == pytest.approx(expect, abs=1e-5) and row.failures_per_day == 0
    # an async background longer than the cycle stalls the loop: at most one save in flight
    slow = sim.sweep(c, never, [4], ("async",), days=30, replicas=2)["async"].rows[0]
    assert slow.ettr == pytest.approx(2.0 / (0.1 + 2.9), abs=1e-5)
    # steps that run beside a background save are slower by `interference`
    c.interference = 0.5
    busy = sim.sweep(c, never, [40], ("async",), days=30, replicas=2)["async"].rows[0]
    assert busy.ettr == pytest.approx(20.0 / (0.1 + 20.0 + 2.9 * 0.5), abs=1e-5)


@pytest.mark.parametrize("interval", [100, 400, 1000])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_exponential_failures_match_the_analytic_models(mode, interval):
    """Exponential failures at a fixed interval: the Monte Carlo's ETTR matches the analytic models.

    It equals the model's exact renewal-reward value within twice its 95% confidence half-width.
    It equals the first-order model (W/L)(1 - (R + D + G + B + L/2)/M) within that plus
    ((R + D + G + L)/M)^2, its stated error."""
    c, f = sim.Costs(**COSTS), sim.Failures(3 * 3600)
    row = sim.sweep(c, f, [interval], (mode,), days=30, replicas=20, seed=1)[mode].rows[0]
    assert abs(row.ettr - sim.renewal_ettr(c, f, interval, mode)) <= 2 * row.ci95, row
    w, L, B = sim._cycle(c, interval, mode)
    err = ((c.restart_s + 30 + c.gap_s + L) / f.mtbf_s) ** 2
    assert abs(row.ettr - sim.first_order_ettr(c, f, interval, mode)) <= err + 2 * row.ci95
    assert row.failures_per_day == pytest.approx(24 / 3, rel=0.05)


def test_simulated_optimum_is_near_youngs_interval():
    """The simulated best interval lies within 15% of Young's sqrt(2 C M) = 1000 s.

    This holds where Young's assumptions hold: save cost << interval << MTBF, no restart cost.
    Seeds 0-4 gave 950-1100 on a 25 s grid. The model's exact optimum is 1000."""
    c, f = sim.Costs(step_s=1.0, sync_stall_s=5.0), sim.Failures(1e5)
    ivs = list(range(500, 2001, 25))
    r = sim.sweep(c, f, ivs, ("sync",), days=365, replicas=40, seed=0)["sync"]
    assert r.young_s == pytest.approx(1000.0)
    assert abs(r.best.interval_s / r.young_s - 1) <= 0.15, r.best
    assert max(ivs, key=lambda iv: sim.renewal_ettr(c, f, iv)) == 1000


def test_seeded_and_the_confidence_interval_covers_another_seed():
    c, f = sim.Costs(**COSTS), sim.Failures(3 * 3600)
    a = sim.sweep(c, f, [200, 500], days=10, replicas=10, seed=7)
    assert a == sim.sweep(c, f, [200, 500], days=10, replicas=10, seed=7)
    b = sim.sweep(c, f, [200, 500], days=10, replicas=10, seed=8)
    for mode in ("sync", "async"):
        for x, y in zip(a[mode].rows, b[mode].rows):
            assert x.ettr != y.ettr and abs(x.ettr - y.ettr) <= x.ci95 + y.ci95


def test_failure_kinds_and_scale():
    """Failure kinds and scale.

    - A preemption keeps all its work (emergency checkpoint).
    - Hangs cost their detection time.
    - Per-node MTBF shrinks the job's MTBF with the node count.
    - Correlated failures (several nodes at once) make fewer, larger interruptions."""
    c = sim.Costs(**dict(COSTS, detection_s={"kill": 30.0, "preempt": 1.0, "hang": 600.0}))
    pre = sim.sweep(c, sim.Failures(3600, {"preempt": 1}), [600], ("sync",), days=5, replicas=4)["sync"].rows[0]
    kill = sim.sweep(c, sim.Failures(3600, {"kill": 1}), [600], ("sync",), days=5, replicas=4)["sync"].rows[0]
    hang = sim.sweep(c, sim.Failures(3600, {"hang": 1}), [600], ("sync",), days=5, replicas=4)["sync"].rows[0]
    assert pre.lost_h_per_day == 0 < kill.lost_h_per_day and pre.ettr > kill.ettr > hang.ettr
    assert hang.downtime_h_per_day > kill.downtime_h_per_day
    assert sim.Failures.at_scale(1000 * 3600, 100).mtbf_s == pytest.approx(10 * 3600)
    assert sim.Failures.at_scale(1000 * 3600, 100, correlated=0.5, burst=3).mtbf_s == pytest.approx(20 * 3600)
    with pytest.raises(sim.SimulateError, match="no detection time for failure kind"):
        sim.sweep(sim.Costs(step_s=1.0), sim.Failures(3600, {"node": 1}), [10], days=1, replicas=2)


def test_cli_scale_table_and_errors(tmp_path):
    r = rl("simulate", "--step-time", "1", "--sync-stall", "10", "--async-stall", "1", "--async-durable", "20",
           "--restart", "5m", "--detection", "kill=30", "--node-mtbf", "2000h", "--nodes", "16,256,2048",
           "--days", "10", "--replicas", "4", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "scale:" in r.stdout and "assumed (--step-time)" in r.stdout and "<- best" in r.stdout
    doc = json.load(open(tmp_path / "simulate.json"))
    res = doc["results"]
    assert [x["nodes"] for x in res] == [16, 256, 2048]
    mtbf = [x["mtbf_s"] for x in res]
    assert mtbf == sorted(mtbf, reverse=True) and mtbf[0] == pytest.approx(2000 * 3600 / 16)
    best = [x["modes"]["sync"]["best"]["interval_s"] for x in res]
    assert best[0] > best[-1]                      # more failures: save more often
    assert (tmp_path / "simulate.png").stat().st_size > 1000
    for args, needle in ((["--mtbf", "3h"], "at least --step-time"),
                         (["--step-time", "1"], "give a failure model"),
                         (["--step-time", "1", "--mtbf", "3h", "--nodes", "4"], "--nodes needs --node-mtbf"),
                         (["--step-time", "1", "--mtbf", "3h", "--kinds", "kill=x"], "expected KIND=WEIGHT"),
                         (["--step-time", "1", "--mtbf", "3h", "--intervals", "0,5"], "whole numbers >= 1"),
                         (["--from", str(tmp_path / "nope.json"), "--mtbf", "3h"], "nope.json"),
                         (["--from", str(tmp_path / "simulate.json"), "--mtbf", "3h"], "not a restartlab report summary"),
                         (["--step-time", "soon", "--mtbf", "3h"], "--step-time: expected a duration")):
        r = rl("simulate", *args, "--out", str(tmp_path / "err"), "--no-plot")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_simulate_is_fast():
    """About 100,000 failures (20 replicas x 30 days at a 480 s MTBF) for one interval."""
    import time
    c, f = sim.Costs(**COSTS), sim.Failures(480)
    t = time.process_time()
    row = sim.sweep(c, f, [50], ("sync",), days=30, replicas=20)["sync"].rows[0]
    assert row.failures_per_day * 30 * 20 > 95_000
    assert time.process_time() - t < 60  # a guard against a per-step loop; the figure is in bench/


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_replay_of_the_local_scenario_matches_its_measured_ettr(tmp_path):
    """The replay of a real run of the local scenario gives its measured ETTR within 3%.

    The run is a real `restartlab run` of the shipped local scenario's two checkpointing phases:
    3 kills in sync, 3 in async. Its baseline is not run, as the replay never reads it. The model
    is fed each phase's own measured costs and actual failure times. The costs are each failure's
    own restart, gap and detection, and the steps kept. The numerator is the phase's own productive
    time. So this checks the model's wall-clock accounting: start-ups, detection, gaps, saves, the
    remaining work.

    The forecast with medians and the model's own lost work is printed, not asserted:
    - With 3 failures, one restart that ran 2 s slow on a loaded machine moved it by 6.6%
      (CI, 2026-12-01).
    - A kill gated on a save's marker lands on a cycle's edge, where the model may lose the whole
      interval. That gave -5.5% with the model's lost work in the own-cost replay (CI 2026-12-02).

    The last attempt's time after its last step (exit, teardown) is measured too. Before it was, the
    own-cost replay read +0.1% to +0.9% in 7 runs beside a busy process. It read +3.3% once in CI
    under heavier load (71a4996, #49). With it, the replay read -0.9% to +0.5% over the same 7
    experiments."""
    d = tmp_path / "expt"
    # Cold restarts, as the shipped scenario runs. With warm ones (relaunch.warm) a phase lasts about
    # 9 s. Then 3% is 0.27 s of the last attempt's saves and exit on a loaded machine (+3.2% in one
    # CI run, 2026-12-03). At about 25 s, a phase holds the same noise well inside it.
    # Its two checkpointing phases only: the replay reads each phase's own costs, never the
    # baseline's. A replay of the baseline is refused: tests/test_collect.py's real run has one.
    r = rl("run", "--expt-dir", str(d), "--plain", "--set", "collection.plots=false",
           "--set", "phases=[{name: sync, checkpoint: sync}, {name: async, checkpoint: async}]", timeout=560)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for phase in ("sync", "async"):
        r = rl("simulate", "--replay", str(d), "--phase", phase, "--json")
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["failures"] == 3 and rep["mode"] == phase, rep
        print(f"{phase}: own costs {rep['relative_error']:+.3f}, medians {rep['median_relative_error']:+.3f}")
        assert abs(rep["relative_error"]) <= 0.03, rep
        assert rep["median_ettr"] and rep["median_wall_s"] > 0, rep
        assert math.isclose(rep["costs"]["step_s"] * rep["steps"], rep["measured_ettr"] * rep["measured_wall_s"],
                            rel_tol=1e-6)


def test_costs_from_a_summary_name_their_source(tmp_path):
    summary = {"phases": [
        {"phase": "baseline", "steps": 100, "productive_s": 5.0, "save": {}, "failures": []},
        {"phase": "sync", "steps": 100, "productive_s": 6.0, "failures": [
            {"kind": "kill", "restart_s": 3.0, "launch_gap_s": 0.3, "detection_s": 0.2},
            {"kind": "hang", "restart_s": 5.0, "launch_gap_s": 0.5, "detection_s": 12.0}],
         "save": {"ckpt_save_seconds": {"median": 0.07}}},
        {"phase": "async", "steps": 100, "productive_s": 6.5, "failures": [],
         "save": {"ckpt_stage_seconds": {"median": 0.004}, "ckpt_drain_seconds": {"median": 0.001}},
         "finalize": {"median": 0.13}, "interference": {"slowdown": 0.25}}]}
    path = pathlib.Path(layout.Expt(tmp_path).summary)
    path.write_text(json.dumps(summary))
    c = sim.costs_from_summary(str(path))
    assert c.step_s == 0.05 and c.sync_stall_s == 0.07 and c.async_stall_s == pytest.approx(0.005)
    assert c.async_durable_s == 0.13 and c.interference == 0.25
    assert c.restart_s == 4.0 and c.gap_s == pytest.approx(0.4) and c.detection_s == {"kill": 0.2, "hang": 12.0}
    assert all(str(path) in c.sources[k] for k in ("step_s", "sync_stall_s", "async_stall_s", "interference"))


def test_replay_run_takes_each_failures_own_costs():
    """A failure's own restart, gap and detection replace the medians for that failure only.

    The wall moves by exactly the differences. With none given, the medians apply. The kept work is
    the same."""
    c = sim.Costs(**dict(COSTS, restart_s=3.0, gap_s=0.1, detection_s={"kill": 0.5}))
    faults = [(4.0, "kill"), (7.5, "kill")]
    F, own = sim.Fault, sim.FaultCosts
    med = sim.replay_run(c, "sync", 10, 200, [F(t, k) for t, k in faults], 2.0)
    same = sim.replay_run(c, "sync", 10, 200, [F(t, k, own(restart_s=3.0, gap_s=0.1, detection_s=0.5))
                                                 for t, k in faults], 2.0)
    assert same.wall_s == pytest.approx(med.wall_s)
    mine = sim.replay_run(c, "sync", 10, 200, [F(4.0, "kill", own(restart_s=5.0, detection_s=0.2)),
                                                F(7.5, "kill", own(gap_s=0.4))], 2.0)
    assert mine.wall_s - med.wall_s == pytest.approx((5.0 - 3.0) + (0.2 - 0.5) + (0.4 - 0.1))
    assert mine.failures == med.failures == 2
    # the last attempt's measured exit adds to the wall (sync: no background to stand in for)
    assert sim.replay_run(c, "sync", 10, 200, [F(t, k) for t, k in faults], 2.0, exit_s=0.7).wall_s \
        - med.wall_s == pytest.approx(0.7)
    # Its own steps kept replace the model's lost work. The remaining work grows by the difference
    # (c.step_s a step), and with it the saves that work still needs.
    kept = sim.replay_run(c, "sync", 10, 200, [F(25.0, "kill", own(kept_steps=0)), F(7.5, "kill")], 2.0)
    model_kept = sim.replay_run(c, "sync", 10, 200, [F(25.0, "kill"), F(7.5, "kill")], 2.0)
    assert kept.wall_s - model_kept.wall_s >= 10 * c.step_s  # the model kept a cycle there; this, nothing
    none = sim.replay_run(c, "sync", 10, 200, [F(25.0, "kill", own(kept_steps=0)), F(7.5, "kill", own(kept_steps=0))],
                          2.0)
    w, L, _ = sim._cycle(c, 10, "sync")
    total = 200 * c.step_s  # nothing kept: the last attempt does all of it, with all its saves
    failed = (2.0 + 25.0) + 0.5 + 0.1 + (3.0 + 7.5) + 0.5 + 0.1
    assert none.wall_s == pytest.approx(failed + 3.0 - c.step_s + total + math.ceil(total / w - 1e-9) * (L - w))


# ---------------------------------------------------------------- torchft beside the restart strategy
def test_torchft_goodput_matches_its_first_order_when_failures_are_rare_and_counts_every_group_lost():
    from restartlab.analysis import simulate_ft as ft
    c = ft.FtCosts(groups=4, stall_s=2.0, rejoin_s=60.0)
    r = ft.simulate(c, mtbf_s=3600.0, days=30, replicas=20, seed=1)
    # per failure: 3 survivors x 2 s + 60 s of the struck group, of 4 group-seconds per second
    assert r.analytic == pytest.approx(1 - (3 * 2 + 60) / 4 / 3600)
    assert abs(r.goodput - r.analytic) < max(3 * r.ci95, 2e-4), r
    assert r.all_groups_lost_per_run == 0 and 20 < r.failures_per_day < 28
    # 2 groups whose relaunch takes longer than the time between failures: both are out at once
    bad = ft.simulate(ft.FtCosts(groups=2, stall_s=1.0, rejoin_s=600.0), mtbf_s=300.0, days=1, replicas=5, seed=1)
    assert bad.all_groups_lost_per_run > 1 and bad.goodput < 0.5, bad
    # torchft's own per-step overhead divides the goodput
    slow = ft.simulate(ft.FtCosts(groups=4, stall_s=2.0, rejoin_s=60.0, step_overhead=0.25), 3600.0, 30, 20, 1)
    assert slow.goodput == pytest.approx(r.goodput / 1.25)


def test_simulate_torchft_without_costs_is_a_usage_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "restartlab.cli", "simulate", "--step-time", "1s", "--mtbf", "1h",
                          "--torchft", "--no-plot", "--out", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2 and "--torchft needs measured torchft costs" in out.stderr and "Traceback" not in out.stderr
    ok = subprocess.run([sys.executable, "-m", "restartlab.cli", "simulate", "--step-time", "1s", "--mtbf", "1h",
                         "--torchft", "--groups", "4", "--ft-stall", "2s", "--ft-rejoin", "60s", "--replicas", "4",
                         "--days", "2", "--no-plot", "--out", str(tmp_path)], capture_output=True, text=True)
    assert ok.returncode == 0 and "torchft, 4 replica groups, the same failures: goodput" in ok.stdout, ok.stderr
    doc = json.load(open(tmp_path / "simulate.json"))
    assert doc["results"][0]["torchft"]["groups"] == 4
