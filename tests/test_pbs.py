"""restartlab's PBS paths against a real OpenPBS 23.06 server (conftest `pbs`, tests/pbs_cluster.py):
three hosts, each a network namespace of this machine with its own MoM; jobs as an ordinary user.

- the whole experiment through `restartlab submit`: MPICH's Hydra over PBS's TM interface on the
  three hosts, gated kills fanned out with `pbsdsh` (one killer per host), every restart bit-exact;
- `status` of held, running, finished and unknown jobs in one qstat call; `cancel`; what qdel does;
- every directive `restartlab render` writes for a PBS profile, accepted by the real qsub;
- a bad submission: PBS's own message, a non-zero exit, the experiment marked as never submitted;
- walltime (restartlab's margin first; PBS's own kill), a SIGKILLed supervisor, a chain over the
  walltime with a secret through qsub -v, `restartlab inject` in a user's own job, warm pools
  through pbsdsh, and a host lost in the middle of a phase (PBS requeues the job; its rerun
  carries the experiment on).

What this cluster cannot be: the hosts share one kernel (their processes are visible to each
other: each host's killer leaves another host's alone by its UTS namespace), there is no PALS, and
a lost MoM does not take its host's processes with it."""
import glob
import json
import os
import re
import sys
import time

import pytest

from tests import pbs_cluster

from restartlab.runtime import killer
from restartlab.contracts import layout
from tests.helpers import final_crc, job_tag

pytestmark = [pytest.mark.pbs, pytest.mark.multirank, pytest.mark.timeout(900)]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rl(pbs, *args, timeout=120):
    """restartlab as the cluster's user on the head (a login node)."""
    return pbs.as_user([sys.executable, "-m", "restartlab.cli", *args], timeout=timeout)


def scenario(pbs, d, name, phases, extra="", nodes=3, iters=40, at_steps=(12, 24), walltime="00:15:00"):
    text = f"""extends: {REPO}/scenarios/systems/pbs.yaml
name: {name}
expt_root: {d}/expt
job: {{nodes: {nodes}, walltime: "{walltime}"}}
launch:
  ranks_per_node: 1
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
    r = rl(pbs, "submit", path)
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    return jid, expt


def status(pbs, *ids):
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", "pbs", "--json", *ids])
    assert r.returncode == 0, r.stderr
    return {d["jobid"]: d for d in map(json.loads, r.stdout.splitlines())}


def job_output(expt, jid):
    """The job's output file: `-o <expt>/` makes PBS write <job id>.OU into the experiment directory
    (-k doe: as the job runs; -j oe: stderr too)."""
    path = os.path.join(expt, f"{jid}.OU")
    return open(path).read() if os.path.exists(path) else ""


def summary(expt):
    with open(layout.Expt(expt).summary) as f:
        return {p["phase"]: p for p in json.load(f)["phases"]}


def left_running(expt):
    """Anything still carrying the experiment's tag, on any host (the hosts share this kernel)."""
    return killer.find_by_env(f"{killer.TAG_VAR}={job_tag(expt)}")


@pytest.fixture(scope="module")
def three_host_job(pbs):
    """One job on the three hosts, asserted on by the end-to-end and the warm tests (#49: a job and
    a baseline less): baseline, `sync` and `async` relaunched cold, `warm` (sync checkpoints)
    relaunched from a standby pool on each host, two gated kills in each restart phase.
    Returns (job id, experiment, PBS's record of the job, its output)."""
    d = pbs.user_dir("e2e")
    path = scenario(pbs, d, "pbs-e2e", [("baseline", "none"), ("sync", "sync"), ("async", "async"), ("warm", "sync")])
    pbs.write(path, open(path).read().replace("{name: warm, checkpoint: sync}", "{name: warm, checkpoint: sync, warm: true}"))
    jid, expt = submit(pbs, path)
    rec = pbs.wait_job(jid, {"F"}, 600)
    return jid, expt, rec, job_output(expt, jid)


