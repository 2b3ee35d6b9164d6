"""Before the experiment, on the real schedulers: restartlab preflight and the smoke job.
Preflight runs against the schedulers' own limits, set as a site's are: queues configured with
qmgr on the OpenPBS server, and partitions created with scontrol on the private Slurm. The smoke
job (restartlab submit --smoke) runs on their nodes.

- A job the server would reject or hold forever is refused before anything is queued, with the
  server's limit quoted. A job that fits passes. The job's Python, its launcher after the setup
  lines and the fan-out tool are found for real, as the cluster's user on its login node.
- The smoke job runs with the experiment's shape, on the OpenPBS cluster's three hosts and on the
  private Slurm's nodes. Every check of its readiness report passes, `status` shows it, and
  nothing is left running. With one host's torch broken on purpose, the report names that host.

What one machine cannot show: every host shares its file system. So a directory that is not
shared cannot be made here. (The check reads back, on every host, a file the job wrote.)"""
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from restartlab.contracts import layout
from tests import pbs_cluster
from tests.test_pbs import ONE_THREAD, job_output, left_running, rl as rl_pbs, scenario as pbs_scenario
from tests.test_slurm import rl as rl_slurm, scenario as slurm_scenario, wait_state

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


def errors(out):
    return [x[len("preflight: error: "):] for x in out.splitlines() if x.startswith("preflight: error: ")]


