"""A real scheduler in the tests: a private Slurm with 2 nodes on this machine (conftest `slurm`).

- Slurm backend end to end: `restartlab submit` -> sbatch -> srun --mpi=pmi2 ranks on both nodes
  -> injector fan-out with `srun --overlap` to each node -> SIGKILLs -> relaunch -> report.
- Warm pools on each node.
- Node loss: spares, shrink, a frozen node Slurm requeues.
- A chain after the relaunch budget runs out.

What both schedulers do the same is tested once on each in tests/test_schedulers.py: status and
cancel, `inject` without flags, the walltime margin and a chain over the walltime. PBS's own is
tested in tests/test_pbs.py.

The chain and node-loss tests run one rank per node. Their subject is the job's clock or its
nodes, not how srun places tasks on one. The end-to-end and warm tests keep two per node.

What one machine cannot show:
- Both "nodes" are the same host. Each node's killer takes only the ranks whose SLURMD_NODENAME is
  its own, so a node's ranks can be struck alone.
- The ranks talk over loopback.
- A node cannot really go down."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from restartlab import schedulers
from restartlab.runtime import killer
from restartlab.contracts import layout
from tests import clusters
from tests.helpers import describe, final_crc, job_tag, kill_and_reap, losses, rows, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.multirank, pytest.mark.timeout(900)]
HERE = os.path.dirname(os.path.abspath(__file__))


def launch_line(ppn, env=""):
    """The scenario's `launch:` line.

    One rank per node gets one thread. Both nodes are this machine's 2 cores, and a rank alone on
    its node would take both. That gave 4 threads on 2 cores, and 1.2 s a step under load.
    Oversubscription is what made parameters differ in their last bits. So a rank alone runs as the
    trainer runs two per node."""
    env = ", ".join(filter(None, [env, 'OMP_NUM_THREADS: "1"' if ppn == 1 else ""]))
    return f"launch: {{ranks_per_node: {ppn}, env: {{{env}}}}}"


def rl(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def scenario(tmp_path, system, name, nodes=2, ppn=2, iters=40, at_steps=(12, 24), phases=None, extra="",
             relaunch="", env=""):
    phases = phases or [("baseline", "none"), ("sync", "sync")]
    text = f"""extends: systems/{system}.yaml
name: {name}
expt_root: {tmp_path}/expt
job: {{nodes: {nodes}, walltime: "00:15:00"}}
{launch_line(ppn, env)}
trainer: {{model: tiny, train_iters: {iters}, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 5, backoff: 0s, hang_timeout: 120s{relaunch}}}
failures:
  kind: kill
  schedule: {{at_steps: [{", ".join(map(str, at_steps))}]}}
  gate: complete
{extra}phases:
""" + "".join(f"  - {{name: {n}, checkpoint: {c}}}\n" for n, c in phases)
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return str(p)


def submit(path, env=None):
    r = rl("submit", path, env=env)
    assert r.returncode == 0, r.stderr
    return clusters.submitted(r.stdout)


def status(sched, *ids, env=None):
    r = rl("status", "--scheduler", sched, "--json", *ids, env=env)
    assert r.returncode == 0, r.stderr
    return {d["jobid"]: d for d in map(json.loads, r.stdout.splitlines())}


def wait_state(sched, jid, states, timeout):
    """The states a job went through until one of `states` (tests/clusters.py)."""
    return clusters.wait_states(sched, schedulers.run_tool, jid, states, timeout)


def test_slurm_node_loss_and_preemption(slurm, tmp_path):
    """kind node: one Slurm node's ranks SIGKILLed (its killer alone, through srun --overlap on
    that node); srun --kill-on-bad-exit ends the other node's ranks; the relaunch resumes. kind
    preempt: SIGTERM to every rank through both nodes' killers; the emergency checkpoint makes the
    resume lose no step. Both phases end with the baseline's parameters."""
    # 0.2 s a step (a test-only delay point). The node's loss lands before step 25's checkpoint,
    # whose .complete releases the preemption. At full speed, 2 ranks reached step 30 before the
    # loss took effect, and the preemption struck the same attempt.
    path = scenario(tmp_path, "slurm", "slurm-kinds", ppn=1, at_steps=("{step: 12, kind: node}", "{step: 24, kind: preempt}"),
                    extra="  node: 1\n  grace: 60s\n", env='RESTARTLAB_DELAY: "step:*:*:0.2"')
    jid, expt = submit(path)
    seen = wait_state("slurm", jid, {"finished", "failed"}, 420)
    out = open(os.path.join(expt, f"job-{jid}.out")).read()
    assert seen[-1] == "finished", out[-3000:]
    with open(layout.Expt(expt).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    sync = phases["sync"]
    assert sync["completed"] and sync["attempts"] == 3, sync
    with open(layout.Expt(expt).phase("sync").injections) as f:
        recs = [r for r in map(json.loads, f) if "follow_up_of" not in r]
    node, pre = recs
    second = job_nodes(expt, jid)[1]
    assert node["kind"] == "node" and node["hosts"] == [second]
    assert [x.get("node") for x in node["receipts"]] == [second] and node["killed"] == 1, node
    # Both nodes' killers sent TERM. A rank may be gone before its own arrives, because the other's
    # TERM already made the ranks agree to stop. That happened in 1 in 3 runs under load with one
    # rank per node.
    assert pre["kind"] == "preempt" and pre["signal"] == "TERM" and pre["killed"] in (1, 2), pre
    assert sorted(x.get("node") for x in pre["receipts"]) == sorted(job_nodes(expt, jid)), pre["receipts"]
    ev = {e["kind"]: e for e in sync["failures"]}
    assert ev["node"]["detected_by"] == "launcher"
    assert ev["preempt"]["lost_steps"] == 0 and ev["preempt"]["detected_by"] == "trainer"
    crc = {ph: final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))
           for ph in ("baseline", "sync")}
    assert crc["sync"] is not None and crc["sync"] == crc["baseline"], crc
    assert leftover_ranks(expt) == []