def test_pbs_experiment_three_hosts_kills_through_pbsdsh(pbs, three_host_job):
    """`restartlab submit` on PBS: baseline, sync and async phases on the three hosts (Hydra's
    mpiexec reaching n1 and n2 through pbs_tmrsh), two gated kills per restart phase fanned out
    with pbsdsh -n to one killer per host (each killer takes only its own host's rank: its
    receipt comes back through the shared file system, since pbsdsh hands nothing back), every
    restart resumed from a complete checkpoint and bit-exact with the baseline; then the finished
    job through `restartlab status`, and nothing of it left running."""
    jid, expt, rec, out = three_host_job
    assert re.fullmatch(r"\d+\.rlpbs-head", jid), jid
    assert rec["Exit_status"] == 0, (rec, out[-3000:])
    assert f"job {jid} on 3 node(s)" in out, out[-2000:]
    assert rec["Job_Owner"].startswith(pbs.user + "@"), rec["Job_Owner"]
    assert len({h.split("/")[0] for h in rec["exec_host"].split("+")}) == 3, rec["exec_host"]
    phases = summary(expt)
    assert phases["baseline"]["completed"] and phases["baseline"]["attempts"] == 1
    crc = {}
    for ph in ("baseline", "sync", "async"):
        crc[ph] = final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))
    assert crc["baseline"] is not None and crc["sync"] == crc["baseline"] == crc["async"], crc
    for ph in ("sync", "async"):
        p = phases[ph]
        assert p["completed"] and p["kills"] == 2 and p["attempts"] == 3, p
        with open(layout.Expt(expt).phase(ph).injections) as f:
            recs = [json.loads(line) for line in f]
        assert len(recs) == 2
        for r in recs:
            assert r["hosts"] == pbs.nodes, r
            # one receipt per host, from that host's killer (the receipt names its host)
            assert [x.get("host") for x in r["receipts"]] == pbs.nodes, r["receipts"]
            assert not any(x.get("error") for x in r["receipts"]), r["receipts"]
            # a host's killer took at most its own rank (Hydra may end the others first)
            # (whole receipts on failure: the soak saw a host with two trees, 2 of 10 runs under load)
            assert all(len(x["roots"]) <= 1 for x in r["receipts"]) and 1 <= r["killed"] <= 3, \
                json.dumps([{k: x.get(k) for k in ("host", "pids", "roots", "cmdlines")} for x in r["receipts"]])
        for e, r in zip(p["failures"], recs):
            assert e["resumed_from"] >= r["newest_complete"] and e["lost_steps"] >= 0, (e, r)
        # cold relaunches: no pool (the warm phase's come later) served them
        assert [json.load(open(layout.Expt(expt).phase(ph).attempt(k).record))["warm_ranks"]
                for k in (1, 2, 3)] == [None] * 3
    assert os.path.exists(layout.Expt(expt).report)
    assert not glob.glob(os.path.join(expt, ".restartlab-fanout-*"))  # the relay files are cleaned up
    st = status(pbs, jid)[jid]
    assert st["state"] == "finished" and st["exit_status"] == 0, st
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", "pbs", expt])
    assert r.returncode == 0 and r.stdout.split()[:2] == [jid, "finished"], r.stdout + r.stderr
    assert left_running(expt) == []


def counting(pbs, tool):
    """A PATH whose `tool` logs each call, then runs PBS's: (env, log path)."""
    d = pbs.user_dir("count")
    log = os.path.join(d, f"{tool}.calls")
    pbs.write(os.path.join(d, tool), f'#!/bin/sh\necho "$*" >> {log}\nexec {pbs.bindir}/{tool} "$@"\n', 0o755)
    return pbs.env(PATH=os.pathsep.join([d, pbs.bindir, os.environ["PATH"]])), log


