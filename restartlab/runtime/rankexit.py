"""python -m restartlab.runtime.rankexit --dir ATTEMPT_DIR -- PROGRAM [ARGS]: run one rank's
PROGRAM as this process's child, and record how it ended.

When PROGRAM ends, this writes how (its exit status, or the signal that ended it) to
ATTEMPT_DIR/exits/<rank>.json (contracts.rank_exit). Then it ends the same way, so the launcher sees
what it would have seen. The supervisor starts every cold rank through it. A launcher reports one
status for the whole launch (Hydra: whichever rank it saw end first, or its own SIGTERM). From these
records, the verdict names the rank that crashed first, and how.

Signals: it forwards none and is ended by none it can catch. Every sender restartlab knows signals
the rank's whole process group or tree, so the program gets its own copy:
- Hydra's cleanup kills each rank's process group. Measured: the mpich wheel's Hydra SIGKILLs a
  forked child of a rank with it.
- restartlab's killer and teardown signal each rank's process tree.
- Slurm's step signals reach every process of the step.

A launcher that signals the direct child only (PALS: not verified) reaches the program when it
escalates to SIGKILL. The child dies with its parent (PR_SET_PDEATHSIG), and nothing outlives the
rank.

A program that is itself a launcher (torchrun in trainer.program.command) starts its workers in
sessions of their own. When it is killed, it leaves them training and holding the launcher's output
open. Hydra then waits for them. Measured: torchrun 2.13's workers trained on to the last step. The
recorder is their subreaper (PR_SET_CHILD_SUBREAPER). When the program ends, whatever it left
running is adopted here and killed, so the rank ends with its program.

This module uses the standard library and contracts only: it starts before every rank and must
start fast."""
import os
import resource
import signal
import sys
import time
from typing import List, Mapping, Optional, cast

from ..contracts import layout
from ..contracts.envvars import node_name
from ..contracts.rank_exit import RankExit

# The catchable signals whose default is to end a process. The recorder waits through them, because
# the program got its own copy. The faults (SEGV, ABRT, ...) are raised by a process on itself.
SHIELDED = tuple(s for s in (getattr(signal, n, None) for n in (
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE", "SIGVTALRM",
    "SIGPROF", "SIGXCPU", "SIGXFSZ", "SIGIO", "SIGPWR", "SIGSTKFLT")) if s is not None)


ORPHAN_GRACE_S = 2.0  # a program that exited cleanly: what it left running may finish (a flush) first


def die_with_parent() -> None:
    """This process gets SIGKILL when its parent ends (Linux prctl PR_SET_PDEATHSIG); a no-op where
    it does not exist."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def rank_name(env: Mapping[str, str] = os.environ) -> str:
    """The launcher's rank number, or pid-<pid> where no launcher (or a malformed one) names it."""
    from .. import launchers
    try:
        found = launchers.discover(env)
    except ValueError:
        found = None
    return str(found[0]) if found else f"pid-{os.getpid()}"


def end_as(status: int) -> int:
    """End this process as the child ended: its signal (no core file of ours) or its exit code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        return 128 + sig  # a signal that does not end a process (never one waitpid reports)
    return os.WEXITSTATUS(status)


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it, not to init (Linux prctl
    PR_SET_CHILD_SUBREAPER); False where it does not exist."""
    try:
        import ctypes
        return cast(bool, ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children(me: int) -> List[int]:
    """The pids whose parent is `me` (from /proc: standard library only)."""
    out: List[int] = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    stat = f.read()
                if int(stat[stat.rindex(b")") + 2:].split()[1]) == me:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def sweep_orphans(me: int, grace: float = 0.0, rounds: int = 50) -> int:
    """Kill every process the program left behind, once it ended, and return the number killed.

    This subreaper adopts them. A launcher's workers in sessions of their own, as torchrun starts
    them, go on training when their launcher is killed. Each gets SIGKILL, after `grace` seconds to
    end by itself. Each one's own children get it in turn as they are adopted. All are reaped."""
    end = time.monotonic() + grace
    while grace and time.monotonic() < end and _children(me):
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        time.sleep(0.05)
    killed = set()
    for _ in range(rounds):
        left = [p for p in _children(me) if p not in killed]
        while True:  # reap what has ended (the killed, and any that ended by themselves)
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                done = 0
            if not done:
                break
        if not left:
            if not _children(me):
                break
            time.sleep(0.02)  # killed ones not yet reaped, or their children not yet re-parented
            continue
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except ProcessLookupError:
                pass
    return len(killed)


def run(argv: List[str], attempt_dir: str) -> int:
    parent = os.getpid()
    for s in SHIELDED:
        signal.signal(s, lambda *_: None)
    reaper = become_subreaper()
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent()
            if os.getppid() != parent:  # the recorder died between the fork and the prctl
                os._exit(137)
            for s in SHIELDED:  # SIGPIPE too, which Python ignores: as subprocess gives it a program
                signal.signal(s, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"restartlab rank: error: cannot run {argv[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    record(attempt_dir, pid, status)
    if reaper:  # nothing of the rank outlives its program (a clean exit's helpers get ORPHAN_GRACE_S to end)
        n = sweep_orphans(parent, 0.0 if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) else ORPHAN_GRACE_S)
        if n:
            print(f"restartlab rank: the program (pid {pid}) ended and left {n} process(es) running (its launcher's "
                  "workers, or their helpers): killed", file=sys.stderr, flush=True)
    return end_as(status)


def record(attempt_dir: str, pid: int, status: int, who: str = "restartlab rank") -> None:
    """Write this rank's end into the attempt's exits/: the program `pid` ended with waitpid `status`.

    A record that cannot be written is said on stderr, never fatal. The rank still ends as it did."""
    rec = RankExit.from_status(rank_name(), node_name(), pid, status)
    try:
        rec.write(layout.Attempt(attempt_dir).rank_exit(rec.rank))
    except OSError as e:
        print(f"{who}: cannot record rank {rec.rank}'s end ({rec.how()}): {e}", file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["--dir"] or len(argv) < 3:
        print("restartlab.runtime.rankexit: usage: python -m restartlab.runtime.rankexit --dir ATTEMPT_DIR "
              "-- PROGRAM [ARGS]", file=sys.stderr)
        return 2
    where, rest = argv[1], argv[2:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        print("restartlab.runtime.rankexit: error: no program given", file=sys.stderr)
        return 2
    return run(rest, where)


if __name__ == "__main__":
    sys.exit(main())
