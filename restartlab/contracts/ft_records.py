"""A torchft replica group's records (layout.ft_record_name, layout.ft_crash_name).

- `FtStep`: one line of ft-rank<R>.jsonl per step a rank attempted. The bundled trainer
  (trainer/ft.py) or the hook on a program of yours (trainer/ft_hook.py) writes it, both through
  ft.StepLog.
- `FtCrash`: ft-rank<R>-crash.json, the exception that ended a program run through the hook.

The analysis (analysis/ft_accounting.py) reads them through `read_steps` and `read_crash`. These
are tolerant. A line that is not a step record is passed over. A field of the wrong type is absent.

Standard library only: the collector reads these on a login node."""
import dataclasses
import json
from typing import Any, Dict, List, Optional

from . import live
from .jsonvalue import integer, load_file, number, text


@dataclasses.dataclass(frozen=True)
class FtStep:
    t0: float                       # the step began (epoch s)
    t: float                        # it ended: committed or not
    step: int                       # the step (a commit has counted it; else the one attempted)
    commit: bool = False            # the Manager committed it (should_commit)
    tq: Optional[float] = None      # its quorum was reached (None: the record has no quorum time)
    quorum: Optional[int] = None    # the quorum's id
    participants: Optional[int] = None  # the groups in the quorum
    slot: Optional[int] = None      # this group's place among them
    heal: bool = False              # the quorum asked this group to heal (receive a survivor's state)
    healed: bool = False            # it did
    heal_s: Optional[float] = None  # the heal's seconds (the step's start to its quorum)
    crc: Optional[int] = None       # the shards' crc, on the steps the verdict compares
    error: Optional[str] = None     # torchft's error for the step (a failed heal)
    loss: Optional[float] = None

    @property
    def quorum_time(self) -> float:
        """When its quorum was reached: tq, else its start."""
        return self.t0 if self.tq is None else self.tq

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Optional["FtStep"]:
        t0, t, step = number(d.get("t0")), number(d.get("t")), integer(d.get("step"))
        if t0 is None or t is None or step is None:
            return None
        return cls(t0, t, step, d.get("commit") is True, number(d.get("tq")), integer(d.get("quorum")),
                   integer(d.get("participants")), integer(d.get("slot")), d.get("heal") is True,
                   d.get("healed") is True, number(d.get("heal_s")), integer(d.get("crc")), text(d.get("error")),
                   number(d.get("loss")))


@dataclasses.dataclass(frozen=True)
class FtCrash:
    type: str                       # the exception's class
    message: str = ""
    time: Optional[float] = None
    file: Optional[str] = None      # where it was raised: the traceback's last frame
    line: Optional[int] = None
    code: Optional[str] = None      # that frame's source line
    thread: Optional[str] = None
    step: Optional[int] = None      # the step the Manager was on

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: object) -> Optional["FtCrash"]:
        if not isinstance(d, dict) or not isinstance(d.get("type"), str):
            return None
        return cls(d["type"], text(d.get("message")) or "", number(d.get("time")), text(d.get("file")),
                   integer(d.get("line")), text(d.get("code")), text(d.get("thread")), integer(d.get("step")))


def read_steps(path: str) -> List[FtStep]:
    """A rank's step records, in file order (malformed lines passed over)."""
    return live.read_typed(path, FtStep.from_json, "a torchft step record")


def read_crash(path: str) -> Optional[FtCrash]:
    """A rank's crash record, or None where there is none that reads."""
    return FtCrash.from_json(load_file(path))
