"""Shared test helpers: real mpiexec runs of the trainer, metrics reading, process cleanup."""
import argparse
import builtins
import collections
import fcntl
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager

from restartlab.runtime import killer
from restartlab.runtime.warm import standby, wire
from restartlab import launchers
from restartlab.contracts import layout
from restartlab.runtime.attempt_stop import STACKS_WAIT_S
from restartlab.contracts.signals import parse_signal
from restartlab.contracts.trainer_options import STACKS_SIGNAL, WARM_PRELOAD
from restartlab.tools.launch import LaunchSpec

MPIEXEC = shutil.which("mpiexec")


# ---------------------------------------------------------------- warm ranks for the tests
# A trainer rank started cold spends ~2.5 of its ~3 CPU-s importing torch (tests/cpu_account).
# Some tests' subject is not the cold start (resume, integrity, async saves, preemption).
# They run the trainer warm instead, from one standby pool per test process.
# The pool is restartlab.runtime.warm, the product's own warm restart.
# The launcher starts a stub per rank, and the pool forks the rank from its imports.
# A warm rank has its attempt's environment in os.environ, its stub's fds and the stub's tag.
# Killing the stub (by the run's tag) kills the rank: the pool does it on the stub's hang-up.
# These stay cold:
# - the rendezvous through mpi4py. The rank needs the launcher's PMI fd, which a fork from the pool
#   does not have.
# - the stopped-peer and wandb tests. They look for the ranks by the run's tag, which a forked
#   rank's /proc environment does not hold.
# - every experiment through the supervisor. relaunch.warm decides there.
# - `make fuzz-trainer` and the product's fuzzer.
_POOL = {}  # this process's pool, by pid (an xdist worker is its own process; a fork is not)
POOL_READY_S = 180
COLD_FALLBACK = "standby pool not usable"  # what a stub prints when it starts its program cold


def trainer_pool() -> standby.Standby:
    """This test process's standby pool of the bundled trainer, started on first use.

    It ends with the session (conftest.stop_trainer_pool) or with this process (the pool's PDEATHSIG)."""
    pool = _POOL.get(os.getpid())
    if pool is not None and not pool.alive():  # it died (its log says why): a new one
        stop_trainer_pool()
        pool = None
    if pool is None:
        tag = f"rl-testpool-{uuid.uuid4().hex[:8]}"
        log = os.path.join(tempfile.mkdtemp(prefix="restartlab-testpool-"), "pool.log")  # 0700
        pool = standby.Standby(sys.executable, tag, log, WARM_PRELOAD)
        try:
            pool.wait_ready(POOL_READY_S)
        except wire.PoolError:
            pool.stop()
            raise
        _POOL[os.getpid()] = pool
    return pool


def stop_trainer_pool():
    pool = _POOL.pop(os.getpid(), None)
    if pool is not None:
        pool.stop()
        shutil.rmtree(os.path.dirname(pool.log_path), ignore_errors=True)


def trainer_cmd(n, args, tag=None, env=None, rendezvous=True, warm_ranks=False):
    """mpiexec argv for n ranks of the trainer. rendezvous=False leaves MASTER_ADDR/PORT unset,
    so the ranks agree on them through mpi4py (the trainer's fallback). warm_ranks: each rank
    through a stub, forked by this process's pool (trainer_pool)."""
    rank_env = launchers.local_rendezvous_env() if rendezvous else {}
    rank_env.update({k: str(v) for k, v in (env or {}).items()})
    if tag:
        rank_env[killer.TAG_VAR] = tag
    spec = LaunchSpec(python=sys.executable, program=(sys.executable, "-m", "restartlab.trainer", *args),
                      launcher="hydra", ranks_per_node=n, env=rank_env, mpiexec=MPIEXEC)
    if warm_ranks:
        if not rendezvous:
            raise ValueError("warm ranks rendezvous through MASTER_ADDR/PORT (no PMI fd in a fork)")
        return spec.stub_argv(trainer_pool().dir)
    return spec.argv()


def check_warm(out, warm_ranks):
    """Fail the test of a run meant to be warm that started cold (the pool refused it).

    Such a run would pass, only slower, and nobody would see why the suite got slow."""
    if warm_ranks and COLD_FALLBACK in out:
        raise AssertionError(f"a warm run started cold:\n{out[-3000:]}")


