"""Recovery without a restart.

The tests cover:
- a phase of torchft replica groups (runtime/ft_phase.py);
- the bundled trainer as one group (trainer/ft.py);
- the accounting and verdict (analysis/ft_accounting.py).

Real parts: torchft 0.2.0's own lighthouse executable, real mpiexec groups, and the phase's real
injector and killer. The accounting test reads records written the way the trainer writes them."""
import json
import os
import shutil
import stat
import subprocess
import sys
import uuid

import pytest

from restartlab.analysis import ft_accounting
from restartlab.contracts import layout
from restartlab.contracts.ft_summary import FtSummary, GroupStats
from restartlab.contracts.envvars import group_tag, tag_matches
from restartlab.contracts.exits import EXIT_FAILED
from restartlab.runtime import killer
from restartlab.tools.launch import LaunchSpec

from .helpers import MPIEXEC

try:
    import torchft  # noqa: F401
except ImportError:
    if os.environ.get("RESTARTLAB_REQUIRE_ALL") == "1":  # CI: a missing part fails, it does not skip
        raise
    pytest.skip("torchft not installed (make test installs setup.cfg [torchft])", allow_module_level=True)


def test_a_groups_tag_is_its_phases_and_no_other():
    t = "rl-x-0123456789"
    assert group_tag(t, 3) == t + ".g3" and tag_matches(t + ".g3", t) and tag_matches(t, t)
    assert not tag_matches(t + ".g", t) and not tag_matches(t + ".gx", t) and not tag_matches(t + "9", t)
    assert not tag_matches(t, t + ".g3") and not tag_matches("rl-x-01234567890.g1", t)


# ---------------------------------------------------------------- the accounting, on recorded logs
def _group(root, g, attempts):
    """attempts: [(launch_ts, [(t0, tq, t, step, commit, quorum, participants, healed, crc)], how)]."""
    gp = layout.Phase(root).group(g)
    for k, (launch, steps) in enumerate(attempts, 1):
        att = gp.attempt(k)
        os.makedirs(att.path)
        json.dump({"attempt": k, "launch_ts": launch}, open(att.launched, "w"))
        with open(os.path.join(att.path, "ft-rank0.jsonl"), "w") as f:
            for t0, tq, t, step, commit, q, n, healed, crc in steps:
                f.write(json.dumps({"t0": t0, "tq": tq, "t": t, "step": step, "commit": commit, "quorum": q,
                                    "participants": n, "slot": 0, "healed": healed,
                                    "heal_s": (tq - t0) if healed else None, "crc": crc}) + "\n")
    with open(gp.ended, "w") as f:
        f.write(json.dumps({"time": 1, "how": "completed", "attempt": len(attempts)}) + "\n")


def _lockstep(first, last, start, q=1, n=2, dt=1.0):
    return [(start + (s - first) * dt, start + (s - first) * dt + 0.01, start + (s - first + 1) * dt, s, True, q, n,
             False, 1000 + s) for s in range(first, last + 1)]


def _phase_with_one_failure(tmp_path, heal_crc=1000 + 6):
    """Two groups in lockstep from t=100, with 1 s steps.

    - Group 1 is killed at t=104.5, in step 5.
    - Group 0's step 5 fails. Its next quorum, without group 1, ends 1.5 s after its start.
    - Group 1 is relaunched at 105 and starts stepping at 108. It heals in 0.3 s at step 9 and
      commits it."""
    root = str(tmp_path / "ft")
    s0 = _lockstep(1, 4, 100)
    s0 += [(104.0, 104.01, 104.8, 5, False, 1, 2, False, 1004)]
    s0 += [(104.8, 106.3, 107.0, 5, True, 2, 1, False, 1005)]
    s0 += [(107.0 + i, 107.01 + i, 108.0 + i, 6 + i, True, 2 if i < 2 else 3, 1 if i < 2 else 2, False, 1006 + i)
           for i in range(5)]
    _group(root, 0, [(99.0, s0)])
    s1a = _lockstep(1, 4, 100)
    s1b = [(108.0, 108.3, 109.0, 8, True, 3, 2, True, heal_crc + 2), (109.0, 109.01, 110.0, 9, True, 3, 2, False, 1009),
           (110.0, 110.01, 111.0, 10, True, 3, 2, False, 1010)]
    _group(root, 1, [(99.0, s1a), (105.0, s1b)])
    with open(layout.Phase(root).injections, "w") as f:
        f.write(json.dumps({"time": 104.5, "kind": "rank", "killed": 1, "receipts": [
            {"host": "h", "pids": [7], "cmdlines": {"7": "python -m restartlab.trainer.ft --outdir x --replica-group 1"}}]}) + "\n")
    return root


