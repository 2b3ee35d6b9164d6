"""What restartlab does the same on both real schedulers, tested once on each (#64.6): the private
Slurm (tests/slurm/) and the OpenPBS cluster of three hosts (tests/pbs_cluster.py), through one
harness (tests/clusters.py, the `cluster` fixture). A test here runs once per scheduler, on that
scheduler's worker (conftest's groups).

- `restartlab status` and `cancel` against the scheduler's real job states;
- `restartlab inject` with no flag in a user's own job: the fan-out to every node, and what each
  node's killer takes;
- the walltime margin: restartlab's own stop before the scheduler's limit, nothing lost;
- a chain of jobs over the walltime, reported as one experiment, a secret passed on by name.

- the whole experiment end to end (kills fanned out to every node, every restart bit-exact) and
  warm restarts from a pool on each node: one job, asserted on by two tests.

What only one scheduler has stays in its own file:
- tests/test_pbs.py: PBS's walltime kill, qsub's directives, a lost MoM and PBS's requeue, the
  supervisor killed;
- tests/test_slurm.py: Slurm's preemption and node loss with spares or a shrink, its requeue of a
  frozen node, a chain after the relaunch budget.

Node loss is in both files but not one test. What is lost differs, and so does what each test
asserts. On PBS a host's MoM is SIGKILLed, after which PBS requeues the job. On Slurm a node is set
DOWN inside a --no-kill job, which lives on."""
import json
import os
import sys
import time

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.runtime import killer
from tests.clusters import left_running
from tests.helpers import final_crc, job_tag, losses, wait_for

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def e2e_job(cluster):
    """One job asserted on by the end-to-end and the warm tests (#49: a job and a baseline less):
    baseline, `sync` and `async` relaunched cold, `warm` (sync checkpoints) relaunched from a
    standby pool on each node, two gated kills (steps 12 and 24) in each restart phase. On Slurm 2
    nodes of 2 ranks, on PBS the 3 hosts of 1. Returns (job id, experiment, its output, its phases)."""
    d = cluster.dir("e2e")
    path = cluster.write(os.path.join(d, "e2e.yaml"), cluster.head(d, "e2e", nodes=cluster.e2e_nodes,
                                                                   ppn=cluster.e2e_ppn) + """\
trainer: {model: tiny, train_iters: 40, save_interval: 5, device: cpu}
relaunch: {max_attempts: 5, backoff: 0s, hang_timeout: 120s}
failures:
  kind: kill
  schedule: {at_steps: [12, 24]}
  gate: complete
phases:
  - {name: baseline, checkpoint: none}
  - {name: sync, checkpoint: sync}
  - {name: async, checkpoint: async}
  - {name: warm, checkpoint: sync, warm: true}
""")
    jid, expt = cluster.submit(path)
    end = cluster.wait_end(jid, 600)
    out = cluster.output(expt, jid)
    assert end == "finished", out[-3000:]
    with open(layout.Expt(expt).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    return jid, expt, out, phases


def crc_of(expt, phases, ph):
    return final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))


