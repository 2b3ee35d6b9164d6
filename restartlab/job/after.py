"""`restartlab submit --after JOB|EXPT_DIR`: wait on the login node until a job has ended, then
submit.

Some queues take one job per user, such as ALCF's debug and debug-scaling ("Max 1 job
running/accruing/queued per-user"). Such a queue refuses a second job while the first is waiting
or running. A dependency (qsub -W depend=...) cannot help, since the dependent job is itself a
queued job.

When the job waited on is a smoke job (`submit --smoke`'s experiment directory), its readiness
report must say READY, or nothing is submitted. After any other job, the wait is for its end,
however it ended."""
import os
import sys
import time
from typing import Optional

from ..contracts import layout, smoke
from ..schedulers.base import PENDING, RUNNING, UNKNOWN, SchedulerError, run_tool
from . import jobref

# the comment a PBS server puts on a job it holds after too many failed starts (OpenPBS 23.06,
# src/server/req_runjob.c: check_failed_attempts): held until someone releases it. A job held on a
# dependency (a chain's continuation) is waited for as any other
STUCK = "too many failed attempts to run"
SAY_EVERY = 60.0       # s between two progress lines while waiting
QUERY_FAILURES = 5     # the server not answering this many times in a row ends the wait


def wait(ref: str, scheduler: Optional[str] = None, poll: float = 30.0, run=run_tool, out=sys.stderr,
         clock=time.monotonic, sleep=time.sleep) -> int:
    """0 once every job of `ref` has ended (and, for a smoke job, its report says READY); 1 when
    it failed, is held by the server, or cannot be followed; 2 for a reference that is not a job.
    An experiment's jobs are read again at each look (a chain adds its continuations as it runs).
    Prints progress; Ctrl-C ends the wait, submitting nothing."""
    try:
        return _wait(ref, scheduler, poll, run, out, clock, sleep)
    except KeyboardInterrupt:
        print("\nrestartlab submit --after: interrupted: nothing submitted", file=out)
        return 130


def awaited(ref: str, scheduler: Optional[str] = None):
    """(scheduler, the job ids `ref` stands for now); jobref.RefError when it stands for none."""
    sched, ids, local = jobref.resolve([ref], scheduler)
    if local or not ids:
        raise jobref.RefError(f"{ref}: no job of a queue to wait for", 2)
    return sched, ids


def _wait(ref, scheduler, poll, run, out, clock, sleep) -> int:
    try:
        sched, ids = awaited(ref, scheduler)
    except jobref.RefError as e:
        print(f"restartlab submit --after: {e}", file=out)
        return e.code
    t0, said, failures, looked = clock(), None, 0, False
    while True:
        if looked and os.path.isdir(ref):
            try:
                ids = awaited(ref, scheduler)[1]
            except jobref.RefError:
                pass  # read again at the next look
        looked = True
        try:
            st = sched.status(ids, run)
            failures = 0
        except SchedulerError as e:
            failures += 1
            if failures >= QUERY_FAILURES:
                print(f"restartlab submit --after: the server did not answer {failures} times in a row ({e}): "
                      "nothing submitted", file=out)
                return 1
            sleep(poll)
            continue
        live = [j for j in ids if st[j].state in (PENDING, RUNNING)]
        unknown = [j for j in ids if st[j].state == UNKNOWN]
        if said is None and unknown and not (os.path.isdir(ref) and os.path.exists(layout.Expt(ref).smoke_report)):
            # never seen: a typo, or a job the server no longer keeps (a smoke job whose report is there ran)
            print(f"restartlab submit --after: the server does not know {', '.join(unknown)}: nothing submitted",
                  file=out)
            return 2
        held = [j for j in live if st[j].detail.startswith("held:") and STUCK in st[j].detail]
        if held:  # held by the server itself (too many failed starts): it runs only once someone releases it
            print(f"restartlab submit --after: {', '.join(f'{j}: {st[j].detail}' for j in held)}: it will not end "
                  "by itself: nothing submitted", file=out)
            return 1
        if not live:
            break
        if said is None or clock() - said >= SAY_EVERY:
            said = clock()
            print(f"restartlab submit --after: waiting for "
                  f"{', '.join(f'{j} ({st[j].state}' + (f': {st[j].detail}' if st[j].detail else '') + ')' for j in live)} "
                  f"({clock() - t0:.0f} s)", file=out, flush=True)
        sleep(poll)
    ended = ", ".join(f"{j} ({st[j].state}{': ' + st[j].detail if st[j].detail else ''})" for j in ids)
    print(f"restartlab submit --after: ended: {ended}", file=out, flush=True)
    return smoke_verdict(ref, out) if os.path.isdir(ref) and _is_smoke(ref) else 0


SMOKE_RUN = "-m restartlab.runtime.smoke run"  # what a smoke job's script runs (templates/smoke.j2)


def _is_smoke(d: str) -> bool:
    """A smoke job's experiment: its report is there, or its job script runs the smoke checks."""
    expt = layout.Expt(d)
    if os.path.exists(expt.smoke_report):
        return True
    try:
        with open(expt.job_script) as f:
            return SMOKE_RUN in f.read()
    except OSError:
        return False


def smoke_verdict(d: str, out) -> int:
    expt = layout.Expt(d)
    report = smoke.read_report(expt.smoke_report)
    if report is None:
        print(f"restartlab submit --after: the smoke job ended without a readiness report ({expt.smoke_report}; its "
              f"output: {expt.job_out}): nothing submitted", file=out)
        return 1
    print("\n".join(f"restartlab submit --after: {x}" for x in report.lines()), file=out)
    if not report.ok:
        print("restartlab submit --after: the smoke job is NOT READY: nothing submitted", file=out)
        return 1
    return 0