@pytest.mark.pbs
def test_preflight_against_the_pbs_servers_queues(pbs):
    made = []
    try:
        for q, sets in (("rlsmall", ["resources_max.nodect = 2", "resources_max.walltime = 00:10:00",
                                     "enabled = True", "started = True"]),
                        ("rlstopped", ["enabled = True"])):
            pbs.qmgr(f"create queue {q} queue_type=execution")
            made.append(q)
            for s in sets:
                pbs.qmgr(f"set queue {q} {s}")
        d = pbs.user_dir("preflight")
        path = pbs_scenario(pbs, d, "pre", [("baseline", "none"), ("sync", "sync")], nodes=3, walltime="00:30:00")
        before = pbs.run(["qselect"]).stdout.split()
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=rlsmall", timeout=300)
        errs = errors(r.stdout)
        assert r.returncode == 2, r.stdout + r.stderr
        assert errs == [
            "queue: --set job.queue: queue rlsmall: it takes at most 2 nodes, the job asks for 3 node(s) (qstat -Qf rlsmall)",
            f"queue: --set job.queue: queue rlsmall: its walltime limit is 00:10:00, job.walltime is 00:30:00 "
            f"({path}:4) (qstat -Qf rlsmall)",
            "queue: --set job.queue: queue(s) here that take 3 node(s) x 00:30:00: debug, prod, workq (set job.queue: "
            "debug, or job.queue: auto)"], r.stdout
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=rlstopped", timeout=300)
        assert errors(r.stdout)[0] == ("queue: --set job.queue: queue rlstopped: it is not started: a job would wait in "
                                       "it and never run (qstat -Qf rlstopped)"), r.stdout
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=nosuch", timeout=300)
        assert errors(r.stdout) == ["queue: --set job.queue: queue 'nosuch' does not exist on this server "
                                    "(qstat -Qf: debug, prod, rlsmall, rlstopped, workq): name one of its queues, or "
                                    "job.queue: auto"], r.stdout
        # submit runs the same checks first: nothing reaches the server, no experiment is made
        r = rl_pbs(pbs, "submit", path, "--set", "job.queue=rlsmall", timeout=300)
        assert r.returncode == 2 and "nothing submitted" in r.stderr, r.stderr
        assert pbs.run(["qselect"]).stdout.split() == before and not os.path.exists(os.path.join(d, "expt"))
        # the server's default queue (workq) takes it: no error, and what was asked is said
        r = rl_pbs(pbs, "preflight", path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        ok = r.stdout
        assert "preflight: ok: queue: queue workq takes 3 node(s) for 00:30:00" in ok, ok
        assert f"preflight: ok: launcher: {os.path.dirname(sys.executable)}/mpiexec: hydra" in ok, ok
        assert "preflight: ok: fanout: " in ok and "pbsdsh" in ok, ok
        assert "preflight: ok: cost: at most 1.5 node-hours: 3 node(s) x 00:30:00 walltime x 1 job(s)" in ok, ok
    finally:
        for q in made:
            pbs.run(["qmgr", "-c", f"delete queue {q}"])


ALCF_TAKERS = {"aurora": "capacity, workq", "polaris": "capacity, workq"}  # workq: the test server's own


@pytest.mark.pbs
@pytest.mark.parametrize("site", ["aurora", "polaris"])
def test_alcf_queue_tables_refuse_prod_for_agpt2b_and_auto_picks_capacity(pbs, site):
    """agpt-2b's shape (2 nodes x 2 h) against ALCF's queues as the site publishes them.
    The queues are set on the real server with qmgr. prod is a routing queue from 256 nodes on
    Aurora, 10 on Polaris. It refuses the job, naming the queue that takes it. auto picks capacity,
    and the server takes the job there."""
    with pbs_cluster.site_queues(pbs, site):
        d = pbs.user_dir(f"alcf-{site}")
        path = pbs_scenario(pbs, d, f"agpt-{site}", [("sync", "sync")], nodes=2, walltime="02:00:00")
        # as the shipped Polaris profile says: never auto into a queue whose jobs may be killed
        pbs.write(path, open(path).read().replace('walltime: "02:00:00"}', 'walltime: "02:00:00", queue_avoid: [preemptable]}'))
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=prod", timeout=300)
        least = {"aurora": 256, "polaris": 10}[site]
        assert r.returncode == 2 and errors(r.stdout) == [
            f"queue: --set job.queue: queue prod: it takes at least {least} nodes, the job asks for 2 node(s) "
            "(qstat -Qf prod)",
            f"queue: --set job.queue: queue(s) here that take 2 node(s) x 02:00:00: {ALCF_TAKERS[site]} (set "
            "job.queue: capacity, or job.queue: auto)"], r.stdout
        # what the server itself says of the same job (the ground truth the line above stands for)
        plain = pbs.write(os.path.join(d, "plain.sh"), "#!/bin/bash\ntrue\n", 0o755)
        q = pbs.as_user(["qsub", "-q", "prod", "-l", "select=2", "-l", "walltime=02:00:00", plain])
        assert q.returncode and "qsub: Job violates queue and/or server resource limits" in q.stderr, q.stdout + q.stderr
        # debug-scaling takes one job per user on both machines. With one of the user's there (held),
        # a 2-node, 30-minute job is refused for it, as qsub refuses it.
        held = pbs.as_user(["qsub", "-h", "-q", "debug-scaling", "-l", "select=2", "-l", "walltime=00:30:00", plain])
        assert held.returncode == 0, held.stderr
        hid = held.stdout.strip()
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=debug-scaling", "--set", "job.walltime=00:30:00",
                   timeout=300)
        assert errors(r.stdout)[0] == (
            "queue: --set job.queue: queue debug-scaling: it takes 1 job(s) per user, running or waiting (max_queued "
            f"[u:PBS_GENERIC=1]), and you have 1 there ({hid}): the server would refuse this one until it ends "
            "(restartlab submit --after JOB waits for it) (qstat -Qf debug-scaling)"), r.stdout
        q = pbs.as_user(["qsub", "-q", "debug-scaling", "-l", "select=2", "-l", "walltime=00:30:00", plain])
        assert q.returncode and "would exceed queue generic's per-user limit" in q.stderr, q.stdout + q.stderr
        pbs.run(["qdel", hid])
        r = rl_pbs(pbs, "submit", path, "--set", "job.queue=auto", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "restartlab submit: job.queue auto: capacity" in r.stderr, r.stderr
        jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
        expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
        assert pbs.job(jid)["queue"] == "capacity"
        assert "#PBS -q capacity\n" in open(layout.Expt(expt).job_script).read()
        assert "queue: capacity" in open(layout.Expt(expt).scenario).read()  # the choice, recorded
        assert "preflight: job.queue auto: capacity" in open(layout.Expt(expt).preflight).read()
        assert rl_pbs(pbs, "cancel", expt).returncode == 0
        pbs.wait_job(jid, {"F"}, 120)


@pytest.mark.pbs
def test_smoke_then_experiment_in_a_one_job_per_user_debug_queue(pbs):
    """Aurora's debug takes one job per user, running or waiting.
    With the smoke job there, preflight refuses the experiment for the reason the server would
    give, and the server does refuse a second job. Preflight names the queues that would take it.
    `submit --after SMOKE` waits for the smoke's READY, then submits into debug, which takes it.
    The smoke job is held queued (the server's scheduling off) until the wait has begun. So the
    wait is seen, not raced."""
    with pbs_cluster.site_queues(pbs, "aurora"):
        d = pbs.user_dir("alcf-debug")
        path = pbs_scenario(pbs, d, "dbg", [("sync", "sync")], nodes=2, walltime="00:30:00", iters=20, at_steps=(8,))
        with pbs.scheduling_off():
            r = rl_pbs(pbs, "submit", "--smoke", path, "--set", "job.queue=debug", timeout=300)
            assert r.returncode == 0, r.stdout + r.stderr
            smoke_jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
            smoke_expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
            r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=debug", timeout=300)
            assert r.returncode == 2 and errors(r.stdout) == [
                "queue: --set job.queue: queue debug: it takes 1 job(s) per user, running or waiting (max_queued "
                f"[u:PBS_GENERIC=1]), and you have 1 there ({smoke_jid}): the server would refuse this one until it "
                "ends (restartlab submit --after JOB waits for it) (qstat -Qf debug)",
                "queue: --set job.queue: queue(s) here that take 2 node(s) x 00:30:00: debug-scaling, capacity, workq "
                "(set job.queue: debug-scaling, or job.queue: auto)"], r.stdout
            plain = pbs.write(os.path.join(d, "plain.sh"), "#!/bin/bash\ntrue\n", 0o755)
            q = pbs.as_user(["qsub", "-q", "debug", "-l", "select=1", "-l", "walltime=00:10:00", plain])
            assert q.returncode and "would exceed queue generic's per-user limit" in q.stderr, q.stdout + q.stderr
            log = os.path.join(d, "after.log")
            with open(log, "w") as out:
                waiting = subprocess.Popen(pbs.user_argv([sys.executable, "-m", "restartlab.cli", "submit", path, "--set",
                                                          "job.queue=debug", "--after", smoke_expt, "--poll", "2"]),
                                           stdout=out, stderr=subprocess.STDOUT, cwd=pbs.workdir, env=pbs.env())
            deadline = time.time() + 120
            while f"waiting for {smoke_jid} (pending)" not in open(log).read():
                assert waiting.poll() is None and time.time() < deadline, open(log).read()
                time.sleep(0.5)
        try:
            assert waiting.wait(timeout=400) == 0, open(log).read()
        finally:
            if waiting.poll() is None:
                waiting.kill()
        text = open(log).read()
        assert "restartlab submit --after: smoke: READY (2 host(s))" in text, text
        jid = re.search(r"^job (\S+)$", text, re.M).group(1)
        expt = re.search(r"^experiment (\S+)$", text, re.M).group(1)
        assert pbs.job(smoke_jid)["job_state"] == "F" and pbs.job(jid)["queue"] == "debug"
        assert rl_pbs(pbs, "cancel", expt).returncode == 0
        pbs.wait_job(jid, {"F"}, 120)
        assert left_running(expt) == [] and left_running(smoke_expt) == []


def scontrol(*args):
    r = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slurm
def test_preflight_against_slurm_partitions(slurm, tmp_path):
    made = []
    try:
        scontrol("create", "PartitionName=rlsmall", "Nodes=ALL", "MaxNodes=1", "MaxTime=00:10:00", "State=UP")
        made.append("rlsmall")
        scontrol("create", "PartitionName=rldown", "Nodes=ALL", "State=DOWN")
        made.append("rldown")
        path = slurm_scenario(tmp_path, "slurm", "pre", nodes=2, extra="")
        r = rl_slurm("preflight", path, "--set", "job.queue=rlsmall", "--set", "job.walltime=00:30:00", timeout=300)
        assert r.returncode == 2, r.stdout + r.stderr
        assert errors(r.stdout) == [
            "queue: --set job.queue: queue rlsmall: it takes at most 1 nodes, the job asks for 2 node(s) "
            "(scontrol show partition rlsmall)",
            "queue: --set job.queue: queue rlsmall: its walltime limit is 00:10:00, job.walltime is 00:30:00 "
            "(--set job.walltime) (scontrol show partition rlsmall)",
            "queue: --set job.queue: queue(s) here that take 2 node(s) x 00:30:00: debug (set job.queue: debug, or "
            "job.queue: auto)"], r.stdout
        # auto: the partition that takes it, from the controller's own answer, written into the script
        r = rl_slurm("submit", "--dry-run", path, "--set", "job.queue=auto", "--set", "job.walltime=00:30:00", timeout=300)
        assert r.returncode == 0 and "restartlab submit: job.queue auto: debug" in r.stderr, r.stderr
        assert "#SBATCH --partition=debug\n" in r.stdout, r.stdout[:2000]
        r = rl_slurm("preflight", path, "--set", "job.queue=rldown", timeout=300)
        assert errors(r.stdout)[:2] == [
            "queue: --set job.queue: queue rldown: it is not enabled: the server refuses new jobs "
            "(scontrol show partition rldown)",
            "queue: --set job.queue: queue rldown: it is not started: a job would wait in it and never run "
            "(scontrol show partition rldown)"], r.stdout
        # more nodes than the partition has: held forever, refused
        r = rl_slurm("preflight", path, "--set", "job.nodes=5", timeout=300)
        assert errors(r.stdout) == [
            f"queue: {path}:4: job.queue: queue debug: it has {len(slurm['nodes'])} nodes in all, the job asks for "
            "5 node(s): it would never start (scontrol show partition debug)",
            f"queue: {path}:4: job.queue: no queue here takes 5 node(s) x 00:15:00: debug: it has "
            f"{len(slurm['nodes'])} nodes in all, the job asks for 5 node(s): it would never start; rlsmall: it takes "
            "at most 1 nodes, the job asks for 5 node(s); rldown: it is not enabled: the server refuses new jobs"], r.stdout
        # the default partition takes the scenario as it is, and srun is found as the launcher
        r = rl_slurm("preflight", path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "preflight: ok: queue: queue debug takes 2 node(s) for 00:15:00" in r.stdout, r.stdout
        assert "preflight: ok: launcher: /usr/bin/srun: srun" in r.stdout, r.stdout
    finally:
        for p in made:
            subprocess.run(["scontrol", "delete", f"PartitionName={p}"], capture_output=True, timeout=60)


def broken_torch_on(d, host):
    """A directory that, first on a rank's PYTHONPATH, breaks `import torch` on `host` only.
    It stands for a host whose Python environment differs: a module not loaded there. Elsewhere
    the real torch loads."""
    pkg = os.path.join(d, "shadow", "torch")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write(textwrap.dedent(f"""\
            import importlib, os, socket, sys
            if socket.gethostname() == {host!r}:
                raise ImportError("torch is broken on purpose on this host")
            sys.path.remove(os.path.dirname(os.path.dirname(__file__)))
            del sys.modules["torch"]
            sys.modules["torch"] = importlib.import_module("torch")
            """))
    return os.path.dirname(pkg)


def smoke_report(expt):
    with open(layout.Expt(expt).smoke_report) as f:
        data = json.load(f)
    return data, {c["name"]: c for c in data["checks"]}


CHECKS = ["fanout", "shared", "stage", "ranks", "torch", "allreduce", "killers", "kill", "teardown", "relaunch"]


@pytest.mark.pbs
def test_smoke_job_on_the_pbs_clusters_three_hosts(pbs):
    d = pbs.user_dir("smoke")
    path = pbs_scenario(pbs, d, "smoke", [("sync", "sync")], nodes=3)
    r = rl_pbs(pbs, "submit", "--smoke", path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    rec = pbs.wait_job(jid, {"F"}, 400)
    out = job_output(expt, jid)
    assert rec["Exit_status"] == 0, out[-3000:]
    data, checks = smoke_report(expt)
    assert [c["name"] for c in data["checks"]] == CHECKS and data["ok"], out[-3000:]
    assert data["hosts"] == pbs.nodes and data["ranks"] == 3
    ranks = [json.load(open(p)) for p in layout.Expt(expt).smoke_attempt(1).smoke_records()]
    assert sorted(x["host"] for x in ranks) == sorted(pbs.nodes)  # one rank on each host the scheduler gave
    assert all(x["allreduce"] == 6.0 and x["backend"] == "gloo" for x in ranks), ranks
    assert checks["kill"]["detail"].startswith(f"SIGKILL on {pbs.nodes[-1]} took pid(s)")
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "status", expt])
    assert r.returncode == 0 and f"{jid}\tfinished" in r.stdout and f"{expt}: smoke: READY (3 host(s))" in r.stdout, \
        r.stdout + r.stderr
    assert left_running(expt) == []


@pytest.mark.pbs
def test_smoke_job_names_the_host_whose_torch_is_broken(pbs):
    d = pbs.user_dir("smoke-broken")
    bad = pbs.nodes[1]
    shadow = broken_torch_on(d, bad)
    for root, dirs, files in os.walk(os.path.join(d, "shadow")):
        for x in dirs + files:
            os.chown(os.path.join(root, x), *[int(v) for v in pbs.as_user(["id", "-u"]).stdout.split() * 2])
    path = pbs_scenario(pbs, d, "broken", [("sync", "sync")], nodes=3)
    text = open(path).read().replace(ONE_THREAD, f"{ONE_THREAD}, PYTHONPATH: {shadow}")
    pbs.write(path, text)
    r = rl_pbs(pbs, "submit", "--smoke", path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    rec = pbs.wait_job(jid, {"F"}, 600)
    assert rec["Exit_status"] == 1, job_output(expt, jid)[-3000:]  # not ready: the job says so
    data, checks = smoke_report(expt)
    assert not data["ok"]
    assert checks["torch"]["failed_hosts"] == [bad] and \
        f"on {bad}: ImportError: torch is broken on purpose on this host" in checks["torch"]["detail"], checks["torch"]
    assert checks["fanout"]["ok"] and checks["shared"]["ok"], checks  # the rest is told apart
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "status", expt])
    assert "smoke: NOT READY" in r.stdout and f"FAIL torch" in r.stdout and f"[on {bad}]" in r.stdout, r.stdout
    assert left_running(expt) == []


