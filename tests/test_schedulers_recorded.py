"""The schedulers' parsers on output recorded from the real thing: PBS from OpenPBS 23.06 (the test
cluster of tests/pbs_cluster.py; tests/data/pbs/record.sh re-records it), Slurm from 22.05.
tests/test_pbs.py and tests/test_slurm.py run the same paths against the live servers."""
import os

import pytest

from restartlab.runtime import fanout
from restartlab.runtime.smoke import one_line
from restartlab import schedulers
from restartlab.schedulers import pbs as pbs_module
from restartlab.schedulers import slurm as slurm_module
from restartlab.schedulers.base import FAILED, FINISHED, PENDING, RUNNING, UNKNOWN, SchedulerError
from restartlab.contracts.jobruns import NodeChange, RunFacts

pbs, slurm = schedulers.get("pbs"), schedulers.get("slurm")

pytestmark = pytest.mark.recorded
DATA = os.path.join(os.path.dirname(__file__), "data", "pbs", "qstat-f-x.txt")


def test_qsub_output():
    assert pbs.parse_submit("1234567.polaris-pbs-01\n") == "1234567.polaris-pbs-01"
    with pytest.raises(SchedulerError):
        pbs.parse_submit("qsub: Unknown queue\n")


def test_qstat_f_many_ids_in_one_query():
    # record.sh: running 17, held 18, finished 16, qdel while running 19, walltime 20, unknown 999999
    ids = ["17.rlpbs-head", "18", "16.rlpbs-head", "19.rlpbs-head", "20.rlpbs-head", "999999.rlpbs-head"]
    assert pbs.status_cmd(ids) == ["qstat", "-f", "-x", *ids]
    with open(DATA) as f:
        text = f.read()
    st = pbs.parse_status(text, ids, returncode=153)
    assert st[ids[0]].state == RUNNING
    assert st[ids[1]].state == PENDING          # short id matches seq.server
    assert st[ids[2]].state == FINISHED and st[ids[2]].exit_status == 0
    assert st[ids[3]].state == FAILED and st[ids[3]].detail == "killed by signal 15"
    assert st[ids[4]].state == FAILED and st[ids[4]].exit_status == -29 and "walltime" in st[ids[4]].detail
    assert st[ids[5]].state == UNKNOWN
    # a long value goes on in tab-indented lines: joined whole
    env = pbs_module.parse_qstat_f(text)["17.rlpbs-head"]["Variable_List"]
    assert "PBS_O_WORKDIR=" in env and "\t" not in env and env.split(",")[0] == "PBS_O_HOME=/home/pbsuser"


def test_pbs_exit_codes_documented():
    # qstat exits 153 for an unknown id and 35 for a finished job queried without -x.
    # Both were seen on OpenPBS 23.06. Neither is a failed query; 1 is.
    assert pbs.parse_status("", ["7.srv"], 153, "qstat: Unknown Job Id 7.srv\n")["7.srv"].state == UNKNOWN
    assert pbs.parse_status("", ["7.srv"], 35, "qstat: 7.srv Job has finished, use -x\n")["7.srv"].state == UNKNOWN
    with pytest.raises(SchedulerError):
        pbs.parse_status("", ["7.srv"], 1, "qstat: cannot connect\n")
    assert pbs_module.exit_detail(271) == "killed by signal 15"
    assert pbs_module.exit_detail(-29).startswith("walltime exceeded")


def test_a_job_pbs_held_after_failed_starts_says_why():
    """A job whose MoMs could not start it: PBS requeues it after each try and holds it after 21.

    tests/data/pbs/record-held.sh recorded this for real, with a sister that cannot resolve the head.
    The job is pending for ever unless released. So status says PBS held it, why, and the last try's
    exit, not just "pending". A soak saw every three-host job so, each try -30."""
    with open(os.path.join(os.path.dirname(DATA), "qstat-f-x-held-failed-starts.txt")) as f:
        text = f.read()
    jid = next(iter(pbs_module.parse_qstat_f(text)))
    st = pbs.parse_status(text, [jid])[jid]
    assert st.state == PENDING and st.exit_status == -3, st
    assert st.detail == ("held: job held, too many failed attempts to run; 21 tries; "
                         "the last: job exec failed, retried (JOB_EXEC_RETRY)"), st.detail
    assert "could not join a sister MoM" in pbs_module.exit_detail(-30)
    # a hold someone asked for (qsub -h) has no such comment: plain pending
    held = pbs.parse_status(open(DATA).read(), ["18"], returncode=153)["18"]
    assert held.state == PENDING and not held.detail.startswith("held:"), held


def test_pbsdsh_once_per_node_index():
    cmd = pbs.fanout_cmd(1, ["a", "b"], ["x", "--y"])
    assert os.path.basename(cmd[0]) == "pbsdsh" and cmd[1:] == ["-n", "1", "--", "x", "--y"]
    # PBS_NODEFILE with mpiprocs=4: each host four times; -n indexes those lines
    assert pbs.fanout_cmd(1, ["a", "b"], ["x"], slots=[0, 4])[1:] == ["-n", "4", "--", "x"]


