"""restartlab's PBS paths against a real OpenPBS 23.06 server (conftest `pbs`, tests/pbs_cluster.py):
three hosts, each a network namespace of this machine with its own MoM; jobs as an ordinary user.

- the whole experiment through `restartlab submit`: MPICH's Hydra over PBS's TM interface on the
  three hosts, gated kills fanned out with `pbsdsh` (one killer per host), every restart bit-exact;
- `status` of held, running, finished and unknown jobs in one qstat call; `cancel`; what qdel does;
- every directive `restartlab render` writes for a PBS profile, accepted by the real qsub;
- a bad submission: PBS's own message, a non-zero exit, the experiment marked as never submitted.

What this cluster cannot be: the hosts share one kernel (their processes are visible to each
other: each host's killer leaves another host's alone by its UTS namespace), there is no PALS, and
a lost MoM does not take its host's processes with it."""
import glob
import json
import os
import re
import sys

import pytest

from restartlab import killer, layout
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
    """The job's output file (PBS writes <name>.o<seq> in the submission directory: -k doe -j oe)."""
    outs = glob.glob(os.path.join(expt, f"*.o{jid.split('.')[0]}"))
    return open(outs[0]).read() if outs else ""


def summary(expt):
    with open(layout.Expt(expt).summary) as f:
        return {p["phase"]: p for p in json.load(f)["phases"]}


def left_running(expt):
    """Anything still carrying the experiment's tag, on any host (the hosts share this kernel)."""
    return killer.find_by_env(f"{killer.TAG_VAR}={job_tag(expt)}")


def test_pbs_experiment_three_hosts_kills_through_pbsdsh(pbs):
    """`restartlab submit` on PBS: baseline, sync and async phases on the three hosts (Hydra's
    mpiexec reaching n1 and n2 through pbs_tmrsh), two gated kills per restart phase fanned out
    with pbsdsh -n to one killer per host (each killer takes only its own host's rank: its
    receipt comes back through the shared file system, since pbsdsh hands nothing back), every
    restart resumed from a complete checkpoint and bit-exact with the baseline; then the finished
    job through `restartlab status`, and nothing of it left running."""
    d = pbs.user_dir("e2e")
    jid, expt = submit(pbs, scenario(pbs, d, "pbs-e2e", [("baseline", "none"), ("sync", "sync"), ("async", "async")]))
    assert re.fullmatch(r"\d+\.rlpbs-head", jid), jid
    rec = pbs.wait_job(jid, {"F"}, 600)
    out = job_output(expt, jid)
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
            assert all(len(x["pids"]) <= 1 for x in r["receipts"]) and 1 <= r["killed"] <= 3, r
        for e, r in zip(p["failures"], recs):
            assert e["resumed_from"] >= r["newest_complete"] and e["lost_steps"] >= 0, (e, r)
    assert os.path.exists(layout.Expt(expt).report)
    assert not glob.glob(os.path.join(expt, ".restartlab-fanout-*"))  # the relay files are cleaned up
    st = status(pbs, jid)[jid]
    assert st["state"] == "finished" and st["exit_status"] == 0, st
    assert left_running(expt) == []
