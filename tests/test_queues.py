"""Which queues take a job, judged from what the server itself says.

The input is the OpenPBS 23.06 test server's `qstat -Qf`, recorded verbatim. The server has ALCF's
Aurora and Polaris queue tables, set by qmgr (tests/data/alcf_queues/*.qmgr). Each file's header
gives each line's source. The same tables live on the real server in tests/test_site_readiness.py.
Slurm's QOS lines are from sacctmgr's documented format, because the private Slurm keeps no
accounting."""
import os

import pytest

from restartlab.job import queues
from restartlab.schedulers import pbs as pbs_mod, slurm as slurm_mod
from restartlab.schedulers.base import ServerQueues

DATA = os.path.join(os.path.dirname(__file__), "data", "alcf_queues")
H = 3600


def server(site, mine=None, user="pbsuser"):
    with open(os.path.join(DATA, f"{site}.qstat-Qf.txt")) as f:
        text = f.read()

    def run(argv):
        if argv == ["qstat", "-Bf"]:
            return 0, "Server: rlpbs-head\n    default_queue = workq\n", ""
        if argv == ["qstat", "-Qf"]:
            return 0, text, ""
        if argv[:2] == ["qselect", "-u"]:
            return 0, "\n".join((mine or {}).get(argv[4], [])) + "\n", ""
        raise AssertionError(argv)
    return pbs_mod.PBS().server_queues(run, user)


def shape(nodes, hours, at_once=1):
    return queues.Shape(nodes, hours * H, f"{nodes} node(s)", at_once=at_once, user="pbsuser")


def test_the_recorded_aurora_table_reads_as_alcf_wrote_it():
    qs = server("aurora")
    q = qs.queues
    assert qs.default == "workq"
    assert (q["prod"].route_to, q["prod"].min_nodes, q["prod"].max_walltime) == (("small", "medium", "large"), 256, 24 * H)
    assert q["small"].from_route_only and not q["capacity"].from_route_only
    assert (q["debug"].user_queued, q["debug"].user_queued_said) == (1, "max_queued [u:PBS_GENERIC=1]")
    assert (q["capacity"].user_queued, q["capacity"].user_run, q["capacity"].max_walltime) == (5, 2, 168 * H)
    assert q["visualization"].users_only == ("alcfvis",)


def test_aurora_prod_refuses_agpt2b_and_names_capacity():
    qs, s = server("aurora"), shape(2, 2)
    assert queues.refusals(qs, "prod", s) == ["it takes at least 256 nodes, the job asks for 2 node(s)"]
    assert queues.takers(qs, s) == ["capacity", "workq"]  # workq: the test server's own, unlimited
    assert queues.summary(qs, s).startswith("queue(s) here that take 2 node(s) x 02:00:00: capacity, workq")
    assert queues.pick(qs, s) == "capacity"


@pytest.mark.parametrize("nodes,hours,want", [
    (1, 0.5, "debug"), (2, 1, "debug"), (3, 0.5, "debug-scaling"), (16, 100, "capacity"), (300, 6, "prod"),
    (1500, 12, "prod"), (20, 12, "workq")])
def test_auto_prefers_a_debug_queue_then_the_tightest(nodes, hours, want):
    assert queues.pick(server("aurora"), shape(nodes, hours), avoid=()) == want


def test_a_route_whose_destinations_all_refuse_says_each_one():
    (why,) = queues.refusals(server("aurora"), "prod", shape(300, 20))
    assert why == ("none of its destinations takes it (small: its walltime limit is 12:00:00, job.walltime is "
                   "20:00:00; medium: it takes at least 1025 nodes, the job asks for 300 node(s); large: it takes "
                   "at least 2000 nodes, the job asks for 300 node(s))")


def test_queues_one_cannot_submit_to_are_never_offered():
    qs, s = server("aurora"), shape(300, 6)
    assert "small" not in queues.takers(qs, s)  # from_route_only: qsub says "Access to queue is denied"
    assert queues.refusals(qs, "small", s) == ["it takes jobs from a routing queue only (from_route_only): submit to prod"]
    assert queues.refusals(qs, "visualization", shape(1, 1)) == [
        "it takes jobs from its listed users only (acl_users), and you are not one of them"]


def test_a_one_job_per_user_queue_with_the_users_smoke_job_in_it():
    qs = server("aurora", mine={"debug": ["7.rlpbs-head"]})
    s = shape(1, 0.5)
    assert queues.refusals(qs, "debug", s) == [
        "it takes 1 job(s) per user, running or waiting (max_queued [u:PBS_GENERIC=1]), and you have 1 there "
        "(7.rlpbs-head): the server would refuse this one until it ends (restartlab submit --after JOB waits for it)"]
    assert queues.pick(qs, s) == "capacity"  # auto goes elsewhere, and says so (preflight's line)
    # relaunch.chain: the running job submits its continuation, two at once: never in debug
    assert "relaunch.chain has 2" in queues.refusals(server("aurora"), "debug", shape(1, 0.5, at_once=2))[0]


