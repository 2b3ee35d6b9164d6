"""relaunch.chain: when the walltime margin or the relaunch budget ended a job before the last
step, submit a continuation job that starts once this one has ended and resumes the experiment
(`restartlab chain`, called by the job script). Every job is a line of the experiment's jobs log."""
import os
import subprocess
import sys
import time

from .. import schedulers
from ..contracts import jobslog, layout, options
from ..tools import options as tool_options
from ..schedulers.base import SchedulerError


def submitted(expt: layout.Expt) -> int:
    """Continuation jobs this experiment's chain has submitted so far."""
    return sum(1 for r in jobslog.read(expt.jobs) if r.submitted_by)


def chain(expt_dir: str, scheduler: str, max_jobs: int, job: str, pass_env=()) -> int:
    expt = layout.Expt(expt_dir)
    used = submitted(expt)
    if used >= max_jobs:
        print(f"restartlab: relaunch.chain: all {max_jobs} continuation job(s) used: not chaining", file=sys.stderr)
        return 0
    sched = schedulers.get(scheduler)
    argv = sched.chain_cmd(job, expt.job_script, pass_env)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=expt_dir)
        if r.returncode:
            raise SchedulerError(f"{argv[0]} exited {r.returncode}: {(r.stderr or r.stdout).strip()}")
        nxt = sched.parse_submit(r.stdout)
    except (OSError, subprocess.TimeoutExpired, SchedulerError) as e:
        print(f"restartlab: relaunch.chain: submitting the continuation failed: {e}", file=sys.stderr)
        return 1
    jobslog.append(expt.jobs, jobslog.JobLine(nxt, submitted_by=job, time=time.time()))
    print(f"restartlab: continuation job {nxt} submitted ({used + 1} of {max_jobs}); it resumes {expt_dir} "
          f"after job {job}", flush=True)
    return 0


def add_args(p):
    p.add_argument("expt_dir")
    options.add_to_parser(p, tool_options.CHAIN)


def main(a) -> int:
    if not os.path.isdir(a.expt_dir):
        print(f"restartlab chain: {a.expt_dir}: not a directory", file=sys.stderr)
        return 2
    return chain(a.expt_dir, a.scheduler, a.max, a.job, [n for n in a.pass_env.split(",") if n])
