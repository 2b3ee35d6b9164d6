"""Slurm: #SBATCH header, sbatch --parsable / sacct (squeue where accounting is off) / scancel,
srun --overlap fan-out."""
import os
import re
import subprocess
import time
from typing import List

from ..contracts.jobruns import NodeChange, RunFacts
from ..contracts.scenario_record import Scenario
from ..contracts.units import hms
from .base import (FAILED, FINISHED, PENDING, RUNNING, UNKNOWN, JobStatus, QueueLimits, Scheduler,
                   SchedulerError, ServerQueues, register)

_STATE = {"PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
          "RUNNING": RUNNING, "COMPLETING": RUNNING, "SUSPENDED": RUNNING, "STOPPED": RUNNING,
          "COMPLETED": FINISHED, "FAILED": FAILED, "CANCELLED": FAILED, "TIMEOUT": FAILED,
          "NODE_FAIL": FAILED, "PREEMPTED": FAILED, "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED,
          "DEADLINE": FAILED}
# what sacct prints (rc 1) when the cluster keeps no job history (no slurmdbd)
ACCOUNTING_OFF = "accounting storage is disabled"


def _by_id(tool, stdout, returncode, stderr, min_fields):
    """{job id: fields} from '|'-separated lines; a failed query is an error, never "unknown"
    for every job (e.g. the controller is down)."""
    if returncode:
        raise SchedulerError(f"{tool} failed (rc {returncode}): {stderr.strip() or stdout.strip()}")
    rows = (line.strip().split("|") for line in stdout.splitlines())
    return {p[0]: p for p in rows if len(p) >= min_fields}


def _exit_code(field: str):
    """sacct's ExitCode is 'code:signal'."""
    code_s, _, sig_s = field.partition(":")
    try:
        code, sig = int(code_s), int(sig_s or 0)
    except ValueError:
        return None
    return 128 + sig if sig else code


