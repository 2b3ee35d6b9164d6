"""The records typed in #64: contracts/receipts, smoke, ft_records, and job/probe.
Each has one writer and one tolerant reader. The JSON they write is as it was before they were typed."""
import json
import os

import pytest

from restartlab.contracts import layout
from restartlab.contracts.injections import Injection
from restartlab.contracts.receipts import NodeCheck, Receipt

# a killer's receipt as kill-ranks printed it before the type (every field, empty or not)
KILLER = {"host": "x1", "node": "n1", "time": 5.0, "tag": "t", "job": None, "signal": "SIGKILL", "dry_run": False,
          "pids": [11, 12], "cmdlines": {"11": "python a.py", "12": "python b.py"}, "roots": [11],
          "ranks": {"11": "PMI_RANK=0"}, "unreadable": 0, "skipped_other_user": {}, "errors": {}}


def test_a_killers_receipt_reads_and_writes_as_before():
    r = Receipt.from_json(KILLER)
    assert r.pids == (11, 12) and r.trees == (11,) and r.where == "n1" and r.ranks == {"11": "PMI_RANK=0"}
    assert r.to_dict() == KILLER
    old = dict(KILLER)
    del old["roots"]  # before roots were kept: every process is a tree's root
    assert Receipt.from_json(old).trees == (11, 12)


def test_a_faults_receipt_keeps_its_until_none():
    began = Receipt(host="h", kind="partition", dev="eth0", at=9.0, restorer=77, duration=0.0)
    assert began.to_dict()["until"] is None and began.to_dict()["rate"] is None
    failed = Receipt(host="h", kind="partition", dev="eth0", error="cannot change eth0")
    assert failed.to_dict() == {"host": "h", "kind": "partition", "dev": "eth0", "error": "cannot change eth0"}


def test_the_reader_is_tolerant_and_keeps_what_it_does_not_know():
    r = Receipt.from_json({"host": 3, "pids": [1, "2", True, 4.0], "ranks": {"1": 5, "2": "PMI_RANK=1"},
                           "ok": "yes", "token_seen": True, "stage": "ok"})
    assert r.host is None and r.pids == (1, 4) and r.ranks == {"2": "PMI_RANK=1"} and r.ok is None
    assert r.extra == {"token_seen": True, "stage": "ok"} and r.to_dict()["stage"] == "ok"


def test_an_injection_record_carries_its_receipts_typed():
    rec = Injection(time=1.0, killed=1, kind="kill", receipts=(Receipt.from_json(KILLER),))
    back = Injection.from_json(json.loads(rec.to_json()))
    assert back.receipts[0].cmdlines == KILLER["cmdlines"] and json.loads(rec.to_json())["receipts"] == [KILLER]


def test_a_node_check_line():
    line = {"node": "n2", "ok": False, "reason": "site check exited 4", "seconds": 0.2, "time": 7.0,
            "attempt": 2, "policy": "spare", "host": "x2"}
    c = NodeCheck.from_json(line)
    assert c is not None and not c.ok and c.attempt == 2 and json.loads(c.to_json()) == line
    assert NodeCheck.from_json({"node": "n2"}) is None and NodeCheck.from_json({"ok": True}) is None


def test_the_smoke_jobs_records(tmp_path):
    from restartlab.contracts import smoke
    rank = smoke.SmokeRank(rank=1, world_size=2, host="n1", torch="2.13.0", allreduce=3.0, allreduce_expected=3.0,
                           allreduce_ok=True, where=("a", "b"))
    p = tmp_path / "rank-1.json"
    p.write_text(rank.to_json())
    assert smoke.read_rank(str(p)) == rank
    p.write_text(json.dumps({"rank": "1", "torch": "2.13.0"}))
    assert smoke.read_rank(str(p)) is None  # no rank number: no record
    p.write_text(json.dumps({"rank": 0, "allreduce_ok": "yes", "devices": True}))
    assert smoke.read_rank(str(p)) == smoke.SmokeRank(rank=0)
    report = smoke.SmokeReport(False, ["a", "b"], 4, "t", 12.5, [smoke.Check("torch", False, "import torch", ["b"])])
    p.write_text(report.to_json())
    assert smoke.read_report(str(p)) == report
    assert report.lines() == ["smoke: NOT READY (2 host(s))", "  FAIL torch     import torch [on b]"]
    assert smoke.read_report(str(tmp_path / "none.json")) is None


