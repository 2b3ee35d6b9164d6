"""The rank killer and the injector with real processes.

Decoys, untagged twins, the injector's own tree and a launcher parent survive.
Gated kills fire within 0.5 s of the marker."""
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

from restartlab.contracts import ckptdir, layout
from restartlab.contracts.receipts import Receipt
from restartlab.runtime import fanout, inject, killer
from restartlab.tools import options as tool_options
from restartlab import launchers
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
    """Processes a test started. Each is killed with its whole tree at the end.

    Otherwise a nested launcher's rank would outlive the test, orphaned, for its 300 s sleep."""
    started = []
    yield started
    for p in started:
        try:
            tree = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        for c in tree:  # started by the test's own processes, by PID
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass
        if p.poll() is None:
            p.kill()
        p.wait()


def alive(p):
    return p.poll() is None


def test_only_tagged_ranks_and_their_children_die(procs):
    tag, other = f"t-{uuid.uuid4().hex[:6]}", f"o-{uuid.uuid4().hex[:6]}"
    # An untagged "launcher" starts a tagged rank as its own child. The tag is only in the
    # rank's environment, as mpiexec -genv does it. The rank has a child of its own (a writer).
    launcher = spawn([sys.executable, "-c", LAUNCHER, tag, sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER],
                     stdout=subprocess.PIPE, text=True)
    decoy = spawn(SLEEPER, tag=other)           # same command line, another job's tag
    twin = spawn(SLEEPER)                       # same command line, no tag
    procs += [launcher, decoy, twin]
    rank_pid = int(launcher.stdout.readline())
    wait_for(lambda: len(killer.targets(tag)) >= 2, 10, "rank + child visible")
    assert psutil.Process(rank_pid).ppid() == launcher.pid      # the launcher really is the parent
    dry = killer.kill_ranks(tag, dry_run=True)
    assert rank_pid in dry.pids and len(dry.pids) == 2 and launcher.pid not in dry.pids
    receipt = killer.kill_ranks(tag)
    assert set(receipt.pids) == set(dry.pids) and receipt.signal == "SIGKILL"
    for pid in receipt.pids:
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
    """Mark step complete; the time just before the marker appeared (nothing can see it earlier)."""
    d = ckptdir.step_path(ckpt, step)
    os.makedirs(d, exist_ok=True)
    t = time.time()
    ckptdir.mark_complete(d, ckptdir.Marker(step))
    return t


def test_gated_kill_after_complete_and_until(tmp_path, procs):
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
        log = layout.Phase(phase).injections
        # the receipt line is appended once the fan-out returns, just after the rank died
        wait_for(lambda: os.path.exists(log) and len(open(log).readlines()) == len(latencies) + 1, 30,
                 "the injection record")
        recs = [json.loads(l) for l in open(log)]
        latencies.append(recs[-1]["time"] - t_marker)
        assert recs[-1]["target_step"] == step and recs[-1]["killed"] == 1
        assert recs[-1]["newest_complete"] == step and recs[-1]["receipts"][0]["pids"] == [rank.pid]
    # The gate: each strike comes after its step's .complete. How soon after is measured elsewhere.
    # bench/injector_latency.py gives it as a ratio in `make bench`. tests/test_inject_schedule.py
    # gives it in fake seconds: within one poll. A wall-clock bound here failed under load (2026-12-05).
    assert min(latencies) >= 0, latencies
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
    assert tool_options.parse_at_steps("500,1000:hang,1500:preempt") == [(500, None), (1000, "hang"), (1500, "preempt")]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown failure kind 'boom'"):
        tool_options.parse_at_steps("5:boom")


