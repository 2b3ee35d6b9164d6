"""The jobs log (layout.Expt.jobs): a line for each batch job that worked on an experiment.

It has two writers, with one line shape each:
- The job script, as a run of a job starts (templates/body.j2 and smoke.j2, in shell: printf
  '{"job": ..., "start": ...}'). It sets `start`.
- A chain's continuation, as it is submitted (job/chain.py, through `append`). It sets
  `submitted_by` and `time`.

It has one tolerant reader (`read`). A line without a job id is passed over. A field of the wrong
type is absent."""
import dataclasses
import errno
import json
import os
from typing import List, Optional

from . import layout, live
from .jsonvalue import number, text


@dataclasses.dataclass(frozen=True)
class JobLine:
    job: str
    start: Optional[float] = None          # a run of the job started then (the job script's clock)
    submitted_by: Optional[str] = None     # a continuation: the job that submitted it (relaunch.chain)
    time: Optional[float] = None           # when it was submitted

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in dataclasses.asdict(self).items() if v is not None})

    @classmethod
    def from_json(cls, d: object) -> Optional["JobLine"]:
        if not isinstance(d, dict) or d.get("job") in (None, ""):
            return None
        return cls(str(d["job"]), number(d.get("start")), text(d.get("submitted_by")), number(d.get("time")))


def read(path: str, warnings: Optional[List[str]] = None) -> List[JobLine]:
    return live.read_typed(path, JobLine.from_json, "a jobs log line", warnings)


def append(path: str, line: JobLine) -> None:
    with open(path, "a") as f:
        f.write(line.to_json() + "\n")


def job_ids(expt_dir: str) -> List[str]:
    """Every batch job that worked on an experiment, in order.

    First comes the id `restartlab submit` wrote: the first job, known before it starts. Then come
    the ids in its jobs log. Each run writes a line, and a chain adds its continuations. The log is
    read by `read`, so a line a job script is still writing is passed over, not an error. OSError
    when neither file is there, or the log cannot be opened. [] when both hold no id (the callers
    say so)."""
    expt = layout.Expt(expt_dir)
    if not os.path.exists(expt.jobid) and not os.path.exists(expt.jobs):
        raise FileNotFoundError(errno.ENOENT, "no job id file and no jobs log", expt.jobs)
    ids = []
    if os.path.exists(expt.jobid):
        with open(expt.jobid) as f:
            ids += [line.strip() for line in f if line.strip()]
    if os.path.exists(expt.jobs):
        with open(expt.jobs):  # one we may not open is an error, not "no jobs" (read() passes over it)
            pass
        ids += [r.job for r in read(expt.jobs)]
    return list(dict.fromkeys(ids))