def job_nodes(expt, jid):
    """The nodes Slurm gave the job (the job script wrote them, in order)."""
    with open(os.path.join(expt, f"nodefile.{jid}")) as f:
        return [x.strip() for x in f if x.strip()]


def leftover_ranks(expt):
    return killer.find_tagged(job_tag(expt))


def node_loss_run(tmp_path, name, spares, policy):
    """A 2-node job (+ spares) whose sync phase loses its second node for real: once training
    passes step 12 the test sets that node DOWN (scontrol); Slurm kills the step's tasks on it
    and, the job being --no-kill, the job lives on without that node. Returns (expt, job, lost node)."""
    text = f"""extends: systems/slurm.yaml
name: {name}
expt_root: {tmp_path}/expt
job: {{nodes: 2, spare_nodes: {spares}, walltime: "00:15:00"}}
{launch_line(1)}
trainer: {{model: tiny, train_iters: 80, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 4, backoff: 0s, hang_timeout: 120s, on_node_loss: {policy}, node_check_timeout: 20s}}
phases:
  - {{name: baseline, checkpoint: none}}
  - {{name: sync, checkpoint: sync, failures: false}}
collection: {{state_every: 5}}
"""
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    jid, expt = submit(str(path))
    first = layout.Expt(expt).phase("sync").attempt(1).path
    wait_for(lambda: any(m.get("train/iter", 0) >= 12 for m in rows(layout.Attempt(first).metrics(0))),
             300, "the sync phase's step 12")
    with open(layout.Attempt(first).hosts) as f:
        lost = f.read().split()[1]
    try:
        r = subprocess.run(["scontrol", "update", f"nodename={lost}", "state=DOWN", "reason=restartlab-test"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        seen = wait_state("slurm", jid, {"finished", "failed"}, 420)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={lost}", "state=RESUME"], capture_output=True, timeout=30)
    out = open(os.path.join(expt, f"job-{jid}.out")).read()
    assert seen[-1] == "finished", out[-3000:]
    return expt, jid, lost


def node_checks(expt):
    with open(layout.Expt(expt).phase("sync").node_checks) as f:
        return [json.loads(x) for x in f]


def test_slurm_node_loss_spares_bit_exact(slurm, tmp_path):
    """relaunch.on_node_loss: spares. The health check before the relaunch finds the lost node
    (srun cannot reach it), the spare takes its place: same world size, bit-exact resume."""
    expt, jid, lost = node_loss_run(tmp_path, "slurm-spares", 1, "spares")
    allocated = job_nodes(expt, jid)
    assert len(allocated) == 3
    a = [json.load(open(layout.Expt(expt).phase("sync").attempt(i).record)) for i in (1, 2)]
    spare = [n for n in allocated if n not in a[0]["hosts"]][0]
    assert a[0]["hosts"][1] == lost and a[1]["hosts"] == [a[0]["hosts"][0], spare], a
    assert a[0]["ranks"] == a[1]["ranks"] == 2 and a[1]["completed"]
    bad = [c for c in node_checks(expt) if not c["ok"]]
    assert [c["node"] for c in bad] == [lost] and bad[0]["attempt"] == 2 and bad[0]["reason"], bad
    assert open(layout.Expt(expt).bad_nodes).read().split() == [lost]
    with open(layout.Expt(expt).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    ev = phases["sync"]["failures"][0]
    assert ev["bad_nodes"] == [lost] and ev["ranks_before"] == ev["ranks_after"] == 2, ev
    assert ev["recovery"] == f"spares: {spare} for {lost}", ev
    crc = {ph: final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))
           for ph in ("baseline", "sync")}
    assert crc["sync"] is not None and crc["sync"] == crc["baseline"], crc
    assert leftover_ranks(expt) == []


def test_slurm_node_loss_shrink_same_losses(slurm, tmp_path):
    """relaunch.on_node_loss: shrink.

    There is no spare, so the relaunch runs on the one healthy node with 1 rank instead of 2. It
    accumulates gradients over two micro-batches (--dp-global 2). So the global batch and its
    samples stay the same. The losses continue within 1e-6 (relative) of the 2-rank baseline. They
    are not bit-exact, as the reduction order changes."""
    expt, jid, lost = node_loss_run(tmp_path, "slurm-shrink", 0, "shrink")
    a = [json.load(open(layout.Expt(expt).phase("sync").attempt(i).record)) for i in (1, 2)]
    assert a[0]["ranks"] == 2 and a[1]["ranks"] == 1 and a[1]["hosts"] == [a[0]["hosts"][0]], a
    assert a[1]["completed"]
    with open(layout.Expt(expt).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    ev = phases["sync"]["failures"][0]
    assert ev["ranks_before"] == 2 and ev["ranks_after"] == 1 and ev["recovery"] == f"shrink: 2 -> 1 node(s), without {lost}", ev
    base = dict(losses(layout.Expt(expt).phase("baseline").attempt(1).metrics(0)))
    after = losses(layout.Expt(expt).phase("sync").attempt(2).metrics(0))
    assert len(after) >= 40
    worst = max(abs(loss / base[it] - 1) for it, loss in after)
    assert worst <= 1e-6, worst
    assert "accum=2" in open(layout.Expt(expt).phase("sync").attempt(2).output).read()
    # #63.3: the resume's state verdict across the change, every piece it can compare compared whole
    st, = [x["state"] for x in phases["sync"]["survival"]["restarts"] if x["attempt"] == 2]
    assert st["across"] == [2, 1] and st["forgot"] == [], st
    assert {"params", "opt_state", "batch", "lr", "opt_step"} <= set(st["equal"]), st
    assert "across a change from 2 ranks to 1" in st["text"] and "rng_torch" in st["incomparable"], st
    assert leftover_ranks(expt) == []


def test_slurm_chain_after_the_relaunch_budget_runs_out(slurm, tmp_path):
    """relaunch.chain when max_attempts (1 here) runs out.

    The injected kill at step 20 ends the first job's only attempt. The job submits its
    continuation and exits 1. The next job resumes from the newest checkpoint. Its injector does not
    strike step 20 again, and the phase finishes. The kill is booked as a failure whose downtime
    leaves out the queue wait."""
    text = f"""extends: systems/slurm.yaml
name: slurm-chain-budget
expt_root: {tmp_path}/expt
job: {{nodes: 2, walltime: "00:15:00"}}
{launch_line(1)}
trainer: {{model: tiny, train_iters: 60, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 1, backoff: 0s, hang_timeout: 120s, chain: 1}}
failures: {{kind: kill, schedule: {{at_steps: [20]}}, gate: complete}}
phases:
  - {{name: sync, checkpoint: sync}}
"""
    path = tmp_path / "budget.yaml"
    path.write_text(text)
    jid, expt = submit(str(path))
    wait_for(lambda: os.path.exists(layout.Expt(expt).phase("sync").completed), 300, "the chain to finish the phase")
    with open(layout.Expt(expt).jobs) as f:
        ids = list(dict.fromkeys(json.loads(x)["job"] for x in f))
    assert len(ids) == 2 and ids[0] == jid, ids
    seen = [wait_state("slurm", j, {"finished", "failed"}, 120)[-1] for j in ids]
    assert seen == ["failed", "finished"], seen  # the first job ran out of attempts (exit 1)
    with open(layout.Expt(expt).phase("sync").injections) as f:
        strikes = [json.loads(x) for x in f]
    assert [r["target_step"] for r in strikes if r.get("killed")] == [20], strikes
    with open(layout.Expt(expt).summary) as f:
        s = json.load(f)["phases"][0]
    assert s["completed"] and s["jobs"] == sorted(ids) and len(s["handovers"]) == 1, s
    ev = s["failures"]
    assert len(ev) == 1 and ev[0]["kind"] == "kill" and ev[0]["queue_wait_s"] > 0, ev
    e = ev[0]  # between two jobs all the gap is the queue's: downtime = detection + restart
    assert e["launch_gap_s"] == 0 and abs(e["downtime_s"] - (e["detection_s"] + e["restart_s"])) < 1e-3, e
    assert "step 20: struck by an earlier job" in open(layout.Expt(expt).phase("sync").injector_log).read()
    assert leftover_ranks(expt) == []


def _slurm_procs_of(node, tag, prefix):
    """A "node" of the private Slurm, as processes.

    These are its slurmd (from its pid file) and the job's slurmstepd on it, with everything under
    it. The slurmstepd is found from the job's ranks on that node: by the tag and SLURMD_NODENAME in
    their environments, then up to their slurmstepd."""
    import psutil
    with open(os.path.join(prefix, "run", f"slurmd-{node}.pid")) as f:
        pids = {int(f.read().strip())}
    for pid in killer.find_by_env(f"{killer.TAG_VAR}={tag}"):
        try:
            p = psutil.Process(pid)
            if p.environ().get("SLURMD_NODENAME") != node:
                continue
            while p is not None and not p.name().startswith("slurmstepd"):
                p = p.parent()
            if p is not None:
                pids |= {p.pid, *(c.pid for c in p.children(recursive=True))}
        except psutil.Error:
            continue
    return sorted(pids)


def test_slurm_node_frozen_until_slurm_requeues_the_job_the_time_between_runs_is_downtime(slurm, tmp_path):
    """#65 on Slurm: a 2-node job whose second node stops answering.

    The hang kind stops its rank. The test then stops that node's slurmd and slurmstepd, so nothing
    on it runs or answers. The watchdog (hang_timeout 300 s) is slower than Slurm (SlurmdTimeout
    30 s). Slurm sets the node DOWN and requeues the job (JobRequeue=1). It runs the job again on the
    other two nodes, after the hold it puts on a requeued job (AuthInfo's cred_expire, 30 s in
    tests/slurm/start_slurm.sh).

    The time from the fault to the rerun's first step is the failure's downtime. It counts in the
    wall time and the ETTR. The report tells it in its parts: when Slurm requeued it, the node it
    set down, and when the job could start again. The first run's output is still in the job's
    output file."""
    path = scenario(tmp_path, "slurm", "slurm-requeue", ppn=1, iters=80, phases=[("sync", "sync")],
                    at_steps=("{step: 20, kind: hang}",), extra="  node: 1\n",
                    env='RESTARTLAB_DELAY: "step:*:*:0.2"')
    text = open(path).read().replace("hang_timeout: 120s", "hang_timeout: 300s")
    open(path, "w").write(text)
    t0 = time.time()
    jid, expt = submit(path)
    e = layout.Expt(expt)
    ph = e.phase("sync")
    wait_for(lambda: os.path.exists(ph.injections) and open(ph.injections).read().strip(), 300, "the hang's strike")
    inj = json.loads(open(ph.injections).readline())
    lost = job_nodes(expt, jid)[1]
    assert inj["kind"] == "hang" and inj["hosts"] == [lost], inj
    frozen = _slurm_procs_of(lost, job_tag(expt), slurm["prefix"])
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        # The node stays frozen to the end. Thawed sooner, it may answer again before the requeued job
        # starts, and the job may run on it again (seen once).
        seen = wait_state("slurm", jid, {"finished", "failed"}, 600)
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        # the first run's processes on the frozen node: nobody was there to end them. Any other still
        # tagged once the job has finished is restartlab's (or Slurm's) leftover: asserted below
        tagged = clusters.left_running(expt)
        elsewhere = [d for d in describe(tagged) if "gone" not in d and d["status"] != "zombie" and d["node"] != lost]
        unkilled = kill_and_reap(tagged)
        subprocess.run(["scontrol", "update", f"nodename={lost}", "state=RESUME"], capture_output=True, timeout=30)
    out = open(os.path.join(expt, f"job-{jid}.out")).read()
    assert seen[-1] == "finished", out[-3000:]
    jobs = [json.loads(x) for x in open(e.jobs)]
    runs = [json.loads(x) for x in open(e.job_runs)]
    assert len(jobs) == 2 and jobs[0]["job"] == jobs[1]["job"] == jid, jobs
    other, = [n for n in slurm["nodes"] if n not in runs[0]["hosts"]]
    assert runs[0]["hosts"] == [runs[1]["hosts"][0], lost] and runs[1]["hosts"] == sorted([runs[0]["hosts"][0], other]), runs
    assert [r["run"] for r in runs] == [1, 2] and runs[1]["requeued"] and runs[1]["eligible"] >= runs[1]["requeued"], runs
    assert [n["node"] for n in runs[1]["nodes"]] == [lost] and "down" in runs[1]["nodes"][0]["state"], runs
    # both runs' output in the one file (--open-mode=append: Slurm truncates it on a requeue otherwise)
    assert out.count(f"restartlab: job {jid} on 2 node(s)") == 2, out[:3000]
    s = json.load(open(e.summary))["phases"][0]
    report = open(e.report).read()
    print(json.dumps(runs), json.dumps(s["failures"], default=str)[:3000], report.partition("## Failures")[2][:3000])
    ev, = s["failures"]
    assert ev["detected_by"] == "scheduler" and ev["rerun"] and ev["kind"] == "hang", ev
    assert ev["downtime_s"] == pytest.approx(ev["rerun"]["first_ts"] - inj["time"], abs=0.01), ev
    assert jobs[1]["start"] - inj["time"] < ev["downtime_s"] < time.time() - t0, ev
    # detection: the fault -> Slurm set the node down; R = detection + gap + restart = the downtime
    assert ev["detection_s"] == pytest.approx(runs[1]["nodes"][0]["since"] - inj["time"], abs=0.01), ev
    assert ev["detection_s"] + ev["launch_gap_s"] + ev["restart_s"] == pytest.approx(ev["downtime_s"], abs=0.05), ev
    atts = [json.loads(open(a.record).read()) for a in ph.attempts() if os.path.exists(a.record)]
    assert s["wall_s"] == pytest.approx(max(a["end_ts"] for a in atts) - json.load(open(ph.attempt(1).launched))["launch_ts"],
                                        abs=0.5), s["wall_s"]

    def steps(k):
        return [r for r in rows(ph.attempt(k).metrics(0)) if {"train/dt", "train/iter", "train/loss"} <= set(r)]
    kept = sum(r["train/dt"] for r in steps(1) if r["train/iter"] <= ev["resumed_from"]) + \
        sum(r["train/dt"] for r in steps(ev["rerun"]["next_attempt"]))
    wall = max(a["end_ts"] for a in atts) - json.load(open(ph.attempt(1).launched))["launch_ts"]
    assert s["ettr"] == pytest.approx(kept / wall, rel=1e-6), (s["ettr"], kept, wall)
    assert f"Slurm requeued job {jid} at " in report and f"{lost} down* since" in report, report
    assert "eligible to run again at" in report and "s between the runs" in report, report
    assert "the scheduler requeued the job" in s["survival"]["restarts"][0]["text"], s["survival"]
    assert elsewhere == [] and unkilled == [], (elsewhere, unkilled)
    left = clusters.left_running(expt)
    assert left == [], describe(left)
