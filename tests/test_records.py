"""The records the processes pass each other, as typed contracts (contracts/attempts.py).
The attempt record, the launch record and the phase's end record each have one type, one writer
and one reader. The words on disk are the ones earlier versions wrote. Records written by the
version before the types (27b9e9f) read the same and are written back the same. What is not a
record is never taken for one."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest

from restartlab.contracts import layout, metric_keys
from restartlab.contracts.attempts import (WRITTEN, AttemptRecord, EndRecord, LaunchRecord, NotARecord, PhaseEnd,
                                          phase_end)
from restartlab.contracts.injections import Injection
from restartlab.contracts.phase_summary import PHASE_FIELDS
from restartlab.contracts.summary import Summary, SummaryError
from restartlab.contracts.rank_exit import RankExit
from restartlab.runtime import attempt_record
from tests import source_scan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The words of the phase's end records and of the summary's ended.how before they had a type (27b9e9f).
# Renaming a member's value would make a new report misread an old experiment, and an old report a new one.
WORDS = {"completed", "walltime", "budget", "failed", "cannot_run", "interrupted", "died", "not started"}


def _phase(tmp_path, attempts=1):
    phase = layout.Phase(str(tmp_path / "sync"))
    os.makedirs(phase.path)
    for k in range(1, attempts + 1):
        os.makedirs(phase.attempt(k).path)
    return phase


def test_the_words_on_disk_are_the_ones_before_the_type():
    assert {e.value for e in PhaseEnd} == WORDS
    assert set(WRITTEN) == set(PhaseEnd) - {PhaseEnd.DIED, PhaseEnd.NOT_STARTED}
    assert json.dumps({"how": PhaseEnd.NOT_STARTED}) == '{"how": "not started"}' and f"{PhaseEnd.DIED}" == "died"


@pytest.mark.parametrize("how", WRITTEN, ids=lambda e: e.value)
def test_an_end_record_reads_back_as_written(tmp_path, how):
    phase = _phase(tmp_path, 2)
    attempt_record.write_end(phase, how, 2, "123.pbs", 15 if how is PhaseEnd.INTERRUPTED else None,
                             why="ezpz is not installed" if how is PhaseEnd.CANNOT_RUN else None)
    with open(phase.ended) as f:
        raw = json.loads(f.read())
    rec = EndRecord.from_json(raw)
    assert rec.how is how and rec.attempt == 2 and rec.job == "123.pbs" and rec.to_json() == raw
    end = phase_end(phase)
    assert end.how is how and end.attempt == 2 and end.text == rec.text()


# lines as 27b9e9f's attempt_record.write_end appended them, and what its phase_end made of them
RECORDED = [
    ({"time": 1764900000.5, "how": "completed", "attempt": 3, "job": None, "signal": None},
     {"how": "completed", "attempt": 3, "job": None, "signal": None, "text": "finished in attempt 3"}),
    ({"time": 1764900000.5, "how": "interrupted", "attempt": 3, "job": "7.pbs", "signal": "SIGTERM"},
     {"how": "interrupted", "attempt": 3, "job": "7.pbs", "signal": "SIGTERM",
      "text": "interrupted by SIGTERM in attempt 3: the job was stopped (the scheduler's qdel, walltime or "
              "preemption, or by hand)"}),
    ({"time": 1764900000.5, "how": "cannot_run", "attempt": 0, "job": None, "signal": None, "why": "no ezpz"},
     {"how": "cannot_run", "attempt": 0, "job": None, "signal": None, "text": "not started: no ezpz"}),
]


@pytest.mark.parametrize("line,summary", RECORDED, ids=[r[0]["how"] for r in RECORDED])
def test_an_end_file_of_the_version_before_reads_the_same(tmp_path, line, summary):
    phase = _phase(tmp_path, line["attempt"])
    with open(phase.ended, "w") as f:
        f.write(json.dumps({"time": 1, "how": "budget", "attempt": 1, "job": None, "signal": None}) + "\n")
        f.write(json.dumps(line) + "\n")  # the latest line is the one that counts
    assert phase_end(phase).to_dict() == summary


@pytest.mark.parametrize("line", [
    {"how": "exploded", "attempt": 3},           # not an end a supervisor writes
    {"how": "completed"},                        # no attempt
    {"how": "completed", "attempt": "3"},
    {"how": "completed", "attempt": True},
    {"how": "completed", "attempt": 1},          # an earlier job's word, attempts since
    ["completed", 3],
])
def test_what_is_not_a_current_end_record_leaves_the_phase_to_its_attempts(tmp_path, line):
    phase = _phase(tmp_path, 3)
    with open(phase.ended, "w") as f:
        f.write(json.dumps(line) + "\n")
    end = phase_end(phase)
    assert end.how is PhaseEnd.DIED and end.attempt == 3 and "ended without a word during attempt 3" in end.text


def test_no_attempt_and_no_record_is_not_started(tmp_path):
    assert phase_end(_phase(tmp_path, 0)).how is PhaseEnd.NOT_STARTED


# The attempt and launch records as 27b9e9f's attempt_record.record and .launched wrote them, before
# the types. It is an attempt of 4 ranks in job 77.pbs, struck by the injector. Its rank 1 exited 3.
OLD_RECORD = (
    '{"attempt": 2, "launch_ts": 1764900000.5, "end_ts": 1764900011.75, "exit_code": 3, "signal": 0, '
    '"launcher": "hydra", "rank_exit": {"rank": "1", "node": "n2", "pid": 4242, "exit_code": 3, "signal": null, '
    '"time": 1764900010.25}, "ranks_recorded": 1, "completed": false, "hang": false, "preempted": false, '
    '"walltime": false, "injected": true, "hosts": ["n1", "n2"], "ranks": 4, "job": "77.pbs", "warm_ranks": null, '
    '"job_start": 1764899000.0}')
OLD_LAUNCH = '{"attempt": 2, "launch_ts": 1764900000.5, "job": "77.pbs", "job_start": 1764899000.0}'


def test_an_attempt_record_of_the_version_before_reads_whole_and_writes_back_the_same(tmp_path):
    att = _phase(tmp_path, 2).attempt(2)
    with open(att.record, "w") as f:
        f.write(OLD_RECORD)
    with open(att.launched, "w") as f:
        f.write(OLD_LAUNCH)
    rec = AttemptRecord.read(att)
    assert (rec.attempt, rec.exit_code, rec.signal, rec.injected, rec.hosts, rec.ranks, rec.job) == \
        (2, 3, 0, True, ["n1", "n2"], 4, "77.pbs")
    assert rec.rank_exit == RankExit("1", "n2", 4242, 3, None, 1764900010.25) and rec.warm_ranks is None
    assert rec.to_json() == json.loads(OLD_RECORD)  # every field, each spelled as before
    assert LaunchRecord.read(att) == LaunchRecord(2, 1764900000.5, "77.pbs", 1764899000.0)
    os.remove(att.record)
    rec.write(att)
    LaunchRecord.read(att).write(att)
    for path, old in ((att.record, OLD_RECORD), (att.launched, OLD_LAUNCH)):
        with open(path) as f:
            assert json.load(f) == json.loads(old)


def test_the_supervisor_writes_what_the_collector_reads(tmp_path):
    """The one writer (runtime/attempt_record.record) and the one reader, end to end on files."""
    phase = _phase(tmp_path, 1)
    att = phase.attempt(1)
    RankExit("0", "n1", 11, None, 9, 5.0).write(att.rank_exit(0))
    attempt_record.record(att, phase, 1, 1.0, 6.0, 137, 10, "hydra", job="9.slurm", out=open(os.devnull, "w"))
    rec = AttemptRecord.read(att)
    assert (rec.attempt, rec.exit_code, rec.signal, rec.completed, rec.job, rec.ranks_recorded) == (1, 137, 9, False, "9.slurm", 1)
    assert rec.rank_exit.signal == 9 and rec.hosts is None and rec.ranks is None


@pytest.mark.parametrize("field,value,read_as", [
    ("exit_code", "3", None), ("exit_code", True, None), ("launch_ts", "soon", None),
    ("completed", 1, False), ("hang", "yes", False), ("hosts", "n1", None), ("hosts", [1, "n2"], ["1", "n2"]),
    ("rank_exit", {"rank": "1"}, None), ("rank_exit", "rank 1", None), ("ranks", 2.5, None), ("job", 77, None),
])
def test_a_field_of_the_wrong_type_reads_as_missing(tmp_path, field, value, read_as):
    att = _phase(tmp_path, 1).attempt(1)
    with open(att.record, "w") as f:
        json.dump(dict(json.loads(OLD_RECORD), **{field: value}), f)
    rec = AttemptRecord.read(att)
    assert getattr(rec, field) == read_as and rec.attempt == 2  # the rest of the record still reads


def test_a_record_that_is_not_a_mapping_is_said_so_and_none_is_no_record(tmp_path):
    att = _phase(tmp_path, 1).attempt(1)
    assert AttemptRecord.read(att) is None and LaunchRecord.read(att) is None
    with open(att.record, "w") as f:
        f.write("[1, 2]")
    with pytest.raises(NotARecord, match="a list, not a mapping"):
        AttemptRecord.read(att)
    with open(att.record, "w") as f:
        f.write('{"attempt": 1, "launch')  # torn: not JSON
    assert AttemptRecord.read(att) is None


# -- the metrics rows' keys: contracts/metric_keys.py spells them; a program's own keys are its adapter's
KEYS = {v for k, v in vars(metric_keys).items() if k.isupper() and isinstance(v, str)}
KEY_OWNERS = {os.path.join("restartlab", "contracts", "metric_keys.py")}
OTHER_PROGRAMS = os.path.join("restartlab", "programs") + os.sep  # ezpz's own metrics file has keys of its own


def _key_spellings(path):
    return [(line, v) for line, v in source_scan.constants(source_scan.parse(path)) if v in KEYS]


def test_no_module_spells_a_metric_key_but_its_owner():
    found = [f"{rel}:{line}: {v!r}" for rel in source_scan.modules(KEY_OWNERS) if not rel.startswith(OTHER_PROGRAMS)
             for line, v in _key_spellings(os.path.join(ROOT, rel))]
    assert not found, "metric keys spelled outside contracts/metric_keys.py:\n" + "\n".join(found)


def test_the_key_check_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""rows carry train/iter"""\nrow = {"train/iter": 1}\n')
    assert _key_spellings(str(f)) == [(2, "train/iter")]


