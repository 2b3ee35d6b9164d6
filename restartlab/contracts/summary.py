"""The report's summary (layout.Expt.summary): what `restartlab report` measured, for programs to read
(`simulate --from`, `restartlab run`'s last lines, the benchmarks). `restartlab report` is its one
writer (`Summary.write`); every reader reads it through `Summary.read`, which names the file and what
is wrong with it. A phase's entry is a PhaseSummary: its fields are declared here, once (the
collector makes most of them, analysis/collect.summarize_phase; the report adds the verdicts,
analysis/report.build), and a test holds a fresh report's keys to this list."""
import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, TypedDict

from .ft_summary import FtSummary


class SummaryError(ValueError):
    pass


class PhaseSummary(TypedDict, total=False):
    # made by the collector (analysis/collect.summarize_phase)
    phase: str
    wall_s: Optional[float]
    attempts: int
    kills: int
    steps: int
    completed: bool
    failures: List[Dict[str, Any]]  # one per failure: collect.failure_events
    by_kind: Dict[str, Dict[str, Any]]  # per failure kind: counts and medians (collect.by_kind)
    lost_steps: int
    downtime_s: float
    recompute_s: float
    save_stall_s: float
    saves_estimated: int            # of the saves, how many were estimated from step times (tap.py)
    save: Dict[str, Dict[str, Any]]  # per save figure: count, median, p90, total
    finalize: Dict[str, Any]
    productive_s: float
    ettr: Optional[float]
    walltime_stop: Optional[Dict[str, Any]]
    interference: Optional[Dict[str, Any]]
    interference_s: float
    step_dt_s: Optional[float]
    # each partition, flap, slow_link: down, stand-still, who noticed when (netfaults.py)
    network_faults: List[Dict[str, Any]]
    # each stall_writes, slow_storage, write_errors, torn on a rank (storagefaults.py)
    storage_faults: List[Dict[str, Any]]
    first_start_s: Optional[float]
    jobs: List[str]
    handovers: List[Dict[str, Any]]
    queue_wait_s: float
    # a failure at a random time: per_failure, save_interval_steps, complete_lag_steps
    expected_loss: Optional[Dict[str, Any]]
    # added by the report (analysis/report.build)
    checkpoint: Optional[str]
    warnings: List[str]
    overhead: Optional[Dict[str, Any]]
    young_daly: Dict[str, Any]
    policy: str
    survival: Optional[Dict[str, Any]]
    ended: Optional[Dict[str, Any]]
    own_metrics: Optional[Dict[str, Any]]
    reused_from: Optional[str]


PHASE_FIELDS = tuple(PhaseSummary.__annotations__)


@dataclasses.dataclass
class Summary:
    source: str
    phases: List[PhaseSummary]
    missing: List[str] = dataclasses.field(default_factory=list)
    problems: List[str] = dataclasses.field(default_factory=list)
    jobs: List[Dict[str, Any]] = dataclasses.field(default_factory=list)  # the batch jobs' states
    torchft: Dict[str, FtSummary] = dataclasses.field(default_factory=dict)  # per torchft phase: its accounting
    strategies: Optional[List[Dict[str, Any]]] = None               # the strategies' table (with torchft)

    def by_phase(self) -> Dict[str, PhaseSummary]:
        return {p["phase"]: p for p in self.phases}

    def write(self, path: str) -> None:
        """Whole or not at all (a reader never sees half a summary)."""
        tmp = f"{path}.tmp"
        d = {fl.name: getattr(self, fl.name) for fl in dataclasses.fields(self)}  # the phases as they are (no deep copy)
        d["torchft"] = {n: ft.to_dict() for n, ft in self.torchft.items()}
        with open(tmp, "w") as f:
            json.dump(d, f, indent=1, default=str)
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: str) -> "Summary":
        """SummaryError naming the file: unreadable, not JSON, or not a report's summary."""
        try:
            with open(path) as f:
                d = json.load(f)
        except OSError as e:
            raise SummaryError(f"{path}: {e.strerror}") from None
        except ValueError as e:
            raise SummaryError(f"{path}: not JSON ({e})") from None
        if not isinstance(d, dict) or not isinstance(d.get("phases"), list) or \
                not all(isinstance(p, dict) and isinstance(p.get("phase"), str) for p in d["phases"]):
            raise SummaryError(f"{path}: not a restartlab report summary (no list of phases, each with its name)")
        vals = {f.name: d[f.name] for f in dataclasses.fields(cls) if d.get(f.name) is not None}
        vals.setdefault("source", "")
        fts = ((n, FtSummary.from_dict(ft)) for n, ft in (d["torchft"].items() if isinstance(d.get("torchft"), dict) else ()))
        vals["torchft"] = {n: ft for n, ft in fts if ft is not None}  # a phase's entry that does not read is left out
        return cls(**vals)