def slurm_time(v):
    """A partition's MaxTime/DefaultTime as scontrol prints it: [D-]HH:MM:SS, MM:SS, or
    UNLIMITED/INFINITE (None)."""
    if v in (None, "", "UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = v.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return (int(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def slurm_stamp(v):
    """A date as scontrol and sinfo print it (2026-12-06T12:42:31, the controller's local time) as epoch
    seconds; None for Unknown, None or (null)."""
    try:
        return time.mktime(time.strptime(str(v).strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def job_fields(text):
    """`scontrol show job -o JOBID` -> {key: value} for the one-word values (JobName, Command and the
    like may hold spaces: not read)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", text))


def parse_run_facts(job_text, nodes_text, since):
    """What a requeued job's new run learns from Slurm (22.05 here, measured on the private Slurm).

    `scontrol show job -o` gives:
      - Restarts: how many times the job was requeued.
      - StartTime: this run's start.
      - SubmitTime: set anew when the job is requeued, so it is the requeue's time.
      - EligibleTime: a requeued job waits before it may start again.

    `sinfo -N -o '%N|%T|%E|%H'` gives each node's state, reason and the reason's time.
    From it come the nodes whose reason was set since `since` (went down, drained)."""
    f = job_fields(job_text)
    restarts = int(f["Restarts"]) if f.get("Restarts", "").isdigit() else None
    changed = []
    seen = set()
    for line in nodes_text.splitlines():
        p = line.strip().split("|")
        if len(p) < 4 or p[0] in seen:  # a node in several partitions is listed once for each
            continue
        seen.add(p[0])
        t, reason = slurm_stamp(p[-1]), "|".join(p[2:-1])  # a reason may hold the separator
        if t is not None and since is not None and t >= since:
            changed.append(NodeChange(p[0], p[1], t, reason if reason not in ("", "none") else None))
    return RunFacts(run=restarts + 1 if restarts is not None else None, started=slurm_stamp(f.get("StartTime")),
                    requeued=slurm_stamp(f.get("SubmitTime")) if restarts else None,
                    eligible=slurm_stamp(f.get("EligibleTime")) if restarts else None, nodes=tuple(changed))


def parse_partitions(text):
    """`scontrol show partition -o` (one line per partition, Key=Value words) -> {name: fields}."""
    out = {}
    for line in text.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "PartitionName" in fields:
            out[fields["PartitionName"]] = fields
    return out


def parse_qos(text):
    """`sacctmgr -n -P show qos format=Name,MaxJobsPU,MaxSubmitPU` -> {qos: (max running, max
    submitted) per user}.

    A limit is None where unset. The format is from Slurm's sacctmgr man page. The private test
    Slurm keeps no accounting, so this is read from recorded text only. It is unverified on a live
    QOS."""
    out = {}
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) >= 3 and f[0]:
            out[f[0]] = tuple(int(x) if x.isdigit() else None for x in f[1:3])
    return out


def partition_limits(fields):
    nodes = fields.get("MaxNodes")
    state = fields.get("State", "UP")
    return QueueLimits(fields["PartitionName"], enabled=state != "DOWN" and state != "INACTIVE",
                       started=state == "UP", min_nodes=int(fields.get("MinNodes") or 0) or None,
                       max_nodes=int(nodes) if nodes and nodes.isdigit() else None,
                       max_walltime=slurm_time(fields.get("MaxTime")),
                       total_nodes=int(fields["TotalNodes"]) if fields.get("TotalNodes", "").isdigit() else None,
                       source=f"scontrol show partition {fields['PartitionName']}")


@register
class Slurm(Scheduler):
    name = "slurm"
    prefix = "#SBATCH"
    title = "Slurm"
    jobid_var = "SLURM_JOB_ID"
    query_tool = "squeue"
    nodefile_sh = ('RL_NODEFILE={nodefile}."$SLURM_JOB_ID"\n'
                   'scontrol show hostnames "${{SLURM_JOB_NODELIST:?not running under Slurm}}" > "$RL_NODEFILE"')

    def directives(self, sc: Scenario) -> List[str]:
        j, ln = sc.job, sc.launch
        out = [f"--job-name={sc.name}", f"--nodes={j.nodes + j.spare_nodes}",
               f"--ntasks-per-node={ln.ranks_per_node}", f"--time={hms(j.walltime)}"]
        if sc.relaunch.on_node_loss != "same":
            out.append("--no-kill")  # a failed node leaves the allocation; the job lives on
        if j.account:
            out.append(f"--account={j.account}")
        if j.queue:
            out.append(f"--partition={j.queue}")
        out.append(f"--output={sc.expt_dir}/job-%j.out")
        # A requeued job runs again under its id, into the same file. Without append, Slurm truncates
        # it and the first run's output is lost (Slurm 22.05, measured on the private Slurm).
        out.append("--open-mode=append")
        return out + list(j.directives)

    def submit_cmd(self, script, pass_env=()):
        # sbatch passes the submitting environment on (--export=ALL, its default): pass_env included
        return ["sbatch", "--parsable", "--export=ALL", script]

    def parse_submit(self, stdout):
        line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
        jid = line.split(";")[0].strip()
        if not jid.isdigit():
            raise SchedulerError(f"sbatch: unexpected output {stdout!r}")
        return jid

    def chain_cmd(self, after_job, script, pass_env=()):
        return ["sbatch", "--parsable", "--export=ALL", f"--dependency=afterany:{after_job}", script]

    def status(self, ids, run):
        """sacct keeps finished jobs; where accounting is off, squeue (live jobs only)."""
        rc, out, err = run(self.sacct_cmd(ids))
        if rc and ACCOUNTING_OFF in err.lower():
            rc, out, err = run(self.status_cmd(ids))
            return self.parse_status(out, ids, rc, err)
        return self.parse_sacct(out, ids, rc, err)

    def sacct_cmd(self, ids):
        # -X: the job allocation only (no steps); -P: '|'-separated, no padding
        return ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,Reason", "-j", ",".join(ids)]

    def parse_sacct(self, stdout, ids, returncode=0, stderr=""):
        def status(jid, p):
            detail = " ".join(x for x in (p[1], f"exit {p[2]}", p[3] if len(p) > 3 and p[3] != "None" else "") if x)
            return JobStatus(jid, _STATE.get(p[1].split()[0], UNKNOWN), _exit_code(p[2]), detail)  # 'CANCELLED by 0'
        seen = _by_id("sacct", stdout, returncode, stderr, 3)
        return {j: status(j, seen[j]) if j in seen else JobStatus(j, UNKNOWN, detail="not known to sacct")
                for j in ids}

    def status_cmd(self, ids):
        # all of the user's jobs in one query (an unknown id in -j makes squeue fail as a whole)
        return ["squeue", "-h", "-t", "all", "-o", "%i|%T|%r"]

    def parse_status(self, stdout, ids, returncode=0, stderr=""):
        seen = _by_id("squeue", stdout, returncode, stderr, 2)
        unknown = ("not known to squeue (finished long ago, or never existed; squeue keeps no history "
                   "where accounting is off)")
        return {j: JobStatus(j, _STATE.get(seen[j][1], UNKNOWN), None, " ".join(seen[j][1:3]).strip())
                if j in seen else JobStatus(j, UNKNOWN, detail=unknown) for j in ids}

    jobid_pattern = r"\d+(_\d+)?"  # <job id>[_<array index>]
    fanout_tool = "srun"

    def server_queues(self, run, user):
        """Every partition (scontrol show partition -o) and the one marked Default=YES.

        It also gets the per-user job limits of each partition's QOS (sacctmgr show qos, where
        accounting answers). For `user`, it gets that user's jobs by partition (squeue -u USER)."""
        rc, out, err = run(["scontrol", "show", "partition", "-o"])
        if rc:
            raise SchedulerError(f"scontrol show partition failed (rc {rc}): {err.strip() or out.strip()}")
        parts = parse_partitions(out)
        queues = {n: partition_limits(f) for n, f in parts.items()}
        default = next((n for n, f in parts.items() if f.get("Default") == "YES"), None)
        qos_of = {n: f.get("QoS") for n, f in parts.items() if f.get("QoS") not in (None, "", "N/A")}
        notes = []
        if qos_of:
            try:
                rc, out, err = run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxJobsPU,MaxSubmitPU"])
            except SchedulerError as e:  # not installed, or not answering
                rc, out, err = 1, "", str(e)
            if rc:
                notes.append(f"the QOS limits were not read (sacctmgr: {(err.strip() or out.strip())[:120]})")
            else:
                limits = parse_qos(out)
                for n, qos in qos_of.items():
                    run_n, sub_n = limits.get(qos, (None, None))
                    q = queues[n]
                    if run_n is not None:
                        q.user_run, q.user_run_said = run_n, f"QOS {qos} MaxJobsPU={run_n}"
                    if sub_n is not None:
                        q.user_queued, q.user_queued_said = sub_n, f"QOS {qos} MaxSubmitPU={sub_n}"
        mine = {}
        if user:
            rc, out, err = run(["squeue", "-h", "-u", user, "-o", "%i %P"])
            if rc:
                raise SchedulerError(f"squeue -u {user} failed (rc {rc}): {err.strip() or out.strip()}")
            for line in out.splitlines():
                jid, _, part = line.strip().partition(" ")
                for p in part.split(","):
                    mine.setdefault(p, []).append(jid)
        return ServerQueues(queues, default, mine, "scontrol show partition" + "".join(f"; {x}" for x in notes))

    def run_facts(self, jobid, since, run):
        """A rerun's facts (parse_run_facts) from scontrol and sinfo: they answer without accounting
        (the rerun is a live job); sacct --duplicates would keep each run only where slurmdbd runs. Dates
        in Slurm's standard form whatever the user's SLURM_TIME_FORMAT (this process is jobrun's, short-lived)."""
        os.environ["SLURM_TIME_FORMAT"] = "standard"
        rc, out, err = run(["scontrol", "show", "job", "-o", jobid])
        if rc:
            raise SchedulerError(f"scontrol show job {jobid} failed (rc {rc}): {err.strip() or out.strip()}")
        rc, nodes, err = run(["sinfo", "-h", "-N", "-o", "%N|%T|%E|%H"])
        if rc:
            raise SchedulerError(f"sinfo -N failed (rc {rc}): {err.strip() or nodes.strip()}")
        return parse_run_facts(out, nodes, since)

    def cancel_cmd(self, jobid):
        # -v: without it scancel of an unknown id prints nothing and exits 0 (seen with Slurm 22.05)
        return ["scancel", "-v", jobid]

    def cancel_error(self, returncode, stdout, stderr):
        errs = [ln.split("error:", 1)[1].strip() for ln in stderr.splitlines() if "error:" in ln]
        if returncode or errs:
            return "; ".join(errs) or stderr.strip() or f"scancel exited {returncode}"
        return None

    def job_hosts(self, env):
        nodelist = env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            return None
        r = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
        if r.returncode:
            raise SchedulerError(f"scontrol show hostnames {nodelist}: {r.stderr.strip() or r.returncode}")
        return r.stdout.split() or None

    def fanout_cmd(self, node_index, hosts, argv, slots=None):
        return ["srun", "--overlap", f"--jobid={os.environ.get('SLURM_JOB_ID', '')}", "-N", "1", "-n", "1",
                f"--nodelist={hosts[node_index]}", "--export=ALL", *argv]