# -- A whole experiment recorded by the version before the types (27b9e9f). It is a `restartlab run`
# of a baseline and a sync phase of 20 steps with one kill. Its checkpoints' data and its plots are
# left out.
RECORDED_EXPT = os.path.join(ROOT, "tests", "data", "recorded", "27b9e9f-sync")
RECORDED_AT = "/tmp/rec/expt"  # where it ran: written into its records, replaced by the copy's path


def _copy_recorded(dest):
    shutil.copytree(RECORDED_EXPT, dest)
    for d, _, files in os.walk(dest):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                data = fh.read()
            if RECORDED_AT.encode() in data:
                with open(p, "wb") as fh:
                    fh.write(data.replace(RECORDED_AT.encode(), dest.encode()))


def test_an_experiment_recorded_before_the_types_reports_the_same(tmp_path):
    d = str(tmp_path / "expt")
    _copy_recorded(d)
    e = layout.Expt(d)
    with open(e.summary) as f:
        before = json.load(f)
    with open(e.report) as f:
        report_before = f.read()
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", d, "--no-plots"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    with open(e.summary) as f:
        after = json.load(f)
    # What the report says since (#52: where each kill landed, the loss of a failure at a random
    # time) is added. Everything it said then is said the same.
    trimmed = json.loads(json.dumps(after))
    for p in trimmed["phases"]:
        for k in ADDED_SINCE["phase"]:
            p.pop(k)
        for ev in p["failures"]:
            for k in ADDED_SINCE["failure"]:
                ev.pop(k)
        for r in (p.get("survival") or {}).get("restarts", []):
            for k in ADDED_SINCE["restart"]:
                assert r.pop(k) is None  # recorded with no state records: nothing said of the state
    assert trimmed == before
    with open(e.report) as f:
        report_after = f.read()
    assert _without_failures(report_after) == _without_failures(report_before)
    sync = {p["phase"]: p for p in after["phases"]}["sync"]
    assert sync["kills"] == 1 and sync["attempts"] == 2 and sync["survival"]["survived"]  # what it recorded
    ev, = sync["failures"]
    assert ev["newest_complete_at_kill"] == 10 and ev["steps_after_save"] == ev["step_at_kill"] - 10
    assert ev["gate"] is None  # recorded before strikes said what they waited for
    assert sync["expected_loss"]["save_interval_steps"] == 5 and f"| 10 (+{ev['steps_after_save']}) |" in report_after


