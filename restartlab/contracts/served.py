"""A warm pool's served record: a line in <node>.served.jsonl (layout.served_name) for each rank the
pool forked.

The pool is its one writer (runtime/warm/pool.py). The supervisor reads them through `read`. It
counts an attempt's warm ranks for its attempt record (runtime/warm/standby.served_in). A line that
is not a record, or a field of the wrong type, reads as absent."""
import dataclasses
import json
from typing import Iterable, List, Optional

from . import live
from .jsonvalue import integer, number, text


@dataclasses.dataclass(frozen=True)
class Served:
    attempt: Optional[str]      # the attempt, as the launcher passed RESTARTLAB_ATTEMPT to the stub
    phase: Optional[str]        # the phase, likewise (RESTARTLAB_PHASE)
    node: Optional[str]         # the pool's node
    rank_pid: Optional[int]     # the forked rank
    stub_pid: Optional[int]     # the stub it serves
    time: Optional[float]       # when it was forked (epoch s)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: object) -> Optional["Served"]:
        if not isinstance(d, dict):
            return None
        return cls(text(d.get("attempt")), text(d.get("phase")), text(d.get("node")), integer(d.get("rank_pid")),
                   integer(d.get("stub_pid")), number(d.get("time")))


def read(paths: Iterable[str]) -> List[Served]:
    """The records in these files, in order; an unreadable file or line is passed over (a pool
    killed mid-write leaves a torn last line)."""
    return [r for p in paths for r in live.read_typed(p, Served.from_json, "a served record")]
