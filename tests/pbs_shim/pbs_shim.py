#!/usr/bin/env python3
"""TEST-ONLY PBS LAYER. A MOCK of PBS Pro's user commands over a real Slurm (PBS Pro cannot be
installed on the test machines). It is put on PATH by tests/test_slurm.py only; restartlab never
ships or calls it outside the tests. Installed as four names (symlinks to this file):

  qsub [-h] [-v NAMES] SCRIPT  sbatch the unmodified script (sbatch itself reads the #PBS directives);
                           prints `<id>.<server>` like PBS Pro. BASH_ENV=pbs_env.sh supplies what
                           Slurm's spank_pbs does not: PBS_NODEFILE, PBS_ENVIRONMENT, PBS_JOBID.
  qstat -f -F json [-x] ID...   PBS Pro's JSON (Jobs{id: {job_state, Exit_status, ...}}) built
                           from `scontrol show job -o`; exit 153 ("Unknown Job Id") for an unknown
                           id, 35 for a finished job without -x (PBS Pro's codes).
  qdel ID                  scancel
  pbsdsh -n I -- CMD...    srun --overlap on the node of line I of $PBS_NODEFILE (PBS Pro's -n
                           indexes the job's vnode list, which the node file lists in order).
Formats follow PBS Pro's documentation and the recorded sample in tests/data/."""
import json
import os
import re
import subprocess
import sys
import time

SERVER = "rl-shim-pbs"
HERE = os.path.dirname(os.path.abspath(__file__))
EXIT_UNKNOWN_JOB, EXIT_JOB_FINISHED = 153, 35


def die(msg, code=2):
    print(f"{os.path.basename(sys.argv[0])}: {msg}", file=sys.stderr)
    sys.exit(code)


def slurm_id(jid):
    return jid.split(".")[0]


def qsub(args):
    hold = "-h" in args
    rest = [a for a in args if a != "-h"]
    if rest[:1] == ["-v"] and len(rest) > 1:  # -v NAME,...: from qsub's environment, which sbatch
        missing = [n for n in rest[1].split(",") if n not in os.environ]  # exports whole (ALL)
        if missing:
            die(f"-v: {', '.join(missing)} not set in qsub's environment")
        rest = rest[2:]
    if len(rest) != 1:
        die("usage (shim): qsub [-h] [-v NAME,...] SCRIPT")
    cmd = ["sbatch", "--parsable", f"--export=ALL,BASH_ENV={os.path.join(HERE, 'pbs_env.sh')},"
           f"RL_SHIM_SERVER={SERVER}"] + (["--hold"] if hold else []) + rest
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        die(r.stderr.strip() or "sbatch failed", r.returncode)
    print(f"{r.stdout.strip().split(';')[0]}.{SERVER}")


def scontrol_job(sid):
    r = subprocess.run(["scontrol", "show", "job", "-o", sid], capture_output=True, text=True)
    if r.returncode or not r.stdout.strip():
        return None
    return dict(re.findall(r"(\w+)=(\S*)", r.stdout))


def pbs_record(j):
    state = j.get("JobState", "")
    pbs_state = {"PENDING": "H" if j.get("Reason") in ("JobHeldUser", "JobHeldAdmin") else "Q",
                 "RUNNING": "R", "CONFIGURING": "R", "COMPLETING": "E", "SUSPENDED": "S"}.get(state, "F")
    rec = {"Job_Name": j.get("JobName"), "Job_Owner": j.get("UserId", "").split("(")[0],
           "job_state": pbs_state, "queue": j.get("Partition"), "server": SERVER,
           "Resource_List": {"nodect": int(j.get("NumNodes", "1").split("-")[0] or 1),
                             "walltime": j.get("TimeLimit")},
           "comment": f"slurm {state} ({j.get('Reason')})"}
    if pbs_state == "F":
        rc, _, sig = j.get("ExitCode", "0:0").partition(":")
        rc, sig = int(rc or 0), int(sig or 0)
        # PBS Pro: Exit_status is the script's exit code, 256+N when killed by signal N,
        # negative for PBS-side failures (-29: walltime)
        rec["Exit_status"] = -29 if state == "TIMEOUT" else (256 + sig if sig else rc)
        if state == "CANCELLED" and not sig:
            rec["Exit_status"] = 256 + 15
    return rec


def qstat(args):
    if args[:3] != ["-f", "-F", "json"]:
        die("usage (shim): qstat -f -F json [-x] ID...")
    rest = args[3:]
    history = "-x" in rest
    ids = [a for a in rest if a != "-x"]
    jobs, code = {}, 0
    for jid in ids:
        j = scontrol_job(slurm_id(jid))
        if j is None:
            print(f"qstat: Unknown Job Id {jid}", file=sys.stderr)
            code = EXIT_UNKNOWN_JOB
            continue
        rec = pbs_record(j)
        if rec["job_state"] == "F" and not history:
            print(f"qstat: {jid} Job has finished, use -x or -H to obtain historical job information",
                  file=sys.stderr)
            code = code or EXIT_JOB_FINISHED
            continue
        jobs[f"{slurm_id(jid)}.{SERVER}"] = rec
    if jobs:
        print(json.dumps({"timestamp": int(time.time()), "pbs_version": "shim (mock over Slurm)",
                          "pbs_server": SERVER, "Jobs": jobs}, indent=4))
    sys.exit(code)


def qdel(args):
    if len(args) != 1:
        die("usage (shim): qdel ID")
    r = subprocess.run(["scancel", slurm_id(args[0])], capture_output=True, text=True)
    if r.returncode:
        die(r.stderr.strip(), r.returncode)


def pbsdsh(args):
    if len(args) < 4 or args[0] != "-n" or args[2] != "--":
        die("usage (shim): pbsdsh -n INDEX -- PROGRAM [ARGS...]", 1)
    if not os.environ.get("PBS_ENVIRONMENT"):
        die("not executing under PBS", 1)
    with open(os.environ["PBS_NODEFILE"]) as f:
        slots = [ln.strip() for ln in f if ln.strip()]
    i = int(args[1])
    if not 0 <= i < len(slots):
        die(f"spawn failed on node {i}: no such vnode index (0..{len(slots) - 1})", 1)
    cmd = ["srun", "--overlap", f"--jobid={os.environ['SLURM_JOB_ID']}", "-N", "1", "-n", "1",
           f"--nodelist={slots[i]}", "--export=ALL", *args[3:]]
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    verb = os.path.basename(sys.argv[0])
    {"qsub": qsub, "qstat": qstat, "qdel": qdel, "pbsdsh": pbsdsh}.get(
        verb, lambda _: die(f"invoked as {verb!r}: expected qsub, qstat, qdel or pbsdsh"))(sys.argv[1:])
