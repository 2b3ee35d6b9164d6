"""restartlab's PBS paths against a real OpenPBS 23.06 server (conftest `pbs`, tests/pbs_cluster.py).

The cluster has three hosts. Each is a network namespace of this machine with its own MoM.
Jobs run as an ordinary user.

- The whole experiment through `restartlab submit`. MPICH's Hydra runs over PBS's TM interface on
  the three hosts. Gated kills fan out with `pbsdsh`, one killer per host. Every restart is bit-exact.
- Every directive `restartlab render` writes for a PBS profile, accepted by the real qsub.
- A bad submission: PBS's own message, a non-zero exit, the experiment marked as never submitted.
- PBS's own kill at the walltime, a SIGKILLed supervisor, and warm pools through pbsdsh.
- A host lost in the middle of a phase. PBS requeues the job, and its rerun carries the experiment on.

Some things both schedulers do the same: status and cancel, `inject` without flags, the walltime
margin, and a chain over the walltime with a secret. tests/test_schedulers.py tests them once on each.

What this cluster cannot be:
- The hosts share one kernel, so their processes are visible to each other. Each host's killer
  leaves another host's processes alone by its UTS namespace.
- There is no PALS.
- A lost MoM does not take its host's processes with it."""
import glob
import json
import os
import re
import sys
import time

import pytest

from tests import pbs_cluster
from tests.clusters import left_running, submitted

from restartlab.runtime import killer
from restartlab.contracts import layout
from tests.helpers import final_crc, job_tag

pytestmark = [pytest.mark.pbs, pytest.mark.multirank, pytest.mark.timeout(900)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rl(pbs, *args, timeout=120):
    """restartlab as the cluster's user on the head (a login node)."""
    return pbs.as_user([sys.executable, "-m", "restartlab.cli", *args], timeout=timeout)


# One rank on a host gets one thread. The hosts are namespaces on this machine's 2 cores, and a rank
# alone on its host would take both. Measured on an idle machine: a rank of the network tests' model,
# 60 steps, took 9.1 CPU-s with 2 threads and 6.6 with 1. The ranks of 3 hosts then want 6 threads.
ONE_THREAD = 'OMP_NUM_THREADS: "1"'


def scenario(pbs, d, name, phases, extra="", nodes=3, iters=40, at_steps=(12, 24), walltime="00:15:00"):
    text = f"""extends: {REPO}/scenarios/systems/pbs.yaml
name: {name}
expt_root: {d}/expt
job: {{nodes: {nodes}, walltime: "{walltime}"}}
launch:
  ranks_per_node: 1
  env: {{{ONE_THREAD}}}
{pbs.hydra_launch()}trainer: {{model: tiny, train_iters: {iters}, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 5, backoff: 0s, hang_timeout: 120s}}
failures:
  kind: kill
  schedule: {{at_steps: [{", ".join(map(str, at_steps))}]}}
  gate: complete
{extra}phases:
""" + "".join(f"  - {{name: {n}, checkpoint: {c}}}\n" for n, c in phases)
    return pbs.write(os.path.join(d, f"{name}.yaml"), text)


def submit(pbs, path):
    """`restartlab submit` without its preflight, which these tests are not about.

    The site tests and the end-to-end one run the preflight against this server. It probes the
    job's Python as the user, torch's import included. That takes 4 to 12 s a submit here."""
    r = rl(pbs, "submit", "--no-preflight", path)
    assert r.returncode == 0, r.stdout + r.stderr
    return submitted(r.stdout)


def job_output(expt, jid):
    """The job's output file: `-o <expt>/` makes PBS write <job id>.OU into the experiment directory
    (-k doe: as the job runs; -j oe: stderr too)."""
    path = os.path.join(expt, f"{jid}.OU")
    return open(path).read() if os.path.exists(path) else ""


def summary(expt):
    with open(layout.Expt(expt).summary) as f:
        return {p["phase"]: p for p in json.load(f)["phases"]}


PBS_PROFILES = ("pbs", "sunspot", "aurora", "polaris")


def shipped_pbs_scenarios():
    """(label, scenario, overrides) of the PBS scenarios to render.

    - Every shipped scenario whose profile is a PBS one.
    - The default scenario on each PBS profile. It has an account, as `make sunspot-expt` submits it.
      It also has a chain, which adds nothing to the header but is rendered for PBS."""
    from restartlab import scenario as scen
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "scenarios", "*.yaml")) +
                       glob.glob(os.path.join(REPO, "scenarios", "examples", "*.yaml"))):
        if scen.load(path, []).scheduler == "pbs":
            out.append((os.path.relpath(path, REPO), path, ["job.account=datascience"]))
    for prof in PBS_PROFILES:
        out.append((f"local.yaml on systems/{prof}.yaml", os.path.join(REPO, "scenarios", "local.yaml"),
                    [f"extends=systems/{prof}.yaml", "job.account=datascience", "relaunch.chain=2"]))
    return out


