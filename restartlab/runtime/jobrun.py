"""python -m restartlab.runtime.jobrun --expt-dir D --job J --start S --scheduler NAME

The job script's second line of record as a run of a job starts. The first is layout.Expt.jobs'.
It writes one line in layout.Expt.job_runs, with this run's nodes and what the scheduler says of
this run (Scheduler.run_facts):
- How many times the job has started, and when.
- The nodes whose state changed since its previous run began, among that run's nodes.

Only a rerun asks the scheduler: a job id already among the experiment's jobs with an earlier start.
A first run costs nothing but this process. It is never the job's failure. A scheduler that does not
answer is written down as such, and the exit status is 0."""
import argparse
import sys
from typing import List, Optional

from .. import schedulers
from ..contracts import jobruns, jobslog, layout
from ..contracts.jobruns import JobRun, RunFacts
from .fanout import read_nodefile


def _short(host: str) -> str:
    return host.split(".", 1)[0]


def record(expt_dir: str, job: str, start: float, scheduler: str, nodefile: Optional[str] = None,
           run: Optional[schedulers.base.Runner] = None) -> JobRun:
    expt = layout.Expt(expt_dir)
    hosts = tuple(read_nodefile(nodefile)[0]) if nodefile else ()
    before = [r for r in jobruns.read(expt.job_runs, []) if r.job == job and r.start < start]
    earlier = [r.start for r in jobslog.read(expt.jobs) if r.job == job and r.start is not None and r.start < start]
    if not earlier:
        rec = JobRun(job, start, scheduler, run=1, hosts=hosts)
    else:
        try:
            facts = schedulers.get(scheduler).run_facts(job, max(earlier), run or schedulers.base.run_tool)
        except (KeyError, schedulers.base.SchedulerError, ValueError) as e:
            rec = JobRun(job, start, scheduler, error=f"{type(e).__name__}: {e}", hosts=hosts)
        else:
            facts = facts or RunFacts(run=len(earlier) + 1)
            prev = {_short(h) for h in before[-1].hosts} if before and before[-1].hosts else set()
            # Keep the previous run's nodes only, by short name. Keep none where its line does not name them:
            # a cluster's other nodes change too. A node file may hold the fully qualified name, pbsnodes
            # the short one.
            rec = JobRun(job, start, scheduler, run=facts.run, started=facts.started,
                         nodes=tuple(n for n in facts.nodes if _short(n.node) in prev), hosts=hosts,
                         requeued=facts.requeued, eligible=facts.eligible)
    with open(expt.job_runs, "a") as f:
        f.write(rec.to_json() + "\n")
    return rec


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m restartlab.runtime.jobrun")
    p.add_argument("--expt-dir", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--start", type=float, required=True)
    p.add_argument("--scheduler", required=True)
    p.add_argument("--nodefile", default=None, help="this run's node file (its nodes, for the next run's record)")
    a = p.parse_args(argv)
    try:
        rec = record(a.expt_dir, a.job, a.start, a.scheduler, a.nodefile)
    except Exception as e:  # never the job's failure (an answer of a shape this version does not read)
        print(f"restartlab: job-run record not written: {e}", file=sys.stderr)
        return 0
    if rec.run and rec.run > 1:
        print(f"restartlab: run {rec.run} of job {a.job}"
              + "".join(f"; {n.node} {n.state} since {n.since:.0f}" for n in rec.nodes)
              + (f" (the scheduler did not answer: {rec.error})" if rec.error else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