def test_experiment_end_to_end_kills_fanned_out_every_restart_bit_exact(cluster, e2e_job):
    """`restartlab submit` of a whole experiment, end to end.

    - Baseline, sync and async phases run on the job's nodes: srun on Slurm, Hydra's mpiexec
      through pbs_tmrsh on PBS.
    - Each restart phase gets two gated kills. They are fanned out through the scheduler
      (srun --overlap; pbsdsh -n) to one killer per node. Each killer takes only its own node's ranks.
    - Every restart resumed from a complete checkpoint and is bit-exact with the baseline.
    - Then `restartlab status` shows the finished job, and nothing of it is left running.

    Tried: with the inject test's fan-out mutations (a killer reaches one node), this job did not
    end in the fixture's 600 s, on either scheduler."""
    jid, expt, out, phases = e2e_job
    hosts = cluster.job_hosts(expt, jid)
    n = cluster.e2e_nodes * cluster.e2e_ppn
    assert len(hosts) == cluster.e2e_nodes and f"job {jid} on {cluster.e2e_nodes} node(s)" in out, out[-2000:]
    assert cluster.exit_status(jid) == 0
    cluster.check_launch(expt, jid)
    assert phases["baseline"]["completed"] and phases["baseline"]["attempts"] == 1
    crc = {ph: crc_of(expt, phases, ph) for ph in ("baseline", "sync", "async")}
    assert crc["baseline"] is not None and crc["sync"] == crc["baseline"] == crc["async"], crc
    for ph in ("sync", "async"):
        p = phases[ph]
        assert p["completed"] and p["kills"] == 2 and p["attempts"] == 3, p
        with open(layout.Expt(expt).phase(ph).injections) as f:
            recs = [json.loads(line) for line in f]
        assert len(recs) == 2
        for r in recs:
            assert r["hosts"] == hosts, r
            # one receipt per node, from that node's killer (the receipt names its node)
            assert sorted(x.get("node") for x in r["receipts"]) == sorted(hosts), r["receipts"]
            assert not any(x.get("error") for x in r["receipts"]), r["receipts"]
            # A node's killer took at most its own ranks. The launcher (srun --kill-on-bad-exit,
            # Hydra) may end the others first. On failure the whole receipts are shown. The soak saw
            # a host with two trees in 2 of 10 runs under load, before the killer's fix of session 16.
            assert all(len(x["roots"]) <= cluster.e2e_ppn for x in r["receipts"]) and cluster.e2e_ppn <= r["killed"] <= n, \
                json.dumps([{k: x.get(k) for k in ("node", "pids", "roots", "cmdlines")} for x in r["receipts"]])
        # Resumed from the newest complete checkpoint. It may be newer than the one the injector saw.
        # A node struck after a save's gather leaves rank 0 free to finish that save's .complete.
        for e, r in zip(p["failures"], recs):
            assert e["resumed_from"] >= r["newest_complete"], (e, r)
            assert e["lost_steps"] == e["step_at_kill"] - e["resumed_from"] >= 0, e
        # cold relaunches: no pool (the warm phase's come later) served them
        assert [json.load(open(layout.Expt(expt).phase(ph).attempt(k).record))["warm_ranks"]
                for k in (1, 2, 3)] == [None] * 3
    assert os.path.exists(layout.Expt(expt).report)
    st = cluster.status(jid)[jid]
    assert st["state"] == "finished" and st["exit_status"] == cluster.exit_fields(0)["exit_status"], st
    r = cluster.rl("status", "--scheduler", cluster.name, expt)
    assert r.returncode == 0 and r.stdout.split()[:2] == [jid, "finished"], r.stdout + r.stderr
    assert left_running(expt) == []


def test_warm_restart_a_pool_on_each_node(cluster, e2e_job):
    """relaunch.warm (the `warm` phase of the shared job): one standby pool per node.

    - The pools are started through the scheduler's fan-out.
    - The launcher starts the stubs, and each node's pool forks that node's ranks.
    - The kills strike stubs and ranks, never a pool.
    - Every relaunch is warm and bit-exact.
    - The pools stop at the phase's end (TERM by the tag on every node), not at the job's.
    - Nothing tagged is left, the pools included.

    Fails when the stubs start their ranks cold (warm/stub.py failing before it reaches the pool):
    startup/warm is None, on both (tried)."""
    jid, expt, out, phases = e2e_job
    assert "warm restart: the standby pool serves" in out and "cold launches" not in out, out[-3000:]
    warm = phases["warm"]
    assert warm["completed"] and warm["kills"] == 2 and warm["attempts"] == 3, warm
    crc = {ph: crc_of(expt, phases, ph) for ph in ("baseline", "warm")}
    assert crc["warm"] is not None and crc["warm"] == crc["baseline"], crc
    assert [e["startup"].get("startup/warm") for e in warm["failures"]] == [1, 1], warm["failures"]
    hosts = cluster.job_hosts(expt, jid)
    ph = layout.Expt(expt).phase("warm")
    log = open(ph.warm_log).read()
    # what a stub said when it started its rank cold (the cause of a warm count short)
    cold = [ln for k in (2, 3) for ln in open(ph.attempt(k).output, errors="replace") if "warm stub" in ln]
    print("".join(cold), log[-5000:])  # whole, in the report's captured output (an assertion message is cut)
    assert all(f"on {h}" in log for h in hosts), log[-3000:]  # a pool preloaded on each node
    pools = {line.split("[")[1].split("]")[0] for line in log.splitlines() if "rank pid" in line and " for stub " in line}
    assert len(pools) == len(hosts), log[-3000:]  # and each forked ranks
    assert sum(1 for line in log.splitlines() if line.endswith(": stopped")) == len(hosts), log[-3000:]
    assert sorted(f for f in os.listdir(ph.warm_dir) if f.endswith(".ready")) == sorted(f"{h}.ready" for h in hosts)
    recs = [json.load(open(ph.attempt(k).record)) for k in (1, 2, 3)]
    # the first attempt starts cold beside the pools; every rank of every relaunch, every node, warm
    n = cluster.e2e_nodes * cluster.e2e_ppn
    assert [r["warm_ranks"] for r in recs] == [0, n, n], (cold, [r["warm_ranks"] for r in recs], log[-3000:])
    with open(ph.injections) as f:
        for r in map(json.loads, f):
            assert r["killed"] >= cluster.e2e_ppn and not any(x.get("error") for x in r["receipts"]), r
    assert killer.find_tagged(job_tag(expt), standby=True) == [] and left_running(expt) == []


