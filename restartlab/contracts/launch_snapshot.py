"""What the checkpoint directory held at an attempt's launch (layout.Attempt.at_launch).

It lists every checkpoint with whether it was complete. It names the newest complete one (what a
correct resume loads) and the one the program's own rule would load.

It has one writer (runtime/tap.py, at each launch) and one tolerant reader (`read`). The verdict
judges each resume against it (analysis/survival.py). The collector reads the phase's save interval
from it, and simulate its checkpoint directory.

Standard library only: the collector reads these on a login node."""
import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

from . import ckptdir
from .jsonvalue import integer, text


@dataclasses.dataclass(frozen=True)
class WillLoad:
    """The checkpoint the program's own rule picks (programs.will_load)."""
    step: Optional[int]
    path: Optional[str]
    complete: bool
    why: Optional[str] = None         # why it is not complete (programs.why_not_complete)
    holds: Tuple[str, ...] = ()       # what a torn one holds (its names, at most 12)

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"step": self.step, "path": self.path, "complete": self.complete}
        if not self.complete:
            d.update(why=self.why, holds=list(self.holds))
        return d


@dataclasses.dataclass(frozen=True)
class LaunchSnapshot:
    ckpt_dir: Optional[str] = None
    selects: Optional[str] = None             # the program's rule: which checkpoint it loads
    complete_rule: Optional[str] = None       # the program's rule: what makes one complete
    checkpoints: Tuple[Tuple[int, bool], ...] = ()  # (step, complete), as listed
    newest_complete: Optional[int] = None
    newest_complete_path: Optional[str] = None
    will_load: Optional[WillLoad] = None

    @property
    def states(self) -> Dict[int, bool]:
        """{step: complete}."""
        return dict(self.checkpoints)

    def to_json(self) -> str:
        return json.dumps({"ckpt_dir": self.ckpt_dir, "selects": self.selects, "complete_rule": self.complete_rule,
                           "checkpoints": [[s, c] for s, c in self.checkpoints],
                           "newest_complete": self.newest_complete, "newest_complete_path": self.newest_complete_path,
                           "will_load": self.will_load.to_dict() if self.will_load else None})


def write(path: str, snap: LaunchSnapshot) -> None:
    """Written aside and renamed (ckptdir.write_atomic): a reader sees the whole of it or nothing."""
    ckptdir.write_atomic(path, snap.to_json().encode())


def from_dict(d: Dict[str, Any]) -> LaunchSnapshot:
    """A snapshot from its JSON mapping.

    A field of the wrong type reads as absent. A checkpoint entry that is not [step, complete] is
    left out."""
    pairs: List[Tuple[int, bool]] = []
    listed = d.get("checkpoints")
    for c in listed if isinstance(listed, list) else []:
        if isinstance(c, list) and len(c) == 2 and integer(c[0]) is not None and isinstance(c[1], bool):
            pairs.append((int(c[0]), c[1]))
    w = d.get("will_load")
    pick = None
    if isinstance(w, dict):
        holds = w.get("holds")
        pick = WillLoad(integer(w.get("step")), text(w.get("path")), w.get("complete") is True, text(w.get("why")),
                        tuple(h for h in holds if isinstance(h, str)) if isinstance(holds, list) else ())
    return LaunchSnapshot(text(d.get("ckpt_dir")), text(d.get("selects")), text(d.get("complete_rule")),
                          tuple(pairs), integer(d.get("newest_complete")), text(d.get("newest_complete_path")), pick)


def read(path: str) -> Optional[LaunchSnapshot]:
    """The snapshot at `path`; None where there is none (no file, not JSON, not a mapping, empty)."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    return from_dict(d) if isinstance(d, dict) and d else None
