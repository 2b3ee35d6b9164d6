"""bench/results.json, as `make bench` writes it (bench/run_all.py, with bench/scaling.py's table and
bench/ckpt_sizes.py's fits): the run's date and machine, the benchmarks that failed, and each
benchmark's figures. The reference pages read it (restartlab/reference.py). A benchmark's figures
are its own nested mapping, walked by path; the two tables the pages draw are records."""
import dataclasses
from typing import Any, Dict, List, Optional

from . import typed_json
from .jsonvalue import load_file


@dataclasses.dataclass
class Entry:
    """What every benchmark's entry holds besides its figures."""
    command: str = ""
    date: Optional[str] = None  # set when it was re-run alone (`run_all.py --only NAME --publish`)


@dataclasses.dataclass
class ScalingCell:
    """bench/scaling.py: one checkpoint on one number of ranks."""
    MB: float
    save_s: float
    load_s: float


@dataclasses.dataclass
class Fit:
    """bench/ckpt_sizes.py: one series' seconds = fixed + bytes / bandwidth, over the width sweep."""
    label: str
    fixed_s: float
    MB_per_s: float
    worst_residual: float
    floor: Optional[str] = None               # the floor it is set against (None: a floor itself)
    per_byte_ratio: Optional[float] = None    # its per-byte cost over its floor's
    per_byte_vs_memory: Optional[float] = None


@dataclasses.dataclass
class PerTensor:
    """bench/ckpt_sizes.py: a point of the layers sweep, beyond the width sweep's fit."""
    tensors: int
    ms_per_tensor: float


@dataclasses.dataclass
class SizePoint:
    bytes: float
    tensors: int


@dataclasses.dataclass
class CkptSizes:
    fits: Dict[str, Fit] = dataclasses.field(default_factory=dict)
    per_tensor: Dict[str, List[PerTensor]] = dataclasses.field(default_factory=dict)
    points: Dict[str, SizePoint] = dataclasses.field(default_factory=dict)
    command: str = ""
    date: Optional[str] = None


@dataclasses.dataclass
class Results:
    date: Optional[str] = None
    machine: Dict[str, Any] = dataclasses.field(default_factory=dict)
    failed: List[str] = dataclasses.field(default_factory=list)
    benchmarks: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)

    def entry(self, name: str) -> Entry:
        return typed_json.read(Entry, self.benchmarks.get(name)) or Entry()

    def scaling(self) -> Dict[str, ScalingCell]:
        """{model@ranks: its cell} of bench/scaling.py's table."""
        got = typed_json.read(_Scaling, self.benchmarks.get("scaling"))
        return got.table if got else {}

    def ckpt_sizes(self) -> CkptSizes:
        return typed_json.read(CkptSizes, self.benchmarks.get("ckpt_sizes")) or CkptSizes()


@dataclasses.dataclass
class _Scaling:
    table: Dict[str, ScalingCell] = dataclasses.field(default_factory=dict)


def read(path: str) -> Optional[Results]:
    """The file's results; None where it cannot be read or is not a JSON object."""
    return typed_json.read(Results, load_file(path))
