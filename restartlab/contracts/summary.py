"""The report's summary (layout.Expt.summary): what `restartlab report` measured, for programs to read
(`simulate --from`, `restartlab run`'s last lines, the benchmarks). `restartlab report` is its one
writer (`Summary.write`); every reader reads it through `Summary.read`, which names the file and what
is wrong with it. A phase's entry is a PhaseSummary (contracts/phase_summary.py: the collector makes
most of it, the report adds the verdicts), and a test holds a fresh report's keys to its fields."""
import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from .ft_summary import FtSummary
from .job_status import JobStatus
from .phase_summary import PhaseSummary, StrategyRow
from .typed_json import read, to_dict


class SummaryError(ValueError):
    pass


@dataclasses.dataclass
class Summary:
    source: str
    phases: List[PhaseSummary]
    missing: List[str] = dataclasses.field(default_factory=list)
    problems: List[str] = dataclasses.field(default_factory=list)
    jobs: List[JobStatus] = dataclasses.field(default_factory=list)  # the batch jobs' states
    torchft: Dict[str, FtSummary] = dataclasses.field(default_factory=dict)  # per torchft phase: its accounting
    strategies: Optional[List[StrategyRow]] = None                  # the strategies' table (with torchft)

    def by_phase(self) -> Dict[str, PhaseSummary]:
        return {p.phase: p for p in self.phases}

    def write(self, path: str) -> None:
        """Whole or not at all (a reader never sees half a summary)."""
        tmp = f"{path}.tmp"
        d = {fl.name: getattr(self, fl.name) for fl in dataclasses.fields(self)}  # the phases as they are (no deep copy)
        d["phases"] = [p.to_dict() for p in self.phases]
        d["strategies"] = to_dict(self.strategies)
        d["jobs"] = to_dict(self.jobs)
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
        vals["phases"] = [p for p in map(PhaseSummary.from_dict, d["phases"]) if p is not None]
        jobs = d["jobs"] if isinstance(d.get("jobs"), list) else []
        vals["jobs"] = [j for j in (read(JobStatus, x) for x in jobs) if j is not None]
        if isinstance(d.get("strategies"), list):
            vals["strategies"] = [r for r in (read(StrategyRow, x) for x in d["strategies"]) if r is not None]
        fts = ((n, FtSummary.from_dict(ft)) for n, ft in (d["torchft"].items() if isinstance(d.get("torchft"), dict) else ()))
        vals["torchft"] = {n: ft for n, ft in fts if ft is not None}  # a phase's entry that does not read is left out
        return cls(**vals)