def test_status_and_cancel_real_states(cluster):
    """`restartlab status` of a finished, a running, a held and an unknown job in one call of the
    scheduler's query tool (qstat -f -F json -x; squeue, the test Slurm keeping no accounting);
    `restartlab cancel` of the running one and of the held one. The running one's script traps
    SIGTERM and goes on: the scheduler sends SIGKILL later (PBS's kill_delay, Slurm's KillWait).
    A job depending on the cancelled one (afterany) is pending until then, and runs after it.
    Cancelling an unknown job: exit 1, naming it.
    Fails when the statuses are asked one job at a time (cli.cmd_status calling the backend once
    per id: 4 calls, on both; checked)."""
    d = cluster.dir("states")

    def script(name, walltime_s, body):
        return cluster.write(os.path.join(d, f"{name}.sh"),
                             cluster.header(walltime_s=walltime_s, output=os.path.join(d, f"{name}.out")) + body, 0o755)
    done = script("done", 60, "true\n")
    stubborn = script("stubborn", 300, f"trap 'echo got TERM >> {d}/stubborn.log' TERM\nfor i in $(seq 600); do sleep 0.5; done\n")
    after = script("after", 60, f"date +%s.%N > {d}/after.ran\n")
    j_done = cluster.qsub(done)
    j_run = cluster.qsub(stubborn)
    j_held = cluster.qsub(done, hold=True)
    j_after = cluster.qsub(after, after=j_run)
    cluster.wait(j_done, {"finished"}, 60)
    cluster.wait(j_run, {"running"}, 60)
    env, logs = cluster.counting_env(cluster.query_tools, cluster.dir("count"))
    rc, out, err = cluster.tool([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", cluster.name,
                                 "--json", j_done, j_run, j_held, cluster.unknown], env=env)
    assert rc == 0, err
    st = {x["jobid"]: x for x in map(json.loads, out.splitlines())}
    assert [st[j]["state"] for j in (j_done, j_run, j_held, cluster.unknown)] == \
        ["finished", "running", "pending", "unknown"], st
    assert st[j_done]["exit_status"] == cluster.exit_fields(0)["exit_status"], st
    assert all(len(open(log).read().splitlines()) == 1 for log in logs.values()), logs  # one query for the four
    assert cluster.status(j_after)[j_after]["state"] == "pending"  # held by its dependency
    t0 = time.time()
    for j in (j_run, j_held):
        r = cluster.rl("cancel", "--scheduler", cluster.name, j)
        assert r.returncode == 0 and f"cancelled {j}" in r.stdout, r.stdout + r.stderr
    cluster.wait(j_run, {"failed"}, 60)
    st = cluster.status(j_run, j_held)
    assert st[j_run]["state"] == "failed" and cluster.cancelled in st[j_run]["detail"], st
    # PBS: a held job qdel'd has never run (finished, or failed with no exit status)
    assert st[j_held]["state"] in cluster.held_cancelled and cluster.held_detail in st[j_held]["detail"], st
    assert "got TERM" in open(os.path.join(d, "stubborn.log")).read()
    cluster.wait(j_after, {"finished"}, 60)
    ran = float(open(os.path.join(d, "after.ran")).read())
    assert ran >= t0, (ran, t0)  # the dependent ran only once its predecessor had ended
    r = cluster.rl("cancel", "--scheduler", cluster.name, cluster.unknown)
    assert r.returncode == 1 and cluster.unknown in r.stderr, r.stdout + r.stderr