def test_a_users_running_limit_is_a_wait_not_a_refusal():
    qs = server("polaris", mine={"capacity": ["8.rlpbs-head"]})
    s = shape(2, 2)
    assert queues.refusals(qs, "capacity", s) == []
    assert queues.waits(qs, "capacity", s) == [
        "it runs 1 job(s) per user at a time (max_run [u:PBS_GENERIC=1]) and you have 1 there (8.rlpbs-head): "
        "this job waits until it ends"]


def test_polaris_table_and_a_queue_to_avoid():
    qs = server("polaris")
    assert queues.pick(qs, shape(2, 2)) == "capacity"
    assert queues.pick(qs, shape(1, 0.5)) == "debug"
    assert queues.pick(qs, shape(5, 0.5)) == "debug-scaling"
    # 5 nodes for 2 h: capacity takes 4 at most; preemptable takes it, unless avoided (its jobs may be killed)
    assert queues.pick(qs, shape(5, 2)) == "preemptable"
    assert queues.pick(qs, shape(5, 2), avoid=("preemptable", "workq")) is None
    assert queues.summary(qs, shape(5, 2), avoid=("preemptable", "workq")).startswith(
        "no queue here takes 5 node(s) x 02:00:00: debug: it takes at most 2 nodes, the job asks for 5 node(s); ")
    assert queues.refusals(qs, "prod", shape(12, 4)) == [
        "none of its destinations takes it (small: its walltime limit is 03:00:00, job.walltime is 04:00:00; "
        "medium: it takes at least 25 nodes, the job asks for 12 node(s); large: it takes at least 100 nodes, "
        "the job asks for 12 node(s))"]


def test_a_users_own_entry_wins_over_the_generic_one():
    attrs = {"max_queued": "[o:PBS_ALL=10],[u:PBS_GENERIC=1],[u:alice=3]"}  # qstat -Qf's three lines, joined
    assert pbs_mod.user_limit(attrs, "max_queued", None, "alice") == (3, "max_queued [u:alice=3]")
    assert pbs_mod.user_limit(attrs, "max_queued", None, "bob") == (1, "max_queued [u:PBS_GENERIC=1]")
    assert pbs_mod.user_limit({"max_user_run": "2"}, "max_run", "max_user_run", "bob") == (2, "max_user_run = 2")
    # the three lines as OpenPBS 23.06 prints them (measured): one attribute, three entries
    text = ("Queue: tq\n    queue_type = Execution\n    max_queued = [o:PBS_ALL=10]\n    max_queued = "
            "[u:PBS_GENERIC=1]\n    max_queued = [u:pbsuser=3]\n    from_route_only = True\n")
    assert pbs_mod.parse_qstat_f(text, "Queue:")["tq"]["max_queued"] == "[o:PBS_ALL=10],[u:PBS_GENERIC=1],[u:pbsuser=3]"


def test_slurm_partitions_with_their_qos():
    parts = ("PartitionName=debug Default=YES QoS=dbg MaxNodes=2 MaxTime=01:00:00 MinNodes=0 State=UP TotalNodes=8\n"
             "PartitionName=long QoS=N/A MaxNodes=UNLIMITED MaxTime=7-00:00:00 State=UP TotalNodes=8\n")
    qos = "normal||\ndbg|1|1\n"  # sacctmgr -n -P show qos format=Name,MaxJobsPU,MaxSubmitPU

    def run(argv):
        if argv[0] == "scontrol":
            return 0, parts, ""
        if argv[0] == "sacctmgr":
            return 0, qos, ""
        if argv[0] == "squeue":
            return 0, "41 debug\n", ""
        raise AssertionError(argv)
    qs = slurm_mod.Slurm().server_queues(run, "alice")
    assert qs.default == "debug" and qs.mine == {"debug": ["41"]}
    assert (qs.queues["debug"].user_queued, qs.queues["debug"].user_queued_said) == (1, "QOS dbg MaxSubmitPU=1")
    s = queues.Shape(1, 1800, "1 node(s)", user=None)
    assert queues.refusals(qs, "debug", s)[0].startswith("it takes 1 job(s) per user, running or waiting (QOS dbg")
    assert queues.pick(qs, s) == "long"


def test_slurm_without_accounting_says_the_qos_was_not_read():
    def run(argv):
        if argv[0] == "scontrol":
            return 0, "PartitionName=debug Default=YES QoS=dbg MaxNodes=2 State=UP\n", ""
        if argv[0] == "sacctmgr":
            return 1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n"
        return 0, "", ""
    qs = slurm_mod.Slurm().server_queues(run, "alice")
    assert "the QOS limits were not read (sacctmgr: sacctmgr: error: Problem talking" in qs.source
    assert isinstance(qs, ServerQueues) and qs.queues["debug"].user_queued is None
