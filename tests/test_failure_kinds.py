"""Failure kinds through `restartlab run`: one schedule mixes rank, hang and preempt.

Each is injected, detected, recovered from, and booked by kind in the report. The report gives its
detection time and the mechanism that noticed it. A preemption loses no step."""
import json
import os
import subprocess
import sys

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.runtime import killer
from tests.helpers import job_tag

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(900)]


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_rank_hang_preempt_in_one_run(tmp_path, warm):
    """The same outcome with warm restart (relaunch.warm).

    The one-rank kinds strike a forked rank, never its stub or the pool. The preemption's TERM
    reaches the ranks directly and through their stubs."""
    d = tmp_path / "expt"
    sched = "[{step: 10, kind: rank}, {step: 25, kind: hang}, {step: 40, kind: preempt}]"
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                        "--set", f"relaunch.warm={str(warm).lower()}",
                        "--set", "phases=[{name: sync, checkpoint: sync}]", "--set", "trainer.train_iters=60",
                        "--set", "trainer.save_interval=5", "--set", f"failures.schedule.at_steps={sched}",
                        "--set", "relaunch.hang_timeout=15s", "--set", "failures.grace=30s",
                        "--set", "collection.plots=false"],
                       capture_output=True, text=True, timeout=850)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = [json.loads(line) for line in open(layout.Expt(d).phase("sync").injections)]
    inj = [x for x in recs if "follow_up_of" not in x]
    assert [(x["kind"], x["signal"]) for x in inj] == [("rank", "KILL"), ("hang", "STOP"), ("preempt", "TERM")]
    assert inj[0]["killed"] == 1 and inj[1]["killed"] == 1 and inj[2]["killed"] >= 2
    follow = [x for x in recs if "follow_up_of" in x]
    assert len(follow) == 1 and follow[0]["escalated"] == 0 and follow[0]["killed"] == 0  # done within the grace
    s = json.load(open(layout.Expt(d).summary))["phases"][0]
    ev = {e["kind"]: e for e in s["failures"]}
    assert set(ev) == {"rank", "hang", "preempt"} and s["completed"], s["failures"]
    assert ev["rank"]["detected_by"] == "launcher" and ev["rank"]["detection_s"] < 5
    assert ev["hang"]["detected_by"] == "watchdog" and 15 <= ev["hang"]["detection_s"] <= 15 + 15
    assert ev["preempt"]["detected_by"] == "trainer" and ev["preempt"]["lost_steps"] == 0
    assert ev["preempt"]["resumed_from"] == ev["preempt"]["step_at_kill"] >= 40
    assert set(s["by_kind"]) == {"rank", "hang", "preempt"}
    a = [json.load(open(layout.Expt(d).phase("sync").attempt(i).record)) for i in (1, 2, 3, 4)]
    assert [x["hang"] for x in a] == [False, True, False, False] and a[2]["preempted"] and a[3]["completed"]
    assert [x["injected"] for x in a] == [True, True, True, False]
    # Before the watchdog's KILL, the hung attempt's ranks that could still run wrote their stacks
    # (trainer_options.STACKS_SIGNAL). That is the one not stopped, waiting in a collective for its peer.
    hung = open(layout.Expt(d).phase("sync").attempt(2).output).read()
    assert "(most recent call first)" in hung and 'trainer/__main__.py", line' in hung, hung[-3000:]
    # Its processes are written as the watchdog found them (procsnap). The launcher is first.
    # The SIGSTOPped rank is "stopped". The launcher's ranks (their exit recorders or warm stubs)
    # are asleep in the kernel.
    with open(layout.Expt(d).phase("sync").attempt(2).hang_procs) as f:
        procs = [line for line in f if not line.startswith(("#", "    pid"))]
    assert "mpiexec" in procs[0] and any(" stopped " in line for line in procs), procs
    assert sum(" sleeping " in line and "PMI_RANK=" in line for line in procs) >= 1, procs
    assert "By failure kind" in open(layout.Expt(d).report).read()
    assert [(e["startup"] or {}).get("startup/warm") for e in s["failures"]] == ([1] * 3 if warm else [None] * 3)
    assert killer.find_tagged(job_tag(d), standby=True) == []


def test_walltime_warning_emergency_checkpoint_nothing_lost(tmp_path):
    """The walltime warning gets an emergency checkpoint, and nothing is lost.

    relaunch.walltime_margin before job.walltime, the job script sends the ranks the trainer's
    preemption signal. The async phase waits for the save in flight, writes an emergency checkpoint
    of its last step, and exits 5. Nothing is relaunched, and the next phase never starts. The job
    exits 5 (state saved, training unfinished). The report says what the stop kept."""
    d = tmp_path / "expt"
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                        "--set", "phases=[{name: first, checkpoint: async, failures: false}, "
                                 "{name: second, checkpoint: sync, failures: false}]",
                        "--set", "trainer.train_iters=100000", "--set", "trainer.save_interval=7",
                        "--set", "job.walltime=60s", "--set", "relaunch.walltime_margin=30s",
                        # 0.2 s a step (a test-only delay point): the subject is the walltime's end
                        "--set", 'launch.env={RESTARTLAB_DELAY: "step:*:*:0.2"}',
                        "--set", "collection.plots=false"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 5, r.stdout[-3000:] + r.stderr[-3000:]
    assert not (d / "second").exists() or not os.path.exists(layout.Expt(d).phase("second").attempts_dir)
    a = json.load(open(layout.Expt(d).phase("first").attempt(1).record))
    assert a["walltime"] and a["preempted"] and a["exit_code"] == 5, a
    assert not os.path.exists(layout.Expt(d).phase("first").attempt(2).path)          # no relaunch after the warning
    s = json.load(open(layout.Expt(d).summary))["phases"][0]
    w = s["walltime_stop"]
    assert w["lost_steps"] == 0 and w["emergency_checkpoint"] == w["last_step"] > 7, w
    assert ckptdir.newest_complete_step(str(d / "first" / "ckpts")) == w["last_step"]
    assert "stopped by the walltime warning" in open(layout.Expt(d).report).read()
    assert "walltime warning (30s left)" in open(layout.Expt(d).job_out).read()
    assert "phase second: not started (walltime)" in open(layout.Expt(d).job_out).read()
    assert f"walltime stop at step {w['last_step']}" in r.stdout
    assert killer.find_tagged(job_tag(d)) == []
