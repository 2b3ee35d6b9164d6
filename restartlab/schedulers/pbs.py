"""PBS Pro (ALCF Aurora / Sunspot / Polaris): #PBS header, qsub / qstat -f -x / qdel, pbsdsh -n
fan-out. What each relies on, as measured on OpenPBS 23.06: docs/pbs.md."""
import json
import os
import re
import shutil
import time
from typing import List, Optional

from ..contracts.jobruns import NodeChange, RunFacts
from ..contracts.scenario_record import Scenario
from ..contracts.units import hms, parse_duration
from .base import (FAILED, FINISHED, PENDING, RUNNING, UNKNOWN, JobStatus, QueueLimits, Scheduler, SchedulerError,
                   ServerQueues,
                   register)

EXIT_UNKNOWN_JOB, EXIT_JOB_FINISHED = 153, 35
_STATE = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "S": PENDING,
          "R": RUNNING, "E": RUNNING, "B": RUNNING, "X": FINISHED, "F": FINISHED}


def exit_detail(code):
    """PBS Exit_status: 0 ok; 256+N killed by signal N; negative: PBS-side (-29 walltime)."""
    if code is None:
        return ""
    if code > 256:
        return f"killed by signal {code - 256}"
    if code < 0:
        return _JOB_EXEC.get(code, f"PBS-side failure {code}")
    return "exit code 0" if code == 0 else f"exit code {code}"


# PBS's own exit statuses for a job its MoM could not start or had to end (JOB_EXEC_* in OpenPBS
# 23.06's src/include/job.h). The server requeues a job that ended -3 or -30. It holds the job once
# its run_count passes 20 (check_failed_attempts in src/server/req_runjob.c).
_JOB_EXEC = {
    -1: "job exec failed before files, no retry (JOB_EXEC_FAIL1)",
    -2: "job exec failed after files, no retry (JOB_EXEC_FAIL2)",
    -3: "job exec failed, retried (JOB_EXEC_RETRY)",
    -4: "job aborted on MoM initialisation (JOB_EXEC_INITABT)",
    -10: "the job's user or group is not valid on the execution host (JOB_EXEC_FAILUID)",
    -11: "job exec failed: bad script", -13: "bad password (JOB_EXEC_FAIL_PASSWORD)",
    -20: "a sister MoM failed and the job was rerun (JOB_EXEC_RERUN_MS_FAIL)",
    -22: "a hook failed (JOB_EXEC_HOOKERROR)",
    -27: "memory limit exceeded (JOB_EXEC_KILL_MEM)",
    -29: "walltime exceeded (JOB_EXEC_KILL_WALLTIME)",
    -30: "the mother superior could not join a sister MoM: its connection to one of the job's hosts "
         "closed while the job started (JOB_EXEC_JOINJOB)",
}


def tool(name, env=os.environ):
    """A PBS command inside a job: on PATH, else under PBS_EXEC (from the environment or the job's
    pbs.conf). A PBS job runs a login shell, whose profile may not put /opt/pbs/bin on PATH (seen on
    OpenPBS 23.06 without /etc/profile.d/pbs.sh); PBS_CONF_FILE always reaches the job."""
    found = shutil.which(name)
    if found:
        return found
    home = env.get("PBS_EXEC")
    if not home:
        try:
            with open(env.get("PBS_CONF_FILE") or "/etc/pbs.conf") as f:
                home = next((ln.split("=", 1)[1].strip() for ln in f if ln.startswith("PBS_EXEC=")), None)
        except OSError:
            home = None
    path = os.path.join(home or "/opt/pbs", "bin", name)
    return path if os.access(path, os.X_OK) else name


