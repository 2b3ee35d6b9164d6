"""What every scheduler module provides (a protocol, documented here, implemented as module
functions in pbs.py, slurm.py, local.py):

    PREFIX                                   directive prefix ('#PBS', '#SBATCH', None)
    directives(sc) -> [str]                  directive bodies (after the prefix), deterministic
    submit_cmd(script) -> [argv]             parse_submit(stdout) -> job id
    status_cmd(ids) -> [argv]                parse_status(stdout, ids) -> {id: JobStatus}
    cancel_cmd(jobid) -> [argv]              cancel_error(rc, stdout, stderr) -> None or reason
    fanout_cmd(node_index, hosts, argv, slots) -> [argv]   run argv once on node `node_index`
                                             (slots: each host's first line in the node file)
    NODEFILE_SH                              bash that sets RL_NODEFILE (one line per host)
"""
from dataclasses import dataclass
from typing import Optional

# states, common to all schedulers
PENDING, RUNNING, FINISHED, FAILED, UNKNOWN = "pending", "running", "finished", "failed", "unknown"


@dataclass
class JobStatus:
    jobid: str
    state: str
    exit_status: Optional[int] = None
    detail: str = ""

    def as_dict(self):
        return {"jobid": self.jobid, "state": self.state, "exit_status": self.exit_status,
                "detail": self.detail}


class SchedulerError(Exception):
    pass
