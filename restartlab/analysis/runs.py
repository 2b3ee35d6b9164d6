"""Which run of its job an attempt ran in: a scheduler may requeue a job (a node lost, a node's link
cut), and it runs again under the same id, its attempts carrying that run's start (job_start). Two
attempts in two runs of one job have the scheduler's requeue between them: a failure's time, not a
chain's hand-over (different job ids: the queue's)."""


def rerun(a, b) -> bool:
    """b ran in another run of a's job (attempts as collect.AttemptData)."""
    return bool(a.job and a.job == b.job and a.job_start is not None and b.job_start is not None
                and a.job_start != b.job_start)


def run_record(runs, b):
    """The job-run record (contracts/jobruns.JobRun) of the run attempt b ran in, else None."""
    return next((r for r in runs if r.job == b.job and b.job_start is not None and abs(r.start - b.job_start) < 1e-3),
                None)