def test_pbs_status_and_cancel_real_states(pbs):
    """`restartlab status` of a finished, a running, a held (qsub -h) and an unknown job in one
    `qstat -f -F json -x` call; `restartlab cancel` of the running one (its script traps SIGTERM and
    goes on: PBS sends SIGKILL kill_delay later, Exit_status 271 = 256 + SIGTERM) and of the held
    one; a job depending on the cancelled one with afterany then runs."""
    d = pbs.user_dir("states")
    done = pbs.write(os.path.join(d, "done.sh"), "#!/bin/bash\n#PBS -l walltime=60\ntrue\n")
    stubborn = pbs.write(os.path.join(d, "stubborn.sh"), "#!/bin/bash\n#PBS -l walltime=300\n"
                         f"trap 'echo got TERM >> {d}/stubborn.log' TERM\n"
                         f"for i in $(seq 600); do sleep 0.5; done\n")
    after = pbs.write(os.path.join(d, "after.sh"), f"#!/bin/bash\n#PBS -l walltime=60\ndate +%s.%N > {d}/after.ran\n")

    def qsub(*args):
        r = pbs.as_user(["qsub", *args], cwd=d)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()
    j_done = qsub(done)
    j_run = qsub(stubborn)
    j_held = qsub("-h", done)
    j_after = qsub("-W", f"depend=afterany:{j_run}", after)
    pbs.wait_job(j_done, {"F"}, 60)
    pbs.wait_job(j_run, {"R"}, 60)
    env, log = counting(pbs, "qstat")
    unknown = "999999.rlpbs-head"
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "status", "--scheduler", "pbs", "--json",
                 j_done, j_run, j_held, unknown], env=env)
    assert r.returncode == 0, r.stderr
    st = {x["jobid"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert [st[j]["state"] for j in (j_done, j_run, j_held, unknown)] == \
        ["finished", "running", "pending", "unknown"], st
    assert st[j_done]["exit_status"] == 0
    assert len(open(log).read().splitlines()) == 1  # one qstat for the four
    assert status(pbs, j_after)[j_after]["state"] == "pending"  # held by its dependency
    t0 = os.path.getmtime(log)
    for j in (j_run, j_held):
        r = pbs.run([sys.executable, "-m", "restartlab.cli", "cancel", "--scheduler", "pbs", j])
        assert r.returncode == 0 and f"cancelled {j}" in r.stdout, r.stdout + r.stderr
    rec = pbs.wait_job(j_run, {"F"}, 60)
    assert rec["Exit_status"] == 271, rec
    st = status(pbs, j_run, j_held)
    assert st[j_run]["state"] == "failed" and "signal 15" in st[j_run]["detail"], st
    assert st[j_held]["state"] in ("failed", "finished"), st
    assert "got TERM" in open(os.path.join(d, "stubborn.log")).read()
    pbs.wait_job(j_after, {"F"}, 60)
    ran = float(open(os.path.join(d, "after.ran")).read())
    assert ran >= t0, (ran, t0)  # the dependent ran only once its predecessor had ended
    r = pbs.run([sys.executable, "-m", "restartlab.cli", "cancel", "--scheduler", "pbs", unknown])
    assert r.returncode == 1 and unknown in r.stderr, r.stdout + r.stderr


PBS_PROFILES = ("pbs", "sunspot", "aurora", "polaris")


def shipped_pbs_scenarios():
    """(label, scenario, overrides): every shipped scenario whose profile is a PBS one, and the
    default scenario on each PBS profile (with an account, as `make sunspot-expt` submits it, and a
    chain, which adds nothing to the header but is rendered for PBS)."""
    from restartlab import scenario as scen
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "scenarios", "*.yaml")) +
                       glob.glob(os.path.join(REPO, "scenarios", "examples", "*.yaml"))):
        if scen.load(path, [])["scheduler"] == "pbs":
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
    """A queue the server does not have, a directive PBS refuses, no server reachable: the preflight
    refuses the first and the last before anything is made (exit 2); past it (--no-preflight),
    `restartlab submit` says so in one line with PBS's own message, exits 1, and leaves the
    experiment directory marked as never submitted (`restartlab status` of it says so)."""
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


