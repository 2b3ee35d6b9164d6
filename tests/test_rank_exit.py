"""Each rank's own end (contracts.rank_exit, runtime/rankexit.py, the warm stub).

The launcher reports one status for a launch. The verdict names the rank that ended badly first.

Measured here with the mpich wheel's Hydra: rank 1 calls os.abort() while rank 0 sleeps. Hydra
SIGKILLs rank 0's process group and exits 15 ("Terminated (signal 15)"). So a verdict read from the
launcher says SIGTERM for an abort. This is the ezpz CI failure #49 names."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from restartlab.contracts import layout, rank_exit
from restartlab.contracts.envvars import TAG_VAR
from tests.helpers import cleanup_tag, job_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAIN = os.path.join(ROOT, "scenarios", "examples", "plain.yaml")

# Rank 0 logs a step every 0.05 s and waits for ever after step 3, as in a collective. Rank 1
# aborts once rank 0 has logged step 3. A file in the attempt directory, their working directory,
# says so, because the ranks start apart under load.
CRASHING = """import os, sys, time
rank = int(os.environ.get("RANK", "0"))
for n in range(1, 41):
    time.sleep(0.05)
    if rank == 0:
        print(f"step {n} loss {1.0 / n:.6f}", flush=True)
    if n == 3:
        if rank == 0:
            open("logged-3", "w").close()
        else:
            while not os.path.exists("logged-3"):
                time.sleep(0.05)
            END
        time.sleep(600)
