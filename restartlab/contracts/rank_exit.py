"""How one rank ended, as the process that stood over it saw it.

The record goes into <attempt>/exits/ (layout.Attempt.rank_exit). The rank's exit recorder writes
it: runtime/rankexit.py, a cold rank's parent. A warm rank's stub writes it instead (the pool tells
it). The supervisor's attempt record and the verdict read it.

A launcher reports one exit status for a whole launch. It is the status of whichever rank it saw
end first, or its own. This was measured with the mpich wheel's Hydra. One rank called os.abort()
while the other slept, and the launch exited 15, "Terminated (signal 15)". These records say which
rank ended first and how.

A rank the launcher or restartlab's killer ended with SIGKILL leaves none. Its recorder dies in the
same signal. So a record is always a rank that ended before it was torn down, or one that a
catchable signal ended."""
import json
import os
import signal
import time
from typing import Any, Dict, Iterable, List, NamedTuple, Optional


class RankExit(NamedTuple):  # a NamedTuple: dataclasses costs the recorder's start-up ~10 ms of imports
    rank: str                     # the launcher's rank number, or pid-<pid> where none named it
    node: str
    pid: int                      # the program's pid
    exit_code: Optional[int]      # None when a signal ended it
    signal: Optional[int]         # the signal that ended it (None: it exited)
    time: float                   # when its parent saw it end

    @classmethod
    def from_status(cls, rank: str, node: str, pid: int, status: int, when: Optional[float] = None) -> "RankExit":
        """From a waitpid status."""
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return cls(str(rank), node, pid, None if sig else os.WEXITSTATUS(status), sig,
                   time.time() if when is None else when)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "RankExit":
        return cls(str(d["rank"]), str(d["node"]), int(d["pid"]),
                   None if d.get("exit_code") is None else int(d["exit_code"]),
                   None if d.get("signal") is None else int(d["signal"]), float(d["time"]))

    @property
    def failed(self) -> bool:
        return bool(self.signal) or self.exit_code not in (0, None)

    def how(self) -> str:
        """'SIGABRT (signal 6)' or 'exit 3'."""
        return how(self.signal, self.exit_code)

    def write(self, path: str) -> None:
        """Atomically: a reader sees the whole record or none."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self._asdict(), f)
        os.replace(tmp, path)


def how(sig: Optional[int], exit_code: Optional[int]) -> str:
    """An end in words: 'SIGABRT (signal 6)' for a signal, else 'exit 3'."""
    if sig:
        try:
            return f"{signal.Signals(sig).name} (signal {sig})"
        except ValueError:
            return f"signal {sig}"
    return f"exit {exit_code}"


def read_all(paths: Iterable[str]) -> List[RankExit]:
    """The records that parse, earliest end first (a torn or foreign file is skipped)."""
    out = []
    for p in paths:
        try:
            with open(p) as f:
                out.append(RankExit.from_dict(json.load(f)))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return sorted(out, key=lambda e: e.time)


def first_failure(exits: Iterable[RankExit]) -> Optional[RankExit]:
    """The rank that ended badly first: the crash the others' ends followed."""
    return next((e for e in sorted(exits, key=lambda e: e.time) if e.failed), None)