def test_the_accounting_of_a_failure_from_recorded_logs(tmp_path):
    s = ft_accounting.summarize(_phase_with_one_failure(tmp_path), 10)
    f, = s.failures
    assert f.struck_groups == [1] and f.survivors == [0]
    assert f.detection_s == pytest.approx(106.3 - 104.5)
    assert f.uncommitted_steps == 1
    assert f.survivor_stall_s == pytest.approx(0.8 + 1.5)   # the failed step, then the quorum's wait
    r = f.relaunch["1"]
    assert r.attempt == 2 and r.relaunched_after_s == pytest.approx(0.5)
    assert r.process_start_s == pytest.approx(3.0) and r.heal_s == pytest.approx(0.3)
    assert r.healed_at_step == 8 and r.rejoin_s == pytest.approx(109.0 - 104.5)
    assert s.per_group["0"] == GroupStats(attempts=1, steps_attempted=11, steps_committed=10, last_step=10)
    assert s.per_group["1"].attempts == 2 and s.per_group["1"].steps_committed == 7
    assert s.steps_committed == 10
    # torchft's terms: each step's participants / groups (steps 5-7 trained with one group of two)
    assert s.torchft_efficiency == pytest.approx((7 * 2 + 3 * 1) / (10 * 2))
    assert s.wall_s == pytest.approx(112.0 - 99.0) and s.ettr == pytest.approx(s.productive_s / 13.0)
    v = s.verdict
    assert v.ok and v.state_equal and v.started_over is None and v.survivor_restarted == [] and v.finished, v
    assert "torchft verdict: OK" in ft_accounting.describe(s)[0]
    # ft.json: the keys in the order the accounting wrote them as a dict (the file reads as before)
    d = s.to_dict()
    assert list(d) == ["strategy", "groups", "train_iters", "per_group", "failures", "steps_committed", "median_step_s",
                       "wall_s", "productive_s", "ettr", "batches_committed", "torchft_efficiency", "throughput",
                       "verdict"]
    assert list(d["failures"][0]) == ["time", "kind", "struck_groups", "survivors", "detection_s", "survivor_stall_s",
                                      "uncommitted_steps", "relaunch"]
    assert list(d["failures"][0]["relaunch"]["1"]) == ["attempt", "relaunched_after_s", "process_start_s", "heal_s",
                                                       "healed_at_step", "rejoin_s", "first_step"]
    assert list(d["verdict"]) == ["survivor_restarted", "heals", "state_equal", "unequal", "started_over", "finished",
                                  "stopped_when_done", "crashes", "heal_failures", "ok"]
    assert d["verdict"]["heals"] == [{"group": 1, "attempt": 2, "step": 8}]
    assert FtSummary.from_dict(json.loads(json.dumps(d))) == s  # the reader reads what the writer wrote


def test_the_verdict_names_a_healed_state_that_differs(tmp_path):
    s = ft_accounting.summarize(_phase_with_one_failure(tmp_path, heal_crc=5), 10)
    assert not s.verdict.ok and s.verdict.unequal == ["step 8 rank 0"]
    assert "state differs from the survivors' at step 8 rank 0" in ft_accounting.describe(s)[0]


def test_a_struck_groups_crash_is_the_strikes_and_a_survivors_is_named(tmp_path):
    """From recorded files: a struck group's crash is the strike's, a survivor's is named.

    Group 1's rank 0 raised 0.1 s after the strike that hit its group. Its peer rank's death is the
    strike's doing, so the crash is not counted. Group 0's crash is named, as no strike hit group 0.
    The verdict adds what is known of it when it matches a torchft behaviour."""
    root = _phase_with_one_failure(tmp_path)
    crash = {"time": 104.6, "type": "RuntimeError", "message": "Connection closed by peer", "file": "/x/site-packages/"
             "torch/distributed/x.py", "line": 3, "code": "work.wait()", "thread": "MainThread", "step": 5}
    json.dump(crash, open(os.path.join(layout.Phase(root).group(1).attempt(1).path, "ft-rank0-crash.json"), "w"))
    assert ft_accounting.summarize(root, 10).verdict.crashes == []
    json.dump(dict(crash, time=109.5, type="AssertionError", message="", file="/v/lib/site-packages/torchft/ddp.py",
                   line=76, code="assert fut._fut"),
              open(os.path.join(layout.Phase(root).group(0).attempt(1).path, "ft-rank0-crash.json"), "w"))
    s = ft_accounting.summarize(root, 10)
    c, = s.verdict.crashes
    assert (c.group, c.attempt, c.where) == (0, 1, "torchft/ddp.py:76") and not s.verdict.ok
    assert "DistributedDataParallel" in (c.known or "")
    assert list(s.to_dict()["verdict"]["crashes"][0]) == ["group", "attempt", "rank", "step", "error", "where", "code",
                                                          "known"]
    assert "group 0 attempt 1 rank 0 died of its own exception at step 5: AssertionError at torchft/ddp.py:76 " \
        "`assert fut._fut` -- known: torchft 0.2.0's DistributedDataParallel" in "\n".join(ft_accounting.describe(s))
    # the same exception in an attempt that exited 0 ended a thread, not the program
    json.dump({"exit_code": 0}, open(layout.Phase(root).group(0).attempt(1).record, "w"))
    assert ft_accounting.summarize(root, 10).verdict.crashes == []


