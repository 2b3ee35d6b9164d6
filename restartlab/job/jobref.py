"""What `status` and `cancel` are given, resolved to one scheduler and its job ids.

- An experiment directory goes by the scheduler it was submitted to, which its resolved scenario
  records. It stands for every job of its chain, as its jobs log lists them.
- A bare job id goes by its form: <seq>.<server> for PBS, digits for Slurm. Only a bare number
  that either could own goes by the query tool on PATH.

Never a Slurm query for a PBS id."""
import os
import re
from typing import List, Optional, Tuple

from .. import schedulers
from ..contracts import jobslog, layout
from ..scenario import ScenarioError, read_resolved


class RefError(Exception):
    def __init__(self, msg, code=2):
        super().__init__(msg)
        self.code = code


def experiment_scheduler(d: str) -> str:
    try:
        return read_resolved(layout.Expt(d).scenario).scheduler
    except ScenarioError as e:
        raise RefError(f"{d}: not an experiment directory restartlab made ({e})")


def by_form(jid: str) -> List[str]:
    """The schedulers whose job ids look like `jid`."""
    return [s.name for s in schedulers.SCHEDULERS.all() if s.jobid_pattern and re.fullmatch(s.jobid_pattern, jid)]


def _bare_number(jid: str) -> str:
    """A bare sequence number: Slurm's form, and one PBS accepts too; the query tool on PATH says
    which (both on PATH: ambiguous)."""
    here = [s.name for s in schedulers.on_path()]
    if len(here) == 1:
        return here[0]
    raise RefError(f"{jid}: a bare number could be a {' or '.join(here) or 'PBS or Slurm'} job: pass --scheduler"
                   if here else f"{jid}: none of qstat, squeue is on PATH: pass --scheduler", 3 if not here else 2)


def resolve(refs: List[str], scheduler: Optional[str] = None) -> Tuple[Optional[schedulers.Scheduler], List[str], List[str]]:
    """(the scheduler, the job ids to ask it about, the local experiments among `refs`)."""
    names, ids, local = set(), [], []
    for x in refs:
        if os.path.isdir(x):
            expt = layout.Expt(x)
            if os.path.exists(expt.not_submitted):
                with open(expt.not_submitted) as f:
                    raise RefError(f"{x}: never submitted: {f.read().strip()}", 1)
            name = experiment_scheduler(x)
            if not schedulers.get(name).has_queue:
                local.append(x)
                continue
            names.add(scheduler or name)
            try:
                found = jobslog.job_ids(x)
            except (OSError, ValueError) as e:
                raise RefError(f"{x}: cannot read the experiment's jobs ({e})")
            if not found:  # both files there, neither with an id: nothing to cancel is not "cancelled"
                raise RefError(f"{x}: no job id in {expt.jobid} or {expt.jobs}")
            ids += [j for j in found if j not in ids]
            continue
        ids.append(x)
        if scheduler:
            continue
        form = by_form(x)
        if len(form) == 1 and not x.isdigit():  # only a bare number is ambiguous
            names.add(form[0])
        elif form:
            names.add(_bare_number(x))
        else:
            raise RefError(f"{x}: neither an experiment directory nor a job id (PBS: 1234.server, Slurm: 1234)")
    if scheduler:
        names = {scheduler}
    if len(names) > 1:
        raise RefError(f"these are jobs of {' and '.join(sorted(names))}: ask about one scheduler's at a time")
    return (schedulers.get(names.pop()) if names else None), ids, local


def local_status(d: str) -> str:
    """A `restartlab run` experiment: no scheduler keeps its state; what its files say."""
    expt = layout.Expt(d)
    if os.path.exists(expt.summary):
        return f"{d}\tfinished\ta local run (restartlab run): report {expt.report}"
    return f"{d}\tunknown\ta local run (restartlab run): no scheduler keeps its state; its output: {expt.job_out}"