PLAIN = """import os, subprocess, sys, time
d, launch = sys.argv[1], sys.argv[2]
rank = os.environ["PMI_RANK"] if launch == "hydra" else os.environ["SLURM_PROCID"]
node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.path.join(d, f"{launch}-{rank}.pid"), "w") as f:
    f.write(f"{os.getpid()} {child.pid} {node}")
time.sleep(120)  # only the injector ends it early
"""


def test_inject_without_flags_strikes_a_plain_program(cluster):
    """The design's usage line in a user's own job: `restartlab inject --every 10s`, no other flag.

    It runs next to a plain Python program of 4 ranks on 2 nodes, 2 per node (not restartlab's
    trainer). On Slurm, srun launches the program, then Hydra's mpiexec does (srun starts its
    proxies). On PBS, Hydra launches it through PBS's TM interface. PBS_NODEFILE lists each host
    twice, so `pbsdsh -n` must name each host's first line. Otherwise the second host's killer
    never runs.

    - Each strike reaches both nodes.
    - Each node's killer takes only that program's ranks (and their children) on its own node.
    - The job script, a job process without a rank variable, and the launchers survive.
    - The receipts say which ranks they took.

    Fails when the fan-out reaches one node. On Slurm: fanout_cmds given only the first node. On
    PBS: `pbsdsh -n` given host numbers instead of each host's first line (read_nodefile). The
    receipts' nodes show it (checked, each on its scheduler). Also asserted: a killer takes no
    launcher or bystander (the pids), and no other node's rank (the node of each rank taken)."""
    d = cluster.dir("plain")
    cluster.write(os.path.join(d, "plain.py"), PLAIN)
    launches = cluster.plain_launches("plain.py", d)
    run = "".join(f'{cmd}\necho "{label} rc=$?"\n' for label, cmd, _ in launches)
    script = cluster.write(os.path.join(d, "plain.sh"), cluster.header(nodes=2, ppn=2, walltime_s=300,
                                                                       output=os.path.join(d, "plain.out")) + f"""
export PATH={os.path.dirname(sys.executable)}:$PATH
cd {d}
restartlab inject --every 10s > inject.log 2>&1 &
inj=$!
sleep 300 &
innocent=$!
{run}kill $inj; wait $inj
kill -0 $innocent && echo "innocent alive"
kill $innocent
echo "script done"
""", 0o755)
    jid = cluster.qsub(script)
    cluster.wait_end(jid, 300)
    out = open(os.path.join(d, "plain.out")).read()
    assert "innocent alive" in out and "script done" in out, out[-3000:]
    for label, _, _ in launches:
        assert f"{label} rc=" in out and f"{label} rc=0" not in out, out[-3000:]  # every program was struck
    ranks = {}   # pid -> (launch, rank, its child, node)
    for f in os.listdir(d):
        if f.endswith(".pid"):
            pid, child, node = open(os.path.join(d, f)).read().split()
            launch, rank = f[:-4].split("-")
            ranks[int(pid)] = (launch, rank, int(child), node)
    assert sorted(f"{v[0]}-{v[1]}" for v in ranks.values()) == sorted(f"{label}-{i}" for label, _, _ in launches
                                                                       for i in range(4))
    for label, _, _ in launches:
        assert len({v[3] for v in ranks.values() if v[0] == label}) == 2, ranks  # on two nodes
    log = open(os.path.join(d, "inject.log")).read()
    recs = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert len(recs) >= len(launches), log
    rank_var = {label: var for label, _, var in launches}
    # A rank's child is named by its rank when the launcher ended that rank while this node's
    # killer scanned. The orphan then carries the rank's variable with no rank above it.
    # (tests/test_killer_inject.py's test_no_tag_takes_a_dead_ranks_orphaned_child_by_its_inherited_rank)
    owner = {pid: (launch, rank, node) for pid, (launch, rank, _, node) in ranks.items()}
    owner.update({child: (launch, rank, node) for launch, rank, child, node in ranks.values()})
    struck = set()
    for rec in recs:
        # the strike's nodes are the ranks' nodes, and each answered
        assert sorted(rec["hosts"]) == sorted({v[3] for v in ranks.values()}), (rec, ranks)
        assert sorted(x.get("node") for x in rec["receipts"]) == sorted(rec["hosts"]), rec
        assert rec["signal"] == "KILL", rec
        for x in rec["receipts"]:
            assert x["job"] == f"{cluster.job_var}={jid}" and not x["errors"], x
            assert set(x["pids"]) <= set(owner), (x, ranks)   # no launcher, proxy, script or bystander
            for pid, what in x["ranks"].items():
                launch, rank, node = owner[int(pid)]
                assert node == x["node"] and what == f"{rank_var[launch]}={rank}", (x, ranks)  # its own node's only
                struck.add(launch)
    assert struck == set(rank_var), (struck, log)
    assert all(f"{var}=" in log for var in rank_var.values())  # the injector's own lines name the ranks
    wait_for(lambda: all(killer.is_gone(p) for p in owner), 30, "the program's ranks and children to be gone")