def test_pbs_walltime_margin_and_walltime_kill(pbs):
    """Two one-host jobs side by side. One has relaunch.walltime_margin 30s of a 60 s walltime:
    restartlab stops it first (the ranks write an emergency checkpoint of their last step, exit 5,
    nothing relaunched), so the job ends before PBS's limit with Exit_status 5. The other has no
    margin: PBS kills it at its walltime (SIGTERM to every process of the job, SIGKILL kill_delay
    later; Exit_status -29, `=>> PBS: job killed: walltime` in its output); the report names the
    phase and attempt it ended in, how (interrupted by SIGTERM), and what PBS says of the job."""
    d = pbs.user_dir("walltime")
    one = dict(nodes=1, iters=1000000, phases=[("p", "async")], extra="")
    margin = scenario(pbs, d, "margin", walltime="00:01:00", **one).replace(".yaml", "")
    killed = scenario(pbs, d, "killed", walltime="00:00:30", **one).replace(".yaml", "")
    for path, m in ((margin, "30s"), (killed, "0s")):
        text = open(path + ".yaml").read().replace("hang_timeout: 120s}", f"hang_timeout: 120s, walltime_margin: {m}}}")
        text = text.replace("phases:\n  - {name: p, checkpoint: async}", "phases:\n  - {name: p, checkpoint: async, failures: false}")
        # 0.2 s a step (a test-only delay point): the subject is the walltime, not the compute in it
        text = text.replace("  ranks_per_node: 1\n", '  ranks_per_node: 1\n  env: {RESTARTLAB_DELAY: "step:*:*:0.2"}\n')
        pbs.write(path + ".yaml", text)
    jm, em = submit(pbs, margin + ".yaml")
    jk, ek = submit(pbs, killed + ".yaml")
    rm = pbs.wait_job(jm, {"F"}, 180)
    rk = pbs.wait_job(jk, {"F"}, 180)
    out_m, out_k = job_output(em, jm), job_output(ek, jk)
    # restartlab's own stop, before PBS's
    assert rm["Exit_status"] == 5, (rm, out_m[-3000:])
    assert "walltime warning (30s left)" in out_m and "PBS: job killed" not in out_m, out_m[-3000:]
    s, _ = report_of(pbs, em)
    p = s["phases"][0]
    w = p["walltime_stop"]
    assert w and w["lost_steps"] == 0 and w["emergency_checkpoint"] == w["last_step"] > 5, p
    assert p["ended"]["how"] == "walltime" and p["attempts"] == 1, p["ended"]
    assert s["jobs"] == [{"jobid": jm, "state": "failed", "exit_status": 5, "detail": "exit code 5"}], s["jobs"]
    # PBS's kill at walltime
    assert rk["Exit_status"] == -29, (rk, out_k[-3000:])
    assert re.search(r"=>> PBS: job killed: walltime \d+ exceeded limit 30", out_k), out_k[-3000:]
    s, md = report_of(pbs, ek)
    p = s["phases"][0]
    assert not p["completed"] and p["overhead"] is None, p
    assert p["ended"]["how"] == "interrupted" and p["ended"]["signal"] == "SIGTERM" and p["ended"]["attempt"] == 1, p["ended"]
    assert s["jobs"][0]["exit_status"] == -29 and "walltime exceeded" in s["jobs"][0]["detail"], s["jobs"]
    assert "interrupted by SIGTERM in attempt 1" in md and f"job {jk}: failed, exit status -29" in md, md
    assert left_running(em) == [] and left_running(ek) == []


def test_pbs_supervisor_killed_is_named(pbs):
    """The phase's supervisor SIGKILLed in the middle of a PBS job (found by the experiment in its
    environment, killed by PID): it leaves no word on how the phase ended. The job script goes on
    to its report and exits 1; when the job ends PBS ends what the supervisor left running (the
    launcher and its ranks). The report says the phase did not finish, in which attempt its
    supervisor died, computes no overhead for it, and gives PBS's exit status of the job."""
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


PLAIN = """import os, subprocess, sys, time
d = sys.argv[1]
rank = os.environ["PMI_RANK"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.path.join(d, f"rank-{rank}.pid"), "w") as f:
    f.write(f"{os.getpid()} {child.pid} {os.uname().nodename}")
time.sleep(120)  # only the injector ends it early
"""


