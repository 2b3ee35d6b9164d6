"""The three recovery policies side by side on a private Slurm (three node daemons on this
machine, tests/slurm/start_slurm.sh; needs root): a 2-node job (2 ranks per node, tiny model,
80 steps, a save every 5) loses its second node once training passes step 20.
- same: the node's ranks are SIGKILLed (the injector's `node` kind; the node stays up) and
  the job relaunches on the same two nodes;
- spares: the node is set DOWN with scontrol; the health check finds it, a spare takes its place;
- shrink: the node is set DOWN; the job goes on with the one healthy node and 2 ranks.
Prints one row per policy from each experiment's report summary (medians per failure).

    python bench/node_loss.py [--keep DIR]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from restartlab.contracts import layout  # noqa: E402
from restartlab.contracts.summary import Summary  # noqa: E402
from tests.helpers import rows  # noqa: E402


def sh(*argv, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, **kw)


def scenario(d, policy):
    spares = 1 if policy == "spares" else 0
    fail = "  - {name: sync, checkpoint: sync, failures: false}\n" if policy != "same" else \
        "  - {name: sync, checkpoint: sync}\n"
    text = f"""extends: systems/slurm.yaml
name: loss-{policy}
expt_root: {d}/expt
job: {{nodes: 2, spare_nodes: {spares}, walltime: "00:15:00"}}
launch: {{ranks_per_node: 2}}
trainer: {{model: tiny, train_iters: 80, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 4, backoff: 0s, hang_timeout: 120s, on_node_loss: {policy}, node_check_timeout: 20s}}
failures: {{kind: node, node: 1, schedule: {{at_steps: [20]}}, gate: none}}
phases:
{fail}"""
    path = os.path.join(d, f"{policy}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(d, policy):
    r = sh(sys.executable, "-m", "restartlab.cli", "submit", scenario(d, policy))
    if r.returncode:
        raise SystemExit(f"submit failed: {r.stderr}")
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    jid, expt = out["job"], out["experiment"]
    first = layout.Expt(expt).phase("sync").attempt(1).path
    lost = None
    if policy != "same":  # a real node failure: the node goes DOWN under the running job
        t0 = time.time()
        while not any(m.get("train/iter", 0) >= 20 for m in rows(layout.Attempt(first).metrics(0))):
            if time.time() - t0 > 300:
                raise SystemExit("no step 20 in 300 s")
            time.sleep(0.05)
        lost = open(os.path.join(first, "hosts")).read().split()[1]
        sh("scontrol", "update", f"nodename={lost}", "state=DOWN", "reason=restartlab-bench")
    try:
        t0 = time.time()
        while sh("squeue", "-h", "-j", jid).stdout.strip():
            if time.time() - t0 > 600:
                raise SystemExit(f"job {jid} still running after 600 s")
            time.sleep(1)
    finally:
        if lost:
            sh("scontrol", "update", f"nodename={lost}", "state=RESUME")
    s = Summary.read(layout.Expt(expt).summary).by_phase()["sync"]
    ev = s.failures[0] if s.failures else None
    return {"policy": policy, "completed": s.completed, "attempts": s.attempts,
            "ranks": f"{ev and ev.ranks_before or 4} -> {ev and ev.ranks_after or 4}",
            "recovery": ev and ev.recovery, "detection_s": ev and ev.detection_s,
            "relaunch_gap_s": ev and ev.launch_gap_s, "restart_s": ev and ev.restart_s,
            "downtime_s": ev and ev.downtime_s, "lost_steps": ev and ev.lost_steps,
            "wall_s": s.wall_s, "ettr": s.ettr, "expt": expt}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--keep", help="leave the cluster's files and the experiments here")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the private Slurm needs root")
    prefix = a.keep or tempfile.mkdtemp(prefix="rl-slurm-bench-", dir="/tmp")
    os.makedirs(prefix, exist_ok=True)
    os.chmod(prefix, 0o755)  # munged (the munge user) must reach the cluster's files below it
    env = dict(os.environ, SLURM_PREFIX=os.path.join(prefix, "slurm"), SLURM_NODES="3", SLURM_CPUS="4",
               SLURMCTLD_PORT="25817", SLURMD_PORT="25818")
    r = sh("bash", os.path.join(ROOT, "tests", "slurm", "start_slurm.sh"), env=env, timeout=600)
    if r.returncode:
        raise SystemExit(f"start_slurm.sh: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    os.environ["SLURM_CONF"] = os.path.join(env["SLURM_PREFIX"], "etc", "slurm.conf")
    try:
        results = [run(prefix, pol) for pol in ("same", "spares", "shrink")]
    finally:
        sh("bash", os.path.join(ROOT, "tests", "slurm", "stop_slurm.sh"), env=env, timeout=300)
        if not a.keep:
            shutil.rmtree(prefix, ignore_errors=True)
    cols = ["policy", "completed", "ranks", "recovery", "detection_s", "relaunch_gap_s", "restart_s",
            "downtime_s", "lost_steps", "wall_s", "ettr"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
