"""A batch job's state as its scheduler reports it.

schedulers/base.Scheduler.status parses qstat's or sacct's answer into it. `restartlab status --json`
prints it, and the report's summary lists it under `jobs` (contracts/summary.Summary)."""
import dataclasses
from typing import Any, Dict, Optional, cast

from .typed_json import to_dict


@dataclasses.dataclass
class JobStatus:
    jobid: str
    state: str                         # one of schedulers/base's states: pending, running, finished, failed, unknown
    exit_status: Optional[int] = None  # the job's, once it ended (a signal: 256 + its number on Slurm)
    detail: str = ""                   # the scheduler's own words (its state, a comment, why it is unknown)

    def as_dict(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], to_dict(self))