def test_inject_without_flags_in_a_pbs_job(pbs):
    """`restartlab inject --every 10s`, no other flag, in a user's own PBS job beside a plain
    program of 4 ranks on 2 hosts (2 per host: PBS_NODEFILE lists each host twice, and `pbsdsh -n`
    must name each host's first line, or the second host's killer never runs). A strike reaches
    both hosts, each host's killer takes only that program's ranks (and their children) on its own
    host; the job script, a job process without a rank variable and the launcher survive."""
    import signal as _signal
    d = pbs.user_dir("plain")
    pbs.write(os.path.join(d, "plain.py"), PLAIN)
    bindir = os.path.dirname(sys.executable)
    pbs.write(os.path.join(d, "plain.sh"), f"""#!/bin/bash
#PBS -l select=2:ncpus=2:mpiprocs=2
#PBS -l place=scatter
#PBS -l walltime=00:04:00
#PBS -j oe
#PBS -o {d}/plain.out
cd {d}
export PATH={bindir}:$PATH
restartlab inject --every 10s > inject.log 2>&1 &
inj=$!
sleep 300 &
innocent=$!
mpiexec -launcher rsh -launcher-exec {pbs.tmrsh} -n 4 -ppn 2 python plain.py {d}
echo "mpiexec rc=$?"
kill $inj; wait $inj
kill -0 $innocent && echo "innocent alive"
kill $innocent
echo "script done"
""", 0o755)
    r = pbs.as_user(["qsub", os.path.join(d, "plain.sh")], cwd=d)
    assert r.returncode == 0, r.stderr
    jid = r.stdout.strip()
    rec = pbs.wait_job(jid, {"F"}, 240)
    out = open(os.path.join(d, "plain.out")).read()
    assert "innocent alive" in out and "script done" in out and "mpiexec rc=0" not in out, (rec, out[-3000:])
    ranks = {}
    for f in glob.glob(os.path.join(d, "rank-*.pid")):
        pid, child, host = open(f).read().split()
        ranks[int(pid)] = (os.path.basename(f)[5:-4], int(child), host)
    assert sorted(v[0] for v in ranks.values()) == ["0", "1", "2", "3"]
    hosts = sorted({v[2] for v in ranks.values()})
    assert len(hosts) == 2, ranks
    log = open(os.path.join(d, "inject.log")).read()
    recs = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert recs, log
    first = recs[0]
    assert sorted(first["hosts"]) == hosts and sorted(x.get("host") for x in first["receipts"]) == hosts, first
    # a rank's child is named by its rank when Hydra ended that rank while this host's killer
    # scanned: the orphan then carries the rank's variable with no rank above it (the killer test
    # test_no_tag_takes_a_dead_ranks_orphaned_child_by_its_inherited_rank makes that on purpose)
    owner = {pid: (name, host) for pid, (name, _, host) in ranks.items()}
    owner.update({child: (name, host) for name, child, host in ranks.values()})
    struck = set()
    for x in first["receipts"]:
        assert x["job"] == f"PBS_JOBID={jid}" and not x["errors"], x
        assert set(x["pids"]) <= set(owner), (x, ranks)   # no launcher, proxy, script or bystander
        for pid, what in x["ranks"].items():
            name, host = owner[int(pid)]
            assert host == x["host"] and what == f"PMI_RANK={name}", (x, ranks)  # its own host's only
            struck.add(host)
    # each host's killer ran there (the receipts above); one of them may find nothing left: Hydra
    # ends the other host's ranks 0.1-0.2 s after the first dies
    assert struck, first
    assert first["signal"] == _signal.Signals.SIGKILL.name.removeprefix("SIG"), first


def test_pbs_warm_restart_a_pool_on_each_host(pbs, three_host_job):
    """relaunch.warm on the three PBS hosts (the `warm` phase of the shared job): one standby pool
    per host, started through pbsdsh; Hydra starts the stubs, each host's pool forks that host's
    rank; the kills strike stubs and ranks (never a pool); every relaunch is warm and bit-exact;
    the pools stop at the phase's end and nothing tagged is left."""
    jid, expt, rec, out = three_host_job
    assert rec["Exit_status"] == 0, (rec, out[-3000:])
    assert "warm restart: the standby pool serves" in out and "cold launches" not in out, out[-3000:]
    phases = summary(expt)
    warm = phases["warm"]
    assert warm["completed"] and warm["kills"] == 2 and warm["attempts"] == 3, warm
    crc = {ph: final_crc(layout.Expt(expt).phase(ph).attempt(phases[ph]["attempts"]).metrics(0))
           for ph in ("baseline", "warm")}
    assert crc["warm"] is not None and crc["warm"] == crc["baseline"], crc
    recs = [json.load(open(layout.Expt(expt).phase("warm").attempt(k).record)) for k in (1, 2, 3)]
    log = open(layout.Expt(expt).phase("warm").warm_log).read()
    # what a stub said when it started its rank cold (the cause of a warm count short of 3)
    cold = [ln for k in (2, 3) for ln in open(layout.Expt(expt).phase("warm").attempt(k).output, errors="replace")
            if "warm stub" in ln]
    print("".join(cold), log[-5000:])  # whole, in the report's captured output (an assertion message is cut)
    assert [r["warm_ranks"] for r in recs] == [0, 3, 3], (cold, [r["warm_ranks"] for r in recs], log[-3000:])
    state = layout.Expt(expt).phase("warm").warm_dir
    assert sorted(f for f in os.listdir(state) if f.endswith(".ready")) == sorted(f"{n}.ready" for n in pbs.nodes)
    assert sum(1 for line in log.splitlines() if line.endswith(": stopped")) == 3, log[-3000:]
    assert killer.find_by_env(f"{killer.TAG_VAR}={job_tag(expt)}") == []


