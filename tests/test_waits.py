"""No endless waits: a rank stopped with SIGSTOP (a hang: nothing exits) is noticed.
The trainer's process-group timeout notices it when the trainer runs alone. Inside a job, the
relaunch loop's watchdog does. The attempt is torn down (the stopped rank included), and the phase
resumes and completes."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from restartlab.runtime import killer
from restartlab.contracts import layout
from tests.helpers import job_tag, rows, trainer_cmd, wait_for

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


def _stop_one_rank(tag):
    """SIGSTOP the highest-PID rank of the job and its process tree, as the injector's hang does.
    A rank is tagged, and its parent untagged. Under the supervisor a rank is its exit recorder and
    the program it waits for."""
    tagged = set(killer.find_tagged(tag))
    ranks = sorted(p for p in tagged if psutil.Process(p).ppid() not in tagged)
    victim = ranks[-1]
    for p in [psutil.Process(victim)] + psutil.Process(victim).children(recursive=True):
        p.send_signal(signal.SIGSTOP)
    return victim, time.time()


def test_process_group_timeout_frees_the_ranks_blocked_on_a_stopped_peer(tmp_path):
    """The ranks waiting in a collective for a stopped peer fail after --pg-timeout instead of
    waiting forever. (The stopped rank itself can do nothing, and MPICH's mpiexec waits for it:
    ending the attempt is the relaunch loop's watchdog's job, tested below.)"""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    metrics = str(tmp_path / layout.metrics_name(0))
    log = open(tmp_path / "out.log", "w")
    p = subprocess.Popen(trainer_cmd(4, ["--model", "tiny", "--train-iters", "100000", "--pg-timeout", "5",
                                         "--outdir", str(tmp_path), "--log-interval", "100000"], tag),
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: any(r.get("train/iter", 0) >= 5 for r in rows(metrics)), 120, "step 5")
        victim, t_stop = _stop_one_rank(tag)
        waited = wait_for(lambda: killer.find_tagged(tag) == [victim], 5 + 30, "the other ranks to give up")
        assert waited <= 5 + 15, waited
        assert "Timed out waiting 5000ms" in (tmp_path / "out.log").read_text()
    finally:
        killer.kill_ranks(tag)
        p.wait(timeout=30)
        log.close()


def test_watchdog_tears_down_a_hung_attempt_and_the_phase_completes(tmp_path):
    d = tmp_path / "expt"
    hang = 10
    p = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "run", "--expt-dir", str(d), "--plain",
                          "--set", "phases=[{name: sync, checkpoint: sync, failures: false}]",
                          "--set", "trainer.train_iters=80", "--set", "trainer.save_interval=10",
                          "--set", f"relaunch.hang_timeout={hang}s", "--set", "collection.plots=false"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        metrics = str(layout.Expt(d).phase("sync").attempt(1).metrics(0))
        wait_for(lambda: any(r.get("train/iter", 0) >= 25 for r in rows(metrics)), 240, "step 25")
        tag = job_tag(d)
        victim, t_stop = _stop_one_rank(tag)
        wait_for(lambda: os.path.exists(layout.Expt(d).phase("sync").attempt(2).path), hang + 30, "the relaunch")
        torn_down = time.time() - t_stop
        assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, out[-3000:]
    # noticed after hang_timeout of silence (the watchdog polls every second), torn down at once
    assert torn_down <= hang + 15, torn_down
    a1 = json.load(open(layout.Expt(d).phase("sync").attempt(1).record))
    a2 = json.load(open(layout.Expt(d).phase("sync").attempt(2).record))
    assert a1["hang"] and not a1["completed"] and a2["completed"], (a1, a2)
    assert "RESUMED from step=20" in open(layout.Expt(d).phase("sync").attempt(2).output).read()
    assert "killed" in open(layout.Expt(d).phase("sync").attempt(1).teardown_log).read()
    assert killer.find_tagged(tag) == []  # nothing of the job outlives it