def test_the_verdict_names_a_survivor_that_restarted_and_a_silent_start_over(tmp_path):
    root = str(tmp_path / "ft")
    _group(root, 0, [(99.0, _lockstep(1, 6, 100)), (107.0, _lockstep(1, 3, 108))])  # from step 1 again
    _group(root, 1, [(99.0, _lockstep(1, 10, 100))])
    s = ft_accounting.summarize(root, 10)
    v = s.verdict
    assert v.survivor_restarted == [0] and v.started_over and v.started_over.group == 0 and v.started_over.step == 1
    assert v.started_over.after_step >= 6 and not v.ok
    assert list(s.to_dict()["verdict"]["started_over"]) == ["group", "attempt", "step", "after_step", "time"]
    line = ft_accounting.describe(s)[0]
    assert "group(s) [0] restarted though no failure struck them" in line and "STARTED OVER SILENTLY" in line


# ---------------------------------------------------------------- the phase, for real
def _launch(tag, ranks, rankenv=False):
    """supervise --launch: `ranks` tagged ranks per replica group under Hydra."""
    return LaunchSpec(python=sys.executable, ranks_per_node=ranks, env={killer.TAG_VAR: tag}, mpiexec=MPIEXEC,
                      rankenv=rankenv).to_json()


def _ft_phase(tmp_path, kind, iters=50, groups=2, min_replicas=1, at_step=10, delay="0.4", env=None, per_group=1):
    tag = f"t-{uuid.uuid4().hex[:8]}"
    phase = str(tmp_path / "ft")
    argv = [sys.executable, "-m", "restartlab.cli", "supervise", "--phase", "ft", "--phase-dir", phase, "--tag", tag,
            "--train-iters", str(iters), "--max-attempts", "4", "--hang-timeout", "60", "--startup-timeout", "120",
            "--ft-groups", str(groups), "--ft-min-replicas", str(min_replicas), "--ft-heartbeat-timeout", "1s",
            "--ft-join-timeout", "2s", "--inject", "--inject-at-steps", str(at_step), "--inject-gate", "none",
            "--inject-kind", kind, "--launch", _launch(tag, per_group), "--", sys.executable, "-m", "restartlab.trainer.ft",
            "--outdir", "{attempt_dir}", "--replica-group", "{group}", "--train-iters", str(iters),
            "--step-delay", delay, "--timeout", "20"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=400, env=dict(os.environ, **(env or {})))
    finally:
        killer.kill_ranks(tag)
        assert not killer.find_tagged(tag), "ranks left behind"
    return r, phase