def run_trainer(n, args, env=None, timeout=240, tag=None, rendezvous=True, warm_ranks=None):
    """Run one attempt to its end; returns CompletedProcess (stdout+stderr merged). Past
    `timeout`, fails with the ranks' stacks (stacks_then_kill). Warm (trainer_pool) unless told
    otherwise or rendezvous=False."""
    tag = tag or f"test-{uuid.uuid4().hex[:8]}"
    warm_ranks = rendezvous if warm_ranks is None else warm_ranks
    proc = subprocess.Popen(trainer_cmd(n, args, tag, env, rendezvous, warm_ranks), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        check_warm(out, warm_ranks)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the trainer ran past {timeout}s: " + stacks_then_kill(proc, tag)) from None
    finally:
        cleanup_tag(tag)


def stacks_then_kill(proc, tag):
    """Kill a test's hung trainer run, and return the end of what it printed, stacks included.

    Before they and mpiexec are killed, its tagged ranks write their Python stacks. The trainer's
    faulthandler does it, on trainer_options.STACKS_SIGNAL."""
    killer.kill_ranks(tag, parse_signal(STACKS_SIGNAL))
    time.sleep(STACKS_WAIT_S)
    killer.kill_ranks(tag, signal.SIGKILL)
    proc.kill()
    out, _ = proc.communicate(timeout=60)
    return f"its output and stacks:\n{out[-8000:]}"


def shared_run(tmp_path_factory, key, make):
    """A directory that `make(path)` fills once per test session, whichever xdist worker asks
    first (the others wait on its lock, then read it): for uninterrupted reference runs that
    several tests compare against and none changes. make fails -> every caller fails."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, above popen-gw0, popen-gw1
    root = base / "shared-runs"
    root.mkdir(exist_ok=True)
    d, done = root / key, root / f"{key}.done"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(d, ignore_errors=True)
            make(str(d))
            done.touch()
    return str(d)


def shared_trainer_run(tmp_path_factory, key, n, argv_for, warm_ranks=True):
    """shared_run of one uninterrupted n-rank trainer run, argv_for(its dir) its arguments: the
    reference several tests compare their interrupted runs against."""
    def make(d):
        r = run_trainer(n, argv_for(d), warm_ranks=warm_ranks)
        assert r.returncode == 0, r.stdout[-3000:]
    return shared_run(tmp_path_factory, key, make)


def run_story(expt_dir, r=None):
    """What a failed assertion on a `restartlab run` shows.

    It is the end of the run's stdout and stderr. It adds the end of the output of every attempt
    the watchdog stopped: its ranks' stacks are there."""
    parts = [r.stdout[-3000:] + r.stderr[-3000:]] if r is not None else []
    for phase in layout.Expt(expt_dir).phases():
        for att in phase.attempts():
            if os.path.exists(att.hang) and os.path.exists(att.output):
                with open(att.output, errors="replace") as f:
                    parts.append(f"--- hung {att.path}:\n{f.read()[-6000:]}")
    return "\n".join(parts)


def job_tag(expt_dir):
    """The job tag baked into an experiment's job script (the ranks' RESTARTLAB_JOB_TAG)."""
    with open(layout.Expt(expt_dir).job_script) as f:
        return re.search(killer.TAG_VAR + r"[ =](rl-[\w.-]+)", f.read()).group(1)


def cleanup_tag(tag):
    """Leave nothing running: kill whatever still carries this test's tag."""
    killer.kill_ranks(tag)


def kill_and_reap(pids, timeout=30.0):
    """SIGKILL these PIDs and wait until each is gone (a killed process is still in /proc, its
    environment readable, until the kernel has torn it down: under load, a while). Returns the
    description (`describe`) of any still there after `timeout`."""
    import psutil
    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            p.kill()
            procs.append(p)
        except psutil.Error:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=timeout)
    return [d for d in describe([p.pid for p in alive]) if d.get("status") != psutil.STATUS_ZOMBIE]  # dead, unreaped


