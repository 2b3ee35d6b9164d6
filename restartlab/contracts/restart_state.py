"""What one resume restored, piece by piece, as a phase's summary carries it.

It is each restart's `state` in the verdict. analysis/state_compare.ResumeState makes it
(`record()`). The report's verdict reads it. typed_json.to_dict writes it, with the keys in the
order of the fields below. That is the order the summary had when this was a dict
(tests/test_typed_records.py holds it).

A piece is a part of the training state a resume must bring back (contracts/state_record.KEYS).
The pieces are the parameters' fingerprint, the optimizer's state, the learning rate, the data
position and the RNGs."""
import dataclasses
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class PieceDiffer:
    """A piece that differs at the resume: its value in this attempt and in the reference."""
    attempt: Any = None
    baseline: Any = None
    ranks: List[int] = dataclasses.field(default_factory=list)  # the ranks on which it differs


@dataclasses.dataclass
class LaterDiffer:
    """Equal through the resume's window, then these pieces differ from this step."""
    step: int
    pieces: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Restored:
    """The piece's value right after the load was the reference's at `step`: restored, then changed."""
    step: int
    load: str = ""  # the load that gave it


@dataclasses.dataclass
class LoadedOther:
    """The program loaded the piece, but not to the value the run had at the save."""
    load: str = ""
    step: Optional[int] = None  # the one reference step whose value it set, if any


@dataclasses.dataclass
class EpochsOff:
    """Where the data position is, when it matches the reference a whole number of epochs away."""
    off: int            # epochs off: + ahead, - behind
    batch: int = 0      # the batch's number in its epoch
    per_epoch: int = 0  # batches an epoch


@dataclasses.dataclass
class Threads:
    """torch's intra-op threads per rank, where they differ at the resume."""
    attempt: List[int] = dataclasses.field(default_factory=list)
    reference: List[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RestartState:
    """The comparison of one resume's first steps with the reference run's (the baseline, or the
    attempt that saved the checkpoint). `text` is the sentence the report prints; `forgot` the
    pieces that differ (a finding when not empty)."""
    attempt: Optional[int] = None  # None: an unnumbered attempt (a phase read from metrics files)
    step: Optional[int] = None     # the resume's first step
    equal: List[str] = dataclasses.field(default_factory=list)
    forgot: List[str] = dataclasses.field(default_factory=list)
    differ_step: Optional[int] = None  # where they first differ
    differ: Dict[str, PieceDiffer] = dataclasses.field(default_factory=dict)
    not_observed: List[str] = dataclasses.field(default_factory=list)
    unrepeatable: List[str] = dataclasses.field(default_factory=list)
    later: Optional[LaterDiffer] = None
    first_matched: int = 0  # steps at which the phase's first attempt equalled the baseline
    ranks: int = 0          # ranks compared
    note: Optional[str] = None  # why nothing could be compared: the whole sentence, `text` then too
    against: str = ""           # the reference, in words ("": none, when nothing was compared)
    matches: Dict[str, int] = dataclasses.field(default_factory=dict)  # piece -> the reference step it has
    restored: Dict[str, Restored] = dataclasses.field(default_factory=dict)
    disturbed: List[str] = dataclasses.field(default_factory=list)  # restored, then changed before the step
    several: Dict[str, List[int]] = dataclasses.field(default_factory=dict)  # a plateau: which step cannot be told
    loaded_other: Dict[str, LoadedOther] = dataclasses.field(default_factory=dict)
    epochs: Dict[str, EpochsOff] = dataclasses.field(default_factory=dict)
    across: Optional[List[int]] = None  # (the reference's ranks, this attempt's) where they differ
    incomparable: Dict[str, str] = dataclasses.field(default_factory=dict)  # piece -> why not across ranks
    threads: Optional[Threads] = None
    text: str = ""