def machine_scenarios():
    """(site, scenario) of each machine's own scenarios (scenarios/aurora/, scenarios/polaris/): their
    queues are the site's, so they go to a server with that site's table (pbs_cluster.site_queues)."""
    return [(site, p) for site in ("aurora", "polaris")
            for p in sorted(glob.glob(os.path.join(REPO, "scenarios", site, "*.yaml")))]


def test_every_pbs_directive_is_accepted_by_qsub(pbs):
    """Every #PBS line `restartlab render` writes for a PBS profile, submitted to the real qsub
    (held with -h, so nothing runs, then deleted): a directive qsub refuses fails with its message.
    The server knows what ALCF's define (the `filesystems` resource, a `prod` queue: see
    tests/pbs_cluster.py)."""
    d = pbs.user_dir("directives")
    cases = shipped_pbs_scenarios()
    assert len([c for c in cases if not c[0].startswith("local.yaml on")]) >= 3, cases
    refused = []
    for i, (label, path, sets) in enumerate(cases):
        refused += _held_and_deleted(pbs, d, f"case{i}", label, path, sets)
    machines = machine_scenarios()
    assert {s for s, _ in machines} == {"aurora", "polaris"}, machines
    for site in ("aurora", "polaris"):
        with pbs_cluster.site_queues(pbs, site):
            for i, (_, path) in enumerate(m for m in machines if m[0] == site):
                refused += _held_and_deleted(pbs, d, f"{site}{i}", os.path.relpath(path, REPO), path,
                                             ["job.account=datascience"])
    assert not refused, "\n".join(refused)


def _held_and_deleted(pbs, d, name, label, path, sets):
    """Render `path` and qsub it held: [] when the server took it (then deleted), else its refusal."""
    script = os.path.join(d, f"{name}.pbs.sh")
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "render", path, "-o", script,
                 *[a for s in sets for a in ("--set", s)]])
    assert r.returncode == 0, (label, r.stderr)
    assert sum(line.startswith("#PBS ") for line in open(script)) >= 5, open(script).read()[:800]
    os.chmod(script, 0o755)
    r = pbs.as_user(["qsub", "-h", script], cwd=d)
    if r.returncode:
        return [f"{label}: {r.stderr.strip()}"]
    jid = r.stdout.strip()
    rec = pbs.job(jid)
    assert rec["job_state"] == "H", rec
    if "-l filesystems" in open(script).read():
        assert rec["Resource_List"]["filesystems"], rec
    pbs.run(["qdel", jid])
    return []