def _pbs_time(text) -> Optional[float]:
    """qstat's 'Sun Dec  6 10:03:26 2026' (the server's local time) as epoch seconds; None when absent."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return time.mktime(time.strptime(" ".join(str(text).split()), "%a %b %d %H:%M:%S %Y"))
    except (TypeError, ValueError):
        return None


def parse_qstat_f(text, header="Job Id:"):
    """`qstat -f` text -> {job id: {attribute: value}}: a job starts at `Job Id: ID`, each attribute
    is `    name = value`, and a long value goes on in lines that start with a tab. `qstat -Qf` and
    `-Bf` are the same with `Queue:` and `Server:` as the header. An attribute printed once per
    entry (a queue's `max_queued = [u:PBS_GENERIC=1]` then `max_queued = [o:PBS_ALL=10]`, OpenPBS
    23.06) is joined with commas, as qmgr takes it."""
    jobs, cur, last = {}, None, None
    for line in text.splitlines():
        if line.startswith(header):
            cur, last = jobs.setdefault(line.split(":", 1)[1].strip(), {}), None
        elif cur is not None and line.startswith("\t") and last:
            cur[last] += line[1:]
        elif cur is not None and " = " in line:
            last, _, value = line.strip().partition(" = ")
            cur[last] = f"{cur[last]},{value}" if last in cur else value
    return jobs


def _int(v):
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


# A PBS limit's entries: [u:PBS_GENERIC=1] for every user, [u:alice=3] for one user, [o:PBS_ALL=10]
# for all jobs, and [g:...], [p:...]. The source is PBS Professional's admin guide, "Scheduling
# limits". On OpenPBS 23.06, qstat -Qf prints one line per entry (measured).
_LIMIT = re.compile(r"\[([ugpo]):([^=\]]+)=(\d+)\]")


def user_limit(attrs, new, old, user):
    """A per-user job limit from a queue's attributes -> (count, the server's words) or (None, '').
    New style `new` = [u:USER=N] for this user, else [u:PBS_GENERIC=N]; old style `old` = N (a server
    takes one style or the other: qmgr refuses to mix them)."""
    entries = {(k, who): int(n) for k, who, n in _LIMIT.findall(attrs.get(new, ""))}
    for who in ((user,) if user else ()) + ("PBS_GENERIC",):
        if ("u", who) in entries:
            return entries["u", who], f"{new} [u:{who}={entries['u', who]}]"
    if old and _int(attrs.get(old)) is not None:
        return int(attrs[old]), f"{old} = {attrs[old]}"
    return None, ""


def queue_from_attrs(queue, attrs, user=None, source=None):
    """One queue's `qstat -Qf` attributes -> QueueLimits.

    It reads what OpenPBS 23.06 prints: queue_type, enabled, started, resources_min/max.nodect and
    .walltime, route_destinations, from_route_only, max_run, max_queued, max_user_run. An attribute
    never set is not printed."""
    min_wall, max_wall = (parse_duration(attrs[f"resources_{k}.walltime"]) if f"resources_{k}.walltime" in attrs
                          else None for k in ("min", "max"))
    run, run_said = user_limit(attrs, "max_run", "max_user_run", user)
    queued, queued_said = user_limit(attrs, "max_queued", None, user)
    route = tuple(d.strip() for d in attrs.get("route_destinations", "").split(",") if d.strip()) \
        if attrs.get("queue_type", "").lower() == "route" else ()
    return QueueLimits(queue, enabled=attrs.get("enabled") == "True", started=attrs.get("started") == "True",
                       min_nodes=_int(attrs.get("resources_min.nodect")),
                       max_nodes=_int(attrs.get("resources_max.nodect")),
                       min_walltime=min_wall, max_walltime=max_wall,
                       source=source or f"qstat -Qf {queue}", route_to=route,
                       from_route_only=attrs.get("from_route_only") == "True",
                       user_run=run, user_run_said=run_said, user_queued=queued, user_queued_said=queued_said,
                       users_only=_acl(attrs, "acl_user_enable", "acl_users"),
                       groups_only=_acl(attrs, "acl_group_enable", "acl_groups"))


def _acl(attrs, enable, names):
    """The names a queue's access list admits, where it is enabled (None: open to all)."""
    if attrs.get(enable) != "True":
        return None
    return tuple(n.split("@")[0].strip() for n in attrs.get(names, "").split(",") if n.strip())


def parse_queue(text, queue, user=None):
    """`qstat -Qf QUEUE` -> QueueLimits."""
    return queue_from_attrs(queue, next(iter(parse_qstat_f(text, "Queue:").values()), {}), user)