def test_the_probes_python_answer():
    """job/probe.py: the job's Python answers in one JSON line (PY_CODE); one that does not read is
    said, not raised."""
    from restartlab.job import probe
    good = json.dumps({"exe": "/x/python", "version": "3.11.2", "modules": {"mpi4py": True, "x": "?"},
                       "torch": "2.13.0", "cuda": None, "xpu": False})
    text = f"RL-SETUP-DONE\nRL-ASK py\nRL-OUT RL-PY {good}\nRL-ASK bad\nRL-OUT RL-PY {{\"torch\": 1}}\nRL-OUT oops\n"
    p = probe.parse(text, ["py", "bad"], 0)
    assert p.pythons["py"] == probe.Python("py", True, "/x/python", "2.13.0", "", None, False, {"mpi4py": True})
    bad = p.pythons["bad"]
    assert not bad.found and bad.torch_error.startswith("an answer that does not read") and bad.torch_error.endswith("oops")


def test_torchft_records(tmp_path):
    from restartlab.contracts import ft_records
    step = ft_records.FtStep(t0=1.0, t=2.0, step=5, commit=True, tq=1.5, quorum=3, participants=2, crc=77)
    p = tmp_path / "ft-rank0.jsonl"
    p.write_text(step.to_json() + "\n" + json.dumps({"t0": 2.0, "t": 3.0, "step": "6"}) + "\n"
                 + json.dumps({"t0": 3, "t": 4, "step": 6, "commit": 1, "crc": "x"}) + "\n" + '{"t0": 4, "t"')
    got = ft_records.read_steps(str(p))
    assert got[0] == step and got[0].quorum_time == 1.5
    assert got[1] == ft_records.FtStep(3.0, 4.0, 6) and got[1].quorum_time == 3.0  # commit 1 is no commit
    assert len(got) == 2  # no step number, a torn line: passed over
    c = tmp_path / "ft-rank0-crash.json"
    crash = ft_records.FtCrash("RuntimeError", "boom", 5.0, "torchft/x.py", 12, "raise", "MainThread", 4)
    c.write_text(crash.to_json())
    assert ft_records.read_crash(str(c)) == crash
    c.write_text(json.dumps({"message": "no type"}))
    assert ft_records.read_crash(str(c)) is None


def test_the_checkpoint_marker(tmp_path):
    from restartlab.contracts import ckptdir
    m = ckptdir.Marker(step=10, mode="async", save_start=1.0, world_size=4, durable_ts=1.5, complete_ts=1.75)
    ckptdir.mark_complete(str(tmp_path), m)
    path = str(tmp_path / ckptdir.COMPLETE)
    assert ckptdir.read_marker(path) == m and m.finalize_s == 0.75
    assert set(json.load(open(path))) == {"step", "mode", "save_start", "world_size", "durable_ts", "complete_ts"}
    open(path, "w").close()
    assert ckptdir.read_marker(path) is None  # another program's empty marker
    open(path, "w").write('{"save_start": "x", "complete_ts": 2}')
    assert ckptdir.read_marker(path).finalize_s is None


def test_the_jobs_log(tmp_path):
    from restartlab.contracts import jobslog, layout
    e = layout.Expt(str(tmp_path))
    with open(e.jobs, "w") as f:  # the job script's lines (printf in templates/body.j2), a torn one, a foreign one
        f.write('{"job": "5.srv", "start": 1.5}\n{"job": "5.srv", "start": 9}\n{"start": 3}\n')
    jobslog.append(e.jobs, jobslog.JobLine("6.srv", submitted_by="5.srv", time=10.0))
    got = jobslog.read(e.jobs)
    assert got == [jobslog.JobLine("5.srv", 1.5), jobslog.JobLine("5.srv", 9.0),
                   jobslog.JobLine("6.srv", submitted_by="5.srv", time=10.0)]
    assert json.loads(open(e.jobs).read().splitlines()[-1]) == {"job": "6.srv", "submitted_by": "5.srv", "time": 10.0}
    assert jobslog.job_ids(str(tmp_path)) == ["5.srv", "6.srv"]
    with open(e.jobs, "a") as f:  # a job script's printf caught half-way: status and cancel still read the rest
        f.write('{"job": "7.s')
    assert jobslog.job_ids(str(tmp_path)) == ["5.srv", "6.srv"]