def test_nodefile_slots(tmp_path):
    nf = tmp_path / "nodefile"
    nf.write_text("a\na\na\nb\nb\nb\n")
    assert fanout.read_nodefile(str(nf)) == (["a", "b"], [0, 3])


def test_sacct_parser_and_fallback():
    # `sacct -X -n -P -o JobID,State,ExitCode,Reason` (format from the sacct man page)
    out = "42|RUNNING|0:0|None\n43|PENDING|0:0|Resources\n44|COMPLETED|0:0|None\n45|TIMEOUT|0:15|None\n46|CANCELLED by 0|0:9|None\n"
    calls = []

    def run(argv):
        calls.append(argv[0])
        return 0, out, ""
    st = slurm.status(["42", "43", "44", "45", "46", "47"], run)
    assert calls == ["sacct"]
    assert [st[i].state for i in ["42", "43", "44", "45", "46", "47"]] == [RUNNING, PENDING, FINISHED, FAILED, FAILED, UNKNOWN]
    assert st["45"].exit_status == 128 + 15 and "Resources" in st["43"].detail
    # no slurmdbd: sacct's own message (Slurm 22.05), then squeue answers

    def run_no_acct(argv):
        calls.append(argv[0])
        if argv[0] == "sacct":
            return 1, "", "sacct: error: Slurm accounting storage is disabled\n"
        return 0, "42|RUNNING|None\n", ""
    calls.clear()
    st = slurm.status(["42", "44"], run_no_acct)
    assert calls == ["sacct", "squeue"] and st["42"].state == RUNNING and st["44"].state == UNKNOWN
    with pytest.raises(SchedulerError, match="sacct failed"):
        slurm.status(["42"], lambda argv: (1, "", "sacct: error: Problem talking to the database\n"))


def test_slurm_parsers():
    assert slurm.parse_submit("42\n") == "42"
    assert slurm.parse_submit("43;cluster\n") == "43"
    st = slurm.parse_status("42|RUNNING|None\n43|PENDING|Resources\n44|COMPLETED|None\n45|TIMEOUT|None\n",
                            ["42", "43", "44", "45", "46"])
    assert [st[i].state for i in ["42", "43", "44", "45", "46"]] == [RUNNING, PENDING, FINISHED, FAILED, UNKNOWN]


def test_cancel_errors():
    # recorded from Slurm 22.05 (tests/test_slurm.py meets the real one): `scancel -v` of an
    # unknown id exits 0 and says so only on stderr
    err = "scancel: Terminating job 999999\nscancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    assert "Invalid job id" in slurm.cancel_error(0, "", err)
    assert slurm.cancel_error(0, "", "scancel: Terminating job 42\n") is None
    assert pbs.cancel_error(0, "", "") is None
    assert "Unknown Job Id" in pbs.cancel_error(153, "", "qdel: Unknown Job Id 9.srv\n")


