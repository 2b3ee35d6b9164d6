"""One line of layout.Expt.job_runs: what the scheduler said of one run of a job as it started.

The one writer is runtime/jobrun.py. The job script runs it after its line in layout.Expt.jobs.

A requeued job runs again under its id. Each run's line names its nodes. A rerun's line also says
how many times the job has started, and when. It says which of the previous run's nodes changed
state since that run began (went down, came back). The lines are read by collect.py, to tell the
time between two runs of one job in its parts. It has one tolerant reader. A line this version
cannot take is left out with a warning."""
import dataclasses
import json
from typing import Any, List, Optional, Tuple

from . import live


@dataclasses.dataclass(frozen=True)
class NodeChange:
    node: str
    state: Optional[str]
    since: float
    comment: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the scheduler says of a run of a job as it starts (Scheduler.run_facts): the JobRun's
    fields it fills."""
    run: Optional[int] = None
    started: Optional[float] = None
    nodes: Tuple[NodeChange, ...] = ()  # the nodes whose state changed since the time asked about
    requeued: Optional[float] = None
    eligible: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class JobRun:
    job: str
    start: float                  # the job script's start (layout.Expt.jobs' `start`: the attempts carry it)
    scheduler: str
    run: Optional[int] = None     # how many times the job has started, this one included (PBS run_count)
    started: Optional[float] = None  # the scheduler's start time of this run (PBS stime)
    nodes: Tuple[NodeChange, ...] = ()  # the previous run's nodes whose state changed since it began
    error: Optional[str] = None   # the scheduler could not be asked: why
    hosts: Tuple[str, ...] = ()   # this run's nodes (its node file): the next run's record looks at these
    requeued: Optional[float] = None  # when the scheduler requeued the job (Slurm's SubmitTime after a requeue)
    eligible: Optional[float] = None  # when the requeued job could start again (Slurm's EligibleTime)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: object) -> Optional["JobRun"]:
        if not isinstance(d, dict) or not isinstance(d.get("job"), str):
            return None
        try:
            nodes = tuple(NodeChange(str(n["node"]), n.get("state"), float(n["since"]), n.get("comment"))
                          for n in d.get("nodes") or [])
            return cls(d["job"], float(d["start"]), str(d.get("scheduler") or ""),
                       int(d["run"]) if d.get("run") is not None else None,
                       float(d["started"]) if d.get("started") is not None else None, nodes, d.get("error"),
                       tuple(str(h) for h in d.get("hosts") or []), _time(d.get("requeued")), _time(d.get("eligible")))
        except (KeyError, TypeError, ValueError):
            return None


def _time(v: Any) -> Optional[float]:
    return float(v) if v is not None else None


def read(path: str, warnings: List[str]) -> List[JobRun]:
    """The file's records in order ([] when there is none); a line this version cannot take is named."""
    return live.read_typed(path, JobRun.from_json, "a job-run record", warnings)