@pytest.mark.multirank
def test_kill_tears_down_a_real_mpiexec_attempt(tmp_path):
    tag = f"t-{uuid.uuid4().hex[:6]}"
    p = subprocess.Popen([MPIEXEC, "-n", "2", "-genv", killer.TAG_VAR, tag, *SLEEPER])
    try:
        wait_for(lambda: len(killer.find_tagged(tag)) == 2, 30, "2 ranks")
        assert killer.TAG_VAR.encode() + b"=" + tag.encode() not in open(f"/proc/{p.pid}/environ", "rb").read()
        r = killer.kill_ranks(tag)
        assert len(r.pids) == 2
        assert p.wait(timeout=30) != 0  # Hydra tears the whole attempt down
    finally:
        if p.poll() is None:
            p.kill()
        killer.kill_ranks(tag)


def test_a_receipt_srun_relayed_before_its_timeout_is_kept(tmp_path, monkeypatch):
    """srun relays the killer's output. Here the killer printed its receipt, then the step did not end
    within the fan-out's timeout (a slow step teardown). The receipt is the node's answer: the ranks
    died. Mutation: the output after the kill dropped -> "no answer", and the death is booked as a
    crash nobody caused."""
    done = Receipt(host="n1", node="n1", signal="SIGKILL", pids=(11, 12), roots=(11,))
    srun = tmp_path / "srun"
    srun.write_text(f"#!/bin/sh\necho '{done.to_json()}'\nexec sleep 30\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    got = fanout.fan_out("slurm", ["n1"], [0], ["kill-ranks"], timeout=1.0)
    assert got == [done], got


@pytest.mark.multirank
def test_mpiexec_fanout_reaches_only_the_chosen_nodes():
    """--fanout mpiexec used to launch on every node whatever the target: now one launch over
    exactly the chosen hosts. Node 0 is a host that does not exist, so reaching it would fail."""
    me = socket.gethostname()
    argv = [sys.executable, "-c", "import json, socket; print(json.dumps({'host': socket.gethostname(), 'pids': []}))"]
    receipts = fanout.fan_out("mpiexec", ["no-such-host.invalid", me], [1], argv, launcher="hydra")
    assert [r.to_dict() for r in receipts] == [{"host": me}], receipts
    assert launchers.get("hydra").fanout_argv(["a", "b"], ["x"]) == ["mpiexec", "-n", "2", "-ppn", "1", "-hosts", "a,b", "x"]
    assert launchers.get("pals").fanout_argv(["a"], ["x"]) == ["mpiexec", "-n", "1", "--ppn", "1", "--hosts", "a", "x"]


# ---------------------------------------------------------------- no --tag: the batch job's ranks
# A rank of a plain program (not restartlab's trainer): writes its pid and rank variable, starts a
# child (a writer, say), sleeps. Started by the real Hydra mpiexec below.
PLAIN_RANK = ("import os,subprocess,sys,time; d=sys.argv[1]; "
              "c=subprocess.Popen([sys.executable,'-c','import time; time.sleep(300)']); "
              "open(os.path.join(d, f'rank{os.environ[\"PMI_RANK\"]}'),'w').write(f'{os.getpid()} {c.pid}'); "
              "time.sleep(300)")
# A launcher that is itself a task of a step (SLURM_PROCID + step id), like a Hydra proxy that srun
# started. It starts one rank with Hydra's variables below it: a rank with a rank below it.
NESTED = ("import os,subprocess,sys,time; "
          "env=dict(os.environ, PMI_RANK='7', PMI_SIZE='8', MPI_LOCALRANKID='0'); "
          "p=subprocess.Popen(sys.argv[1:], env=env); print(p.pid, flush=True); time.sleep(300)")


def test_no_tag_kills_this_jobs_ranks_only(procs, tmp_path):
    """Without --tag, kill-ranks takes every rank of the batch job it runs in (its PBS_JOBID).

    It takes them with their children, whatever program the ranks run. It never takes:
    - the launcher: mpiexec, its proxy, or a launcher that is itself a task
    - a job process without a rank variable
    - another job's rank"""
    job, other = f"{uuid.uuid4().hex[:6]}.pbs-server", f"{uuid.uuid4().hex[:6]}.pbs-server"
    base = {k: v for k, v in os.environ.items() if k not in (killer.TAG_VAR, "SLURM_JOB_ID", "SLURMD_NODENAME")}
    env = dict(base, PBS_JOBID=job)
    mpi = subprocess.Popen([MPIEXEC, "-n", "3", sys.executable, "-c", PLAIN_RANK, str(tmp_path)], env=env)
    script_child = subprocess.Popen(SLEEPER, env=env)                  # e.g. the job script's `sleep`
    nested = subprocess.Popen([sys.executable, "-c", NESTED, *SLEEPER], stdout=subprocess.PIPE, text=True,
                              env=dict(env, SLURM_PROCID="1", SLURM_STEP_ID="0", SLURM_NTASKS="2"))
    foreign = subprocess.Popen([sys.executable, "-c", NESTED, *SLEEPER], stdout=subprocess.PIPE, text=True,
                               env=dict(base, PBS_JOBID=other))          # another job's rank
    procs += [mpi, script_child, nested, foreign]
    nested_rank, foreign_rank = int(nested.stdout.readline()), int(foreign.stdout.readline())
    wait_for(lambda: len(list(tmp_path.iterdir())) == 3, 60, "3 ranks up")
    ranks = {int(f.read_text().split()[0]): int(f.read_text().split()[1]) for f in tmp_path.iterdir()}
    launcher_side = {p.pid for p in psutil.Process(mpi.pid).children(recursive=True)} - set(ranks) - set(ranks.values())
    assert launcher_side, "Hydra's proxy is not visible"

    def kill_ranks(*args):
        r = subprocess.run([sys.executable, "-m", "restartlab.cli", "kill-ranks", *args],
                           env=env, capture_output=True, text=True, timeout=60)
        return r.returncode, json.loads(r.stdout)
    rc, dry = kill_ranks("--dry-run")
    expect = set(ranks) | set(ranks.values()) | {nested_rank}
    assert rc == killer.EXIT_KILLED and set(dry["pids"]) == expect, (dry, ranks, nested_rank)
    assert dry["job"] == f"PBS_JOBID={job}"
    assert {dry["ranks"][str(p)] for p in ranks} == {"PMI_RANK=0", "PMI_RANK=1", "PMI_RANK=2"}
    assert dry["ranks"][str(nested_rank)] == "PMI_RANK=7" and str(nested.pid) not in dry["ranks"]
    assert not (set(dry["pids"]) & (launcher_side | {mpi.pid, script_child.pid, nested.pid, foreign_rank}))
    rc, one = kill_ranks("--one", "--dry-run")
    assert len(one["ranks"]) == 1 and len(one["pids"]) == 2  # one rank and its child
    rc, receipt = kill_ranks()
    assert rc == killer.EXIT_KILLED and set(receipt["pids"]) == expect
    for pid in expect:
        wait_for(lambda: killer.is_gone(pid), 10, f"pid {pid} dies")
    assert alive(script_child) and alive(nested) and alive(foreign)
    assert psutil.pid_exists(foreign_rank) and not killer.is_gone(foreign_rank)
    assert mpi.wait(timeout=30) != 0  # Hydra noticed its ranks die and ended (not killed by us)


def test_no_tag_takes_a_dead_ranks_orphaned_child_by_its_inherited_rank(tmp_path):
    """The interleaving behind a PBS run's receipt naming a rank's child as the rank.

    A host's killer scans while Hydra is ending that host's ranks, 0.1-0.2 s after another host's
    rank was killed. So a rank is gone, and its child, reparented, carries the job's id and the
    rank's variable with no rank above it. The test makes this on purpose: the rank exits, leaving
    its child. The killer takes the orphan, the rank's leftover that still holds what it held.
    It names the orphan by the rank variable it inherited."""
    job = f"{uuid.uuid4().hex[:6]}.pbs-server"
    base = {k: v for k, v in os.environ.items() if k not in (killer.TAG_VAR, "SLURM_JOB_ID", "SLURMD_NODENAME")}
    rank = subprocess.run([sys.executable, "-c", "import os, subprocess, sys; print(os.getpid(), subprocess.Popen("
                           "[sys.executable, '-c', 'import time; time.sleep(300)'], stdout=subprocess.DEVNULL, "
                           "stderr=subprocess.DEVNULL).pid)"],
                          env=dict(base, PBS_JOBID=job, PMI_RANK="5", PMI_SIZE="8"),
                          capture_output=True, text=True, timeout=60)
    dead, orphan = map(int, rank.stdout.split())   # its rank has exited: a reaper is its parent now
    try:
        assert killer.is_gone(dead) and psutil.Process(orphan).ppid() != dead
        r = subprocess.run([sys.executable, "-m", "restartlab.cli", "kill-ranks", "--dry-run"],
                           env=dict(base, PBS_JOBID=job), capture_output=True, text=True, timeout=60)
        receipt = json.loads(r.stdout)
        assert receipt["pids"] == [orphan] and receipt["ranks"] == {str(orphan): "PMI_RANK=5"}, receipt
    finally:
        try:
            psutil.Process(orphan).kill()   # started by this test (its rank's child), by PID
        except psutil.NoSuchProcess:
            pass


def test_no_tag_outside_a_job_is_a_usage_error():
    env = {k: v for k, v in os.environ.items() if k not in ("PBS_JOBID", "SLURM_JOB_ID")}
    for verb in (["kill-ranks"], ["inject", "--every", "10s"]):
        r = subprocess.run([sys.executable, "-m", "restartlab.cli", *verb], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "not inside a batch job" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_sigterm_during_a_strike_waits_for_its_record(tmp_path):
    """The job script stops the injector with SIGTERM when a phase ends.

    Here the SIGTERM arrives while a strike is under way: a real signal, sent from inside the strike.
    It must not lose the strike's record. Otherwise the collector would book that attempt's death as
    an uninjected crash."""
    def strike(kind, idx, sig):
        return 2, [Receipt(node="n1", signal="SIGKILL", pids=(11, 12), ranks={"11": "PMI_RANK=0"})]
    inj, recs = _term_inside(tmp_path, [], "strike", lambda real: strike)
    assert len(recs) == 1 and recs[0]["killed"] == 2 and inj.terminated == "SIGTERM"


def _term_inside(tmp_path, args, step, make):
    """Run an injector whose `step` (a method, replaced by make(the real one)) first sends this
    process the job script's TERM. Returns (the injector, its injection records)."""
    p = argparse.ArgumentParser()
    inject.add_args(p)
    inj = inject.Injector(p.parse_args(["--every", "1s", "--tag", "t", "--phase-dir", str(tmp_path),
                                        "--fanout", "local", *args]))
    inner = make(getattr(inj, step))

    def with_term(*a):
        os.kill(os.getpid(), signal.SIGTERM)  # the script's TERM, in the middle of it
        time.sleep(0.2)
        return inner(*a)
    setattr(inj, step, with_term)
    old = signal.signal(signal.SIGTERM, inj.on_terminate)
    try:
        with pytest.raises(SystemExit):
            inj.run()
    finally:
        signal.signal(signal.SIGTERM, old)
    return inj, [json.loads(x) for x in open(layout.Phase(str(tmp_path)).injections).read().splitlines()]


def test_sigterm_while_a_storage_strike_is_armed_waits_for_its_record(tmp_path):
    """The same for a storage strike: a TERM after the strike is armed (here while the record's
    facts are read) must not leave it armed without its record. The ranks' emergency save would
    take it, and the report would show a torn checkpoint nobody caused. Mutation: no `striking`
    around the arming -> the injector exits armed, with no record."""
    inj, recs = _term_inside(tmp_path, ["--kind", "stall_writes", "--duration", "5s"], "seen", lambda real: real)
    assert os.path.exists(layout.Phase(str(tmp_path)).iofault_ctl)  # armed
    assert len(recs) == 1 and recs[0]["kind"] == "stall_writes" and inj.terminated == "SIGTERM", recs


def test_no_tag_an_orphaned_rank_is_still_a_rank_named_by_its_launcher(procs):
    """A Hydra rank whose proxy (an srun task) died first, as when Hydra tears down a job.

    The rank is reparented, so srun's variable now looks new too. It is still taken. It is named as
    rank discovery would name it: Hydra's PMI_RANK, first in the registry's order."""
    job = f"{uuid.uuid4().hex[:6]}.pbs-server"
    env = {k: v for k, v in os.environ.items() if k not in (killer.TAG_VAR, "SLURM_JOB_ID", "SLURMD_NODENAME")}
    env["PBS_JOBID"] = job
    nested = subprocess.Popen([sys.executable, "-c", NESTED, *SLEEPER], stdout=subprocess.PIPE, text=True,
                              env=dict(env, SLURM_PROCID="1", SLURM_STEP_ID="0", SLURM_NTASKS="2"))
    procs.append(nested)
    rank = int(nested.stdout.readline())
    nested.kill()
    nested.wait()
    wait_for(lambda: psutil.Process(rank).ppid() != nested.pid, 10, "the rank is reparented")
    try:
        r = subprocess.run([sys.executable, "-m", "restartlab.cli", "kill-ranks"], env=env,
                           capture_output=True, text=True, timeout=60)
        receipt = json.loads(r.stdout)
        assert receipt["ranks"] == {str(rank): "PMI_RANK=7"}, receipt
        wait_for(lambda: killer.is_gone(rank), 10, "the orphan dies")
    finally:
        if not killer.is_gone(rank):
            os.kill(rank, signal.SIGKILL)


def test_a_rank_whose_recorder_dies_mid_strike_counts_as_one_tree(procs, monkeypatch):
    """A cold rank is its exit recorder and its program, both tagged; Hydra's teardown may end the
    recorder while a killer walks the tags. Made on purpose: the recorder is SIGKILLed right after
    its walk and its program reparented before the count. The strike counts one tree, as the walk
    saw it. Reading parents afresh after the walk (71a4996) counted two: the soak's run of the
    PBS three-host test found a host's receipt with two roots for its one rank."""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    rec = spawn([sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER], tag)
    procs.append(rec)
    wait_for(lambda: psutil.Process(rec.pid).children(), 20, "the program")
    [prog] = psutil.Process(rec.pid).children()
    real = killer._tree

    def walk_then_die(pid, others=None):
        out = real(pid, others)
        if pid == rec.pid:
            rec.kill()
            rec.wait()
            wait_for(lambda: prog.ppid() != rec.pid, 20, "the program reparented")
        return out
    monkeypatch.setattr(killer, "_tree", walk_then_die)
    trees = []
    try:
        found = killer.targets(tag, trees=trees)
        assert set(found) == {rec.pid, prog.pid} and trees == [rec.pid], (found, trees)
    finally:
        prog.kill()


def test_a_recorder_that_ended_since_the_scan_is_not_a_tree(procs, monkeypatch):
    """The soak's PBS failure, seen whole: a host's receipt held the rank's exit recorder (found
    alive by the scan, a zombie with no cmdline by its walk: Hydra's teardown) and its program,
    reparented: two trees for one rank. Made on purpose: the scan's list is the recorder and its
    program, the recorder already ended (a zombie, not reaped). One tree, the program."""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    rec = spawn([sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER], tag)
    procs.append(rec)
    wait_for(lambda: psutil.Process(rec.pid).children(), 20, "the program")
    [prog] = psutil.Process(rec.pid).children()
    os.kill(rec.pid, signal.SIGKILL)  # not reaped: a zombie until the fixture's wait
    wait_for(lambda: psutil.Process(rec.pid).status() == psutil.STATUS_ZOMBIE, 20, "the zombie")
    monkeypatch.setattr(killer, "find_tagged", lambda *a, **k: [rec.pid, prog.pid])
    trees = []
    try:
        found = killer.targets(tag, trees=trees)
        assert set(found) == {prog.pid} and trees == [prog.pid], (found, trees)
    finally:
        prog.kill()


@pytest.mark.parametrize("program_ending", [False, True], ids=["program-alive", "program-ending-too"])
def test_a_recorder_ending_when_walked_is_not_a_tree(procs, monkeypatch, program_ending):
    """A recorder that is ending when the killer walks it is no tree.

    Seen in the fresh-clone CI run at 409efc3 (PBS three-host test). A host's receipt held its rank's
    exit recorder and its program as two roots, both with no command line. Hydra's teardown had
    reached them while the killer walked. A process that is ending has released its memory, so the
    kernel shows no command line. It has also handed its children to another parent before it turns
    zombie. So the walk of the recorder saw no child, and the program counted as a second tree.
    A test cannot hold that window open on a real process. So the walk is shown it on purpose, as the
    kernel shows it: no command line, no children. The recorder ending is no tree. The program alive
    is one tree. The program ending is none."""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    rec = spawn([sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER], tag)
    procs.append(rec)
    wait_for(lambda: psutil.Process(rec.pid).children(), 20, "the program")
    [prog] = psutil.Process(rec.pid).children()
    ending = {rec.pid} | ({prog.pid} if program_ending else set())
    cmdline, children = psutil.Process.cmdline, psutil.Process.children
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: [] if self.pid in ending else cmdline(self))
    monkeypatch.setattr(psutil.Process, "children",
                        lambda self, recursive=False: [] if self.pid == rec.pid else children(self, recursive))
    monkeypatch.setattr(killer, "find_tagged", lambda *a, **k: [rec.pid, prog.pid])
    trees = []
    try:
        found = killer.targets(tag, trees=trees)
        want = set() if program_ending else {prog.pid}
        assert set(found) == want and trees == sorted(want), (found, trees)
    finally:
        prog.kill()


def test_a_recorder_that_ends_between_its_check_and_its_children_is_not_a_tree(procs, monkeypatch):
    """A recorder that ends between its check and the read of its children is no tree.

    Seen in the baseline run of session 16 (PBS three-host test, under CPU accounting). A host's
    receipt held its rank's exit recorder and its program as two roots. Both had ended by the time
    their command lines were read. The recorder passed its walk's check (alive, a command line).
    Then it ended before its children were read. The kernel had handed its program to another parent,
    so the walk found nothing below it. The program was then walked as its own tree. The test makes
    this on purpose, on real processes. The recorder is SIGKILLed inside the read of its children.
    That read waits until the program is reparented. The recorder, ended with nothing found below it,
    is no tree. The program is one."""
    tag = f"t-{uuid.uuid4().hex[:8]}"
    rec = spawn([sys.executable, "-c", RANK_WITH_CHILD, *SLEEPER], tag)
    procs.append(rec)
    wait_for(lambda: psutil.Process(rec.pid).children(), 20, "the program")
    [prog] = psutil.Process(rec.pid).children()
    children = psutil.Process.children

    def die_then_read(self, recursive=False):
        if self.pid == rec.pid:
            os.kill(rec.pid, signal.SIGKILL)  # not reaped: a zombie until the fixture's wait
            wait_for(lambda: prog.ppid() != rec.pid, 20, "the program reparented")
        return children(self, recursive)
    monkeypatch.setattr(psutil.Process, "children", die_then_read)
    monkeypatch.setattr(killer, "find_tagged", lambda *a, **k: [rec.pid, prog.pid])
    trees = []
    try:
        found = killer.targets(tag, trees=trees)
        assert prog.pid in found and trees == [prog.pid], (found, trees)
    finally:
        prog.kill()