@pytest.mark.slurm
def test_smoke_job_on_the_slurm_nodes(slurm, tmp_path):
    path = slurm_scenario(tmp_path, "slurm", "smoke", nodes=3, ppn=1)
    r = rl_slurm("submit", "--smoke", path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    wait_state("slurm", jid, {"finished", "failed"}, 400)
    out = open(os.path.join(expt, f"job-{jid}.out")).read()
    data, checks = smoke_report(expt)
    assert data["ok"] and [c["name"] for c in data["checks"]] == CHECKS, out[-3000:]
    assert data["hosts"] == slurm["nodes"], data["hosts"]
    r = rl_slurm("status", expt)
    assert r.returncode == 0 and f"{jid}\tfinished" in r.stdout and "smoke: READY (3 host(s))" in r.stdout, r.stdout


@pytest.mark.slurm
def test_smoke_job_names_the_node_whose_fanout_cannot_run(slurm, tmp_path):
    """A node whose Python stack is broken: the fan-out cannot run there, and the report says so by node.
    Every Python started in a job step there exits, as with a module missing on that node."""
    bad = slurm["nodes"][-1]
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import os, sys
        if os.environ.get("SLURMD_NODENAME") == {bad!r} and os.environ.get("SLURM_STEP_ID") not in (None, "batch"):
            sys.exit("this node's Python is broken on purpose")
        """))
    path = slurm_scenario(tmp_path, "slurm", "smokebad", nodes=3, ppn=1)
    text = open(path).read().replace("\nlaunch: {", f"\nlaunch: {{setup: ['export PYTHONPATH={site}'], ")
    open(path, "w").write(text)
    r = rl_slurm("submit", "--smoke", path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    wait_state("slurm", jid, {"finished", "failed"}, 400)
    out = open(os.path.join(expt, f"job-{jid}.out")).read()
    data, checks = smoke_report(expt)
    assert not data["ok"], out[-3000:]
    assert checks["fanout"]["failed_hosts"] == [bad] and f"slurm reached 2 of 3 host(s); {bad}: rc=1" in \
        checks["fanout"]["detail"] and "broken on purpose" in checks["fanout"]["detail"], checks["fanout"]
    assert bad in checks["ranks"]["failed_hosts"], checks["ranks"]
    r = rl_slurm("status", expt)
    assert "smoke: NOT READY" in r.stdout and f"FAIL fanout" in r.stdout and f"[on {bad}]" in r.stdout, r.stdout
