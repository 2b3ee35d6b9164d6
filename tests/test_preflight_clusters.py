"""restartlab preflight against the real schedulers' own limits: queues configured with qmgr on the
OpenPBS server (three hosts) and partitions created with scontrol on the private Slurm, as a
site's are. A job the server would reject or hold forever is refused before anything is queued,
with the server's limit quoted; a job that fits passes (the job's Python, its launcher after the
setup lines and the fan-out tool found for real, as the cluster's user on its login node)."""
import os
import subprocess
import sys

import pytest

from tests.test_pbs import rl as rl_pbs, scenario as pbs_scenario
from tests.test_slurm import rl as rl_slurm, scenario as slurm_scenario

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
            f"({path}:4) (qstat -Qf rlsmall)"], r.stdout
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=rlstopped", timeout=300)
        assert errors(r.stdout) == ["queue: --set job.queue: queue rlstopped: it is not started: a job would wait in it "
                                    "and never run (qstat -Qf rlstopped)"], r.stdout
        r = rl_pbs(pbs, "preflight", path, "--set", "job.queue=nosuch", timeout=300)
        assert errors(r.stdout) == ["queue: --set job.queue: queue 'nosuch' does not exist on this server "
                                    "(qstat -Qf nosuch): name one of its queues"], r.stdout
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
            "(--set job.walltime) (scontrol show partition rlsmall)"], r.stdout
        r = rl_slurm("preflight", path, "--set", "job.queue=rldown", timeout=300)
        assert errors(r.stdout) == [
            "queue: --set job.queue: queue rldown: it is not enabled: the server refuses new jobs "
            "(scontrol show partition rldown)",
            "queue: --set job.queue: queue rldown: it is not started: a job would wait in it and never run "
            "(scontrol show partition rldown)"], r.stdout
        # more nodes than the partition has: held forever, refused
        r = rl_slurm("preflight", path, "--set", "job.nodes=5", timeout=300)
        assert errors(r.stdout) == [
            f"queue: {path}:4: job.queue: queue debug: it has {len(slurm['nodes'])} nodes in all, the job asks for "
            "5 node(s): it would never start (scontrol show partition debug)"], r.stdout
        # the default partition takes the scenario as it is, and srun is found as the launcher
        r = rl_slurm("preflight", path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "preflight: ok: queue: queue debug takes 2 node(s) for 00:15:00" in r.stdout, r.stdout
        assert "preflight: ok: launcher: /usr/bin/srun: srun" in r.stdout, r.stdout
    finally:
        for p in made:
            subprocess.run(["scontrol", "delete", f"PartitionName={p}"], capture_output=True, timeout=60)