"""
ABORTING = CRASHING.replace("END", "os.abort()")
EXITING = CRASHING.replace("END", "sys.exit(3)")  # rank 0 is left waiting: Hydra ends ranks only on a signal


def _tagged(tag):
    return [p.pid for p in psutil.process_iter() if _env(p).get(TAG_VAR) == tag]


def _env(p):
    try:
        return p.environ()
    except psutil.Error:
        return {}


def test_record_round_trip_and_the_first_failure(tmp_path):
    """A record is written whole (a torn neighbour is skipped), and the first failure is the
    earliest bad end, not the earliest end."""
    att = layout.Attempt(str(tmp_path / "1"))
    ok = rank_exit.RankExit("0", "n0", 10, 0, None, 5.0)
    term = rank_exit.RankExit("2", "n1", 12, None, signal.SIGTERM, 7.0)
    abort = rank_exit.RankExit.from_status("1", "n0", 11, signal.SIGABRT, when=6.0)
    for r in (ok, term, abort):
        r.write(att.rank_exit(r.rank))
    with open(att.rank_exit("3"), "w") as f:
        f.write('{"rank": "3", "no')
    got = rank_exit.read_all(att.rank_exits())
    assert got == [ok, abort, term]
    assert rank_exit.first_failure(got) == abort and abort.how() == "SIGABRT (signal 6)"
    assert rank_exit.RankExit.from_status("0", "n", 1, 3 << 8).how() == "exit 3"
    assert not [n for n in os.listdir(att.exits_dir) if n.endswith(".tmp")]


def _recorded(argv, att_dir, tag, **kw):
    env = dict(os.environ, **{TAG_VAR: tag})
    return subprocess.Popen([sys.executable, "-m", "restartlab.runtime.rankexit", "--dir", att_dir, "--", *argv],
                            env=env, **kw)


@pytest.mark.multirank
def test_under_hydra_the_abort_is_recorded_where_the_launcher_says_sigterm(tmp_path):
    """Two ranks through the recorder under the mpich wheel's mpiexec.

    - Rank 1's SIGABRT is in its record.
    - Rank 0, SIGKILLed with its process group by Hydra, leaves none.
    - The launcher's status is not the abort's.
    - Nothing tagged is left."""
    prog = tmp_path / "crash.py"
    prog.write_text(ABORTING)
    tag = f"rl-rankexit-{os.getpid()}"
    att = tmp_path / "att"
    env = dict(os.environ, **{TAG_VAR: tag})
    r = subprocess.run(["mpiexec", "-n", "2", "-genv", TAG_VAR, tag, sys.executable, "-m", "restartlab.runtime.rankexit",
                        "--dir", str(att), "--", sys.executable, "-m", "restartlab.runtime.rankenv", "--",
                        sys.executable, str(prog)], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    try:
        assert r.returncode not in (0, 128 + signal.SIGABRT, signal.SIGABRT), r.returncode  # Hydra's own
        [e] = rank_exit.read_all(layout.Attempt(str(att)).rank_exits())
        assert (e.rank, e.signal, e.exit_code) == ("1", signal.SIGABRT, None), e
        deadline = time.time() + 10
        while _tagged(tag) and time.time() < deadline:
            time.sleep(0.1)
        assert not _tagged(tag)
    finally:
        cleanup_tag(tag)


@pytest.mark.multirank
def test_the_recorder_outlives_no_signal_of_the_programs_and_its_death_takes_the_program(tmp_path):
    """The recorder outlives no signal of the program's, and its death takes the program.

    The recorder waits through a SIGTERM meant for the program. The program got its own (here none,
    so it runs on). The recorder records the program's own end and dies by the same signal. When the
    recorder itself is SIGKILLed, its program dies with it (PR_SET_PDEATHSIG). Nothing outlives a
    rank."""
    tag = f"rl-rankexit-sig-{os.getpid()}"
    att = str(tmp_path / "att")
    try:
        p = _recorded([sys.executable, "-c", "import time; time.sleep(60)"], att, tag)
        deadline = time.time() + 20
        while not psutil.Process(p.pid).children() and time.time() < deadline:
            time.sleep(0.05)
        [child] = psutil.Process(p.pid).children()
        p.send_signal(signal.SIGTERM)  # the recorder alone
        time.sleep(0.5)
        assert p.poll() is None and child.is_running()
        child.send_signal(signal.SIGTERM)
        assert p.wait(20) == -signal.SIGTERM
        [e] = rank_exit.read_all(layout.Attempt(att).rank_exits())
        assert e.signal == signal.SIGTERM and e.pid == child.pid and e.rank.startswith("pid-")

        p = _recorded([sys.executable, "-c", "import time; time.sleep(60)"], att, tag)
        deadline = time.time() + 20
        while not psutil.Process(p.pid).children() and time.time() < deadline:
            time.sleep(0.05)
        [child] = psutil.Process(p.pid).children()
        p.kill()
        p.wait(20)
        child.wait(20)  # gone: its parent's death killed it
        assert not _tagged(tag)
        p = _recorded(["/nonexistent/program"], att, tag, stderr=subprocess.PIPE, text=True)
        assert p.wait(20) == 127 and "cannot run '/nonexistent/program'" in p.stderr.read()
    finally:
        cleanup_tag(tag)


def _crash_run(tmp_path, *more, program=ABORTING):
    prog = tmp_path / "crash.py"
    prog.write_text(program)
    d = str(tmp_path / "expt")
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", PLAIN, "--expt-dir", d, "--plain",
                        "--set", f"trainer.program.command=[python, {prog}]",
                        "--set", "phases=[{name: crash, checkpoint: none, failures: none}]",
                        "--set", "relaunch.max_attempts=2", "--set", "relaunch.hang_timeout=60s", *more],
                       capture_output=True, text=True, timeout=400, cwd=ROOT)
    try:
        with open(layout.Expt(d).summary) as f:
            [ph] = json.load(f)["phases"]
    finally:
        if os.path.exists(layout.Expt(d).job_script):
            cleanup_tag(job_tag(d))
    return r, ph["survival"], layout.Expt(d).phase("crash")


@pytest.mark.multirank
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_the_verdict_names_the_rank_that_aborted_not_the_launchers_sigterm(tmp_path, warm):
    """Through `restartlab run`: both attempts crash at step 3 with rank 1's abort. Each attempt's
    verdict names SIGABRT in rank 1 and the launcher's different word for it; the second attempt
    of the warm phase was forked by the pool, and its stub recorded the end. Mutation: launch
    without the recorder (standby.cold_argv ignoring attempt_dir) and the cold verdict says
    SIGTERM."""
    r, v, phase = _crash_run(tmp_path, *(["--set", "phases.0.warm=true"] if warm else []))
    assert r.returncode != 0
    assert [x["outcome"] for x in v["restarts"]] == ["crash", "crash"], v
    for x in v["restarts"]:
        assert "crashed at step 3, SIGABRT (signal 6) in rank 1 on " in x["text"], x["text"]
        assert "the first rank to end (the launcher reported SIGTERM (signal 15))" in x["text"], x["text"]
    with open(phase.attempt(2).record) as f:
        rec = json.load(f)
    assert rec["rank_exit"]["rank"] == "1" and rec["signal"] == signal.SIGTERM
    if warm:
        assert rec["warm_ranks"] == 2, rec


@pytest.mark.multirank
def test_a_rank_that_exits_non_zero_does_not_leave_its_peer_waiting_for_the_watchdog(tmp_path):
    """Rank 1 exits 3 at step 3 while rank 0 waits as in a collective.

    Hydra leaves rank 0 running: it ends the others only when a rank dies by a signal. So before
    relaunch.rank_exit_grace the attempt lasted until a watchdog. The start-up one is 20 minutes by
    default. The #49 CI hang of 520 s and the rendezvous one of 936 s were such attempts. With a 3 s
    grace each attempt ends seconds after rank 1's exit. Its verdict is a crash naming rank 1's exit
    3, not a hang. Nothing of it is left. Mutation: relaunch.rank_exit_grace=0 -> each attempt runs
    into the 60 s hang watchdog, its verdict "hung"."""
    r, v, phase = _crash_run(tmp_path, "--set", "relaunch.rank_exit_grace=3s", program=EXITING)
    assert r.returncode != 0
    assert [x["outcome"] for x in v["restarts"]] == ["crash", "crash"], v
    for k, x in enumerate(v["restarts"], 1):
        assert "crashed at step 3, exit 3 in rank 1 on " in x["text"], x["text"]
        with open(phase.attempt(k).record) as f:
            rec = json.load(f)
        assert not rec["hang"] and rec["end_ts"] - rec["launch_ts"] < 45, rec  # the watchdog's 60 s not reached
        assert os.path.exists(phase.attempt(k).hang_procs)  # who was left waiting, as the loop found them
    with open(layout.Expt(os.path.dirname(phase.path)).job_out) as f:
        out = f.read()
    assert "rank 1 on " in out and "ended (exit 3) and the others still run 3s later: stopping the attempt" in out, out[-3000:]
