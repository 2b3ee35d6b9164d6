"""Slurm: #SBATCH header, sbatch --parsable / squeue / scancel, srun --overlap fan-out."""
import os

from ..scenario import hms
from .base import FAILED, FINISHED, PENDING, RUNNING, UNKNOWN, JobStatus, SchedulerError

PREFIX = "#SBATCH"
NODEFILE_SH = ('RL_NODEFILE="$RL_EXPT_DIR/nodefile.$SLURM_JOB_ID"\n'
               'scontrol show hostnames "${SLURM_JOB_NODELIST:?not running under Slurm}" > "$RL_NODEFILE"')


def directives(sc):
    j, ln = sc["job"], sc["launch"]
    out = [f"--job-name={sc['name']}", f"--nodes={j['nodes']}",
           f"--ntasks-per-node={ln['ranks_per_node']}", f"--time={hms(j['walltime'])}"]
    if j["account"]:
        out.append(f"--account={j['account']}")
    if j["queue"]:
        out.append(f"--partition={j['queue']}")
    out.append(f"--output={sc['expt_dir']}/job-%j.out")
    return out + list(j["directives"])


def submit_cmd(script):
    return ["sbatch", "--parsable", script]


def parse_submit(stdout):
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    jid = line.split(";")[0].strip()
    if not jid.isdigit():
        raise SchedulerError(f"sbatch: unexpected output {stdout!r}")
    return jid


def status_cmd(ids):
    # all of the user's jobs in one query (an unknown id in -j makes squeue fail as a whole)
    return ["squeue", "-h", "-t", "all", "-o", "%i|%T|%r"]


_STATE = {"PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
          "RUNNING": RUNNING, "COMPLETING": RUNNING, "SUSPENDED": RUNNING, "STOPPED": RUNNING,
          "COMPLETED": FINISHED, "FAILED": FAILED, "CANCELLED": FAILED, "TIMEOUT": FAILED,
          "NODE_FAIL": FAILED, "PREEMPTED": FAILED, "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED,
          "DEADLINE": FAILED}


def parse_status(stdout, ids, returncode=0, stderr=""):
    if returncode:  # e.g. the controller is down: never report every job as "unknown"
        raise SchedulerError(f"squeue failed (rc {returncode}): {stderr.strip() or stdout.strip()}")
    seen = {}
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2:
            seen[parts[0]] = parts
    out = {}
    for jid in ids:
        p = seen.get(jid)
        if p is None:
            out[jid] = JobStatus(jid, UNKNOWN, detail="not known to squeue (finished long ago, or never existed)")
        else:
            out[jid] = JobStatus(jid, _STATE.get(p[1], UNKNOWN), None, f"{p[1]} {p[2] if len(p) > 2 else ''}".strip())
    return out


def cancel_cmd(jobid):
    # -v: without it scancel of an unknown id prints nothing and exits 0 (seen with Slurm 22.05)
    return ["scancel", "-v", jobid]


def cancel_error(returncode, stdout, stderr):
    """None when the cancel went through, else the reason."""
    errs = [ln.split("error:", 1)[1].strip() for ln in stderr.splitlines() if "error:" in ln]
    if returncode or errs:
        return "; ".join(errs) or stderr.strip() or f"scancel exited {returncode}"
    return None


def fanout_cmd(node_index, hosts, argv, slots=None):
    return ["srun", "--overlap", f"--jobid={os.environ.get('SLURM_JOB_ID', '')}", "-N", "1", "-n", "1",
            f"--nodelist={hosts[node_index]}", "--export=ALL", *argv]
