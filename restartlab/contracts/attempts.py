"""What the relaunch loop and the collector agree on about attempts and phases.

- The attempt record: `AttemptRecord` (layout.Attempt.record), with one writer `write` and one
  reader `read`.
- How a phase ended: `PhaseEnd`, and the end record `EndRecord` with its one writer `append` and
  one reader `phase_end`.
- The one definition of "completed" (rank 0's final row) and of "injected" (an injection record
  with a kill inside an attempt's window).

The supervisor writes (runtime/attempt_record.py), and the analysis reads. Neither spells these for
itself. The readers take what earlier versions wrote. They take a field of the wrong type as
missing, so a hand-edited or torn record is reported, not a traceback."""
import dataclasses
import enum
import json
import os
import time
from typing import Any, Dict, Iterable, List, Optional

from . import layout, live
from .jsonvalue import integer, number, text
from .injections import Injection
from .rank_exit import RankExit
from .metric_keys import FINISHED, PARAMS_CRC


class NotARecord(ValueError):
    """The attempt record holds JSON that is not a mapping (the analysis reports it as malformed)."""


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """layout.Attempt.launched: what is known of an attempt at its launch.

    It is written before the launcher starts. An attempt cut short with its job (killed, requeued,
    its node lost) leaves no attempt record. This one still tells which run of which job it was in."""
    attempt: Optional[int] = None
    launch_ts: Optional[float] = None
    job: Optional[str] = None
    job_start: Optional[float] = None

    def write(self, att: layout.Attempt) -> None:
        """The one writer, atomic (a reader sees the whole record or none)."""
        tmp = att.launched + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dataclasses.asdict(self), f)
        os.replace(tmp, att.launched)

    @classmethod
    def read(cls, att: layout.Attempt) -> Optional["LaunchRecord"]:
        """The one reader: None when there is none or it is not JSON; a field of the wrong type as missing."""
        try:
            with open(att.launched) as f:
                d = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(d, dict):
            return cls()
        return cls(integer(d.get("attempt")), number(d.get("launch_ts")), text(d.get("job")), number(d.get("job_start")))


@dataclasses.dataclass
class AttemptRecord:
    """layout.Attempt.record: what the supervisor knows about one launch, written right after the
    launcher exited."""
    attempt: Optional[int] = None
    launch_ts: Optional[float] = None
    end_ts: Optional[float] = None
    exit_code: Optional[int] = None      # the launcher's one status for the launch
    signal: Optional[int] = None         # the signal that status names, by the launcher's rule (0: none)
    launcher: Optional[str] = None
    rank_exit: Optional[RankExit] = None  # the first rank that ended badly, by the ranks' own records
    ranks_recorded: int = 0              # how many ranks recorded their end
    completed: bool = False              # rank 0 logged the last step's final row
    hang: bool = False                   # the watchdog stopped it
    preempted: bool = False              # the trainer's preemption exit (5), by the launcher or a rank
    walltime: bool = False               # the walltime warning stopped it
    injected: bool = False               # a strike of the phase's injector landed in it
    hosts: Optional[List[str]] = None    # the nodes node-check chose for it
    ranks: Optional[int] = None          # its rank count, when node-check chose it
    job: Optional[str] = None            # the batch job it ran in
    warm_ranks: Optional[int] = None     # in a warm phase, how many ranks the pools forked
    job_start: Optional[float] = None    # when that run of the job began (a requeued job runs again)

    def to_json(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["rank_exit"] = self.rank_exit._asdict() if self.rank_exit else None
        return d

    @classmethod
    def from_json(cls, d: object) -> "AttemptRecord":
        if not isinstance(d, dict):
            raise NotARecord(f"a {type(d).__name__}, not a mapping")
        try:
            first = RankExit.from_dict(d["rank_exit"]) if d.get("rank_exit") else None
        except (KeyError, ValueError, TypeError, AttributeError):
            first = None
        hosts = d.get("hosts")
        return cls(attempt=integer(d.get("attempt")), launch_ts=number(d.get("launch_ts")), end_ts=number(d.get("end_ts")),
                   exit_code=integer(d.get("exit_code")), signal=integer(d.get("signal")), launcher=text(d.get("launcher")),
                   rank_exit=first, ranks_recorded=integer(d.get("ranks_recorded")) or 0,
                   **{k: d.get(k) is True for k in ("completed", "hang", "preempted", "walltime", "injected")},
                   hosts=[str(h) for h in hosts] if isinstance(hosts, list) else None,
                   ranks=integer(d.get("ranks")), job=text(d.get("job")), warm_ranks=integer(d.get("warm_ranks")),
                   job_start=number(d.get("job_start")))

    def write(self, att: layout.Attempt) -> None:
        """The one writer (the supervisor, once the launcher exited). Atomic, as the launch record's:
        a supervisor killed mid-write leaves no record, never a half-written one."""
        tmp = att.record + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_json(), f)
        os.replace(tmp, att.record)

    @classmethod
    def read(cls, att: layout.Attempt) -> Optional["AttemptRecord"]:
        """The one reader: the record.

        None when there is none or it is not JSON: the attempt was cut short with its job.
        NotARecord when it is JSON but no mapping."""
        try:
            with open(att.record) as f:
                d = json.load(f)
        except (OSError, ValueError):
            return None
        return cls.from_json(d)


