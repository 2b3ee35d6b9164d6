"""A torchft phase's accounting and verdict (layout.Phase.ft_summary, ft.json; and the `torchft`
entry of the report's summary): what analysis/ft_accounting.py measured from the groups' records.

One writer: ft_accounting.summarize builds an FtSummary, and `to_dict` gives its JSON (the keys in
the order of the fields below: the file reads as it did when it was a dict). One tolerant reader:
`FtSummary.from_dict`, for a summary read back from a file (simulate --from). A field of the
wrong type reads as absent; a failure or a group that does not read is left out.

Standard library only: the collector runs on a login node."""
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from . import typed_json
from .jsonvalue import integer, number, text


@dataclasses.dataclass(frozen=True)
class GroupStats:
    attempts: int
    steps_attempted: int
    steps_committed: int
    last_step: int              # the last step it committed (0: none)


@dataclasses.dataclass(frozen=True)
class Relaunch:
    """A struck group's first attempt after its strike."""
    attempt: int
    relaunched_after_s: float       # the strike to its launch
    process_start_s: Optional[float]  # its launch to its first step
    heal_s: Optional[float]         # the heal's seconds (None: it did not heal)
    healed_at_step: Optional[int]
    rejoin_s: Optional[float]       # the strike to its first commit
    first_step: Optional[int]       # the step of that commit


@dataclasses.dataclass
class FtFailure:
    """One strike that killed: the groups it struck, what the survivors paid, each struck group's
    relaunch (None: none after the strike)."""
    time: Optional[float]
    kind: Optional[str]             # the injection's (None in records from before the kinds)
    struck_groups: List[int]
    survivors: List[int] = dataclasses.field(default_factory=list)
    detection_s: Optional[float] = None       # the strike to the survivors' first quorum without the struck
    survivor_stall_s: Optional[float] = None  # the survivors' uncommitted steps and that quorum's wait
    uncommitted_steps: int = 0
    relaunch: Dict[str, Optional[Relaunch]] = dataclasses.field(default_factory=dict)  # by group


@dataclasses.dataclass(frozen=True)
class Heal:
    group: int
    attempt: int
    step: int


@dataclasses.dataclass(frozen=True)
class StartOver:
    """A step committed below one committed before it: every group was lost, a fresh start."""
    group: int
    attempt: int
    step: int
    after_step: int
    time: float


@dataclasses.dataclass(frozen=True)
class Crash:
    """An exception a program died of on its own (ft-rank<R>-crash.json)."""
    group: int
    attempt: int
    rank: int
    step: Optional[int]
    error: str                  # "<type>: <message>"
    where: str                  # "<file>:<line>", the file shortened
    code: Optional[str]         # that line's source
    known: Optional[str]        # the torchft behaviour it matches (ft_accounting.KNOWN)


@dataclasses.dataclass(frozen=True)
class HealFailure:
    """A group attempt's heals that failed (asked by the quorum, not applied)."""
    group: int
    attempt: int
    times: int
    step: int                   # the first
    error: str                  # torchft's error for the first
    known: Optional[str]
    others_uncommitted_s: float  # meanwhile, the other groups' steps they could not commit


@dataclasses.dataclass(frozen=True)
class FtVerdict:
    survivor_restarted: List[int]
    heals: List[Heal]
    state_equal: bool
    unequal: List[str]          # "step S rank R" where the crcs differ (10 at most)
    started_over: Optional[StartOver]
    finished: bool
    stopped_when_done: List[int]
    crashes: List[Crash]
    heal_failures: List[HealFailure]
    ok: bool