def test_walltime_margin_stops_before_the_limit_nothing_lost(cluster):
    """A job with a 1-minute walltime and relaunch.walltime_margin 30s, one rank on each of 2 nodes.

    Half a minute in, the job script sends SIGTERM (the trainer's preemption signal) to the ranks,
    through the scheduler's fan-out. The async phase waits for its save in flight, writes an
    emergency checkpoint of its last step, and exits 5. Nothing is relaunched. The job ends (exit 5)
    before the scheduler's limit, with its newest complete checkpoint = its last step. The trainer
    sleeps 0.2 s a step (a test-only delay point): the subject is the minute's end.
    Fails when the warning does not reach the ranks (watch.walltime_warning without its teardown).
    Then the scheduler kills the job at its limit (PBS: exit -29; Slurm: TIMEOUT; checked on both)."""
    d = cluster.dir("walltime")
    path = cluster.write(os.path.join(d, "walltime.yaml"), cluster.head(
        d, "walltime", nodes=2, walltime="00:01:00", env={"RESTARTLAB_DELAY": "step:*:*:0.2"}) + """\
trainer: {model: tiny, train_iters: 1000000, save_interval: 7, device: cpu}
relaunch: {max_attempts: 5, backoff: 0s, hang_timeout: 120s, walltime_margin: 30s}
phases:
  - {name: async, checkpoint: async, failures: false}
""")
    jid, expt = cluster.submit(path)
    assert cluster.walltime_directive("00:01:00") in open(layout.Expt(expt).job_script).read()
    assert cluster.wait_end(jid, 240) == "failed"
    out = cluster.output(expt, jid)
    assert cluster.exit_status(jid) == 5, out[-3000:]
    assert "walltime warning (30s left)" in out and not cluster.killed_at_walltime(out), out[-3000:]
    adir = layout.Expt(expt).phase("async").attempt(1).path
    a = json.load(open(layout.Attempt(adir).record))
    # Every rank exited 5 (their own records). The launcher says 5, or 143 when srun's
    # --kill-on-bad-exit ended the slower rank's task after the first one's exit 5.
    assert a["walltime"] and a["preempted"] and a["rank_exit"]["exit_code"] == 5 and a["exit_code"] in (5, 143), a
    assert 20 <= a["end_ts"] - a["launch_ts"] < 58, a  # after the warning (30 s after the script started), before the limit
    assert not os.path.exists(layout.Expt(expt).phase("async").attempt(2).path)
    # two ranks: each its exit recorder and the trainer (4 processes, 2 trees)
    assert "4 process(es) in 2 tree(s)" in open(layout.Attempt(adir).teardown_log).read().splitlines()[0]
    s, _ = cluster.report(expt)
    p = s["phases"][0]
    w = p["walltime_stop"]
    assert w and w["lost_steps"] == 0 and w["emergency_checkpoint"] == w["last_step"] > 7, p
    assert p["ended"]["how"] == "walltime" and p["attempts"] == 1, p["ended"]
    assert ckptdir.newest_complete_step(layout.Expt(expt).phase("async").ckpts) == w["last_step"]
    assert s["jobs"] == [{"jobid": jid, "state": "failed", **cluster.exit_fields(5)}], s["jobs"]
    assert left_running(expt) == []