class PhaseEnd(str, enum.Enum):
    """How a phase's supervisor ended in one job (the `how` of its end record), and the two ends
    only the reader can tell: DIED (no end record after its last attempt) and NOT_STARTED. A `str`:
    the JSON and every comparison with the bare word stay what they were."""
    COMPLETED = "completed"
    WALLTIME = "walltime"
    BUDGET = "budget"
    FAILED = "failed"
    CANNOT_RUN = "cannot_run"
    INTERRUPTED = "interrupted"
    DIED = "died"
    NOT_STARTED = "not started"

    def __str__(self) -> str:  # f"{end}" is the word, as in the records
        return self.value


# what the report says of each end a supervisor writes
_TEXT = {PhaseEnd.COMPLETED: "finished in attempt {k}",
         PhaseEnd.WALLTIME: "stopped by the walltime margin in attempt {k} (its newest checkpoint is the emergency one)",
         PhaseEnd.BUDGET: "relaunch budget used up after attempt {k}",
         PhaseEnd.FAILED: "failed in attempt {k} (relaunching could not help)",
         PhaseEnd.CANNOT_RUN: "not started: {why}",
         PhaseEnd.INTERRUPTED: "interrupted by {signal} in attempt {k}: the job was stopped (the scheduler's "
                               "qdel, walltime or preemption, or by hand)"}
WRITTEN = tuple(_TEXT)  # the ends a supervisor records; DIED and NOT_STARTED are the reader's


@dataclasses.dataclass(frozen=True)
class EndRecord:
    """One line of <phase>/ended.jsonl: a supervisor's last word on the phase in one job (a chain's
    jobs each append one)."""
    how: PhaseEnd
    attempt: int
    job: Optional[str] = None
    signal: Optional[str] = None       # the signal's name (SIGTERM), for INTERRUPTED
    why: Optional[str] = None          # for CANNOT_RUN, and FAILED where the supervisor knows why
    time: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        out = {"time": self.time or time.time(), "how": self.how.value, "attempt": self.attempt,
               "job": self.job, "signal": self.signal}
        if self.why:
            out["why"] = self.why
        return out

    @classmethod
    def from_json(cls, d: object) -> Optional["EndRecord"]:
        """The record, or None for a line this version cannot take as one.

        Such a line is not an end a supervisor writes, or has no attempt number. The reader then goes
        by the attempts alone."""
        if not isinstance(d, dict) or d.get("how") not in {e.value for e in WRITTEN}:
            return None
        k = integer(d.get("attempt"))
        if k is None:
            return None
        return cls(PhaseEnd(d["how"]), k, text(d.get("job")), text(d.get("signal")), text(d.get("why")),
                   number(d.get("time")) or 0.0)

    def append(self, phase: layout.Phase) -> None:
        """The one writer: a line appended to the phase's end records."""
        with open(phase.ended, "a") as f:
            f.write(json.dumps(self.to_json()) + "\n")

    def text(self) -> str:
        if self.how == PhaseEnd.FAILED and self.why:
            return f"failed in attempt {self.attempt}: {self.why}; relaunching could not help"
        return _TEXT[self.how].format(k=self.attempt, signal=self.signal or "a signal",
                                      why=self.why or "the program cannot run here")


@dataclasses.dataclass(frozen=True)
class PhaseOutcome:
    """How a phase's latest supervisor ended, as the summary carries it (`to_dict`)."""
    how: PhaseEnd                 # DIED: it left no end record after its last attempt (SIGKILLed, its node lost)
    attempt: int                  # its last attempt (0: none started)
    text: str                     # the sentence the report gives
    job: Optional[str] = None
    signal: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"how": self.how, "attempt": self.attempt, "job": self.job, "signal": self.signal, "text": self.text}


def phase_end(phase: layout.Phase) -> PhaseOutcome:
    """The one reader of the end records: how the phase's latest supervisor ended."""
    atts = phase.attempts()
    k = int(os.path.basename(atts[-1].path)) if atts else 0
    recs = live.read_records(phase.ended)
    last = EndRecord.from_json(recs[-1]) if recs else None
    if last is not None and last.attempt >= k:
        return PhaseOutcome(last.how, last.attempt, last.text(), last.job, last.signal)
    if not k:
        return PhaseOutcome(PhaseEnd.NOT_STARTED, 0, "not started")
    rec = atts[-1].record
    return PhaseOutcome(PhaseEnd.DIED, k, f"its supervisor ended without a word during attempt {k}"
                        + ("" if os.path.exists(rec) else " (which has no record of its end)")
                        + ": killed (SIGKILL), or its node was lost")


# an injection record is written just after its strike's signals went out; the launcher may see
# the deaths first. A strike this long after an attempt's end still belongs to it.
INJECTION_SLACK_S = 0.5


def completed_row(m: object) -> bool:
    """Rank 0's final row.

    The bundled trainer's carries the parameters' checksum at the last step. A tapped program's is
    train/finished (tap.py: it ended after logging the last step)."""
    return isinstance(m, dict) and (PARAMS_CRC in m or m.get(FINISHED) is True)


def injected(record: Injection, t0: Optional[float], t1: Optional[float], number: Optional[int] = None) -> bool:
    """Whether an injection record struck attempt `number` that ran from t0 to t1.

    It goes by the attempt the record names, which the injector gives when it ran with the phase
    dir. Else it goes by the record's time."""
    if not record.struck:
        return False
    if number is not None and record.attempt is not None:
        return record.attempt == number
    t = record.time
    return t is not None and t0 is not None and t1 is not None and t0 <= t <= t1 + INJECTION_SLACK_S


def injections_into(records: Iterable[Injection], t0: Optional[float], t1: Optional[float],
                    number: Optional[int] = None) -> List[Injection]:
    return [r for r in records if injected(r, t0, t1, number)]
