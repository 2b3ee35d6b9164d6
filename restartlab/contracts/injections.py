"""The injection record: one line of a phase's injections file (layout.Phase.injections).

The file has one line per strike the injector made. A kind's follow-up (a node kill's escalation)
adds a second line (killed 0). The injector is its one writer (`to_json`). Everything that reads the
file reads it through `from_json` (contracts/live.read_injections). That takes a line from any
earlier version. A field it lacks is None. A field of the wrong type is None, as the readers' own
checks made it before this type. A field it does not know is kept in `extra` and written back."""
import dataclasses
import json
from typing import Any, Dict, Mapping, Optional, Tuple

from . import typed_json
from .jsonvalue import integer, items, number, text
from .receipts import Receipt


@dataclasses.dataclass(frozen=True)
class NetFault:
    """A network fault as the injector made it (runtime/inject_faults.net_fault): its length, its
    flaps, its rate, and when the node's restorer planned to end it."""
    duration: Optional[float] = None
    flaps: Optional[int] = None     # a flap's
    flap_up: Optional[float] = None
    rate: Optional[str] = None      # a slow link's
    until: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class StorageFault:
    """A storage fault as the injector armed it (runtime/inject_faults.io_fault).

    It holds its id (what the rank's preload logs), the rank (-1: every rank) and the kind's own
    settings."""
    id: Optional[int] = None
    rank: Optional[int] = None
    duration: Optional[float] = None
    errno: Optional[str] = None
    after_bytes: Optional[int] = None
    rate: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Injection:
    time: Optional[float]                  # when the strike began (epoch s)
    killed: int = 0                        # ranks (process trees) it ended; 0: none found, or a follow-up
    kind: Optional[str] = None             # the failure kind (failures.py); None in records before kinds
    reason: Optional[str] = None           # what triggered it (the schedule's words)
    signal: Optional[str] = None
    target_step: Optional[int] = None      # the step a step-driven schedule aimed at
    step_seen: Optional[int] = None        # rank 0's newest step when it struck
    newest_complete: Optional[int] = None  # the newest complete checkpoint then
    newest_complete_seen: Optional[int] = None  # the newest the injector had ever seen complete
    complete_mtime: Optional[float] = None  # newest_complete's newest file time (its marker's, for
                                            # the bundled trainer): when a gated strike's gate opened
    hosts: Tuple[str, ...] = ()
    receipts: Tuple[Receipt, ...] = ()     # each node's receipt: its killer's (what it signalled), or its fault's
    where: Optional[str] = None            # start-up, save or between saves (Injector.where)
    attempt: Optional[int] = None          # the attempt it struck (None: by its time)
    saving: Tuple[str, ...] = ()           # what was being written when it struck
    follow_up_of: Optional[float] = None   # a follow-up line: its strike's time
    gate: Optional[str] = None             # what it waited for: complete (the step's .complete), step (the
                                           # step seen); None: a timed or fuzz strike, or a record before gates
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # a kind's own (grace, escalated)

    @property
    def struck(self) -> bool:
        """A strike that reached ranks, or a network fault that began on a node (what counts as a
        failure)."""
        return self.killed > 0 or bool(self.extra.get("faulted"))

    @property
    def net_fault(self) -> NetFault:
        """Its network fault's settings (all None for another kind)."""
        return typed_json.read(NetFault, self.extra.get("fault")) or NetFault()

    @property
    def storage_fault(self) -> StorageFault:
        """Its storage fault's settings (all None for another kind)."""
        return typed_json.read(StorageFault, self.extra.get("fault")) or StorageFault()

    @property
    def booked_kind(self) -> str:
        """The kind it is booked under: its own, else kill (records from before the kinds)."""
        return self.kind or "kill"

    def to_dict(self) -> Dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        d.update(hosts=list(self.hosts), receipts=[r.to_dict() for r in self.receipts], saving=list(self.saving))
        for k in ("follow_up_of", "gate", "complete_mtime"):  # absent from the lines that have none (as before they existed)
            if d[k] is None:
                del d[k]
        return {**d, **self.extra}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Injection":
        """From one parsed line (ValueError: not a JSON object)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"an injection record is a JSON object, not {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(time=number(d.get("time")), killed=integer(d.get("killed")) or 0, kind=text(d.get("kind")),
                   reason=text(d.get("reason")), signal=text(d.get("signal")), target_step=integer(d.get("target_step")),
                   step_seen=integer(d.get("step_seen")), newest_complete=integer(d.get("newest_complete")),
                   newest_complete_seen=integer(d.get("newest_complete_seen")),
                   complete_mtime=number(d.get("complete_mtime")), hosts=items(d.get("hosts")),
                   receipts=tuple(Receipt.from_json(r) for r in items(d.get("receipts")) if isinstance(r, dict)),
                   where=text(d.get("where")), attempt=integer(d.get("attempt")), saving=items(d.get("saving")),
                   follow_up_of=number(d.get("follow_up_of")), gate=text(d.get("gate")), extra={k: v for k, v in d.items() if k not in known})