ADDED_SINCE = {"phase": ("expected_loss", "saves_estimated", "network_faults",
                         "storage_faults"), "failure": ("newest_complete_at_kill", "steps_after_save", "gate", "rerun"),
               "restart": ("state",)}


def _without_failures(report: str) -> str:
    """The report less its failures section (its table gained a column, a line per phase follows it)."""
    head, _, rest = report.partition("## Failures")
    return head + "## By failure kind" + rest.partition("## By failure kind")[2]


# ---------------------------------------------------------------- the injection record
def test_the_recorded_injection_line_reads_whole_and_writes_back_the_same():
    """The line the injector wrote before the type (the recorded experiment's) reads into every field.
    The type writes it back key for key: the file format did not change."""
    with open(layout.Expt(RECORDED_EXPT).phase("sync").injections) as f:
        raw = json.loads(f.readline())
    inj = Injection.from_json(raw)
    assert inj.struck and inj.killed == 2 and inj.attempt == 1 and inj.target_step == 9 and inj.booked_kind == "kill"
    assert inj.where == "between saves" and inj.newest_complete_seen == 10 and inj.receipts[0].host == "vm"
    assert json.loads(inj.to_json()) == raw and not inj.extra


def test_a_follow_up_keeps_its_kinds_own_fields_and_counts_as_no_failure():
    line = {"grace": 20.0, "escalated": 1, "time": 5.0, "follow_up_of": 4.0, "kind": "node", "killed": 0}
    inj = Injection.from_json(line)
    assert not inj.struck and inj.follow_up_of == 4.0 and inj.extra == {"grace": 20.0, "escalated": 1}
    assert json.loads(inj.to_json()) == dict(line, reason=None, signal=None, target_step=None, step_seen=None,
                                              newest_complete=None, newest_complete_seen=None, hosts=[], receipts=[],
                                              where=None, attempt=None, saving=[])