def describe(pids):
    """What a reader of a failed assertion needs about each process: pid, state, parent, node (its
    SLURMD_NODENAME), age and command line."""
    import psutil
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                env = p.environ() if p.status() != psutil.STATUS_ZOMBIE else {}
                out.append({"pid": pid, "status": p.status(), "ppid": p.ppid(), "node": env.get("SLURMD_NODENAME"),
                            "age_s": round(time.time() - p.create_time(), 1), "cmdline": p.cmdline()[:6]})
        except psutil.Error as e:
            out.append({"pid": pid, "gone": type(e).__name__})
    return out


def raw_rows(path):
    """Whole rows ({timestamp, rank, metrics}); unparsable lines are skipped."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
                r["metrics"]
            except (ValueError, KeyError, TypeError):
                continue
            out.append(r)
    return out


def rows(path):
    return [r["metrics"] for r in raw_rows(path)]


def losses(path):
    """[(iter, loss)] in file order (recomputed steps appear again)."""
    return [(r["train/iter"], r["train/loss"]) for r in rows(path) if "train/loss" in r]


def final_crc(path):
    crcs = [r["train/params_crc"] for r in rows(path) if "train/params_crc" in r]
    return crcs[-1] if crcs else None


def wait_for(pred, timeout, what, interval=0.05):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return time.time() - t0
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


FREEZE_S = 120  # how long the ranks wait right after the step a kill is aimed at (the kill comes first)


def start_and_kill_at(n, args, metrics_path, step, timeout=240, env=None, warm_ranks=True, before_kill=0.0):
    """Start an attempt and SIGKILL its tagged ranks once rank 0 logged `step`. Returns the receipt.

    With warm ranks the kill goes to their stubs. A stub's hang-up makes the pool SIGKILL its rank
    at once. The ranks wait right after `step` until the kill: before its save, and before the next
    step (the trainer's delay points). So the kill lands there however slowly the test gets to it.
    A tiny model trains several steps, and completes a save, in the time a loaded machine takes to
    notice the step and find the ranks. In a soak at e184ded, a kill aimed after step 6 found step 8
    complete. `before_kill` is the seconds the test waits before it kills. tests/test_data.py makes
    a slow kill happen with it."""
    tag = f"test-{uuid.uuid4().hex[:8]}"
    freeze = f"save:{step}:*:{FREEZE_S},step:{step + 1}:*:{FREEZE_S}"
    env = dict(env or {})
    env["RESTARTLAB_DELAY"] = ",".join(filter(None, [env.get("RESTARTLAB_DELAY"), freeze]))
    proc = subprocess.Popen(trainer_cmd(n, args, tag, env, warm_ranks=warm_ranks), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        try:
            wait_for(lambda: any(r.get("train/iter", 0) >= step for r in rows(metrics_path)) or
                     proc.poll() is not None, timeout, f"step {step} in {metrics_path}", 0.01)
        except AssertionError as e:
            raise AssertionError(f"{e}: " + stacks_then_kill(proc, tag)) from None
        time.sleep(before_kill)
        receipt = killer.kill_ranks(tag, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        check_warm(out, warm_ranks)
        return receipt, proc.returncode, out
    finally:
        if proc.poll() is None:
            proc.kill()
        cleanup_tag(tag)


# ---------------------------------------------------------------- the report's reads (issue 35)
@contextmanager
def counted_opens():
    """{path: times opened for reading} of every open() in this process while inside."""
    seen = collections.Counter()
    real_open, real_io_open = builtins.open, io.open

    def counting(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and not any(c in mode for c in "wax+"):
            seen[os.path.realpath(file)] += 1
        return real_open(file, mode, *args, **kwargs)
    builtins.open = io.open = counting
    try:
        yield seen
    finally:
        builtins.open, io.open = real_open, real_io_open


def report_args(expt, *more):
    """`restartlab report EXPT --no-plots ...` as the CLI parses it."""
    from restartlab.analysis import report
    p = argparse.ArgumentParser()
    report.add_args(p)
    return p.parse_args([str(expt), "--no-plots", *more])


def assert_each_file_read_once(expt, opens, must):
    """Every file of the experiment opened at most once, and each of `must` (the inputs the report cannot do without)
    exactly once."""
    root = os.path.realpath(expt) + os.sep
    twice = {p: n for p, n in opens.items() if n > 1 and p.startswith(root)}
    assert not twice, f"read more than once by one report: {twice}"
    for p in must:
        assert opens.get(os.path.realpath(p)) == 1, (p, sorted(opens))