@pytest.mark.multirank
def test_a_group_killed_heals_from_the_survivor_which_never_restarts(tmp_path):
    """HSDP: 2 groups of 2 ranks, FSDP over each group's ranks, torchft between the groups.

    One rank of a group is killed at step 10. Its launcher ends the group, and its loop relaunches
    it. The survivor never restarts. Each relaunched rank heals its shards from the survivor's same
    rank. Every rank's shard crc equals the survivor's same rank's at every step both committed."""
    r, phase = _ft_phase(tmp_path, "rank", iters=40, per_group=2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.load(open(layout.Phase(phase).ft_summary))
    f, = s["failures"]
    struck, = f["struck_groups"]
    survivor, = f["survivors"]
    assert s["per_group"][str(survivor)]["attempts"] == 1, s["per_group"]
    assert s["per_group"][str(struck)]["attempts"] == 2, s["per_group"]
    rel = f["relaunch"][str(struck)]
    # healed, not started from step 1: the survivor still trains (40 steps of >= 0.4 s after the kill)
    assert rel["heal_s"] is not None and rel["first_step"] > 1, json.dumps(s, indent=1)[-4000:]
    assert f["detection_s"] is not None and f["detection_s"] > 0, f
    v = s["verdict"]
    assert v["ok"] and v["state_equal"] and any(h["group"] == struck and h["attempt"] == 2 for h in v["heals"]), v
    assert "torchft verdict: OK" in r.stdout
    # the struck group's loop tore down only its own ranks: the survivor's attempt ran to the end
    rec = json.load(open(layout.Phase(phase).group(survivor).attempt(1).record))
    assert rec["exit_code"] == 0 and rec["completed"] and not rec["injected"], rec
    healed = layout.Phase(phase).group(struck).attempt(2)
    recs = [json.loads(x) for x in open(os.path.join(healed.path, "ft-rank1.jsonl"))]
    assert any(x["healed"] for x in recs) and recs[-1]["step"] == 40, recs[:3]   # rank 1 healed too
    # the strike is booked in the struck group's attempt (the phase's strikes, and it died)
    assert json.load(open(layout.Phase(phase).group(struck).attempt(1).record))["injected"]


@pytest.mark.multirank
def test_every_group_lost_with_min_replicas_1_starts_over_silently_and_the_verdict_says_so(tmp_path):
    """torchft's --min_replicas 1: once every group has died, a relaunched group finds no peer to
    heal from and trains from step 0 on a fresh initialisation, and torchft says nothing. A `kill`
    strikes every group at once; the verdict names the start over."""
    r, phase = _ft_phase(tmp_path, "kill", iters=30, delay="0.1")
    s = json.load(open(layout.Phase(phase).ft_summary))
    v = s["verdict"]
    assert v["started_over"] is not None and v["started_over"]["step"] == 1, (v, r.stdout[-2000:])
    assert not v["ok"] and "STARTED OVER SILENTLY" in r.stdout
    assert sorted(s["failures"][0]["struck_groups"]) == [0, 1]


def test_a_lighthouse_that_cannot_start_ends_the_phase_in_one_line(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "torchft_lighthouse"
    fake.write_text("#!/bin/sh\necho 'Error: Address already in use (os error 98)' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    phase = tmp_path / "ft"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "supervise", "--phase", "ft", "--phase-dir", str(phase),
                        "--tag", "t-x", "--ft-groups", "2", "--launch", _launch("t-x", 1), "--", "true"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == EXIT_FAILED and "Traceback" not in r.stderr, r.stderr
    line, = [x for x in r.stderr.splitlines() if "FAILED" in x]
    assert "lighthouse did not start" in line and "Address already in use" in line, line
    end = json.loads(open(layout.Phase(str(phase)).ended).read().splitlines()[-1])
    assert end["how"] == "cannot_run" and layout.Phase(str(phase)).groups() == []


# ---------------------------------------------------------------- a torchft program of yours
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_PROGRAM = os.path.join(ROOT, "examples", "torchft", "train.py")


def _program_phase(tmp_path, iters, program_args, supervise=(), env=None):
    """A torchft phase of 2 groups of 1 rank running examples/torchft/train.py through the hook,
    as the rendered script launches it (rankenv, then ft_hook), no injector."""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    phase = str(tmp_path / "ft")
    argv = [sys.executable, "-m", "restartlab.cli", "supervise", "--phase", "ft", "--phase-dir", phase, "--tag", tag,
            "--train-iters", str(iters), "--max-attempts", "2", "--hang-timeout", "60", "--startup-timeout", "60",
            "--ft-groups", "2", "--ft-min-replicas", "1", "--ft-heartbeat-timeout", "1s", "--ft-join-timeout", "2s",
            "--program", json.dumps({"adapter": "torchft", "steps": iters}), *supervise,
            "--launch", _launch(tag, 1, rankenv=True), "--", sys.executable, "-m", "restartlab.trainer.ft_hook", "--outdir", "{attempt_dir}", "--replica-group", "{group}",
            "--train-iters", str(iters), "--", USER_PROGRAM, "--steps", str(iters), *program_args]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, **(env or {})))
    finally:
        killer.kill_ranks(tag)
        assert not killer.find_tagged(tag), "ranks left behind"
    return r, phase


@pytest.mark.multirank
def test_a_torchft_program_of_yours_through_run_heals_and_its_survivor_never_restarts(tmp_path):
    """scenarios/examples/torchft.yaml through `restartlab run`.

    examples/torchft/train.py runs as 2 replica groups under the hook. It is written as torchft's
    train_ddp.py example is, with torchft's default asynchronous quorum. A group's rank is killed at
    step 15. Then:
    - the survivor never restarts;
    - the struck group heals, and its state (the Manager's registered state dicts) equals the
      survivor's;
    - the report has the torchft section.

    The steps take 0.4 s here; the example's take 0.15 s. Under load (3 workers beside both
    clusters), the survivor once finished its last 45 steps (7 s) before the struck group's relaunch
    took its first step (8.3 s). That group then started over alone."""
    expt = str(tmp_path / "expt")
    cmd = 'trainer.program.command=[python, "{scenario_dir}/../../examples/torchft/train.py", --steps, "60", ' \
          '--delay, "0.4", --async-quorum]'
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", os.path.join(ROOT, "scenarios", "examples",
                        "torchft.yaml"), "--expt-dir", expt, "--plain", "--set", cmd], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    phase = layout.Expt(expt).phase("torchft")
    s = json.load(open(phase.ft_summary))
    f, = s["failures"]
    struck, = f["struck_groups"]
    survivor, = f["survivors"]
    assert s["per_group"][str(survivor)]["attempts"] == 1 and s["per_group"][str(struck)]["attempts"] == 2, s["per_group"]
    rel = f["relaunch"][str(struck)]
    assert rel["heal_s"] is not None and rel["first_step"] > 15, f
    v = s["verdict"]
    assert v["ok"] and v["state_equal"] and not v["crashes"] and not v["heal_failures"], v
    assert any(h["group"] == struck and h["attempt"] == 2 for h in v["heals"]), v
    report = open(layout.Expt(expt).report).read()
    assert "## torchft phases" in report and "### torchft: OK" in report


