"""The rank killer and the injector with real processes: decoys, untagged twins, the injector's
own tree and a launcher parent survive; gated kills fire within 0.5 s of the marker."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from restartlab import ckptdir, inject, killer, launchers
from tests.helpers import MPIEXEC, wait_for

SLEEPER = [sys.executable, "-c", "import sys,time; time.sleep(300)", "rank-like"]
# argv: TAG CMD...: start CMD with RESTARTLAB_JOB_TAG=TAG in its environment only, print its pid
LAUNCHER = ("import os,subprocess,sys,time; env=dict(os.environ, RESTARTLAB_JOB_TAG=sys.argv[1]); "
            "p=subprocess.Popen(sys.argv[2:], env=env); print(p.pid, flush=True); time.sleep(300)")
RANK_WITH_CHILD = "import subprocess,sys,time; subprocess.Popen(sys.argv[1:]); time.sleep(300)"


def spawn(argv, tag=None, **kw):
    env = dict(os.environ)
    env.pop(killer.TAG_VAR, None)
    if tag:
        env[killer.TAG_VAR] = tag
    return subprocess.Popen(argv, env=env, **kw)


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def alive(p):
    return p.poll() is None


def test_only_tagged_ranks_and_their_children_die(procs):
    tag, other = f"t-{uuid.uuid4().hex[:6]}", f"o-{uuid.uuid4().hex[:6]}"
    # an untagged "launcher" that starts a tagged rank as its own child (the tag only in the
    # rank's environment, as mpiexec -genv does); the rank has a child of its own (a writer)
    launcher = spawn([sys.executable, "-c", LAUNCHER, tag, sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER],
                     stdout=subprocess.PIPE, text=True)
    decoy = spawn(SLEEPER, tag=other)           # same command line, another job's tag
    twin = spawn(SLEEPER)                       # same command line, no tag
    procs += [launcher, decoy, twin]
    rank_pid = int(launcher.stdout.readline())
    wait_for(lambda: len(killer.targets(tag)) >= 2, 10, "rank + child visible")
    assert psutil.Process(rank_pid).ppid() == launcher.pid      # the launcher really is the parent
    dry = killer.kill_ranks(tag, dry_run=True)
    assert rank_pid in dry["pids"] and len(dry["pids"]) == 2 and launcher.pid not in dry["pids"]
    receipt = killer.kill_ranks(tag)
    assert set(receipt["pids"]) == set(dry["pids"]) and receipt["signal"] == "SIGKILL"
    for pid in receipt["pids"]:
        wait_for(lambda: killer.is_gone(pid), 10, f"pid {pid} dies")
    assert alive(decoy) and alive(twin) and alive(launcher)


def test_killer_spares_itself_and_its_ancestors():
    """The kill-ranks CLI run *inside* a tagged process tree must not kill its own parent chain."""
    tag = f"t-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, **{killer.TAG_VAR: tag})
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "kill-ranks", "--tag", tag],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == killer.EXIT_NONE, r.stdout + r.stderr
    assert json.loads(r.stdout)["pids"] == []


def test_exit_codes(procs):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, "-m", "restartlab.cli", "kill-ranks", "--tag", tag]
    assert subprocess.run(cmd, capture_output=True, timeout=60).returncode == killer.EXIT_NONE
    p = spawn(SLEEPER, tag=tag)
    procs.append(p)
    wait_for(lambda: killer.find_tagged(tag), 10, "tagged sleeper")
    r = subprocess.run(cmd + ["--signal", "TERM"], capture_output=True, text=True, timeout=60)
    assert r.returncode == killer.EXIT_KILLED and json.loads(r.stdout)["signal"] == "SIGTERM"
    assert p.wait(timeout=10) == -signal.SIGTERM
    assert subprocess.run(cmd + ["--signal", "NOPE"], capture_output=True, timeout=60).returncode == killer.EXIT_USAGE


def _fake_complete(ckpt, step):
    d = ckptdir.step_path(ckpt, step)
    os.makedirs(d, exist_ok=True)
    ckptdir.mark_complete(d, {"step": step})
    return time.time()


def test_gated_kill_latency_and_until(tmp_path, procs):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    ckpt, phase = str(tmp_path / "ckpts"), str(tmp_path / "phase")
    inj = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "inject", "--at-steps", "20,40",
                            "--ckpt-dir", ckpt, "--phase-dir", phase, "--tag", tag, "--fanout", "local",
                            "--until", str(tmp_path / "done")], stdout=subprocess.PIPE, text=True)
    procs.append(inj)
    latencies = []
    for step in (20, 40):
        rank = spawn(SLEEPER, tag=tag)
        procs.append(rank)
        wait_for(lambda: killer.find_tagged(tag), 10, "rank")
        time.sleep(1.0)
        t_marker = _fake_complete(ckpt, step)
        rank.wait(timeout=10)
        log = os.path.join(phase, "injections.jsonl")
        # the receipt line is appended once the fan-out returns, just after the rank died
        wait_for(lambda: os.path.exists(log) and len(open(log).readlines()) == len(latencies) + 1, 30,
                 "the injection record")
        recs = [json.loads(l) for l in open(log)]
        latencies.append(recs[-1]["time"] - t_marker)
        assert recs[-1]["target_step"] == step and recs[-1]["killed"] == 1
        assert recs[-1]["newest_complete"] == step and recs[-1]["receipts"][0]["pids"] == [rank.pid]
    assert max(latencies) < 0.5, latencies
    # schedule exhausted: the injector exits by itself; a timed one stops on --until
    assert inj.wait(timeout=10) == 0
    timed = subprocess.Popen([sys.executable, "-m", "restartlab.cli", "inject", "--every", "1h", "--tag", tag,
                              "--fanout", "local", "--until", str(tmp_path / "done")])
    procs.append(timed)
    time.sleep(1)
    (tmp_path / "done").touch()
    assert timed.wait(timeout=5) == 0


def test_mtbf_schedule_reproducible_from_seed():
    a = inject.timed_offsets(mtbf=300, seed=7)
    b = inject.timed_offsets(mtbf=300, seed=7)
    c = inject.timed_offsets(mtbf=300, seed=8)
    xa, xb, xc = [next(a) for _ in range(5)], [next(b) for _ in range(5)], [next(c) for _ in range(5)]
    assert xa == xb and xa != xc and all(x < y for x, y in zip(xa, xa[1:]))
    assert inject.step_targets(every_steps=100, train_iters=350) == [(100, None), (200, None), (300, None)]
    # one schedule may mix failure kinds
    assert inject.parse_at_steps("500,1000:hang,1500:preempt") == [(500, None), (1000, "hang"), (1500, "preempt")]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown failure kind 'boom'"):
        inject.parse_at_steps("5:boom")


@pytest.mark.multirank
def test_kill_tears_down_a_real_mpiexec_attempt(tmp_path):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    p = subprocess.Popen([MPIEXEC, "-n", "2", "-genv", killer.TAG_VAR, tag, *SLEEPER])
    try:
        wait_for(lambda: len(killer.find_tagged(tag)) == 2, 30, "2 ranks")
        assert killer.TAG_VAR.encode() + b"=" + tag.encode() not in open(f"/proc/{p.pid}/environ", "rb").read()
        r = killer.kill_ranks(tag)
        assert len(r["pids"]) == 2
        assert p.wait(timeout=30) != 0  # Hydra tears the whole attempt down
    finally:
        if p.poll() is None:
            p.kill()
        killer.kill_ranks(tag)


@pytest.mark.multirank
def test_mpiexec_fanout_reaches_only_the_chosen_nodes():
    """--fanout mpiexec used to launch on every node whatever the target: now one launch over
    exactly the chosen hosts. Node 0 is a host that does not exist, so reaching it would fail."""
    me = socket.gethostname()
    argv = [sys.executable, "-c", "import json, socket; print(json.dumps({'host': socket.gethostname(), 'pids': []}))"]
    receipts = inject.fan_out("mpiexec", ["no-such-host.invalid", me], [1], argv, launcher="hydra")
    assert receipts == [{"host": me, "pids": []}], receipts
    assert launchers.get("hydra").fanout_argv(["a", "b"], ["x"]) == ["mpiexec", "-n", "2", "-ppn", "1", "-hosts", "a,b", "x"]
    assert launchers.get("pals").fanout_argv(["a"], ["x"]) == ["mpiexec", "-n", "1", "--ppn", "1", "--hosts", "a", "x"]
