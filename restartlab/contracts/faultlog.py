"""A network fault's record: what its node's restorer did to the link, with the times. The restorer
(runtime/netfault.py) appends one line to the phase's `faults.jsonl` (layout.Phase.faults) when it
has put the link back, or has given up; the collector reads them (analysis/netfaults.py)."""
import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .jsonvalue import items, number, text

Window = Tuple[float, Optional[float]]  # the link down (or capped) at, back at (None: never back)


@dataclass(frozen=True)
class FaultLog:
    host: str = ""                      # the node's host name, as the node says it
    node: str = ""                      # the node's name in the job's node file
    kind: str = ""                      # partition, flap or slow_link
    dev: str = ""                       # the link: eth0, ...
    tag: Optional[str] = None           # the run's tag
    planned_at: Optional[float] = None  # the receipt's `at`: the injection record's time, to the float
    duration: Optional[float] = None    # planned seconds (0: until the phase is done)
    rate: Optional[str] = None          # slow_link's cap (10mbit)
    windows: Tuple[Window, ...] = ()
    restored: Optional[bool] = None     # the link is as it was
    ended_by: Optional[str] = None      # "duration", or what stopped it sooner
    errors: Tuple[str, ...] = ()

    def to_json(self) -> str:
        """The line, as the restorer wrote it before the type (windows as [down, back] lists)."""
        return json.dumps({"host": self.host, "node": self.node, "kind": self.kind, "dev": self.dev, "tag": self.tag,
                           "planned_at": self.planned_at, "duration": self.duration, "rate": self.rate,
                           "windows": [list(w) for w in self.windows], "restored": self.restored,
                           "ended_by": self.ended_by, "errors": list(self.errors)})

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Optional["FaultLog"]:
        """A line read back; a field of the wrong type reads as absent, a window that is not
        [number, number or null] is left out."""
        windows = tuple((number(w[0]) or 0.0, number(w[1])) for w in items(d.get("windows"))
                        if isinstance(w, list) and len(w) == 2 and number(w[0]) is not None)
        restored = d.get("restored")
        return cls(host=text(d.get("host")) or "", node=text(d.get("node")) or "", kind=text(d.get("kind")) or "",
                   dev=text(d.get("dev")) or "", tag=text(d.get("tag")), planned_at=number(d.get("planned_at")),
                   duration=number(d.get("duration")), rate=text(d.get("rate")), windows=windows,
                   restored=restored if isinstance(restored, bool) else None, ended_by=text(d.get("ended_by")),
                   errors=tuple(e for e in items(d.get("errors")) if isinstance(e, str)))