@dataclasses.dataclass(frozen=True)
class Throughput:
    """Committed steps per second, over four spans.

    The spans are the whole run, before the first failure, while a struck group was out (the kill to
    its rejoin), and after the last rejoin. None where there is no such span."""
    overall: Optional[float] = None
    before: Optional[float] = None
    during: Optional[float] = None
    after: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class FtSummary:
    strategy: str               # "torchft"
    groups: int
    train_iters: int
    per_group: Dict[str, GroupStats]
    failures: List[FtFailure]
    steps_committed: int        # the job's progress: each step once
    median_step_s: Optional[float]
    wall_s: Optional[float]
    productive_s: float
    ettr: Optional[float]
    batches_committed: int
    torchft_efficiency: Optional[float]
    throughput: Throughput
    verdict: FtVerdict

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> Optional["FtSummary"]:
        """The summary a file holds; None where it is not one (no verdict, no group count)."""
        if not isinstance(d, dict) or not isinstance(d.get("verdict"), dict) or integer(d.get("groups")) is None:
            return None
        per_group = {k: g for k, g in ((k, _group(v)) for k, v in _dict(d.get("per_group")).items()) if g}
        failures = [f for f in map(_failure, _list(d.get("failures"))) if f]
        return cls(text(d.get("strategy")) or "torchft", integer(d.get("groups")) or 0,
                   integer(d.get("train_iters")) or 0, per_group, failures, integer(d.get("steps_committed")) or 0,
                   number(d.get("median_step_s")), number(d.get("wall_s")), number(d.get("productive_s")) or 0.0,
                   number(d.get("ettr")), integer(d.get("batches_committed")) or 0,
                   number(d.get("torchft_efficiency")),
                   typed_json.read(Throughput, d.get("throughput")) or Throughput(), _verdict(d["verdict"]))


def _dict(v: object) -> Dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: object) -> List[Any]:
    return v if isinstance(v, list) else []


def _ints(v: object) -> List[int]:
    return [i for i in map(integer, _list(v)) if i is not None]


def _group(v: object) -> Optional[GroupStats]:
    ids = _ids(_dict(v), ("attempts", "steps_attempted", "steps_committed", "last_step"))
    return GroupStats(ids[0], ids[1], ids[2], ids[3]) if ids else None


def _relaunch(v: object) -> Optional[Relaunch]:
    d = _dict(v)
    attempt, after = integer(d.get("attempt")), number(d.get("relaunched_after_s"))
    if attempt is None or after is None:
        return None
    return Relaunch(attempt, after, number(d.get("process_start_s")), number(d.get("heal_s")),
                    integer(d.get("healed_at_step")), number(d.get("rejoin_s")), integer(d.get("first_step")))


def _failure(v: object) -> Optional[FtFailure]:
    d = _dict(v)
    if not isinstance(d.get("struck_groups"), list):
        return None
    return FtFailure(number(d.get("time")), text(d.get("kind")), _ints(d.get("struck_groups")), _ints(d.get("survivors")),
                     number(d.get("detection_s")), number(d.get("survivor_stall_s")),
                     integer(d.get("uncommitted_steps")) or 0,
                     {k: _relaunch(r) for k, r in _dict(d.get("relaunch")).items()})


def _ids(d: Dict[str, Any], keys: Tuple[str, ...]) -> Optional[List[int]]:
    """The counts of `keys` in d, or None where one does not read."""
    vals = [integer(d.get(k)) for k in keys]
    return [v for v in vals if v is not None] if None not in vals else None


def _heal(v: object) -> Optional[Heal]:
    ids = _ids(_dict(v), ("group", "attempt", "step"))
    return Heal(ids[0], ids[1], ids[2]) if ids else None


def _start_over(v: object) -> Optional[StartOver]:
    d = _dict(v)
    ids = _ids(d, ("group", "attempt", "step", "after_step"))
    return StartOver(ids[0], ids[1], ids[2], ids[3], number(d.get("time")) or 0.0) if ids else None


def _crash(v: object) -> Optional[Crash]:
    d = _dict(v)
    ids = _ids(d, ("group", "attempt", "rank"))
    if not ids:
        return None
    return Crash(ids[0], ids[1], ids[2], integer(d.get("step")), text(d.get("error")) or "", text(d.get("where")) or "",
                 text(d.get("code")), text(d.get("known")))


def _heal_failure(v: object) -> Optional[HealFailure]:
    d = _dict(v)
    ids = _ids(d, ("group", "attempt"))
    if not ids:
        return None
    return HealFailure(ids[0], ids[1], integer(d.get("times")) or 0, integer(d.get("step")) or 0, text(d.get("error")) or "",
                       text(d.get("known")), number(d.get("others_uncommitted_s")) or 0.0)


def _verdict(d: Dict[str, Any]) -> FtVerdict:
    return FtVerdict(_ints(d.get("survivor_restarted")), [h for h in map(_heal, _list(d.get("heals"))) if h],
                     d.get("state_equal") is True, [u for u in _list(d.get("unequal")) if isinstance(u, str)],
                     _start_over(d.get("started_over")), d.get("finished") is True,
                     _ints(d.get("stopped_when_done")), [c for c in map(_crash, _list(d.get("crashes"))) if c],
                     [h for h in map(_heal_failure, _list(d.get("heal_failures"))) if h], d.get("ok") is True)