@pytest.mark.parametrize("field, value", [("time", "5"), ("time", True), ("attempt", "2"), ("attempt", True),
                                          ("killed", None), ("receipts", {"a": 1}), ("kind", 3)])
def test_an_injection_field_of_the_wrong_type_reads_as_missing(field, value):
    inj = Injection.from_json({"time": 1.0, "killed": 1, "attempt": 1, field: value})
    got = getattr(inj, field)
    assert got in (None, 0, ()), (field, got)


def test_the_injector_writes_what_the_readers_read(tmp_path):
    """Its one writer (Injector.record) and its one reader (live.read_injections), through the file."""
    from restartlab.contracts import live
    from restartlab.runtime.inject import Injector
    phase = layout.Phase(str(tmp_path))
    inj = Injection(time=3.5, killed=2, kind="rank", attempt=4, hosts=("h",), saving=("step-10",))
    rec = Injector.__new__(Injector)
    rec.log_path = phase.injections
    rec.record(inj)
    assert live.read_injections(phase.path) == [inj]


# ---------------------------------------------------------------- the report's summary
def test_a_fresh_reports_phases_have_the_declared_fields_and_the_summary_reads_back(tmp_path):
    """A phase's entry in the summary has exactly the fields contracts/summary.PhaseSummary declares.
    A field added to the collector or the report but not declared there fails here. The summary
    the report writes is the one Summary.read gives back."""
    d = str(tmp_path / "expt")
    _copy_recorded(d)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", d, "--no-plots"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    s = Summary.read(layout.Expt(d).summary)
    with open(layout.Expt(d).summary) as f:
        assert [list(p) for p in json.load(f)["phases"]] == [list(PHASE_FIELDS)] * 2  # and in their order
    assert s.source == d and s.by_phase()["sync"].kills == 1 and s.strategies is None
    with open(layout.Expt(d).summary) as f:
        assert json.load(f) == dataclasses.asdict(s)


@pytest.mark.parametrize("text, why", [
    (None, "No such file"), ("{", "not JSON"), ("[]", "not a restartlab report summary"),
    ('{"phases": [{"wall_s": 1}]}', "not a restartlab report summary"),
])
def test_what_is_not_a_summary_is_named_with_its_file(tmp_path, text, why):
    p = layout.Expt(str(tmp_path)).summary
    if text is not None:
        with open(p, "w") as f:
            f.write(text)
    with pytest.raises(SummaryError) as e:
        Summary.read(str(p))
    assert str(e.value).startswith(f"{p}: ") and why in str(e.value)


def test_the_launch_snapshot_round_trips_and_reads_what_it_can(tmp_path):
    """#64.1: the at-launch checkpoint snapshot (contracts/launch_snapshot), one writer, one tolerant reader.
    What it writes reads back equal. A field of the wrong type reads as absent. A checkpoint entry
    that is not [step, complete] is left out. No file, not JSON, not a mapping, or an empty one
    reads as None. The verdict then judges without it, as before."""
    import json
    from restartlab.contracts import launch_snapshot as LS
    snap = LS.LaunchSnapshot("/c", "highest", "file:.complete", ((10, True), (20, False)), 10, "/c/step-10",
                             LS.WillLoad(20, "/c/step-20", False, "no .complete", ("a.pt", "b.pt")))
    path = str(tmp_path / "at-launch.json")
    LS.write(path, snap)
    assert LS.read(path) == snap and snap.states == {10: True, 20: False}
    assert json.load(open(path))["will_load"] == {"step": 20, "path": "/c/step-20", "complete": False,
                                                  "why": "no .complete", "holds": ["a.pt", "b.pt"]}
    odd = LS.from_dict({"checkpoints": [[10, True], "x", [20], [30.0, False], ["40", True]], "newest_complete": "10",
                        "will_load": {"step": 30, "complete": "yes"}, "ckpt_dir": 3})
    assert odd.checkpoints == ((10, True), (30, False)) and odd.newest_complete is None and odd.ckpt_dir is None
    assert odd.will_load == LS.WillLoad(30, None, False)
    for text in (None, "not json", "[1, 2]", "{}"):
        if text is not None:
            with open(path, "w") as f:
                f.write(text)
        else:
            os.remove(path)
        assert LS.read(path) is None, text
