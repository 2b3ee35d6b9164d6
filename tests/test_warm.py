"""Warm standby restart (restartlab.runtime.warm).

The pool and its stubs run as real processes, with real signals and a real Unix socket. The pool
preloads `json` here: the mechanism is tested, not the import time. The bundled trainer through
the pool is in the multirank tests at the end.

Fault points in the pool (RESTARTLAB_WARM_TESTPOINT) widen the windows where a stub can die or be
signalled while its rank is being made. So those interleavings happen on purpose."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from restartlab import programs
from restartlab.contracts import layout
from restartlab.contracts.trainer_options import WARM_PRELOAD
from restartlab.runtime import killer
from restartlab.runtime.warm import pool as warm_pool, standby, wire

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tag():
    return f"rl-warmtest-{uuid.uuid4().hex[:8]}"


def _wait(cond, timeout=30.0, what="condition"):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def pool(tmp_path, request):
    """A running pool for this test (its own tag); stopped, and nothing tagged left, at the end."""
    tag = _tag()
    points = getattr(request, "param", "")
    env = dict(os.environ, **({warm_pool.TESTPOINT_VAR: points} if points else {}))
    sb = standby.Standby(PY, tag, str(tmp_path / "pool.log"), preload="json", env=env)
    sb.wait_ready(60)
    yield sb, tag
    sb.stop()
    killer.kill_ranks(tag, standby=True)
    assert killer.find_tagged(tag, standby=True) == []


def stub(sb, tag, code, *args, cwd=None, env=None, **kw):
    argv = [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", sb.dir, "--", PY, "-c", code, *args]
    return subprocess.Popen(argv, cwd=cwd, env=dict(os.environ, RESTARTLAB_JOB_TAG=tag, **(env or {})),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, **kw)


def _gone(pid) -> bool:
    return killer.is_gone(pid)


def _log_pid(sb, stub_pid, timeout=30.0, told=False) -> int:
    """The rank pid the pool logged for this stub when it forked it.

    With `told`, the pid as logged once the pool has told the stub. From then on, the stub stands in
    for the rank."""
    line = re.compile(rf": stub pid {stub_pid} told its rank pid (\d+)$" if told
                      else rf": rank pid (\d+) for stub pid {stub_pid}:", re.M)
    found = []

    def logged():
        with open(sb.log_path) as f:
            m = line.search(f.read())
        if m:
            found.append(int(m.group(1)))
        return bool(m)
    _wait(logged, timeout, f"the pool to fork a rank for stub {stub_pid}")
    return found[0]


def _term_and_wait(p, tag, timeout=30.0):
    """Send the stub a TERM, as the launcher or the killer would, and wait for its end. Past
    `timeout` the run's processes are killed (nothing is left) and the test fails."""
    try:
        p.send_signal(signal.SIGTERM)
        return p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            killer.kill_ranks(tag)
            p.communicate(timeout=60)


# ---------------------------------------------------------------- what the pool can run
def test_split_python_takes_modules_scripts_code_and_refuses_the_rest():
    assert warm_pool.split_python([PY, "-m", "pkg.mod", "--x", "1"], PY) == ("module", "pkg.mod", ["--x", "1"], False)
    assert warm_pool.split_python([PY, "-u", "train.py", "a"], PY) == ("script", "train.py", ["a"], True)
    assert warm_pool.split_python([PY, "-c", "print(1)", "z"], PY) == ("code", "print(1)", ["z"], False)
    # another name of the same binary in the same directory (a venv's python and python3)
    twin = os.path.join(os.path.dirname(PY), "python3" if os.path.basename(PY) != "python3" else "python")
    if os.path.exists(twin) and os.path.realpath(twin) == os.path.realpath(PY):
        assert warm_pool.split_python([twin, "t.py"], PY)[0] == "script"
    for bad, why in (([PY, "-X", "dev", "t.py"], "-X"), (["/usr/bin/env", "t.py"], "not the pool's"),
                     ([PY, "-"], "standard input"), ([PY, "-m"], "without")):
        with pytest.raises(wire.PoolError, match=why):
            warm_pool.split_python(bad, PY)


def test_the_preload_a_program_gets_by_default():
    """The adapter says what its pools import (the bundled trainer is told by its adapter, not by
    the words of its command: #64.4)."""
    from restartlab import programs
    assert programs.ADAPTERS.get(programs.resolve({}).adapter).preload == "torch"
    assert programs.ADAPTERS.get(programs.resolve({"adapter": "restartlab"}).adapter).preload == WARM_PRELOAD


