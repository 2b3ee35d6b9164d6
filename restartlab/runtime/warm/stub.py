"""The stub (`python -m restartlab.runtime.warm stub --dir D -- PROGRAM...`).

The launcher starts the stub in a rank's place. The stub:
- hands its argv, environment, working directory and standard fds to the node's pool.
- stands in for the rank the pool forks: it forwards signals and mirrors the rank's exit status.
- starts the program cold itself (through the exit recorder) when no pool can take it.

It records the rank's end (contracts.rank_exit) as the exit recorder records a cold rank's. The
stub is what passes a catchable signal on to its rank. restartlab's killer finds both and leaves
those signals to the stub (killer.signalled).

It uses only the standard library, the shared contracts, `wire` and the recorder. When a program
of yours starts cold through rankenv, it also uses the verbs' names, which are standard library
too."""
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, List, Optional

from .. import rankexit
from ...contracts.signals import FORWARDED
from ...contracts.envvars import node_name
from ...contracts.warm_messages import Refused, Request
from .wire import SOCKET_NAME, PoolError, node_dir, recv_end, recv_reply, send_msg, unix_path

if TYPE_CHECKING:
    import argparse
    from types import FrameType


def stub_main(a: "argparse.Namespace") -> int:
    """Hand this rank to the pool and stand in for it; the program cold (exec) when the pool
    cannot take it."""
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        print("restartlab warm stub: error: no program (give it after --)", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pending: List[int] = []
    rank = [0]
    s: int  # a signal number: FORWARDED's below, then pending's

    def forward(signum: int, frame: "Optional[FrameType]") -> None:
        if rank[0]:
            try:
                os.kill(rank[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)
    try:
        with unix_path(os.path.join(node_dir(a.dir), SOCKET_NAME)) as addr:
            sock.connect(addr)
        for s in FORWARDED:  # from now on a signal is the rank's
            signal.signal(s, forward)
        send_msg(sock, Request(argv, dict(os.environ), os.getcwd(), a.rankenv, os.getpid()), fds=(0, 1, 2))
        reply = recv_reply(sock)
        if reply is None or isinstance(reply, Refused):
            raise PoolError(reply.error if reply else "the pool hung up")
    except (OSError, PoolError) as e:
        # The signals stay blocked while the handlers go back to the default. Otherwise a signal
        # caught between CPython's check of its pending handlers and the sigaction would be dropped.
        # A blocked one stays pending, and sigpending() finds it.
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        for s in FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        pending += sorted(signal.sigpending() & set(FORWARDED))
        sock.close()
        why = f"standby pool not usable ({e}; {os.path.join(node_dir(a.dir), SOCKET_NAME)} on {node_name()})"
        if pending:  # a signal the stub held for a rank that never started
            return _signalled_before_start(pending[0], a.attempt_dir, why)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        print(f"restartlab warm stub: {why}: starting the program cold", file=sys.stderr, flush=True)
        if a.rankenv:  # the cold rank gets its variables as any cold rank does
            from ...tools import verbs
            argv = verbs.argv(sys.executable, "rankenv", "--", *argv)
        if a.attempt_dir:
            return rankexit.run(argv, a.attempt_dir)
        try:
            os.execvp(argv[0], argv)
        except OSError as e2:
            print(f"restartlab warm stub: error: cannot run {argv[0]!r}: {e2.strerror}", file=sys.stderr)
            return 127
    rank[0] = reply.pid
    for s in pending:
        forward(s, None)
    while True:
        try:
            end = recv_end(sock)
            break
        except InterruptedError:
            continue
    if end is None:  # the pool died (and its ranks with it)
        print("restartlab warm stub: the standby pool died", file=sys.stderr, flush=True)
        return 137
    status = end.status
    if a.attempt_dir:
        rankexit.record(a.attempt_dir, rank[0], status, "restartlab warm stub")
    return rankexit.end_as(status)  # die as the rank died: the launcher reports the same


def _signalled_before_start(sig: int, attempt_dir: Optional[str], why: str) -> int:
    """The stub held `sig` for its rank, and then the pool refused the rank. A cold rank signalled
    that early has not set its handlers yet, so the signal ends it. The stub ends the same way, and
    records that end as the rank's. Starting the program cold without the signal would lose it: a
    preemption's TERM would go unanswered."""
    print(f"restartlab warm stub: {why}; {signal.Signals(sig).name} arrived before the rank started: "
          "the rank ends of it, as a cold rank would, and the program is not started", file=sys.stderr, flush=True)
    if attempt_dir:
        rankexit.record(attempt_dir, os.getpid(), sig, "restartlab warm stub")
    return rankexit.end_as(sig)  # a waitpid status of `sig` is the signal's number
