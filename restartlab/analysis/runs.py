"""Which run of its job an attempt ran in.

A scheduler may requeue a job, for example when a node is lost or a node's link is cut. The job then
runs again under the same id. Its attempts carry that run's start (job_start). Between two attempts in
two runs of one job lies the scheduler's requeue. That time is a failure's, not a chain's hand-over.
A chain hands over between different job ids, and that time is the queue's."""


def rerun(a, b) -> bool:
    """b ran in another run of a's job (attempts as collect.AttemptData)."""
    return bool(a.job and a.job == b.job and a.job_start is not None and b.job_start is not None
                and a.job_start != b.job_start)


def run_record(runs, b):
    """The job-run record (contracts/jobruns.JobRun) of the run attempt b ran in, else None."""
    return next((r for r in runs if r.job == b.job and b.job_start is not None and abs(r.start - b.job_start) < 1e-3),
                None)