# ---------------------------------------------------------------- the hand-over
def test_the_preload_is_frozen_and_the_collector_back_on():
    """Pool.preload imports with the cyclic collector off, then freezes what the imports made (no
    collection, in the pool or a forked rank, passes over it again) and turns the collector back on
    (the pool and the ranks still collect their own garbage). In a process of its own: a freeze in
    pytest's would hold the suite's objects. Fails with the freeze or the enable taken out."""
    code = ("import gc, sys\nfrom restartlab.runtime.warm.pool import Pool\n"
            "before = gc.get_freeze_count()\nPool('/nonexistent', sys.executable).preload(['json', 'csv'])\n"
            "print(gc.isenabled(), gc.get_freeze_count() > before, 'csv' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["True", "True", "True"], r.stdout + r.stderr


def test_the_rank_gets_the_stubs_argv_env_cwd_streams_and_its_exit_status_comes_back(pool, tmp_path):
    sb, tag = pool
    code = ("import json, os, sys; line = sys.stdin.readline().strip(); "
            "print(json.dumps({'argv': sys.argv, 'foo': os.environ.get('FOO'), 'cwd': os.getcwd(), "
            "'warm': os.environ.get('RESTARTLAB_WARM'), 'ppid': os.getppid(), 'line': line})); "
            "print('to stderr', file=sys.stderr); sys.exit(3)")
    p = stub(sb, tag, code, "a", "b", cwd=str(tmp_path), env={"FOO": "bar"})
    out, err = p.communicate("hello\n", timeout=60)
    assert p.returncode == 3, err
    got = json.loads(out)
    assert got == {"argv": ["-c", "a", "b"], "foo": "bar", "cwd": str(tmp_path), "warm": "1",
                   "ppid": sb.proc.pid, "line": "hello"}
    assert "to stderr" in err


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_death_by_a_signal_is_mirrored(pool, sig):
    sb, tag = pool
    p = stub(sb, tag, f"import os; os.kill(os.getpid(), {int(sig)})")
    p.communicate(timeout=60)
    assert p.returncode == -sig


# a program that counts the TERMs it gets (a line each), forks a child that counts its own, and waits
COUNTS_TERMS = """import os, signal, sys, time
out = sys.argv[1]
def count(who):
    signal.signal(signal.SIGTERM, lambda s, f: open(out, "a").write(who + "\\n"))
r, w = os.pipe()
if os.fork() == 0:
    count("child")
    os.write(w, b"1")  # its handler is in place
    while True:
        time.sleep(0.05)
count("rank")
os.read(r, 1)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_the_killers_term_reaches_a_warm_rank_once_and_its_children_too(pool, tmp_path):
    """kill-ranks by the run's tag finds a warm rank twice: its stub (under the launcher) and the rank
    the pool forked. The stub passes a catchable signal on to its rank. Before the fix the killer
    signalled the rank as well, so each TERM reached it twice (a preemption's emergency checkpoint
    handler ran twice). Now the killer leaves the rank to its stub, and still signals the rank's own
    children, as it does a cold rank's. SIGKILL still goes to every process. Mutation: signal the
    forked rank too (killer.signalled returning every pid) -> two "rank" lines per TERM."""
    sb, tag = pool
    got = tmp_path / "terms"
    p = stub(sb, tag, COUNTS_TERMS, str(got))
    try:
        assert p.stdout.readline().strip() == "ready"
        rank = _log_pid(sb, p.pid, told=True)  # the stub knows its rank: a signal is passed on, not held
        for n in (1, 2):
            rec = killer.kill_ranks(tag, signal.SIGTERM)
            assert {p.pid, rank} <= set(rec.pids) and rec.signal == "SIGTERM", rec  # both struck, by the receipt
            _wait(lambda: got.exists() and got.read_text().count("rank") >= n and got.read_text().count("child") >= n,
                  30, f"TERM {n} at the rank and its child")
            time.sleep(1.0)  # a second copy, were one sent, is passed on by the stub within milliseconds
            lines = got.read_text().split()
            assert lines.count("rank") == n and lines.count("child") == n, lines
        assert p.poll() is None  # the program chose to go on: the stub stands in for it still
    finally:
        rec = killer.kill_ranks(tag, signal.SIGKILL)
        p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL and rank in rec.pids


def test_a_silent_or_chatty_peer_cannot_hold_the_pool(pool):
    """A connection that sends nothing is dropped after the request timeout (10 s).

    The stub queued behind it is served then, so the pool does not hang on it."""
    import socket as _socket
    sb, tag = pool
    silent = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    silent.connect(os.path.join(sb.dir, wire.SOCKET_NAME))
    p = stub(sb, tag, "print('served')")
    assert p.communicate(timeout=60)[0].strip() == "served" and p.returncode == 0
    silent.settimeout(60)
    assert silent.recv(4096)  # the pool's error reply, then its hang-up
    silent.close()


def test_an_interrupted_rank_dies_of_sigint_as_python_does(pool):
    sb, tag = pool
    p = stub(sb, tag, "raise KeyboardInterrupt")
    out, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in err


@pytest.mark.parametrize("pool", ["child_start=2"], indirect=True)
def test_a_pool_that_dies_before_its_forked_rank_first_runs_takes_the_rank_with_it(pool, tmp_path):
    """Fault point: the forked child waits 2 s before it becomes the rank.

    The pool is SIGKILLed in that window. Under load, a child may not run before its parent has told
    the stub and been killed. make test-fast lost this test twice that way (2026-12-05). The child's
    check of its parent compares with the pool's pid taken before the fork. Mutation: the child's own
    getppid(), which is then the reaper's -> the rank runs on, orphaned, and this test times out."""
    sb, tag = pool
    p = stub(sb, tag, "import time; time.sleep(600)")
    rank = _log_pid(sb, p.pid, told=True)
    sb.proc.kill()
    _wait(lambda: _gone(rank), what="the rank forked just before the pool died, to die too")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 137 and "standby pool died" in err, err


@pytest.mark.parametrize("pool", ["child_start=2"], indirect=True)
def test_a_term_passed_on_before_the_forked_child_becomes_the_rank_is_not_lost(pool):
    """Fault point: the forked child waits 2 s before it becomes the rank.

    The stub already knows its pid. A TERM the stub passes on in that window reached the pool's own
    handler, which the child still had. That handler only marks a pool stopping, so the rank then ran
    as if never signalled. The pool now forks with the passed-on signals blocked. The child unblocks
    them once the rank's own dispositions are set. So the TERM ends it as it ends a cold rank that
    early. Mutation: no block -> the program runs, prints "ran" and sleeps, and this test times out."""
    sb, tag = pool
    p = stub(sb, tag, "import time; print('ran', flush=True); time.sleep(600)")
    _log_pid(sb, p.pid, told=True)  # the child is in its 2 s wait
    out, err = _term_and_wait(p, tag)
    assert p.returncode == -signal.SIGTERM and "ran" not in out, (p.returncode, out, err)


@pytest.mark.parametrize("pool", ["before_reply=3"], indirect=True)
def test_a_signal_that_reaches_the_stub_before_it_knows_its_rank_is_forwarded(pool, tmp_path):
    """A TERM that reaches the stub before it knows its rank's pid is held and forwarded.

    The pool forks and logs the rank. Then, at a fault point, it waits 3 s before telling the stub
    its pid. A TERM the launcher sends the stub in that window is held, and forwarded once the pid
    is known."""
    sb, tag = pool
    code = ("import signal, sys, time\n"
            "def h(s, f):\n    print('TERM', flush=True); sys.exit(7)\n"
            "signal.signal(signal.SIGTERM, h)\n"
            "time.sleep(120)")
    p = stub(sb, tag, code)
    _log_pid(sb, p.pid)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 7 and "TERM" in out, (out, err)


@pytest.mark.parametrize("pool", ["before_refusal=3"], indirect=True)
def test_a_signal_held_for_a_rank_the_pool_then_refuses_ends_that_rank(pool, tmp_path):
    """The pool refuses the rank: it has an interpreter option the pool cannot run (-X dev).

    Then, at a fault point, the pool waits 3 s before it tells the stub. A TERM the launcher sends
    the stub in that window is held for the rank. A cold rank signalled that early has no handler
    yet and dies of it. So the stub dies of it too, before it starts the program, and records that
    end as the rank's. Mutation: the held signal dropped -> the program starts cold, prints "ran"
    and sleeps, and this test times out."""
    sb, tag = pool
    attempt = tmp_path / "attempt"
    argv = [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", sb.dir, "--attempt-dir", str(attempt), "--",
            PY, "-X", "dev", "-c", "import time; print('ran', flush=True); time.sleep(600)"]
    p = subprocess.Popen(argv, env=dict(os.environ, RESTARTLAB_JOB_TAG=tag), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    _wait(lambda: "a request refused" in open(sb.log_path).read(), what="the pool to refuse the rank")
    out, err = _term_and_wait(p, tag)
    assert p.returncode == -signal.SIGTERM and "ran" not in out, (p.returncode, out, err)
    assert "standby pool not usable" in err and "SIGTERM arrived before the rank started" in err, err
    ends = [json.load(open(f)) for f in layout.Attempt(str(attempt)).rank_exits()]
    assert [(e["signal"], e["exit_code"], e["pid"]) for e in ends] == [(signal.SIGTERM, None, p.pid)], ends


def test_a_killed_stub_takes_its_rank_with_it(pool, tmp_path):
    sb, tag = pool
    p = stub(sb, tag, "import time; time.sleep(600)")
    rank = _log_pid(sb, p.pid)
    assert psutil.pid_exists(rank)
    p.kill()
    p.wait(timeout=30)
    _wait(lambda: _gone(rank), what="the rank to die with its stub")
    # and the pool serves the next stub
    q = stub(sb, tag, "print('next')")
    assert q.communicate(timeout=60)[0].strip() == "next" and q.returncode == 0


@pytest.mark.parametrize("first", ["rank", "stub"])
def test_a_rank_and_its_stub_dying_in_one_wake_up_leave_the_pool_serving(pool, first):
    """The bad interleaving of a strike (or a teardown) on a loaded machine, made on purpose.

    The pool is SIGSTOPped. The rank and its stub are SIGKILLed one after the other while it cannot
    look. Then the pool is SIGCONTed, so that one select() hands it the rank's exit and the stub's
    hang-up together, in either order. This was seen in CI and under load before the fix. With the
    exit first, the reap dropped the rank, and the stale hang-up event then raised KeyError.
    The pool died, and every later attempt of the phase started cold ('Connection reset by peer' /
    'No such file')."""
    sb, tag = pool
    p = stub(sb, tag, "import time; time.sleep(600)")
    rank = _log_pid(sb, p.pid)
    os.kill(sb.proc.pid, signal.SIGSTOP)
    try:
        _wait(lambda: psutil.Process(sb.proc.pid).status() == psutil.STATUS_STOPPED, what="the pool to stop")
        for pid in ([rank, p.pid] if first == "rank" else [p.pid, rank]):
            os.kill(pid, signal.SIGKILL)
            if pid == p.pid:
                p.wait(timeout=30)
            else:  # a zombie child of the stopped pool: its pidfd is readable
                _wait(lambda: _gone(rank), what="the rank to die")
    finally:
        os.kill(sb.proc.pid, signal.SIGCONT)
    _wait(lambda: f"rank pid {rank} ended" in open(sb.log_path).read(), what="the pool to reap the rank")
    q = stub(sb, tag, "print('still serving')")
    out, err = q.communicate(timeout=60)
    assert (out.strip(), q.returncode) == ("still serving", 0) and "not usable" not in err, err
    assert sb.alive() and "Traceback" not in open(sb.log_path).read()


@pytest.mark.parametrize("pool", ["before_fork=2"], indirect=True)
def test_a_stub_that_dies_before_its_rank_is_forked_leaves_no_rank(pool, tmp_path):
    """Fault point: the pool has read the request and waits 2 s before forking; the stub is killed
    in that window. The rank the pool then forks must die at once (its stub's socket is closed)."""
    sb, tag = pool
    marker = tmp_path / "ran"
    p = stub(sb, tag, f"import time; time.sleep(3); open({str(marker)!r}, 'w').close(); time.sleep(600)")
    _wait(lambda: f"request from stub pid {p.pid}" in open(sb.log_path).read(), what="the request")
    p.kill()
    p.wait(timeout=30)
    rank = _log_pid(sb, p.pid)
    _wait(lambda: _gone(rank), what="the orphan rank to die")
    time.sleep(3.5)
    assert not marker.exists()


def test_a_rank_whose_streams_broke_never_unwinds_into_the_pool(tmp_path):
    """#49, the PBS warm test's rare cold rank: a struck stub leaves its rank writing to broken pipes.

    The rank's error, then its traceback, fail to write. That second failure escaped become() in the
    forked child. It unwound through the pool's own frames into serve_main's finally, and removed the
    pool's directory, socket and all. The next attempt's stub on that node found none and started
    cold. strace on the OpenPBS hosts showed it: the struck rank's SIGPIPE, then its unlink of
    pool.sock and rmdir of the pool's directory, 28 ms before its SIGKILL.

    The test makes this on purpose. The pool made its own directory (--make-dir, as on each node of
    a job). The rank's stdout and stderr are pipes nobody reads. The directory and the socket
    survive, and the next stub is served warm. Mutation: the fork site's os._exit and the handler's
    guard removed -> the directory is gone and the next stub starts cold."""
    tag = _tag()
    d = str(tmp_path / "pool")
    env = dict(os.environ, RESTARTLAB_JOB_TAG=tag)
    with open(tmp_path / "pool.log", "wb") as log:
        srv = subprocess.Popen([PY, "-m", "restartlab.runtime.warm", "serve", "--preload", "json", "--python", PY,
                                "--tag", tag, "--dir", d, "--make-dir"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait(lambda: os.path.exists(os.path.join(d, wire.SOCKET_NAME)), 60, "the pool's socket")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        os.close(out_r)  # nobody reads the rank's output: every write is EPIPE
        os.close(err_r)
        broken = subprocess.Popen([PY, "-m", "restartlab.runtime.warm", "stub", "--dir", d, "--", PY, "-c",
                                   "print('x' * 100000, flush=True)"], stdout=out_w, stderr=err_w,
                                  stdin=subprocess.DEVNULL, env=env)
        os.close(out_w)
        os.close(err_w)
        assert broken.wait(60) != 0
        _wait(lambda: "ended: {'exit': 1}" in open(tmp_path / "pool.log").read(), 30, "the pool to reap the rank")
        assert os.path.isdir(d) and os.path.exists(os.path.join(d, wire.SOCKET_NAME)), os.listdir(tmp_path)
        p = subprocess.run([PY, "-m", "restartlab.runtime.warm", "stub", "--dir", d, "--", PY, "-c",
                            "import os; print('warm', os.environ.get('RESTARTLAB_WARM'))"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0 and p.stdout.strip() == "warm 1", (p.stdout, p.stderr)
    finally:
        srv.terminate()
        srv.wait(30)
        killer.kill_ranks(tag, standby=True)
    assert not os.path.exists(d)  # the pool removed its own directory when it stopped
    assert killer.find_tagged(tag, standby=True) == []


def test_the_pools_death_kills_its_ranks(pool, tmp_path):
    sb, tag = pool
    p = stub(sb, tag, "import time; time.sleep(600)")
    rank = _log_pid(sb, p.pid, told=True)  # (before that, see the next test)
    sb.proc.kill()
    _wait(lambda: _gone(rank), what="the rank to die with the pool")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 137 and "standby pool died" in err


@pytest.mark.parametrize("pool", ["before_reply=3"], indirect=True)
def test_a_pool_that_dies_before_telling_the_stub_its_rank_leaves_the_program_to_start_cold(pool, tmp_path):
    """Fault point: the pool has forked the rank and waits 3 s before telling the stub its pid; the
    pool is SIGKILLed in that window. The forked rank dies with it (nothing of it runs on) and the
    stub, never having stood in for a rank, starts the program cold and says so. (Under load the
    pool-death test above once hit this window by chance, and timed out on the cold program.)"""
    sb, tag = pool
    marker = tmp_path / "runs"
    p = stub(sb, tag, f"import os; open({str(marker)!r}, 'a').write(str(os.getpid()) + '\\n')")
    rank = _log_pid(sb, p.pid)
    sb.proc.kill()
    _wait(lambda: _gone(rank), what="the forked rank to die with the pool")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0 and "the pool hung up" in err and "starting the program cold" in err, err
    ran = marker.read_text().split() if marker.exists() else []
    assert ran[-1:] == [str(p.pid)], ran  # the program, cold, in the stub's own process (exec)


def test_the_pool_dies_with_its_supervisor(tmp_path):
    """The supervisor is SIGKILLed, so nothing of it runs its cleanup.

    The pool it started goes too (PR_SET_PDEATHSIG, kept across the pool's re-exec).
    So would its ranks."""
    tag = _tag()
    code = (f"import time\nfrom restartlab.runtime.warm.standby import Standby\n"
            f"sb = Standby({PY!r}, {tag!r}, {str(tmp_path / 'pool.log')!r}, preload='json', "
            f"state_dir={str(tmp_path / 'state')!r})\n"
            f"sb.wait_ready(60)\nprint(sb.proc.pid, sb.dir, flush=True)\ntime.sleep(600)\n")
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    pool_pid, pool_dir = p.stdout.readline().split()
    assert killer.find_tagged(tag, standby=True) == [int(pool_pid)]
    p.kill()
    p.wait(timeout=30)
    _wait(lambda: _gone(int(pool_pid)), what="the pool to die with its supervisor")
    assert killer.find_tagged(tag, standby=True) == []
    from restartlab.contracts import private
    private.remove_tree(pool_dir)


# ---------------------------------------------------------------- the killer and teardown
def test_the_killer_never_counts_the_idle_pool_and_the_pool_recovers_from_a_strike(pool):
    sb, tag = pool
    assert killer.kill_ranks(tag, dry_run=True).pids == ()
    assert killer.kill_ranks(tag, dry_run=True, standby=True).pids == (sb.proc.pid,)
    p = stub(sb, tag, "import time; time.sleep(600)")
    rank = _log_pid(sb, p.pid)
    # one rank (a hang, a single rank's death): the forked rank, which does the work, not its stub
    r = killer.kill_ranks(tag, signal.SIGSTOP, one=True)
    assert r.pids == (rank,)
    _wait(lambda: psutil.Process(rank).status() == psutil.STATUS_STOPPED, what="the rank to stop")
    r = killer.kill_ranks(tag)  # a strike: the stub and its rank, never the pool
    assert set(r.pids) == {p.pid, rank} and sb.alive()
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    q = stub(sb, tag, "print('again')")
    assert q.communicate(timeout=60)[0].strip() == "again"


def test_the_no_tag_killer_finds_a_warm_rank_and_its_stub_in_its_job(tmp_path):
    """`restartlab inject` inside a batch job without --tag finds a warm rank and its stub.

    It finds ranks by the job id and a launcher's rank variable. A forked rank's /proc environment
    is its pool's: the job id, and no rank variable. It is found as the pool's. A one-rank strike
    picks it over its stub, and the pool itself is never a rank."""
    job = f"PBS_JOBID=warmtest-{uuid.uuid4().hex[:6]}.pbs"
    name, _, jid = job.partition("=")
    env = dict(os.environ, **{name: jid})
    tag = _tag()
    sb = standby.Standby(PY, tag, str(tmp_path / "pool.log"), preload="json", env=env)
    try:
        sb.wait_ready(60)
        rank_vars = {"PMI_RANK": "0", "PMI_SIZE": "1", "MPI_LOCALRANKID": "0", name: jid}
        p = stub(sb, tag, "import time; time.sleep(600)", env=rank_vars)
        rank = _log_pid(sb, p.pid)
        one = killer.kill_ranks(None, signal.SIGSTOP, dry_run=True, one=True, job=job)
        assert one.pids == (rank,), one
        every = killer.kill_ranks(None, signal.SIGKILL, job=job)
        assert set(every.pids) == {p.pid, rank} and sb.alive(), every
        p.wait(timeout=30)
    finally:
        sb.stop()
        killer.kill_ranks(tag, standby=True)


def test_the_teardown_verb_leaves_nothing_behind_the_pool_included(pool):
    sb, tag = pool
    p = stub(sb, tag, "import time; time.sleep(600)")
    _log_pid(sb, p.pid)
    r = subprocess.run([PY, "-m", "restartlab.cli", "teardown", "--tag", tag], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    sb.proc.wait(timeout=30)
    p.wait(timeout=30)
    assert killer.find_tagged(tag, standby=True) == []


# ---------------------------------------------------------------- falling back to cold
def test_a_pool_that_cannot_preload_says_why(tmp_path):
    sb = standby.Standby(PY, _tag(), str(tmp_path / "pool.log"), preload="json,no_such_module_xyz")
    with pytest.raises(wire.PoolError, match="no_such_module_xyz"):
        sb.wait_ready(60)
    sb.stop()
    assert not os.path.exists(sb.dir)


def test_a_preload_that_starts_a_thread_is_refused(tmp_path):
    (tmp_path / "threadmod.py").write_text("import threading, time\n"
                                           "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    sb = standby.Standby(PY, _tag(), str(tmp_path / "pool.log"), preload="threadmod", env=env)
    with pytest.raises(wire.PoolError, match="2 threads"):
        sb.wait_ready(60)
    sb.stop()


def test_a_stub_without_a_pool_or_with_a_program_the_pool_cannot_run_starts_it_cold(pool, tmp_path):
    sb, tag = pool
    argv = [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", str(tmp_path / "none"), "--", PY, "-c",
            "import os, sys; print(os.environ.get('RESTARTLAB_WARM')); sys.exit(4)"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 4 and r.stdout.strip() == "None" and "starting the program cold" in r.stderr
    argv = [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", sb.dir, "--", PY, "-X", "dev", "-c", "print('cold')"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "cold" and "interpreter option -X" in r.stderr


def test_a_program_of_yours_gets_torchruns_variables_warm_or_cold(pool, tmp_path):
    """--rankenv: a program of yours gets torchrun's variables, warm or cold.

    The pool adds rankenv's variables to the forked rank. A stub with no pool starts the program
    cold through rankenv itself. Either way, the program sees RANK from the launcher's PMI_RANK.
    Its stdout is line-buffered, not written through: each line is one write (tests/test_rank_lines.py).
    Mutation: the forked rank's stdout written through as before -> "True" for write_through."""
    sb, tag = pool
    code = ("import os, sys; print(os.environ.get('RANK'), os.environ.get('WORLD_SIZE'), os.environ.get('RESTARTLAB_WARM'),"
            " sys.stdout.line_buffering, sys.stdout.write_through)")
    env = dict(os.environ, PMI_RANK="1", PMI_SIZE="2", MPI_LOCALRANKID="1", RESTARTLAB_JOB_TAG=tag)
    env.pop("PYTHONUNBUFFERED", None)
    for where, warm in ((sb.dir, "1"), (str(tmp_path / "none"), "None")):
        argv = [PY, "-m", "restartlab.runtime.warm", "stub", "--dir", where, "--rankenv", "--", PY, "-c", code]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and r.stdout.split() == ["1", "2", warm, "True", "False"], (where, r.stdout, r.stderr)
    # without the flag, no variables: the bundled trainer reads the launcher's own
    r = subprocess.run([PY, "-m", "restartlab.runtime.warm", "stub", "--dir", sb.dir, "--", PY, "-c", code],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.stdout.split()[:3] == ["None", "None", "1"], r.stdout + r.stderr


# ---------------------------------------------------------------- the bundled trainer, warm
def _run(expt, *sets, timeout=850):
    argv = [PY, "-m", "restartlab.cli", "run", "--expt-dir", str(expt), "--plain",
            "--set", "relaunch.warm=true", "--set", "collection.plots=false", *[x for s in sets for x in ("--set", s)]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)



def test_a_warm_rank_runs_the_threads_its_environment_says_not_the_pools(tmp_path):
    """The pool imported torch under its own OMP_NUM_THREADS (2); the rank's says 1.

    A cold rank's torch reads the rank's at import, and so must a warm one's. Measured before the
    fix: the warm rank ran 2 threads and its cold relaunch 1. Its losses left the baseline's in the
    7th digit."""
    tag = _tag()
    sb = standby.Standby(PY, tag, str(tmp_path / "pool.log"), preload="torch", env=dict(os.environ, OMP_NUM_THREADS="2"))
    try:
        sb.wait_ready(120)
        code = "import torch, os; print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
        for want in ("1", "2"):
            p = stub(sb, tag, code, env={"OMP_NUM_THREADS": want})
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and out.split() == [want, want], (out, err)
    finally:
        sb.stop()
        killer.kill_ranks(tag, standby=True)


def test_the_pools_start_in_the_ranks_environment(tmp_path, monkeypatch):
    """launch.env reaches the ranks through the launcher's flags only; the pools, which import the
    program's modules for them, are started with it too."""
    from types import SimpleNamespace
    from restartlab.runtime.warm import route
    from restartlab.tools.launch import LaunchSpec
    seen = {}

    class Fake:
        def __init__(self, *a, env=None, **kw):
            seen.update(env)
    monkeypatch.setattr(route, "Standby", Fake)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    cfg = SimpleNamespace(fanout="local", warm_preload="json", tag=_tag(), launcher="hydra",
                          launch_spec=LaunchSpec(PY, ("train.py",), env={"OMP_NUM_THREADS": "1", "FOO": "bar"}))
    ph = SimpleNamespace(warm_log=str(tmp_path / "w.log"), warm_dir=str(tmp_path / "w"))
    assert route.WarmRoute(cfg, programs.resolve({})).start(ph, ["localhost"], None) is None
    assert seen["OMP_NUM_THREADS"] == "1" and seen["FOO"] == "bar" and seen["PATH"] == os.environ["PATH"]

@pytest.mark.multirank
@pytest.mark.timeout(900)
def test_warm_restarts_resume_bit_exact_sync_and_async(tmp_path):
    """The local scenario with warm restart on.

    - The first attempt starts cold beside the pool that preloads.
    - Every relaunch is forked from the pool, as the report's start column and the pool's own count show.
    - Each resumes from the newest complete checkpoint.
    - The loss at every step and the final parameters equal the baseline's.
    - Nothing tagged outlives the run."""
    from tests.helpers import job_tag
    d = tmp_path / "expt"
    r = _run(d, "trainer.train_iters=60", "failures.schedule.at_steps=[15, 35]")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.load(open(layout.Expt(d).summary))["phases"]
    report = open(layout.Expt(d).report).read()
    for ph in s[1:]:
        assert ph["completed"] and ph["kills"] == 2, ph
        assert all((e["startup"] or {}).get("startup/warm") == 1 for e in ph["failures"]), ph["failures"]
        assert all(e["resumed_from"] is not None for e in ph["failures"])
    assert report.count("| warm |") == 4 and report.count("final parameters identical (crc)") == 2, report
    for ph in ("sync", "async"):  # the pools' own count: every rank of every attempt forked
        recs = [json.load(open(a.record)) for a in layout.Expt(d).phase(ph).attempts()]
        assert [r["warm_ranks"] for r in recs] == [0, 2, 2], recs  # the first starts cold beside the pool
    assert "warm restart: the standby pool serves" in open(layout.Expt(d).job_out).read()
    assert killer.find_tagged(job_tag(d), standby=True) == []


@pytest.mark.multirank
@pytest.mark.timeout(900)
def test_kill_anywhere_with_warm_restart_is_bit_exact(tmp_path):
    """`restartlab fuzz` with warm restart: kills at random points (inside saves too), every
    restart forked from the pool and bit-exact. A warm attempt reaches its first step in ~0.5 s:
    the random kills strike within 1.5 s of a launch (the scenario's 4 s would let the phase end
    first)."""
    d = tmp_path / "expt"
    r = subprocess.run([PY, "-m", "restartlab.cli", "fuzz", os.path.join(ROOT, "scenarios", "fuzz.yaml"),
                        "--phase", "sync", "--kills", "4", "--seed", "2", "--after-complete", "--window", "1.5s",
                        "--expt-dir", str(d),
                        "--plain", "--set", "relaunch.warm=true", "--set", "launch.ranks_per_node=2",
                        "--set", "trainer.train_iters=60"], capture_output=True, text=True, timeout=850, cwd=ROOT)
    fz = layout.Expt(d).fuzz_summary
    assert r.returncode == 0 and os.path.exists(fz), r.stdout[-3000:] + r.stderr[-3000:]
    data = json.load(open(fz))
    assert len(data["kills"]) >= 3 and data["verdict"]["survived"], data["verdict"]
    assert "final parameters identical (crc)" in data["verdict"]["baseline"]
    s = json.load(open(layout.Expt(d).summary))["phases"]
    started = [e for ph in s for e in ph["failures"] if e["startup"]]  # (a kill in start-up: no first step)
    assert len(started) >= 2 and all(e["startup"].get("startup/warm") == 1 for e in started), started


@pytest.mark.multirank
@pytest.mark.timeout(900)
def test_a_pool_that_cannot_start_falls_back_to_cold_and_says_so_once(tmp_path):
    from tests.helpers import job_tag
    d = tmp_path / "expt"
    r = _run(d, "trainer.train_iters=30", "failures.schedule.at_steps=[15]", "relaunch.warm_preload=no_such_module_xyz",
             "phases=[{name: sync, checkpoint: sync}]")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = open(layout.Expt(d).job_out).read()
    assert out.count("warm restart: the standby pool cannot serve") == 1 and "no_such_module_xyz" in out, out
    assert "warm launches" not in out
    ph = json.load(open(layout.Expt(d).summary))["phases"][0]
    assert ph["completed"] and ph["kills"] == 1 and (ph["failures"][0]["startup"] or {}).get("startup/warm") is None
    assert "| cold |" in open(layout.Expt(d).report).read()
    assert killer.find_tagged(job_tag(d), standby=True) == []


@pytest.mark.multirank
@pytest.mark.timeout(900)
def test_your_own_program_restarts_warm_through_rankenv(tmp_path):
    """A program from trainer.program restarts warm through rankenv.

    The program is `python train.py` under restartlab.runtime.rankenv. A tap reads it, and it has no
    start-up row of its own.
    - The pool takes `python` for its own interpreter: another name of the same binary in the same
      directory.
    - The pool sets the torchrun variables as rankenv would.
    - The report's start column comes from the pools' count in each attempt record."""
    d = tmp_path / "expt"
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", os.path.join(ROOT, "scenarios", "examples", "plain.yaml"),
                        "--expt-dir", str(d), "--plain", "--set", "relaunch.warm=true",
                        "--set", "collection.plots=false"], capture_output=True, text=True, timeout=850, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = open(layout.Expt(d).report).read()
    assert report.count("| warm |") == 2 and "loss identical to the baseline's" in report, report
    recs = [json.load(open(a.record)) for a in layout.Expt(d).phase("restart").attempts()]
    assert [x["warm_ranks"] for x in recs] == [0, 2, 2], recs
    assert "starting the program cold" not in open(layout.Expt(d).phase("restart").attempt(1).output).read()