@pytest.mark.multirank
def test_torchfts_own_ddp_crashes_the_survivor_when_its_peer_dies_and_the_verdict_names_it(tmp_path):
    """torchft 0.2.0's DistributedDataParallel crashes the survivor when its peer dies.

    Group 1 exits after step 5's quorum, before its gradients. So group 0 meets the dead peer inside
    DDP's gradient allreduce. It dies in torchft's communication hook (torchft/ddp.py,
    `assert fut._fut`), as a failed bucket's future has none. That is the restart torchft exists to
    avoid. The hook writes the exception, and the verdict names it.

    The lighthouse waits for both groups (--ft-min-replicas 2). With 1, a group that starts more
    than the join timeout (2 s) after the other trains alone. Group 1 then died in a quorum of its
    own, never meeting group 0 (make soak, two busy processes beside: group 0 joined 3 s late)."""
    r, phase = _program_phase(tmp_path, 20, ["--ddp", "--die-at", "5", "--delay", "0.1"],
                              supervise=["--ft-min-replicas", "2"])
    s = json.load(open(layout.Phase(phase).ft_summary))
    v = s["verdict"]
    assert 0 in v["survivor_restarted"] and not v["ok"], (v, r.stdout[-2000:])
    c, = [c for c in v["crashes"] if c["group"] == 0]
    assert c["attempt"] == 1 and c["error"] == "AssertionError" and c["where"].startswith("torchft/ddp.py:"), c
    assert c["code"] == "assert fut._fut" and "DistributedDataParallel" in c["known"], c
    assert "died of its own exception" in r.stdout and "known: torchft 0.2.0's DistributedDataParallel" in r.stdout


@pytest.mark.multirank
def test_a_heal_without_numpy_fails_stalls_the_survivor_and_the_verdict_names_it(tmp_path):
    """torchft 0.2.0 does not declare numpy, yet its PGTransport's heal calls Tensor.numpy()
    (torchft/checkpointing/pg_transport.py, recv_checkpoint).

    With numpy absent (--no-numpy hides it before torch), group 1 joins late. Its heal fails with
    "Numpy is not available" at every step. The survivor cannot commit while it waits on the
    transfer, as torchft retries forever (max_retries None). The group's own output grows all along,
    so its loop's watchdog goes by commits. There are none, so the group is stopped after the
    startup timeout. The verdict names the failed heals, and the survivor finishes.

    Group 1 joins after group 0's first commit, and group 0 waits for it there (--late-after, marker
    files). With a fixed delay alone, group 0 finished before a slow-starting group 1 joined, under
    load. Group 1 has no fixed sleep, as its startup timeout counts from its launch. A 7 s sleep on
    top of two cold imports and group 0's first commit once left it stopped before it joined (CI,
    stop 69). The startup timeout (20 s) is what stops group 1 once it has joined and its heals fail."""
    gate = tmp_path / "gate"
    gate.mkdir()
    r, phase = _program_phase(tmp_path, 30, ["--pg-transport", "--late-after", "1", "--gate", str(gate),
                                             "--delay", "0.2", "--timeout", "3", "--no-numpy"],
                              supervise=["--startup-timeout", "20", "--max-attempts", "1"],
                              env={"RESTARTLAB_FT_DONE_GRACE_S": "0.5"})
    assert sorted(os.listdir(gate)) == ["g0-committed", "g1-up"], r.stdout[-3000:]
    s = json.load(open(layout.Phase(phase).ft_summary))
    v = s["verdict"]
    h = next((h for h in v["heal_failures"] if h["group"] == 1 and h["attempt"] == 1), None)
    assert h is not None and h["error"] == "RuntimeError: Numpy is not available", (v, r.stdout[-3000:])
    assert "does not declare numpy" in h["known"] and h["others_uncommitted_s"] > 0, h
    assert s["per_group"]["0"]["attempts"] == 1 and v["finished"] and not v["ok"], s["per_group"]
    log = open(os.path.join(layout.Phase(phase).group(1).path, "supervise.log")).read()
    assert "no progress in" in log and "for 20s" in log, log
    assert "its heal failed" in r.stdout and "known: torchft 0.2.0 does not declare numpy" in r.stdout


