"""The records typed in #64 (contracts/receipts, smoke, ft_records; job/probe): one writer each, one tolerant
reader, and the JSON they write as it was before they were typed."""
import json

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
    """contracts/ft_summary: what the report's summary holds of a torchft phase reads back typed
    (simulate --from reads it); a field of the wrong type reads as unset, a failure without its
    struck groups and a phase's entry that is not a summary are left out."""
    from restartlab.contracts.ft_summary import FtSummary
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
    assert s.verdict.heal_failures[0].times == 3 and s.throughput == {"overall": 0.8, "before": None}
    assert FtSummary.from_dict({"groups": 2}) is None and FtSummary.from_dict([]) is None
    path = layout.Expt(str(tmp_path)).summary
    Summary(source="t", phases=[{"phase": "ft"}], torchft={"ft": s}).write(path)
    with open(path) as f:
        raw = json.load(f)
    raw["torchft"]["bad"] = {"verdict": "no"}
    with open(path, "w") as f:
        json.dump(raw, f)
    back = Summary.read(path)
    assert list(back.torchft) == ["ft"] and back.torchft["ft"] == s