def test_pbs_chain_over_the_walltime_with_a_secret(pbs):
    """relaunch.chain on PBS: a job whose walltime (60 s, margin 25 s) ends before the last step
    stops with an emergency checkpoint and submits its continuation from inside the job (qsub -W
    depend=afterany, found under PBS_EXEC: the job's PATH has no /opt/pbs/bin); the next job
    resumes the same experiment and finishes; every step is trained once. A secret in launch.env
    reaches both jobs by name through `qsub -v` (the job script stops at once without it) and is
    written in no file. The trainer is slowed to 1 s a step (a test-only delay point)."""
    from tests.helpers import losses, wait_for
    d = pbs.user_dir("chain")
    text = f"""extends: {REPO}/scenarios/systems/pbs.yaml
name: pbs-chain
expt_root: {d}/expt
job: {{nodes: 1, walltime: "00:01:00"}}
launch:
  ranks_per_node: 1
  env: {{RESTARTLAB_DELAY: "step:*:*:1.0", RL_TEST_TOKEN: "${{RL_TEST_TOKEN}}"}}
{pbs.hydra_launch()}trainer: {{model: tiny, train_iters: 40, save_interval: 5, device: cpu}}
relaunch: {{max_attempts: 3, backoff: 0s, hang_timeout: 120s, walltime_margin: 25s, chain: 2}}
phases:
  - {{name: sync, checkpoint: sync, failures: false}}
"""
    path = pbs.write(os.path.join(d, "chain.yaml"), text)
    secret = "s3cr3t-value-for-the-pbs-chain"
    r = pbs.as_user([sys.executable, "-m", "restartlab.cli", "submit", path], env={"RL_TEST_TOKEN": secret})
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.search(r"^job (\S+)$", r.stdout, re.M).group(1)
    expt = re.search(r"^experiment (\S+)$", r.stdout, re.M).group(1)
    wait_for(lambda: os.path.exists(layout.Expt(expt).phase("sync").completed), 400, "the chain to finish the phase")
    with open(layout.Expt(expt).jobs) as f:
        ids = list(dict.fromkeys(json.loads(x)["job"] for x in f))
    assert ids[0] == jid and len(ids) >= 2, ids
    recs = [pbs.wait_job(j, {"F"}, 120) for j in ids]
    assert recs[0]["Exit_status"] == 5 and recs[-1]["Exit_status"] == 0, [(r["Exit_status"], r.get("depend")) for r in recs]
    # (a finished job keeps no depend attribute: its submission says it)
    assert f"-W depend=afterany:{ids[0]}" in recs[1]["Submit_arguments"], recs[1]["Submit_arguments"]
    assert "RL_TEST_TOKEN" in recs[1]["Variable_List"]  # passed on by name to the continuation
    st = status(pbs, *ids)
    assert st[ids[-1]]["state"] == "finished", st
    s, md = report_of(pbs, expt)
    p = s["phases"][0]
    assert p["completed"] and p["failures"] == [] and p["jobs"] == sorted(ids), p
    assert len(p["handovers"]) == len(ids) - 1 and all(h["walltime_stop"] and h["lost_steps"] == 0 for h in p["handovers"])
    seen = sorted(it for a in os.listdir(layout.Expt(expt).phase("sync").attempts_dir)
                  for it, _ in losses(layout.Expt(expt).phase("sync").attempt(int(a)).metrics(0)))
    assert seen == list(range(1, 41))  # every step trained, none twice across the jobs
    for f in glob.glob(os.path.join(expt, "*")):
        if os.path.isfile(f):
            assert secret not in open(f, errors="replace").read(), f


def test_pbs_node_lost_mid_phase(pbs):
    """A host lost in the middle of a phase, for real as far as one machine allows: the second
    host's MoM and the job's processes there SIGKILLed (a crash; its kernel is this machine's).
    Within the job, restartlab's node check finds that host bad (pbsdsh reaches no one there) and
    relaunches on the spare; the server marks the node down at once, and once the MoM has been
    unreachable for $max_poll_downtime it requeues the job (Exit_status -14, rerunnable by
    default). When the MoM is back the job runs again and carries on the same experiment from its
    newest checkpoint, to the baseline's parameters."""
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
    # (COMM_MATURITY_TIME, compiled in): a cluster just started would keep the job running. The
    # wait comes before the job (none in the suite, whose cluster is older), not at its step 12,
    # where an idle machine finished the whole phase in it (2026-12-02)
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
    # the requeue races the relaunch on the spare: seen both ways (CI 2026-12-02: attempt 2 cut
    # before its first step; an idle machine the same day: it trained on the spare first)
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