def test_the_hook_writes_the_exception_a_program_dies_of_and_keeps_its_exit(tmp_path):
    """restartlab.trainer.ft_hook runs the program as python would (sys.argv, __main__).

    An exception the program dies of, in its main thread or another, goes to ft-rank<R>-crash.json.
    The traceback and the exit status stay as without the hook. A program that is not there is one
    line."""
    prog = tmp_path / "boom.py"
    prog.write_text("import sys, threading\n"
                    "assert __name__ == '__main__' and sys.argv[1:] == ['--x', '1'], sys.argv\n"
                    "t = threading.Thread(target=lambda: 1 / 0, name='worker'); t.start(); t.join()\n"
                    "raise KeyError('gone')\n")
    hook = [sys.executable, "-m", "restartlab.trainer.ft_hook", "--outdir", str(tmp_path / "out"), "--replica-group",
            "0", "--train-iters", "5", "--"]
    r = subprocess.run(hook + [str(prog), "--x", "1"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, RANK="0"))
    assert r.returncode == 1 and "KeyError: 'gone'" in r.stderr and "ZeroDivisionError" in r.stderr, r.stderr
    c = json.load(open(tmp_path / "out" / "ft-rank0-crash.json"))
    assert c["type"] == "ZeroDivisionError" and c["thread"] == "worker" and c["code"] == "t = threading.Thread(" \
        "target=lambda: 1 / 0, name='worker'); t.start(); t.join()", c   # the first exception wins
    r = subprocess.run(hook + [str(tmp_path / "nope.py")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().endswith("nope.py: no such file") and "Traceback" not in r.stderr


def test_the_state_crc_reads_nested_state_and_needs_no_numpy():
    import zlib

    import torch

    from restartlab.trainer.ft_hook import state_crc
    a, b = torch.arange(6, dtype=torch.float32), torch.ones(2, dtype=torch.int64)
    want = zlib.crc32(b.numpy().tobytes(), zlib.crc32(a.numpy().tobytes()))
    assert state_crc({"optim": {"state": {0: {"m": b}}, "lr": 0.1}, "model": {"w": a}}) == want  # key order
    assert state_crc({"model": {"w": a}, "x": [b]}) == want


# ---------------------------------------------------------------- the scenario: keys, refusals, the script
FT_PHASE = ("name: t\ntrainer: {train_iters: 50}\nlaunch:\n  ranks_per_node: 2\nfailures:\n  kind: rank\n"
            "  gate: none\n  schedule: {every: 10s}\nphases:\n  - name: ft\n    checkpoint: none\n    recovery:\n"
            "      strategy: torchft\n")
# (the scenario, the text of the line the error names, what it says)
FT_BAD = [
    (FT_PHASE + "      groups: 3\n", "groups: 3", "phases[0].recovery.groups: 3 replica groups do not divide "
     "launch.ranks_per_node (2)"),
    (FT_PHASE + "      min_replicas: 3\n", "min_replicas: 3", "phases[0].recovery.min_replicas: 3 is more than the 2 groups"),
    (FT_PHASE.replace("checkpoint: none", "checkpoint: sync"), "checkpoint: sync",
     "phases[0].checkpoint: sync: a torchft phase recovers from its surviving groups"),
    (FT_PHASE + "      heartbeat_timeout: 0s\n", "heartbeat_timeout", "phases[0].recovery.heartbeat_timeout: must be > 0"),
    (FT_PHASE + "      strategy2: x\n", "strategy2", "phases[0].recovery.strategy2: unknown key (did you mean 'strategy'?)"),
    (FT_PHASE.replace("strategy: torchft", "strategy: torchfx"), "torchfx",
     "phases[0].recovery.strategy: 'torchfx' is not one of restart, torchft (did you mean 'torchft'?)"),
    (FT_PHASE.replace("launch:", "job: {nodes: 2}\nlaunch:"), "strategy: torchft",
     "phases[0].recovery.strategy: torchft phases run on one node in this version (job.nodes is 2)"),
    (FT_PHASE.replace("schedule: {every: 10s}", "schedule: {at_steps: [5]}").replace("gate: none", "gate: complete"),
     "gate: complete", "failures.gate: phase 'ft' saves no checkpoints"),
    (FT_PHASE.replace("trainer: {train_iters: 50}", "trainer:\n  program: {command: [python, t.py], steps: 9, "
                      "progress: 'step (?P<step>\\d+)', checkpoints: '{ckpt_dir}/s(?P<step>\\d+)'}"),
     "strategy: torchft", "phases[0].recovery.strategy: a program of yours in a torchft phase is a torchft program: "
     "trainer.program.adapter: torchft"),
    (FT_PHASE.replace("trainer: {train_iters: 50}", "trainer:\n  program: {command: [bash, t.sh], steps: 9, "
                      "adapter: torchft}"),
     "command: [bash", "trainer.program.command: 'bash': a torchft program's command starts with its Python"),
    (FT_PHASE.replace("trainer: {train_iters: 50}", "trainer:\n  program: {command: [python, t.py], steps: 9, "
                      "adapter: torchft}") + "  - name: cold\n    checkpoint: none\n",
     "adapter: torchft", "trainer.program.adapter: torchft: a torchft program runs only in torchft phases "
     "(recovery.strategy: torchft); phase(s) cold restart"),
]


@pytest.mark.parametrize("text,at,frag", FT_BAD, ids=[b[2][:40] for b in FT_BAD])
def test_a_torchft_phase_that_does_not_fit_is_refused_with_file_line_key(tmp_path, text, at, frag):
    from restartlab import scenario
    p = tmp_path / "bad.yaml"
    text = "extends: " + os.path.join(os.path.dirname(os.path.dirname(__file__)), "scenarios", "systems",
                                      "local.yaml") + "\n" + text
    p.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if at in x)
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.load(str(p))
    assert f"{p}:{line}: {frag}" in str(e.value), str(e.value)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "validate", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and frag in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_torchft_not_installed_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    import importlib.util
    from restartlab import scenario
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchft" else real(name, *a))
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scenarios", "strategies.yaml")
    scenario.load(path)  # validation is about the file: `restartlab validate scenarios/*.yaml` passes without torchft
    from restartlab import cli
    expt_root = tmp_path / "expt"
    assert cli.main(["run", path, "--set", f"expt_root={expt_root}"]) == 2
    err = capsys.readouterr().err
    assert "strategies.yaml:" in err and "recovery.strategy: torchft is not installed" in err, err
    assert not expt_root.exists()  # refused before anything ran


def test_the_job_script_runs_each_group_under_its_own_loop():
    from restartlab import scenario
    from restartlab.job import render
    sc = scenario.load(os.path.join(os.path.dirname(os.path.dirname(__file__)), "scenarios", "strategies.yaml"))
    text, ctx = render.render(sc, "pbs", "/expt/x")
    ft = ctx.phase("torchft")
    assert ft.ft == ["--ft-groups", "2", "--ft-min-replicas", "1", "--ft-heartbeat-timeout", "1s",
                        "--ft-join-timeout", "5s"]
    spec = LaunchSpec.from_json(ft.launch, ft.program)
    argv = spec.argv()
    assert argv[:3] == ["mpiexec", "-n", "1"] and "restartlab.trainer.ft" in argv and not spec.rankenv
    # a group's launch: its own tag on its ranks and its number in the program, nothing else changed
    g1 = spec.for_group(1, group_tag(ctx.tag, 1))
    assert g1.env[killer.TAG_VAR] == group_tag(ctx.tag, 1) and spec.env[killer.TAG_VAR] == ctx.tag
    assert g1.program[g1.program.index("--replica-group") + 1] == "1" and g1.launcher_argv()[:3] == argv[:3]
    assert argv[argv.index("--replica-group") + 1] == "{group}" and argv[argv.index("--outdir") + 1] == "{attempt_dir}"
    assert "--inject-at-steps 300,600" in " ".join(ft.inject) and ctx.phase("torchft-nofail").inject is None
    line = next(x for x in text.splitlines() if x.startswith("rl_phase --phase torchft "))
    assert "--ft-groups 2" in line


def test_a_torchft_program_of_yours_is_launched_through_the_hook_in_its_python():
    from restartlab import scenario
    from restartlab.job import render
    sc = scenario.load(os.path.join(ROOT, "scenarios", "examples", "torchft.yaml"))
    text, ctx = render.render(sc, "pbs", "/expt/x")
    spec = LaunchSpec.from_json(ctx.phases[0].launch, ctx.phases[0].program)
    argv = spec.argv()
    assert spec.rankenv and spec.program[:3] == ("python", "-m", "restartlab.trainer.ft_hook"), spec
    at = argv.index("restartlab.runtime.rankenv")
    assert argv[at + 1:at + 5] == ["--", "python", "-m", "restartlab.trainer.ft_hook"], argv
    assert argv[argv.index("--replica-group") + 1] == "{group}" and argv[argv.index("--outdir") + 1] == "{attempt_dir}"
    assert argv[argv.index("--train-iters") + 1] == "60"
    from restartlab.contracts import pycmd
    from restartlab.trainer import ft_hook
    # python -m restartlab.trainer.ft_hook ARGS -- PROGRAM, as group 0 runs it, read by the hook's own parser
    hook = pycmd.parse(spec.for_group(0, "t").program)
    _, cmd = ft_hook.parse_args(list(hook.args))
    prog = [cmd.target, *cmd.args]
    assert prog[0] == os.path.join(ROOT, "scenarios", "examples", "..", "..", "examples", "torchft", "train.py")
    assert prog[1:] == ["--steps", "60", "--delay", "0.15", "--async-quorum"] and ctx.phases[0].strategy == "torchft"


def test_restartlab_run_shows_a_torchft_phases_progress(tmp_path):
    """restartlab run's progress line reads a torchft phase's groups (their attempts, the furthest
    group's step), not "starting" for the whole phase."""
    from restartlab.job import run
    root = str(tmp_path / "ft")
    _group(root, 0, [(99.0, _lockstep(1, 4, 100))])
    _group(root, 1, [(99.0, _lockstep(1, 2, 100)), (105.0, _lockstep(3, 6, 105))])
    for g, k, step in ((0, 1, 4), (1, 2, 6)):
        with open(layout.Phase(root).group(g).attempt(k).metrics(0), "w") as f:
            f.write(json.dumps({"timestamp": 1, "rank": 0, "metrics": {"train/iter": step}}) + "\n")
    text, cur = run.progress([("ft", root)], 10, 0)
    assert cur == 0 and text.startswith("phase 1/1 ft: step 6/10, kills 0, restarts 1"), text


@pytest.mark.multirank
def test_a_group_still_relaunching_when_the_training_is_done_is_stopped_not_run_again_from_the_start(tmp_path):
    """A group struck near the end comes back after the survivor completed the last step.

    It would find no peer. With min_replicas 1 it would train the whole run again from a fresh
    start, within the 30 s the phase gives a group behind. So the phase stops a group still
    relaunching (no commit in its attempt) as soon as the training is done. The verdict says
    finished and names the stopped group."""
    r, phase = _ft_phase(tmp_path, "rank", iters=40, at_step=36, delay="0.05")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.load(open(layout.Phase(phase).ft_summary))
    struck, = s["failures"][0]["struck_groups"]
    v = s["verdict"]
    assert v["finished"] and v["stopped_when_done"] == [struck] and v["started_over"] is None, v
    assert f"the training is done (a group completed the last step): stopping group(s) [{struck}], still " \
        "relaunching" in r.stdout, r.stdout



def test_a_lighthouse_port_taken_before_it_binds_is_retried_on_another(tmp_path):
    """The port is picked free, then bound by the lighthouse: another process may take it in
    between. A lighthouse that exits at once is started again on a new port (here the first start
    fails as a taken port does; the second listens)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "torchft_lighthouse"
    fake.write_text(f"""#!{sys.executable}
import os, socket, sys, time
marker = {str(tmp_path / "tried")!r}
if not os.path.exists(marker):
    open(marker, "w").close()
    sys.exit("Error: Address already in use (os error 98)")
host, port = sys.argv[sys.argv.index("--bind") + 1].rsplit(":", 1)
s = socket.socket()
s.bind((host, int(port)))
s.listen()
time.sleep(60)
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    phase, tag = tmp_path / "ft", f"t-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "supervise", "--phase", "ft", "--phase-dir", str(phase),
                        "--tag", tag, "--ft-groups", "1", "--max-attempts", "1", "--launch", _launch(tag, 1), "--",
                        "false"], env=env, capture_output=True, text=True, timeout=120)
    log = open(layout.Phase(str(phase)).lighthouse_log).read()
    assert log.count("restartlab: ") == 2 and "Address already in use" in log, log
    assert "torchft: lighthouse at http://" in r.stdout, r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in r.stderr  # the group's program (false) failed: the phase did


