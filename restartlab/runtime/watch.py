"""One launch watched to its end: the supervisor's, for each attempt.

It gives the walltime warning and runs the watchdog. The watchdog stops an attempt with no progress
for relaunch.hang_timeout (startup_timeout before the first step). It also stops one where a rank
ended badly while its peers still run (relaunch.rank_exit_grace). A stuck attempt is stopped in this
order: its ranks' stacks, KILL to them on every node, then the launcher (TERM, then KILL)."""
import os
import signal
from typing import Callable, Dict, List, Optional, Protocol

from ..contracts import layout, rank_exit
from .attempt_launch import Launched
from .clock import Clock


class Settings(Protocol):
    """The supervisor's settings the watchdog reads (supervise.Config)."""
    tick: float
    hang_timeout: float
    startup_timeout: float
    rank_exit_grace: float
    stop_at: float
    walltime_margin: float
    preempt_signal: str
    node_policy: str
    node_wait: float


class Ranks(Protocol):
    """What the watchdog asks of the attempt's processes (supervise.Procs)."""
    def last_activity(self, att: layout.Attempt) -> Optional[float]: ...

    def has_stepped(self, att: layout.Attempt) -> bool: ...

    def failed_rank(self, att: layout.Attempt) -> Optional[rank_exit.RankExit]: ...

    def teardown(self, att: layout.Attempt, sig: str = "KILL") -> List[str]: ...

    def dump_stacks(self, att: layout.Attempt) -> None: ...

    def answering(self, names: List[str]) -> List[str]: ...

STOP_GRACE_S = 5.0               # the launcher's time to end after a TERM before it gets a KILL
NODE_POLL_S = 10.0               # between two asks of a node the stop could not reach (wait_for_nodes)


def touch(path: str) -> None:
    with open(path, "a"):
        pass


class Watchdog:
    """The watch over the phase's launches, one at a time (`watch`), and the stop of a stuck one."""

    def __init__(self, cfg: Settings, clock: Clock, procs: Ranks, say: Callable[..., None]) -> None:
        self.cfg, self.clock, self.procs, self.say = cfg, clock, procs, say
        self.bad_rank_seen: Dict[str, float] = {}  # attempt path -> when this loop first saw a rank's bad end

    def past_stop(self) -> bool:
        return self.cfg.stop_at > 0 and self.clock.time() >= self.cfg.stop_at

    def watch(self, run: Launched, att: layout.Attempt) -> int:
        """Wait for the attempt to end; the walltime warning and the watchdog meanwhile."""
        cfg = self.cfg
        while True:
            rc = run.wait(cfg.tick)
            if rc is not None:
                return rc
            if not os.path.exists(att.walltime) and self.past_stop():
                self.walltime_warning(att)
            if self.peers_left_waiting(att):
                return self.stop_stuck(run, att)
            last = self.procs.last_activity(att)
            limit = cfg.hang_timeout if self.procs.has_stepped(att) else cfg.startup_timeout
            if last is not None and self.clock.time() - last > limit:
                self.say(f"no progress in {att.path} for {limit:g}s: stopping the attempt", err=True)
                touch(att.hang)
                return self.stop_stuck(run, att)

    def stop_stuck(self, run: Launched, att: layout.Attempt) -> int:
        """Stop an attempt that will not end by itself, and return its exit status.

        First it records where its ranks are (stacks, processes). Then it sends KILL to them on every
        node, and then it stops the launcher."""
        self.procs.dump_stacks(att)
        self.procs.teardown(att)
        return self.stop(run)

    def peers_left_waiting(self, att: layout.Attempt) -> bool:
        """A rank ended badly relaunch.rank_exit_grace ago, and the launch still runs.

        The grace counts from when this loop first saw the rank's exit record. Its peers wait for it
        in a collective or a rendezvous until their own timeout, since a launcher may not end them.
        Hydra ends them only when a rank dies by a signal, and leaves an exit status alone. This does
        not apply after the walltime warning, whose emergency checkpoint has the margin's time."""
        grace = self.cfg.rank_exit_grace
        if grace <= 0 or os.path.exists(att.walltime):
            return False
        bad = self.procs.failed_rank(att)
        if bad is None:
            return False
        seen = self.bad_rank_seen.setdefault(att.path, self.clock.time())
        if self.clock.time() - seen < grace:
            return False
        self.say(f"rank {bad.rank} on {bad.node} ended ({bad.how()}) and the others still run "
                 f"{grace:g}s later: stopping the attempt (relaunch.rank_exit_grace)", err=True)
        return True

    def stop(self, run: Launched) -> int:
        """TERM to the launcher, KILL after STOP_GRACE_S; its exit status."""
        run.signal(signal.SIGTERM)
        rc = run.wait(STOP_GRACE_S)
        if rc is None:
            run.signal(signal.SIGKILL)
            rc = run.wait(None)
        assert rc is not None  # wait(None) waits for the end
        return rc

    def walltime_warning(self, att: layout.Attempt) -> None:
        """The ranks write an emergency checkpoint and exit; the marker says: do not relaunch."""
        touch(att.walltime)
        self.say(f"walltime warning ({self.cfg.walltime_margin:g}s left): SIG{self.cfg.preempt_signal} to "
                 f"the ranks for an emergency checkpoint", err=True)
        self.procs.teardown(att, self.cfg.preempt_signal)

    def wait_for_nodes(self, lost: List[str], k: int, att: layout.Attempt) -> List[str]:
        """Wait for the nodes the stop of attempt k could not reach (cut off, down) to answer again.

        This applies with on_node_loss same, before the next launch. The wait lasts up to
        relaunch.node_wait. Returns the nodes that still do not answer.

        A launch onto such a node fails at once, and each failure spends the relaunch budget. This was
        seen on the OpenPBS cluster: two relaunches into a partition failed in 6 s and the phase failed,
        before PBS marked the node down. Meanwhile the scheduler may mark the node down and requeue the
        job.

        Once the nodes answer, the stop is made again, since attempt k's ranks there may still run. The
        walltime margin ends the wait, and the next launch is not made then."""
        cfg = self.cfg
        if not lost or cfg.node_policy != "same" or cfg.node_wait <= 0:
            return []
        self.say(f"attempt {k}'s stop could not reach {', '.join(lost)}: waiting up to {cfg.node_wait:.0f} s for "
                 "it to answer before relaunching on the same nodes (relaunch.node_wait)", err=True)
        deadline = self.clock.time() + cfg.node_wait
        while True:
            if self.past_stop():
                return []  # the walltime margin: _attempts launches nothing more
            back = self.procs.answering(lost)
            lost = [h for h in lost if h not in back]
            if not lost:
                lost = self.procs.teardown(att) or []  # what is left of attempt k there, now reachable
                if not lost:
                    self.say("every node answers again, attempt's ranks stopped there: relaunching")
                    return []
            left = deadline - self.clock.time()
            if left <= 0:
                return lost
            self.clock.sleep(min(NODE_POLL_S, left))