def test_status_query_failure_is_an_error_not_unknown():
    # squeue's message when slurmctld is down (seen with Slurm 22.05).
    # For PBS, any exit code other than 0, 153 (unknown id) and 35 (finished, without -x) means the
    # query itself failed.
    with pytest.raises(SchedulerError, match="Unable to contact slurm controller"):
        slurm.parse_status("", ["42"], 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    with pytest.raises(SchedulerError, match="cannot connect to server"):
        pbs.parse_status("", ["1.srv"], 1, "qstat: cannot connect to server srv\n")
    # unknown ids are not a failure of the query
    assert pbs.parse_status("", ["1.srv"], 153, "qstat: Unknown Job Id 1.srv\n")["1.srv"].state == UNKNOWN


# srun prints its own status line before or after the task's stderr as the timing falls:
# test_site_readiness::test_smoke_job_names_the_node_whose_fanout_cannot_run failed under make soak
# (2026-12-05) with srun's line last, which the smoke report then showed instead of the program's
# message (smoke.one_line took the last line). Both orders, on purpose:
@pytest.mark.parametrize("err", ["this node's Python is broken on purpose\nsrun: error: rl3: task 0: Exited with exit code 1",
                                 "srun: error: rl3: task 0: Exited with exit code 1\nthis node's Python is broken on purpose"])
def test_a_fanout_error_says_the_programs_words_whichever_line_srun_printed_last(err):
    assert one_line(f"rc=1: {err}", "srun") == "rc=1: this node's Python is broken on purpose"


def test_a_fanout_error_in_one_line():
    tb = "rc=1: Traceback (most recent call last):\n  File \"x.py\", line 1\nModuleNotFoundError: No module named 'torch'"
    assert one_line(tb, "pbsdsh") == "rc=1: ModuleNotFoundError: No module named 'torch'"
    assert one_line("rc=1: srun: error: rl3: task 0: Exited with exit code 1", "srun") == \
        "rc=1: srun: error: rl3: task 0: Exited with exit code 1"  # only the tool spoke: its words
    assert one_line("rc=1: srun: error: a\nsrun: error: b", "srun") == "rc=1: srun: error: b"
    assert one_line("timed out after 60s") == "timed out after 60s" and one_line("") == "no message"


def test_slurm_rerun_facts_from_scontrol_and_sinfo():
    """What a requeued job's new run reads (Slurm.run_facts).

    - How many times it ran.
    - When Slurm requeued it: SubmitTime, set anew by the requeue.
    - When it could start again.
    - The node that went down since the previous run began. Nodes whose reason is older than that
      run, or unset, are not named."""
    rec = os.path.join(os.path.dirname(__file__), "data", "slurm")
    job = open(os.path.join(rec, "scontrol-show-job-requeued.txt")).read()
    nodes = open(os.path.join(rec, "sinfo-N-node-down.txt")).read()
    stamp = slurm_module.slurm_stamp
    calls = []

    def run(argv):
        calls.append(argv[:2])
        return (0, job, "") if argv[0] == "scontrol" else (0, nodes + nodes, "")  # a node in two partitions
    f = slurm.run_facts("2", stamp("2026-12-06T12:41:12"), run)
    assert calls == [["scontrol", "show"], ["sinfo", "-h"]]
    assert f.run == 2 and f.requeued == stamp("2026-12-06T12:49:03")
    assert f.eligible - f.requeued == 121 and f.started == stamp("2026-12-06T12:51:04")
    assert f.nodes == (NodeChange("rl2", "down*", stamp("2026-12-06T12:42:31"), "Not responding"),)
    # the node went down before the previous run began: not this rerun's news
    assert slurm.run_facts("2", stamp("2026-12-06T12:43:00"), run).nodes == ()
    with pytest.raises(SchedulerError, match="scontrol show job 2 failed"):
        slurm.run_facts("2", None, lambda argv: (1, "", "slurm_load_jobs error: Invalid job id specified"))
    # a job never requeued: one run, no requeue time
    first = slurm_module.parse_run_facts("JobId=3 JobState=RUNNING Restarts=0 SubmitTime=2026-12-06T12:00:00 "
                                         "StartTime=2026-12-06T12:00:01 EndTime=Unknown", "", None)
    assert first == RunFacts(run=1, started=stamp("2026-12-06T12:00:01"))


def test_slurm_rerun_facts_a_reason_with_the_separator_in_it():
    f = slurm_module.parse_run_facts("Restarts=1", "rl2|down*|disk | ib errors|2026-12-06T12:42:31\n", 0.0)
    assert f.nodes[0].comment == "disk | ib errors" and f.nodes[0].since, f


def test_a_reruns_job_run_line_names_the_previous_runs_node_that_went_down(tmp_path):
    """runtime/jobrun.record on a rerun: Slurm's facts (recorded scontrol and sinfo), the nodes kept to
    the previous run's (by short name: that run's node file held rl1 and rl2.cluster, sinfo says rl2),
    written as one job-run line and read back. A first run asks nothing."""
    from restartlab.contracts import jobruns, jobslog, layout
    from restartlab.runtime import jobrun
    rec = os.path.join(os.path.dirname(__file__), "data", "slurm")
    job = open(os.path.join(rec, "scontrol-show-job-requeued.txt")).read()
    nodes = open(os.path.join(rec, "sinfo-N-node-down.txt")).read() + "rl9|down*|gone|2026-12-06T12:44:00\n"
    asked = []

    def run(argv):
        asked.append(argv[0])
        return (0, job, "") if argv[0] == "scontrol" else (0, nodes, "")
    expt = layout.Expt(str(tmp_path))
    nodefile = tmp_path / "nodes"
    nodefile.write_text("rl1\nrl2.cluster\n")
    stamp = slurm_module.slurm_stamp
    first_start = stamp("2026-12-06T12:41:12")
    jobslog.append(expt.jobs, jobslog.JobLine("2", start=first_start))
    one = jobrun.record(str(tmp_path), "2", first_start, "slurm", str(nodefile), run=run)
    assert asked == [] and one.run == 1 and one.hosts == ("rl1", "rl2.cluster")
    again = jobrun.record(str(tmp_path), "2", first_start + 600, "slurm", str(nodefile), run=run)
    assert asked == ["scontrol", "sinfo"] and again.run == 2 and again.requeued == stamp("2026-12-06T12:49:03")
    assert again.nodes == (NodeChange("rl2", "down*", stamp("2026-12-06T12:42:31"), "Not responding"),)  # not rl9
    assert jobruns.read(expt.job_runs, []) == [one, again]