def test_chain_over_the_walltime_reports_as_one_and_passes_a_secret_by_name(cluster):
    """relaunch.chain: a job whose walltime ends before the last step hands over to a continuation.

    The walltime is 1 minute, with a 25 s margin. The job stops with an emergency checkpoint and
    submits its continuation from inside the job (afterany). The next job resumes the same
    experiment, numbers its attempts on, and finishes. Every step is trained once.

    - The report covers the jobs as one experiment.
    - The hand-over is not a failure.
    - Its queue wait is counted apart from the wall time.
    - `restartlab status EXPT_DIR` follows the chain.

    A secret in launch.env reaches every job by name (the job script stops at once without it). It
    is written in no file. The trainer is slowed to 1 s a step (a test-only delay point), so
    one job cannot finish 40 steps. Under load a second job can be stopped by the margin too
    (chain: 3). The report makes no plots. Then what is left of the last job's walltime after its
    last step is always enough. With plots, a loaded machine once ran it past its limit.
    Fails when the job is not stopped by its margin (the walltime test's mutation): one job, no
    continuation (checked on PBS). Also asserted: no step trained twice (a continuation that starts
    over), the secret in no file of the experiment."""
    d = cluster.dir("chain")
    path = cluster.write(os.path.join(d, "chain.yaml"), cluster.head(
        d, "chain", nodes=2, walltime="00:01:00",
        env={"RESTARTLAB_DELAY": "step:*:*:1.0", "RL_TEST_TOKEN": "${RL_TEST_TOKEN}"}) + """\
trainer: {model: tiny, train_iters: 40, save_interval: 5, device: cpu}
relaunch: {max_attempts: 3, backoff: 0s, hang_timeout: 120s, walltime_margin: 25s, chain: 3}
phases:
  - {name: sync, checkpoint: sync, failures: false}
collection: {plots: false}
""")
    secret = "s3cr3t-value-for-the-chain"
    jid, expt = cluster.submit(path, env={"RL_TEST_TOKEN": secret})
    wait_for(lambda: os.path.exists(layout.Expt(expt).phase("sync").completed), 420, "the chain to finish the phase")
    with open(layout.Expt(expt).jobs) as f:
        ids = list(dict.fromkeys(json.loads(x)["job"] for x in f))
    assert ids[0] == jid and len(ids) >= 2, ids
    for j in ids:
        cluster.wait_end(j, 120)
    assert cluster.exit_status(ids[0]) == 5 and cluster.exit_status(ids[-1]) == 0, ids
    cluster.check_continuation(expt, ids[0], ids[1], "RL_TEST_TOKEN")
    r = cluster.rl("status", "--scheduler", cluster.name, expt)
    assert r.returncode == 0 and [x.split()[0] for x in r.stdout.splitlines()] == ids, r.stdout + r.stderr
    assert [x.split()[1] for x in r.stdout.splitlines()][-1] == "finished", r.stdout
    with open(layout.Expt(expt).summary) as f:
        s = json.load(f)["phases"][0]
    assert s["completed"] and s["failures"] == [] and s["jobs"] == sorted(ids), s
    hand = s["handovers"]
    assert len(hand) == len(ids) - 1 and all(h["walltime_stop"] and h["lost_steps"] == 0 for h in hand), hand
    assert all(h["queue_wait_s"] >= 0 for h in hand) and s["queue_wait_s"] == sum(h["queue_wait_s"] for h in hand)
    first = json.load(open(layout.Expt(expt).phase("sync").attempt(1).record))
    assert first["walltime"] and first["job"] == jid
    seen = sorted(it for a in os.listdir(layout.Expt(expt).phase("sync").attempts_dir)
                  for it, _ in losses(layout.Expt(expt).phase("sync").attempt(int(a)).metrics(0)))
    assert seen == list(range(1, 41))  # every step trained, none twice across the jobs
    assert f"job {ids[0]} -> job {ids[1]}" in open(layout.Expt(expt).report).read()
    for top, _, files in os.walk(expt):
        for name in files:
            with open(os.path.join(top, name), "rb") as f:
                assert secret.encode() not in f.read(), os.path.join(top, name)
    assert left_running(expt) == []