def test_bad_submission_one_line_and_marked(pbs):
    """A bad submission says so in one line and marks the experiment.

    The cases are a queue the server does not have, a directive PBS refuses, and no server reachable.
    The preflight refuses the first and the last before anything is made (exit 2). Past the
    preflight (--no-preflight), `restartlab submit` says so in one line with PBS's own message and
    exits 1. It leaves the experiment directory marked as never submitted. `restartlab status` of it
    says so."""
    d = pbs.user_dir("bad")
    base = scenario(pbs, d, "bad", [("sync", "sync")])
    cases = {"queue": (["--set", "job.queue=nosuchq"], "Unknown queue"),
             "directive": (["--set", "job.directives=[-l nosuchres=1]"], "Unknown resource"),
             # a destination on a server that does not exist: qsub cannot reach it
             "server": (["--set", "job.queue=workq@nosuchhost.invalid"], "cannot connect to server")}
    for what, (sets, msg) in cases.items():
        if what != "directive":  # preflight asks the server about the queue first: nothing is made
            made = lambda: sorted(os.listdir(os.path.join(d, "expt"))) if os.path.isdir(os.path.join(d, "expt")) else []
            before = made()
            r = pbs.as_user([sys.executable, "-m", "restartlab.cli", "submit", base, *sets])
            assert r.returncode == 2 and "preflight: error: queue: --set job.queue: " in r.stderr, (what, r.stderr)
            assert "nothing submitted" in r.stderr and made() == before, (what, r.stderr)
        # qsub's own refusal (the preflight skipped, as the experiment records)
        r = pbs.as_user([sys.executable, "-m", "restartlab.cli", "submit", base, *sets, "--no-preflight"])
        assert r.returncode == 1 and r.stdout == "", (what, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()[1:]
        assert len(lines) == 1 and "qsub refused the job" in lines[0], (what, r.stderr)
        assert msg in lines[0], (what, lines)
        marker = re.search(r"never submitted: (\S+)\)$", lines[0]).group(1)
        expt = os.path.dirname(marker)
        assert os.path.exists(layout.Expt(expt).job_script) and not os.path.exists(layout.Expt(expt).jobid)
        s = pbs.run([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", "pbs", expt])
        assert s.returncode == 1 and "never submitted" in s.stderr, (what, s.stderr)


def report_of(pbs, expt):
    """`restartlab report` afterwards, where the scheduler can be asked (qstat on PATH)."""
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "report", expt, "--no-plots"], timeout=120)
    assert r.returncode == 0, r.stderr
    with open(layout.Expt(expt).summary) as f:
        return json.load(f), open(layout.Expt(expt).report).read()


def test_pbs_walltime_kill(pbs):
    """A one-host job without a walltime margin: PBS kills it at its walltime.

    PBS sends SIGTERM to every process of the job, and SIGKILL kill_delay later. The Exit_status is
    -29, and the output has `=>> PBS: job killed: walltime`. The report names the phase and attempt
    it ended in, and how: interrupted by SIGTERM. It also gives what PBS says of the job.
    restartlab's own stop before the limit, the margin, is tested in tests/test_schedulers.py, on
    both schedulers."""
    d = pbs.user_dir("walltime")
    path = scenario(pbs, d, "killed", [("p", "async")], nodes=1, iters=1000000, walltime="00:00:30")
    text = open(path).read().replace("hang_timeout: 120s}", "hang_timeout: 120s, walltime_margin: 0s}")
    text = text.replace("phases:\n  - {name: p, checkpoint: async}", "phases:\n  - {name: p, checkpoint: async, failures: false}")
    # 0.2 s a step (a test-only delay point): the subject is the walltime, not the compute in it
    text = text.replace(ONE_THREAD, ONE_THREAD + ', RESTARTLAB_DELAY: "step:*:*:0.2"')
    pbs.write(path, text)
    jk, ek = submit(pbs, path)
    rk = pbs.wait_job(jk, {"F"}, 180)
    out_k = job_output(ek, jk)
    assert rk["Exit_status"] == -29, (rk, out_k[-3000:])
    assert re.search(r"=>> PBS: job killed: walltime \d+ exceeded limit 30", out_k), out_k[-3000:]
    s, md = report_of(pbs, ek)
    p = s["phases"][0]
    assert not p["completed"] and p["overhead"] is None, p
    assert p["ended"]["how"] == "interrupted" and p["ended"]["signal"] == "SIGTERM" and p["ended"]["attempt"] == 1, p["ended"]
    assert s["jobs"][0]["exit_status"] == -29 and "walltime exceeded" in s["jobs"][0]["detail"], s["jobs"]
    assert "interrupted by SIGTERM in attempt 1" in md and f"job {jk}: failed, exit status -29" in md, md
    assert left_running(ek) == []


def test_pbs_supervisor_killed_is_named(pbs):
    """The phase's supervisor is SIGKILLed in the middle of a PBS job.

    The test finds it by the experiment in its environment and kills it by PID. The supervisor
    leaves no word on how the phase ended. The job script goes on to its report and exits 1. When
    the job ends, PBS ends what the supervisor left running: the launcher and its ranks. The report
    says the phase did not finish, and in which attempt its supervisor died. It computes no overhead
    for the phase, and gives PBS's exit status of the job."""
    import psutil
    from tests.helpers import rows, wait_for
    d = pbs.user_dir("supkill")
    path = scenario(pbs, d, "supkill", [("baseline", "none"), ("sync", "sync")], nodes=1, iters=400)
    jid, expt = submit(pbs, path)
    first = layout.Expt(expt).phase("sync").attempt(1).path
    wait_for(lambda: any(m.get("train/iter", 0) >= 8 for m in rows(layout.Attempt(first).metrics(0))), 240,
             "the sync phase's step 8")

    def supervisors():
        out = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if "supervise" in (p.info["cmdline"] or []) and p.environ().get("RL_EXPT_DIR") == expt:
                    out.append(p)
            except psutil.Error:
                pass
        return out
    sup = supervisors()
    assert len(sup) == 1, sup
    sup[0].kill()
    rec = pbs.wait_job(jid, {"F"}, 240)
    out = job_output(expt, jid)
    assert rec["Exit_status"] == 1, (rec, out[-3000:])
    s, md = report_of(pbs, expt)
    ph = {p["phase"]: p for p in s["phases"]}
    assert ph["baseline"]["completed"] and ph["baseline"]["ended"]["how"] == "completed"
    sync = ph["sync"]
    assert not sync["completed"] and sync["overhead"] is None, sync
    assert sync["ended"]["how"] == "died" and sync["ended"]["attempt"] == 1, sync["ended"]
    assert "supervisor ended without a word during attempt 1" in md, md
    assert s["jobs"] == [{"jobid": jid, "state": "failed", "exit_status": 1, "detail": "exit code 1"}], s["jobs"]
    wait_for(lambda: left_running(expt) == [], 30, "PBS to end what the dead supervisor left")


def test_pbs_node_lost_mid_phase(pbs):
    """A host lost in the middle of a phase, for real as far as one machine allows.

    The second host's MoM and the job's processes there are SIGKILLed. This is a crash, and its
    kernel is this machine's. Within the job, restartlab's node check finds that host bad, since
    pbsdsh reaches no one there. It relaunches on the spare. The server marks the node down at once.
    Once the MoM has been unreachable for $max_poll_downtime, the server requeues the job
    (Exit_status -14, rerunnable by default). When the MoM is back, the job runs again. It carries
    on the same experiment from its newest checkpoint, to the baseline's parameters."""
    import psutil
    from tests.helpers import rows, wait_for
    d = pbs.user_dir("nodeloss")
    path = scenario(pbs, d, "nodeloss", [("baseline", "none"), ("sync", "sync")], nodes=2, iters=80)
    text = open(path).read().replace("job: {nodes: 2,", "job: {nodes: 2, spare_nodes: 1,").replace(
        "hang_timeout: 120s}", "hang_timeout: 120s, on_node_loss: spares, node_check_timeout: 20s}").replace(
        "phases:\n  - {name: baseline, checkpoint: none}\n  - {name: sync, checkpoint: sync}",
        "phases:\n  - {name: baseline, checkpoint: none}\n  - {name: sync, checkpoint: sync, failures: false}")
    pbs.write(path, text)
    # pbs_mom never kills a job for a lost sister while its own comm link is younger than 60 s
    # (COMM_MATURITY_TIME, compiled in). So a cluster just started would keep the job running.
    # The wait comes before the job, not at its step 12. Waiting at step 12, an idle machine
    # finished the whole phase within the wait (2026-12-02). In the suite the cluster is older,
    # so there is no wait.
    age = time.time() - psutil.Process(pbs.mom_pid(pbs.nodes[0])).create_time()
    time.sleep(max(0.0, 70 - age))
    jid, expt = submit(pbs, path)
    first = layout.Expt(expt).phase("sync").attempt(1).path
    wait_for(lambda: any(m.get("train/iter", 0) >= 12 for m in rows(layout.Attempt(first).metrics(0))), 300,
             "the sync phase's step 12")
    lost = pbs.nodes[1]
    mom = pbs.mom_pid(lost)
    assert mom, lost
    tag = job_tag(expt)
    host_ns = os.stat(f"/proc/{mom}/ns/uts").st_ino
    os.kill(mom, 9)
    for p in psutil.process_iter():  # the job's processes on that host die with it
        try:
            if os.stat(f"/proc/{p.pid}/ns/uts").st_ino == host_ns and p.environ().get(killer.TAG_VAR) == tag:
                p.kill()
        except (OSError, psutil.Error):
            pass
    try:
        wait_for(lambda: pbs.node_state(lost) and "down" in pbs.node_state(lost), 30, f"{lost} down")
        rec = pbs.wait_job(jid, {"Q", "F"}, 120)
        history = [rec.get("job_state"), rec.get("Exit_status"), rec.get("comment")]
    finally:
        pbs.start_mom(lost)
    rec = pbs.wait_job(jid, {"F"}, 400)
    out = job_output(expt, jid)
    assert rec["Exit_status"] == 0, (history, rec, out[-3000:])
    phases = summary(expt)
    sync = phases["sync"]
    assert sync["completed"], sync
    crc = {ph: final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))
           for ph in ("baseline", "sync")}
    assert crc["sync"] is not None and crc["sync"] == crc["baseline"], crc
    # what PBS did: the node down at once, the job requeued (-14), then run again under its id
    assert history[:2] == ["Q", -14], history
    assert rec["run_count"] == 2, rec.get("run_count")
    with open(layout.Expt(expt).jobs) as f:
        assert [json.loads(x)["job"] for x in f] == [jid, jid]
    # what restartlab did inside the first run: the node check found the host gone, the
    # relaunch took the spare; the requeue cut that attempt short
    with open(layout.Expt(expt).phase("sync").node_checks) as f:
        checks = [json.loads(x) for x in f]
    gone = [c for c in checks if c["attempt"] == 2 and not c["ok"]]
    assert [c["node"] for c in gone] == [lost] and "did not run on node" in gone[0]["reason"], checks
    with open(layout.Attempt(layout.Expt(expt).phase("sync").attempt(2).path).hosts) as f:
        assert f.read().split() == [pbs.nodes[0], pbs.nodes[2]]
    # the rerun has its nodes back: it checks all three again (the bad list was the first run's)
    assert sorted(c["node"] for c in checks if c["attempt"] == 3 and c["ok"]) == sorted(pbs.nodes), checks
    ev = sync["failures"]
    assert ev[0]["attempt"] == 1 and ev[0]["bad_nodes"] == [lost], ev
    assert ev[0]["lost_steps"] == ev[0]["step_at_kill"] - ev[0]["resumed_from"] >= 0, ev
    # the requeue is the failure's time (#65): no chain hand-over, nothing taken out of the wall time
    assert sync["handovers"] == [] and sync["queue_wait_s"] == 0, sync["handovers"]
    again = [e for e in ev if e["rerun"]]
    assert len(again) == 1, ev
    r = again[0]["rerun"]
    with open(layout.Expt(expt).jobs) as f:
        starts = [json.loads(x)["start"] for x in f]
    assert r["run"] == 2 and r["run_start"] == pytest.approx(starts[1]) and r["scheduler"] == "pbs", r
    assert any(n["node"] == lost for n in r["nodes"]), r  # the lost node changed state between the runs
    assert again[0]["downtime_s"] >= r["between_runs_s"] > 0, again[0]
    atts = phases["sync"]["attempts"]
    launched = json.load(open(layout.Attempt(first).launched))["launch_ts"]
    last = json.load(open(layout.Expt(expt).phase("sync").attempt(atts).record))["end_ts"]
    assert sync["wall_s"] == pytest.approx(last - launched, abs=0.01), sync["wall_s"]
    assert "PBS requeued job" in open(layout.Expt(expt).report).read()
    v = sync["survival"]
    outcomes = [r["outcome"] for r in v["restarts"]]
    assert v["survived"] and not v["findings"] and "ended with its node" in v["restarts"][0]["text"], v
    # The requeue races the relaunch on the spare, and both orders were seen. In CI (2026-12-02),
    # attempt 2 was cut before its first step. On an idle machine the same day, it trained on the
    # spare first.
    if rows(layout.Attempt(layout.Expt(expt).phase("sync").attempt(2).path).metrics(0)):
        # the spare took over, then the requeue ended that attempt: a second failure, no bad node
        assert [e["attempt"] for e in ev] == [1, 2] and ev[1]["bad_nodes"] == [], ev
        assert ev[0]["recovery"] == f"spares: {pbs.nodes[2]} for {lost}", ev
        assert ev[1]["hosts_after"] == pbs.nodes[:2] and outcomes[1] in ("newest", "first"), (ev, v)
    else:
        # cut short: the attempt that carried on (the rerun's) ran on the job's first two hosts again
        assert len(ev) == 1 and ev[0]["hosts_after"] == pbs.nodes[:2], ev
        assert ev[0]["recovery"] == "the job's next run, on the same nodes", ev
        assert outcomes[1] == "cut_short", v
    assert "the scheduler requeued the job" in " ".join(x["text"] for x in v["restarts"]), v
    assert left_running(expt) == []