def test_a_group_that_started_over_alone_when_the_training_is_done_is_stopped_at_once(tmp_path, monkeypatch):
    """The state of that interleaving, made on purpose.

    The groups' records are on disk. Stand-in processes (sleep, true) act as the groups' loops,
    which the phase signals and reaps. Group 1 has completed the last step (60). Group 0's relaunch
    found no peer and has already committed its own steps 1-3 (a fresh start). So it is no longer
    "relaunching". It is not in step either, so the phase stops it as soon as the training is done.
    The old rule gave it the grace of a group in step, 60 s here, in which it trained on from step
    3. A group whose newest commit is 59 is in step. It gets the grace (1 s in the second half) and
    is stopped after it."""
    import io
    from types import SimpleNamespace

    from restartlab.runtime.ft_phase import FtPhase
    root = str(tmp_path / "ft")
    _group(root, 1, [(99.0, _lockstep(1, 60, 100))])
    open(layout.Phase(root).group(1).completed, "w").close()

    def phase(g0_steps, first=14):
        shutil.rmtree(layout.Phase(root).group(0).path, ignore_errors=True)
        _group(root, 0, [(99.0, _lockstep(1, first, 100)), (170.0, g0_steps)])
        att = layout.Phase(root).group(0).attempt(2)
        open(att.metrics(0), "w").close()  # it has begun: not "relaunching"
        out = io.StringIO()
        ft = FtPhase(SimpleNamespace(phase="ft", phase_dir=root), None, out=out)
        ft.groups = {0: subprocess.Popen(["sleep", "120"]), 1: subprocess.Popen(["true"])}
        ft.groups[1].wait()  # group 1's loop has ended (it completed)
        return ft, out
    monkeypatch.setenv("RESTARTLAB_FT_DONE_GRACE_S", "60")
    ft, out = phase(_lockstep(1, 3, 171))
    rcs = ft.wait_groups()
    assert ft.stopped == [0] and rcs[0] is None, (ft.stopped, rcs)
    said = out.getvalue()
    assert "stopping group(s) [0], still relaunching or not in step" in said and "behind after" not in said, said
    monkeypatch.setenv("RESTARTLAB_FT_DONE_GRACE_S", "1")
    ft, out = phase(_lockstep(15, 59, 171))  # in step: one behind the done group's 60
    assert ft.late(60) == [] and ft.late(62) == [0]
    ft.wait_groups()
    said = out.getvalue()
    assert ft.stopped == [0] and "stopping group(s) [0], behind after 1s" in said and "not in step" not in said, said
    # Only the current attempt counts; its first attempt reached step 59. A group whose records do
    # not read yet is not known to be out of step.
    ft, out = phase(_lockstep(1, 3, 171), first=59)
    assert ft.late(60) == [0]
    ft.stop_groups()
    ft, out = phase([])
    assert ft.late(60) == []
    ft.stop_groups()