@register
class PBS(Scheduler):
    name = "pbs"
    prefix = "#PBS"
    title = "PBS Pro"
    jobid_var = "PBS_JOBID"
    query_tool = "qstat"
    nodefile_var = "PBS_NODEFILE"
    fanout_relays_output = False  # measured on OpenPBS 23.06: see docs/pbs.md
    fanout_tool, fanout_where = "pbsdsh", "neither on PATH nor under PBS_EXEC/bin (pbs.conf)"

    def fanout_path(self, env):
        path = tool("pbsdsh", env)  # in the job: on PATH, else under PBS_EXEC
        return path if os.path.isabs(path) and os.access(path, os.X_OK) else None
    nodefile_sh = 'RL_NODEFILE="${{PBS_NODEFILE:?PBS_NODEFILE is not set: is this running under PBS?}}"'

    def directives(self, sc: Scenario) -> List[str]:
        j, ln = sc.job, sc.launch
        sel = f"select={j.nodes + j.spare_nodes}"  # spares: allocated, kept idle
        if j.ncpus:
            sel += f":ncpus={j.ncpus}"
        sel += f":mpiprocs={ln.ranks_per_node}"
        if j.select:
            sel += f":{j.select}"
        out = [f"-N {sc.name[:236]}"]
        if j.account:
            out.append(f"-A {j.account}")
        if j.queue:
            out.append(f"-q {j.queue}")
        out += [f"-l {sel}", f"-l walltime={hms(j.walltime)}"]
        if j.place:
            out.append(f"-l place={j.place}")
        if j.filesystems:
            out.append(f"-l filesystems={j.filesystems}")
        # The job's output goes into the experiment directory. A directory given to -o (the trailing
        # slash) is filled with <job id>.OU, so a chain's jobs each keep their own (OpenPBS 23.06, measured).
        out += ["-k doe", "-j oe", f"-o {sc.expt_dir}/"]
        return out + list(j.directives)

    def submit_cmd(self, script, pass_env=()):
        # qsub -v NAME (no value): the value is taken from qsub's own environment
        return ["qsub", *(["-v", ",".join(pass_env)] if pass_env else []), script]

    def parse_submit(self, stdout):
        """qsub prints `<seq>.<server>` on one line."""
        jid = stdout.strip().splitlines()[-1].strip() if stdout.strip() else ""
        if not jid or " " in jid:
            raise SchedulerError(f"qsub: unexpected output {stdout!r}")
        return jid

    def chain_cmd(self, after_job, script, pass_env=()):
        # run inside the job, whose login shell may not have /opt/pbs/bin on PATH
        return [tool("qsub"), "-W", f"depend=afterany:{after_job}", *(["-v", ",".join(pass_env)] if pass_env else []),
                script]

    def status_cmd(self, ids):
        # The text form, not -F json. OpenPBS 23.06's `qstat -f -F json`, given several ids, prints
        # the first job only (measured, docs/pbs.md). -x adds finished jobs (job_history_enable).
        return ["qstat", "-f", "-x", *ids]

    def parse_status(self, stdout, ids, returncode=0, stderr=""):
        """`qstat -f -x` output -> {id: JobStatus}. Ids qstat does not know (it prints
        'Unknown Job Id' and exits 153, after the jobs it knows) are UNKNOWN."""
        if returncode not in (0, EXIT_UNKNOWN_JOB, EXIT_JOB_FINISHED):
            # e.g. the server cannot be reached: never report every job as "unknown"
            raise SchedulerError(f"qstat failed (rc {returncode}): {stderr.strip() or stdout.strip()}")
        jobs = parse_qstat_f(stdout)
        out = {}
        for jid in ids:
            rec = jobs.get(jid) or next((v for k, v in jobs.items() if k.split(".")[0] == jid.split(".")[0]), None)
            if rec is None:
                out[jid] = JobStatus(jid, UNKNOWN, detail="unknown job id")
                continue
            st = _STATE.get(rec.get("job_state"), UNKNOWN)
            try:
                code = int(rec["Exit_status"]) if "Exit_status" in rec else None
            except ValueError:
                raise SchedulerError(f"qstat: job {jid}: Exit_status {rec['Exit_status']!r} is not a number")
            if st == FINISHED and code not in (None, 0):
                st = FAILED
            detail = exit_detail(code)
            if rec.get("job_state") == "H" and rec.get("comment"):
                # held by PBS itself (e.g. "job held, too many failed attempts to run"): it never runs
                # until someone releases it, so say why, with the last try's exit status
                tries = f"{rec['run_count']} tries" if rec.get("run_count") else ""
                detail = "; ".join(x for x in (f"held: {rec['comment']}", tries,
                                               f"the last: {detail}" if detail else "") if x)
            out[jid] = JobStatus(jid, st, code, detail)
        return out

    def cancel_cmd(self, jobid):
        return ["qdel", jobid]

    # <sequence>[<array index>].<server>, as qsub prints it (a bare sequence number is ambiguous)
    jobid_pattern = r"\d+(\[\d*\])?\.[A-Za-z0-9][A-Za-z0-9.-]*"

    def server_queues(self, run, user):
        """Every queue (qstat -Qf) and the server's default_queue (qstat -Bf).

        For `user`, also the jobs that user has in each queue with a per-user limit (qselect -u USER
        -q QUEUE)."""
        rc, out, err = run(["qstat", "-Bf"])
        if rc:
            raise SchedulerError(f"qstat -Bf failed (rc {rc}): {err.strip() or out.strip()}")
        default = next(iter(parse_qstat_f(out, "Server:").values()), {}).get("default_queue")
        rc, out, err = run(["qstat", "-Qf"])
        if rc:
            raise SchedulerError(f"qstat -Qf failed (rc {rc}): {err.strip() or out.strip()}")
        queues, odd = {}, []
        for n, a in parse_qstat_f(out, "Queue:").items():
            try:
                queues[n] = queue_from_attrs(n, a, user)
            except ValueError as e:  # a value this parser does not read: that queue is left out, and said
                odd.append(f"queue {n} left out: {e}")
        mine = {}
        for n, q in queues.items() if user else ():
            if q.user_queued is None and q.user_run is None:
                continue
            rc, out, err = run(["qselect", "-u", user, "-q", n])
            if rc:
                raise SchedulerError(f"qselect -u {user} -q {n} failed (rc {rc}): {err.strip() or out.strip()}")
            mine[n] = out.split()
        return ServerQueues(queues, default, mine, "; ".join(["qstat -Qf", *odd]))

    def run_facts(self, jobid, since, run):
        """qstat -f -F json JOBID (run_count, stime) and pbsnodes -av -F json (each node's state,
        last_state_change_time, comment): a requeued job learns which nodes went down, or came back,
        between its runs. OpenPBS 23.06 here; PBS Pro 2022.1 and later give the same JSON (unverified on
        ALCF's)."""
        rc, out, err = run([tool("qstat"), "-f", "-F", "json", jobid])
        if rc:
            raise SchedulerError(f"qstat -f -F json {jobid} failed (rc {rc}): {err.strip() or out.strip()}")
        job = next(iter((json.loads(out).get("Jobs") or {}).values()), {})
        rc, nodes_out, err = run([tool("pbsnodes"), "-av", "-F", "json"])
        if rc:
            raise SchedulerError(f"pbsnodes -av -F json failed (rc {rc}): {err.strip() or nodes_out.strip()}")
        changed = []
        for name, n in sorted((json.loads(nodes_out).get("nodes") or {}).items()):
            t = n.get("last_state_change_time")
            if isinstance(t, (int, float)) and since is not None and t >= since:
                changed.append(NodeChange(name, n.get("state"), float(t), n.get("comment")))
        return RunFacts(run=_int(job.get("run_count")), started=_pbs_time(job.get("stime")), nodes=tuple(changed))

    def cancel_error(self, returncode, stdout, stderr):
        """None when the cancel went through, else the reason (qdel exits non-zero on failure)."""
        return (stderr.strip() or stdout.strip() or f"qdel exited {returncode}") if returncode else None

    def fanout_cmd(self, node_index, hosts, argv, slots=None):
        """Once on the node at `node_index` of the unique hosts. `pbsdsh -n` takes an index into the
        job's vnode list, one entry per MPI slot (PBS_NODEFILE's lines), so we pass the index of that
        host's first line (`slots`); plain pbsdsh would run once per slot."""
        return [tool("pbsdsh"), "-n", str(slots[node_index] if slots else node_index), "--", *argv]
