"""One line of <phase>/iofaults.jsonl: an event of a storage fault on one rank.

The ranks' preload writes it (runtime/iofault/iofault.c, the one writer). The preload is C, so its
fields are listed here and in its log_event. The events:
- `begin`: the rank took the strike at its first checkpoint write after the arming.
- `end`: a stall is over (or an error window closed).
- `error`: the first call it failed.
- `cut`: a torn file cut at `bytes`, and the rank SIGKILLed.

One tolerant reader reads it. A line this version cannot take is a warning, never the report's
failure."""
import dataclasses
from typing import List, Optional

from . import live

EVENTS = ("begin", "end", "error", "cut")


@dataclasses.dataclass(frozen=True)
class IOFaultEvent:
    id: int                  # the strike (the injector's record carries it: extra.fault.id)
    kind: str                # the preload's word: stall, slow, error, torn
    event: str               # one of EVENTS
    rank: int
    pid: int
    host: str
    at: float                # epoch seconds
    file: Optional[str]      # the checkpoint file written when it happened (None for `end`)
    bytes: int               # error: bytes of the save written before the first failure; cut: where the data stops
    errno: int
    seconds: float
    rate: float
    duration: float
    after: int
    dir: str = ""            # the checkpoint directory the preload watched
    size: Optional[int] = None  # cut: the file's length as left (a writer that sized it first: its full length)

    @classmethod
    def from_json(cls, d: object) -> Optional["IOFaultEvent"]:
        if not isinstance(d, dict) or d.get("event") not in EVENTS:
            return None
        try:
            return cls(id=int(d["id"]), kind=str(d["kind"]), event=d["event"], rank=int(d["rank"]),
                       pid=int(d["pid"]), host=str(d.get("host", "")), at=float(d["at"]),
                       file=d.get("file") if isinstance(d.get("file"), str) else None,
                       bytes=int(d.get("bytes") or 0), errno=int(d.get("errno") or 0),
                       seconds=float(d.get("seconds") or 0), rate=float(d.get("rate") or 0),
                       duration=float(d.get("duration") or 0), after=int(d.get("after") or 0),
                       dir=str(d.get("dir") or ""),
                       size=int(d["size"]) if isinstance(d.get("size"), int) and d["size"] >= 0 else None)
        except (KeyError, TypeError, ValueError):
            return None


def read(path: str, warnings: List[str]) -> List[IOFaultEvent]:
    """The file's records in order ([] when there is none); a line this version cannot take is named."""
    return live.read_typed(path, IOFaultEvent.from_json, "a storage-fault event", warnings)