def test_the_jobs_ids_before_any_job_ran(tmp_path):
    from restartlab.contracts import jobslog, layout
    e = layout.Expt(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        jobslog.job_ids(str(tmp_path))  # neither file: the callers say they cannot read the jobs
    open(e.jobid, "w").write("8.srv\n")
    assert jobslog.job_ids(str(tmp_path)) == ["8.srv"]  # submitted, not started
    open(e.jobs, "w").write('{"job": "8.s')  # its first run's line, caught half-way: the id file still names it
    assert jobslog.job_ids(str(tmp_path)) == ["8.srv"]
    open(e.jobs, "a").write('rv", "start": 1}\n')  # the line finished
    jobslog.append(e.jobs, jobslog.JobLine("9.srv", submitted_by="8.srv", time=1.0))
    assert jobslog.job_ids(str(tmp_path)) == ["8.srv", "9.srv"]
    os.unlink(e.jobs)
    os.mkdir(e.jobs)  # a log that cannot be opened is an error, not "no jobs" (a directory: root too)
    with pytest.raises(IsADirectoryError):
        jobslog.job_ids(str(tmp_path))


# trainer.program's adapter spec as the job script carried it before the type (render.program_json)
SPEC_JSON = ('{"adapter":"generic","progress":"step (?P<step>\\\\d+)","progress_file":null,"progress_fields":{},'
             '"checkpoints":"{ckpt_dir}/ckpt-(?P<step>\\\\d+)","complete":null,"selects":null,"resumed":null,'
             '"saved":null,"saving":null,"counts":"saves","save_every":5,"loss_line":null,"env":{"A":"1"}}')


def test_the_adapter_spec_on_the_tools_command_lines():
    from restartlab import programs
    from restartlab.contracts.program_spec import Spec
    s = Spec.from_json(SPEC_JSON)
    assert s.progress == r"step (?P<step>\d+)" and s.save_every == 5 and s.env == {"A": "1"} and s.complete is None
    assert s.to_json() == SPEC_JSON
    # the tools' reader fills the adapter's defaults; what the scenario set stays
    r = programs.from_argv(SPEC_JSON)
    assert r.complete == "exists" and r.selects == "newest_complete" and r.counts == "saves" and r.env == {"A": "1"}
    assert programs.from_argv(None).adapter == "restartlab" and not programs.taps(programs.from_argv(None))
    # a value of the wrong type reads as unset (the adapter's default then), keys not the spec's are left
    odd = json.loads(SPEC_JSON) | {"save_every": "5", "selects": 3, "command": ["python"], "env": {"A": 1}}
    s = Spec.from_json(json.dumps(odd))
    assert s.save_every is None and s.selects is None and s.env == {}
    assert programs.resolve(s).selects == "newest_complete"
    for bad in ("[1]", "not json"):
        try:
            Spec.from_json(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} read as a spec")


# a network fault's line as the restorer wrote it before the type (runtime/netfault.py)
FAULT_LINE = ('{"host": "rlpbs-n2", "node": "rlpbs-n2", "kind": "flap", "dev": "eth0", "tag": "t1", "planned_at": '
              '1796611636.25, "duration": 5.0, "rate": null, "windows": [[1.0, 6.0], [8.0, 13.0]], "restored": true, '
              '"ended_by": "duration", "errors": []}')


def test_a_network_faults_record():
    from restartlab.contracts.faultlog import FaultLog
    f = FaultLog.from_json(json.loads(FAULT_LINE))
    assert f.windows == ((1.0, 6.0), (8.0, 13.0)) and f.restored is True and f.planned_at == 1796611636.25
    assert f.to_json() == FAULT_LINE
    # the link never came back: its window open; a window that is not [number, number or null] left out
    odd = json.loads(FAULT_LINE) | {"windows": [[1.0, None], ["x", 2.0], [3.0]], "restored": "yes", "errors": ["e", 5]}
    f = FaultLog.from_json(odd)
    assert f.windows == ((1.0, None),) and f.restored is None and f.errors == ("e",)


def test_a_torchft_phases_summary_read_back(tmp_path):
    """contracts/ft_summary: what the report's summary holds of a torchft phase reads back typed.
    simulate --from reads it. A field of the wrong type reads as unset. A failure without its struck
    groups and a phase's entry that is not a summary are left out."""
    from restartlab.contracts.ft_summary import FtSummary, Throughput
    from restartlab.contracts.phase_summary import PhaseSummary
    from restartlab.contracts.summary import Summary
    rel = {"attempt": 2, "relaunched_after_s": 0.5, "process_start_s": 3.0, "heal_s": "x", "healed_at_step": 8,
           "rejoin_s": 4.5, "first_step": 8}
    d = {"strategy": "torchft", "groups": 2, "train_iters": 10, "per_group": {"0": {"attempts": 1, "steps_attempted": 11,
         "steps_committed": 10, "last_step": 10}, "1": {"attempts": "two"}},
         "failures": [{"time": 104.5, "kind": "rank", "struck_groups": [1], "survivors": [0], "detection_s": 1.8,
                       "survivor_stall_s": 2.3, "uncommitted_steps": 1, "relaunch": {"1": rel}}, {"kind": "rank"}],
         "steps_committed": 10, "median_step_s": 1.0, "wall_s": 13.0, "productive_s": 10.0, "ettr": 0.77,
         "batches_committed": 17, "torchft_efficiency": 0.85, "throughput": {"overall": 0.8, "before": None},
         "verdict": {"survivor_restarted": [], "heals": [{"group": 1, "attempt": 2, "step": 8}], "state_equal": True,
                     "unequal": [], "started_over": None, "finished": True, "stopped_when_done": [], "crashes": [],
                     "heal_failures": [{"group": 1, "attempt": 1, "times": 3, "step": 2, "error": "RuntimeError: x",
                                        "known": None, "others_uncommitted_s": 1.5}], "ok": False}}
    s = FtSummary.from_dict(d)
    assert s is not None and list(s.per_group) == ["0"] and len(s.failures) == 1
    r = s.failures[0].relaunch["1"]
    assert r is not None and r.heal_s is None and r.rejoin_s == 4.5
    assert s.verdict.heal_failures[0].times == 3 and s.throughput == Throughput(overall=0.8)
    assert FtSummary.from_dict({"groups": 2}) is None and FtSummary.from_dict([]) is None
    path = layout.Expt(str(tmp_path)).summary
    Summary(source="t", phases=[PhaseSummary(phase="ft")], torchft={"ft": s}).write(path)
    with open(path) as f:
        raw = json.load(f)
    raw["torchft"]["bad"] = {"verdict": "no"}
    with open(path, "w") as f:
        json.dump(raw, f)
    back = Summary.read(path)
    assert list(back.torchft) == ["ft"] and back.torchft["ft"] == s


# ---------------------------------------------------------------- a phase's summary (contracts/phase_summary)
# the keys each part had, in their order, when the collector and the report wrote dicts (59f235c)
OLD_KEYS = {
    "failure": ["attempt", "kill_ts", "injected", "kind", "detected_by", "detection_s", "step_at_kill", "resumed_from",
                "lost_steps", "downtime_s", "recompute_s", "restart_s", "startup", "warm_ranks", "launch_gap_s",
                "queue_wait_s", "newest_complete_at_kill", "steps_after_save", "gate", "bad_nodes", "ranks_before",
                "ranks_after", "hosts_before", "hosts_after", "recovery", "rerun"],
    "rerun": ["job", "next_attempt", "stopped_at", "stopped_by", "end_ts", "end_evidence", "run_start", "run",
              "scheduler_start", "scheduler", "requeued_at", "eligible_at", "scheduler_error", "nodes", "launch_ts",
              "first_ts", "between_runs_s"],
    "node": ["node", "state", "since", "comment"],
    "kind": ["failures", "detected_by", "detection_s", "launch_gap_s", "restart_s", "lost_steps", "recompute_s",
             "downtime_s"],
    "quantiles": ["count", "median", "p90", "total"],
    "handover": ["attempt", "from_job", "to_job", "queue_wait_s", "walltime_stop", "lost_steps"],
    "interference": ["busy_steps", "idle_steps", "busy_dt_s", "idle_dt_s", "slowdown"],
    "walltime_stop": ["attempt", "last_step", "emergency_checkpoint", "lost_steps"],
    "expected_loss": ["per_failure", "save_interval_steps", "complete_lag_steps"],
    "overhead": ["downtime_s", "recompute_s", "save_stall_s", "interference_s", "drift_s", "measured_s", "residual_s",
                 "first_start_s", "baseline_first_start_s"],
    "young_daly": ["young_s", "daly_s", "mtbf_s", "save_cost_s", "restart_cost_s"],
    "ended": ["how", "attempt", "job", "signal", "text"],
    "own_metrics": ["adapter", "file", "restarts", "save", "stage", "drain"],
    "own_restart": ["attempt", "program_restart_s", "restart_s", "uncounted_s"],
    # step_s_during only for a slowed link, and each layer only where it noticed (none: no key)
    "network_fault": ["kind", "nodes", "start", "end", "windows", "planned_s", "down_s", "restored", "ended_by", "errors",
                      "recorded", "stood_still_s", "outcome", "lost_steps", "layers", "attempt", "text"],
    "survival": ["phase", "finished", "survived", "findings", "baseline", "restarts"],
    "restart": ["attempt", "outcome", "text", "resumed_from", "expected", "state", "finding"],
    "storage_fault": ["kind", "id", "rank", "armed_at", "armed_step", "took_at", "file", "checkpoint", "attempt",
                      "blocked_s", "errno", "bytes", "effect", "followed", "text"],
}


def _full_state():
    """A resume's comparison with every part set (analysis/state_compare.ResumeState)."""
    from restartlab.analysis.state_compare import ResumeState
    return ResumeState(attempt=2, step=11, equal=["params"], differ={"lr": (0.1, 0.2), "rng_torch": ("a", "b")},
                       differ_step=11, differ_on={"lr": [0, 1]}, not_observed=["scale"], unrepeatable=["rng_device"],
                       later=(14, ["batch"]), matches={"lr": 9}, epochs={"batch": (1, 3, 8)},
                       restored={"lr": (10, "the scheduler's load")}, several={"rng_torch": [3, 4]},
                       loaded_other={"rng_torch": ("torch.load", None)}, first_matched=10, ranks=2, note=None,
                       against="the baseline's", across=(2, 4), incomparable={"opt_state": "sharded"},
                       threads=([2, 2], [1, 1]))


def test_a_restarts_state_writes_the_dict_it_replaced():
    """What survival wrote with ResumeState.as_dict (fafcf2a and before), key for key and in order."""
    from restartlab.contracts.restart_state import RestartState
    from restartlab.contracts.typed_json import read, to_dict
    rs = _full_state()
    old = {"attempt": 2, "step": 11, "equal": ["params"], "forgot": rs.forgot, "differ_step": 11,
           "differ": {"lr": {"attempt": 0.1, "baseline": 0.2, "ranks": [0, 1]},
                      "rng_torch": {"attempt": "a", "baseline": "b", "ranks": []}},
           "not_observed": ["scale"], "unrepeatable": ["rng_device"], "later": {"step": 14, "pieces": ["batch"]},
           "first_matched": 10, "ranks": 2, "note": None, "against": "the baseline's", "matches": {"lr": 9},
           "restored": {"lr": {"step": 10, "load": "the scheduler's load"}}, "disturbed": rs.disturbed,
           "several": {"rng_torch": [3, 4]}, "loaded_other": {"rng_torch": {"load": "torch.load", "step": None}},
           "epochs": {"batch": {"off": 1, "batch": 3, "per_epoch": 8}}, "across": [2, 4],
           "incomparable": {"opt_state": "sharded"}, "threads": {"attempt": [2, 2], "reference": [1, 1]},
           "text": rs.text()}
    written = json.loads(json.dumps(to_dict(rs.record())))
    assert list(written) == list(old) and written == old
    assert rs.forgot and rs.disturbed == ["lr"]  # the derived lists are not empty: their order is checked too
    assert read(RestartState, written) == rs.record()


def _full_phase():
    from restartlab.contracts import phase_summary as P
    from restartlab.contracts.jobruns import NodeChange
    q = P.Quantiles(count=3, median=0.5, p90=0.9, total=1.7)
    ev = P.FailureEvent(attempt=2, kill_ts=10.5, injected=True, kind="kill", detected_by="scheduler", detection_s=1.5,
                        step_at_kill=14, resumed_from=10, lost_steps=4, downtime_s=30.0, recompute_s=2.0,
                        restart_s=5.0, startup={"startup/import_s": 1.0}, warm_ranks=2, launch_gap_s=0.5,
                        queue_wait_s=0.0, newest_complete_at_kill=10, steps_after_save=4, gate="complete",
                        bad_nodes=["n2"], ranks_before=4, ranks_after=2, hosts_before=["n1", "n2"], hosts_after=["n1"],
                        recovery="shrink", rerun=P.RequeueParts(job="7.pbs", next_attempt=3, stopped_at=11.0,
                                                                stopped_by="watchdog", end_ts=12.0, end_evidence="x",
                                                                run_start=20.0, run=2, scheduler_start=19.0,
                                                                scheduler="pbs", requeued_at=15.0, eligible_at=16.0,
                                                                scheduler_error=None,
                                                                nodes=[NodeChange("n2", "down", 13.0, "lost")],
                                                                launch_ts=21.0, first_ts=26.0, between_runs_s=8.0))
    return P.PhaseSummary(
        phase="sync", wall_s=100.0, attempts=3, kills=1, steps=40, completed=True, failures=[ev],
        by_kind={"kill": P.KindStats(1, ["scheduler"], 1.5, 0.5, 5.0, 4.0, 2.0, 30.0)}, lost_steps=4,
        downtime_s=30.0, recompute_s=2.0, save_stall_s=1.7, saves_estimated=1, save={"ckpt_save_seconds": q},
        finalize=P.Quantiles(), productive_s=60.0, ettr=0.6,
        walltime_stop=P.WalltimeStop(3, 40, 38, 2), interference=P.Interference(5, 30, 0.2, 0.1, 1.0),
        interference_s=0.5, step_dt_s=0.1,
        network_faults=[P.NetworkFault("partition", ["n2"], 1.0, 41.0, 1, 40.0, 40.0, True, "duration", [], True, 54.0,
                                       "resumed by itself", 0, P.Layers(watchdog_s=30.0, stop="stopped"), 1, None, "t"),
                        P.NetworkFault("slow_link", ["n1"], step_s_during=0.5)],
        storage_faults=[P.StorageFault("torn", 3, 0, 5.0, 10, 6.0, "step-10/a", "step-10", 1, None, None, 100,
                                       "cut", "resumed", "t")],
        first_start_s=3.0, jobs=["7.pbs"], handovers=[P.Handover(1, "7.pbs", "8.pbs", 40.0, True, 0)],
        queue_wait_s=40.0, expected_loss=P.ExpectedLoss(4.5, 10.0, 0.0), checkpoint="sync", warnings=["w"],
        overhead=P.Overhead(30.0, 2.0, 1.7, 0.5, 0.1, 40.0, 5.7, 3.0, 2.0),
        young_daly=P.YoungDaly(60.0, 58.0, 3600.0, 0.5, 7.0), policy="same",
        survival=P.SurvivalVerdict("sync", True, False, ["attempt 2: x"], "identical",
                                   [P.RestartVerdict(2, "older", "x", 5, 10, _full_state().record(), True)]),
        ended=P.Ended("completed", 3, "7.pbs", None, "completed"),
        own_metrics=P.OwnMetrics("ezpz", "m.jsonl", [P.OwnRestart(2, 4.0, 5.0, 1.0)], q, P.Quantiles(), P.Quantiles()),
        reused_from=None)


def test_a_phase_summary_writes_the_keys_of_the_dicts_it_replaced_in_their_order():
    from restartlab.contracts.phase_summary import PHASE_FIELDS
    d = _full_phase().to_dict()
    ev = d["failures"][0]
    assert list(d) == list(PHASE_FIELDS)
    assert list(ev) == OLD_KEYS["failure"] and list(ev["rerun"]) == OLD_KEYS["rerun"]
    assert list(ev["rerun"]["nodes"][0]) == OLD_KEYS["node"] and list(d["by_kind"]["kill"]) == OLD_KEYS["kind"]
    assert list(d["save"]["ckpt_save_seconds"]) == list(d["finalize"]) == OLD_KEYS["quantiles"]
    for part in ("interference", "walltime_stop", "expected_loss", "overhead", "young_daly", "ended", "own_metrics"):
        assert list(d[part]) == OLD_KEYS[part], part
    assert list(d["handovers"][0]) == OLD_KEYS["handover"]
    assert list(d["own_metrics"]["restarts"][0]) == OLD_KEYS["own_restart"]
    assert list(d["own_metrics"]["save"]) == OLD_KEYS["quantiles"]
    cut, slowed = d["network_faults"]
    assert list(cut) == OLD_KEYS["network_fault"] and cut["layers"] == {"watchdog_s": 30.0, "stop": "stopped"}
    assert slowed["step_s_during"] == 0.5 and slowed["layers"] == {}
    assert list(d["storage_faults"][0]) == OLD_KEYS["storage_fault"]
    assert list(d["survival"]) == OLD_KEYS["survival"] and list(d["survival"]["restarts"][0]) == OLD_KEYS["restart"]


def test_a_phase_summary_reads_back_field_for_field():
    from restartlab.contracts.phase_summary import PhaseSummary
    s = _full_phase()
    assert PhaseSummary.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_a_phase_summary_read_back_takes_a_wrong_value_as_absent():
    """typed_json's rules.
    A value of the wrong type reads as absent (None, or the field's default). An item of a list or a
    mapping that does not read is left out. A phase without its name does not read."""
    from restartlab.contracts.phase_summary import FailureEvent, PhaseSummary, Quantiles
    s = PhaseSummary.from_dict({
        "phase": "p", "wall_s": "5", "kills": True, "steps": 3.0, "completed": 1, "ettr": 0.5,
        "failures": [5, {"attempt": "2", "lost_steps": 3, "kill_ts": 7, "rerun": {"nodes": [{"node": "n"}, 3]}}],
        "save": {"a": [], "b": {"count": 2.0, "median": "x"}}, "jobs": ["1", 2], "young_daly": "no",
        "ended": {"how": "died", "attempt": 2}, "finalize": None, "extra": 1})
    assert (s.wall_s, s.kills, s.steps, s.completed, s.ettr, s.jobs, s.young_daly) == (None, 0, 3, False, 0.5, ["1"], None)
    ev, = s.failures
    assert ev == FailureEvent(attempt=0, lost_steps=3, kill_ts=7.0, rerun=ev.rerun) and ev.rerun.nodes == []
    assert s.save == {"b": Quantiles(count=2)} and s.finalize == Quantiles() and s.ended.how == "died"
    assert PhaseSummary.from_dict({"phase": "p", "wall_s": 10 ** 400}).wall_s is None  # beyond a float: absent
    assert PhaseSummary.from_dict({"wall_s": 1.0}) is None and PhaseSummary.from_dict({"phase": 3}) is None
    assert PhaseSummary.from_dict([]) is None


def test_the_strategies_table_writes_the_keys_it_wrote_as_dicts():
    from restartlab.analysis import strategies
    from restartlab.contracts.phase_summary import PhaseSummary
    from restartlab.contracts.typed_json import to_dict
    base = PhaseSummary(phase="baseline", checkpoint="none", wall_s=10.0, completed=True)
    sync = PhaseSummary(phase="sync", checkpoint="sync", wall_s=14.0, kills=1, completed=True)
    rows = to_dict(strategies.rows([base, sync], {}, {"sync": True}, ["baseline", "sync"]))
    assert [list(r) for r in rows] == [["phase", "strategy", "wall_s", "steps", "failures", "ettr", "vs_baseline_s",
                                        "recovery_s", "work_lost_steps", "batches_skipped", "restarted_processes",
                                        "verdict", "failure_cost_s"]] * 2
    assert rows[1]["strategy"] == "restart warm (sync)" and rows[1]["failure_cost_s"] == 4.0
    assert rows[1]["verdict"] == "resumed as it should" and rows[0]["vs_baseline_s"] is None


def test_simulates_results_write_the_keys_they_wrote_as_dicts():
    from restartlab.analysis import simulate as sim
    from restartlab.contracts.sim_result import Replay, SweepResult
    from restartlab.contracts.typed_json import to_dict
    modes = sim.sweep(sim.Costs(step_s=1.0, sync_stall_s=2.0), sim.Failures(3600), [10, 20], ("sync",), days=1,
                      replicas=2)
    d = to_dict(SweepResult(nodes=None, mtbf_s=3600.0, kinds={"kill": 1.0}, modes=modes))
    assert list(d) == ["nodes", "mtbf_s", "kinds", "modes"]  # torchft only with its costs
    assert list(d["modes"]["sync"]) == ["rows", "best", "young_s", "daly_s"]
    assert list(d["modes"]["sync"]["best"]) == ["interval_steps", "interval_s", "ettr", "ci95", "failures_per_day",
                                                "lost_h_per_day", "downtime_h_per_day"]
    assert d["modes"]["sync"]["best"] in d["modes"]["sync"]["rows"]
    assert list(to_dict(Replay())) == ["phase", "mode", "interval_steps", "steps", "failures", "simulated_ettr",
                                       "simulated_wall_s", "measured_ettr", "measured_wall_s", "relative_error",
                                       "median_ettr", "median_wall_s", "median_relative_error", "exit_s", "costs"]


def test_the_summarys_jobs_write_the_dicts_they_were_and_read_back(tmp_path):
    """The batch jobs' states in the report's summary (contracts/job_status).
    They are written with the keys schedulers/base's as_dict wrote (efa1751 and before), in that
    order. They read back as records, with a torn entry left out."""
    from restartlab.analysis.report import jobs_markdown
    from restartlab.contracts.job_status import JobStatus
    from restartlab.contracts.summary import Summary
    jobs = [JobStatus("7.pbs", "failed", 1, "exit code 1"), JobStatus("8.pbs", "running")]
    path = str(tmp_path / "s.json")
    Summary(source="x", phases=[], jobs=jobs).write(path)
    with open(path) as f:
        raw = json.load(f)
    assert raw["jobs"] == [{"jobid": "7.pbs", "state": "failed", "exit_status": 1, "detail": "exit code 1"},
                           {"jobid": "8.pbs", "state": "running", "exit_status": None, "detail": ""}]
    assert [list(j) for j in raw["jobs"]] == [["jobid", "state", "exit_status", "detail"]] * 2
    raw["jobs"].append({"state": "finished"})  # no job id: not a job's state
    with open(path, "w") as f:
        json.dump(raw, f)
    assert Summary.read(path).jobs == jobs
    assert jobs_markdown(jobs).splitlines()[-2:] == ["- job 7.pbs: failed, exit status 1 (exit code 1)",
                                                     "- job 8.pbs: running"]


def test_cancel_of_an_experiment_whose_files_name_no_job_is_an_error(tmp_path, monkeypatch):
    """`restartlab cancel EXPT` (and status) when the job id file is empty.
    The jobs log holds only a line caught half-way. job_ids reads the log tolerantly, so it returns
    no id. The result is an error naming both files, not a silent exit 0 with the job left running."""
    from restartlab.contracts import layout
    from restartlab.job import jobref
    e = layout.Expt(str(tmp_path))
    open(e.jobid, "w").close()
    open(e.jobs, "w").write('{"job": "8.s')
    monkeypatch.setattr(jobref, "experiment_scheduler", lambda d: "pbs")
    with pytest.raises(jobref.RefError, match="no job id in .*jobid.* or .*jobs"):
        jobref.resolve([str(tmp_path)])
    open(e.jobid, "w").write("8.srv\n")
    sched, ids, local = jobref.resolve([str(tmp_path)])
    assert ids == ["8.srv"] and sched.name == "pbs" and not local
