"""The analysis' read model (issue 35).

`collect.load_phase` opens every file of a phase once and keeps what any judge needs. `survival`
and `report` judge those records without opening a file. The open count is taken on two
experiments:
- a made-up one here, with every kind of file the report reads;
- a real one (tests/test_collect.py::test_real_restartlab_run).
The fast paths of the reader are held to the slow ones they replace: json.loads per line, and a
scan of every injection per attempt."""
import json
import os
import random
import subprocess
import sys

import yaml

from restartlab.analysis import collect, report, survival
from restartlab.contracts import ckptdir, layout, live
from restartlab.runtime.attempt_record import injections_into
from restartlab.contracts.injections import Injection
from tests.helpers import assert_each_file_read_once, counted_opens, report_args


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _rows(first, last, t0, resumed=None, final=False, loss=lambda s: 1.0 / s):
    out = []
    for s in range(first, last + 1):
        m = {"train/iter": s, "train/loss": loss(s), "train/dt": 0.5}
        if s == first:
            m.update({"startup/launch_ts": t0 - 1.0, "train/restart_seconds": 1.0})
            if resumed:
                m["train/resumed_from"] = resumed
        if s % 5 == 0:
            m["train/ckpt_save_seconds"] = 0.1
        out.append({"timestamp": t0 + s - first, "rank": 0, "metrics": m})
    if final:
        out.append({"timestamp": t0 + last - first + 0.5, "rank": 0, "metrics": {"train/iter": last, "train/params_crc": "9"}})
    return "".join(json.dumps(r) + "\n" for r in out)


def made_up_experiment(root):
    """A baseline and a sync phase with every file the report reads.

    The attempts:
    - a killed attempt;
    - one that crashed with an error line in its output;
    - one cut short with its job (a launch record, hosts);
    - the one that finished.
    The other files: snapshots at each launch, injections, node checks, end records, checkpoint
    markers, the resolved scenario."""
    expt = layout.Expt(str(root))
    _write(expt.scenario, yaml.safe_dump({"name": "t", "scheduler": "local", "phases": [
        {"name": "baseline", "checkpoint": "none"}, {"name": "sync", "checkpoint": "sync"}],
        "relaunch": {"on_node_loss": "same"}, "trainer": {"train_iters": 20}}))
    base = expt.phase("baseline")
    a = base.attempt(1)
    _write(a.metrics(0), _rows(1, 20, 10.0, final=True))
    _write(a.record, json.dumps({"launch_ts": 9.0, "end_ts": 31.0, "exit_code": 0, "completed": True}))
    _write(base.ended, json.dumps({"time": 31.0, "how": "completed", "attempt": 1}) + "\n")
    ph = expt.phase("sync")
    snaps = {1: [], 2: [(5, True), (10, True)], 3: [(10, True)], 4: [(10, True), (15, False)]}
    for k, ck in snaps.items():
        good = [s for s, c in ck if c]
        _write(ph.attempt(k).at_launch, json.dumps({"checkpoints": [list(x) for x in ck],
                                                    "newest_complete": max(good) if good else None}))
    t = 100.0
    _write(ph.attempt(1).metrics(0), _rows(1, 12, t))
    _write(ph.attempt(1).record, json.dumps({"launch_ts": t - 1, "end_ts": t + 12, "exit_code": 137}))
    _write(ph.attempt(1).output, "step 12\nkilled\n")
    _write(ph.attempt(2).metrics(0), _rows(11, 13, t + 20, resumed=10))
    _write(ph.attempt(2).record, json.dumps({"launch_ts": t + 19, "end_ts": t + 24, "exit_code": 1}))
    _write(ph.attempt(2).output, "Traceback (most recent call last):\nRuntimeError: the disk is full\n")
    _write(ph.attempt(3).launched, json.dumps({"launch_ts": t + 30, "job": "7.pbs"}))
    _write(ph.attempt(3).hosts, "n0\nn1\n")
    _write(ph.attempt(4).metrics(0), _rows(11, 20, t + 40, resumed=10, final=True))
    _write(ph.attempt(4).record, json.dumps({"launch_ts": t + 39, "end_ts": t + 51, "exit_code": 0,
                                             "completed": True}))
    _write(ph.injections, json.dumps({"time": t + 12, "killed": 2, "attempt": 1, "newest_complete_seen": 10}) + "\n")
    _write(ph.node_checks, json.dumps({"attempt": 2, "node": "n0", "ok": True}) + "\n")
    _write(ph.ended, json.dumps({"time": t + 51, "how": "completed", "attempt": 4}) + "\n")
    for s in (5, 10):
        step = ckptdir.step_path(ph.ckpts, s)
        os.makedirs(step)
        ckptdir.mark_complete(step, ckptdir.Marker(s, save_start=t + s, complete_ts=t + s + 0.2))
    return expt


def test_the_report_reads_each_file_once_and_survival_none(tmp_path):
    expt = made_up_experiment(tmp_path / "expt")
    with counted_opens() as opens:
        phases, summaries, missing, problems, _ = report.build(report_args(expt.root))
    ph = expt.phase("sync")
    must = [expt.scenario, expt.phase("baseline").attempt(1).metrics(0), ph.injections, ph.node_checks, ph.ended,
            ph.attempt(3).launched, ph.attempt(3).hosts, ph.attempt(2).output, ph.attempt(1).output]
    for k in (1, 2, 4):
        must += [ph.attempt(k).metrics(0), ph.attempt(k).record, ph.attempt(k).at_launch]
    assert_each_file_read_once(expt.root, opens, must)
    v = {s.phase: s.survival for s in summaries}
    assert not missing and not problems
    # the verdict from the records is the one the files say
    sync = v["sync"]
    assert [r.outcome for r in sync.restarts] == ["first", "crash", "cut_short", "newest"], sync
    assert "RuntimeError: the disk is full" in sync.restarts[1].text
    assert "loss identical to the baseline's at all 20 steps both logged; final parameters identical" in sync.baseline
    # survival opens nothing: it judges what collect read
    loaded = [collect.load_phase(n, phase_dir=expt.phase(n).path, losses=True) for n in ("baseline", "sync")]
    with counted_opens() as opens:
        again = survival.judge(loaded[1], loaded[0]).summary()
    assert not opens and again == sync


def test_a_bare_report_run_reads_each_file_once(tmp_path):
    """The same count through the CLI as users run it (a child process with a counting open)."""
    expt = made_up_experiment(tmp_path / "expt")
    code = ("import builtins, collections, io, json, os, sys\n"
            "seen = collections.Counter(); real = builtins.open\n"
            "def counting(f, mode='r', *a, **k):\n"
            "    if isinstance(f, str) and not any(c in mode for c in 'wax+'): seen[os.path.realpath(f)] += 1\n"
            "    return real(f, mode, *a, **k)\n"
            "builtins.open = io.open = counting\n"
            "from restartlab import cli\n"
            "rc = cli.main(['report', sys.argv[1], '--no-plots'])\n"
            "real(sys.argv[2], 'w').write(json.dumps(dict(seen)))\n"
            "sys.exit(rc)\n")
    out = tmp_path / "opens.json"
    r = subprocess.run([sys.executable, "-c", code, expt.root, str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    opens = json.loads(out.read_text())
    assert_each_file_read_once(expt.root, opens, [expt.phase("sync").attempt(4).metrics(0)])


def _reference_rows(path):
    """What iter_rows replaced: json.loads on each line (the definition its fast path must keep)."""
    out, warnings = [], []
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                m = row["metrics"]
                ts = row["timestamp"]
                ts = float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
                if not isinstance(m, dict) or ts is None:
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                warnings.append((n, line.endswith("\n")))
                continue
            out.append((n, m, ts))
    return out, warnings


def test_rows_are_read_as_json_loads_reads_them(tmp_path):
    good = json.dumps({"timestamp": 1.5, "metrics": {"train/iter": 1, "train/loss": float("nan")}})
    lines = [good, "  " + good, good + "   ", good + " x", good + good, good[:-3], "", "   ", "\t" + good + "\r",
             json.dumps({"timestamp": 2, "metrics": {"a": 1}}), json.dumps({"timestamp": True, "metrics": {}}),
             json.dumps({"timestamp": "3", "metrics": {}}), json.dumps({"timestamp": 3.0, "metrics": [1]}),
             json.dumps([1, 2]), '"metrics"', "{}", good + "\x0b", "garbage {not json", "\ufeff" + good,
             json.dumps({"metrics": {}}), good]
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n" + good[:-1])  # the last line torn: no newline
    warnings = []
    got = list(collect.iter_rows(str(p), warnings))
    want, want_warnings = _reference_rows(str(p))
    assert [(n, json.dumps(m), ts) for n, m, ts in got] == [(n, json.dumps(m), ts) for n, m, ts in want]
    assert [(int(str(w).split(":")[1]), isinstance(w, live.Malformed)) for w in warnings] == want_warnings
    assert "torn last line" in str(warnings[-1])


def test_the_kill_index_finds_what_a_scan_of_every_injection_finds():
    rnd = random.Random(35)
    for _ in range(300):
        recs = []
        for i in range(rnd.randint(0, 12)):
            r = {"killed": rnd.choice([0, 1, 2, True, None])}
            if rnd.random() < 0.6:
                r["attempt"] = rnd.choice([1, 2, 3, True, "2", None])
            if rnd.random() < 0.9:
                r["time"] = rnd.choice([rnd.uniform(0, 40), rnd.randint(0, 40), None, "5", False])
            recs.append(r)
        recs = [Injection.from_json(r) for r in recs]
        ph = collect.PhaseData("p", injections=recs)
        for _ in range(10):
            t0 = rnd.choice([None, rnd.uniform(0, 30)])
            t1 = rnd.choice([None, (t0 or 0) + rnd.uniform(0, 15)])
            number = rnd.choice([None, 1, 2, 3, 4])
            assert ph.kills(t0, t1, number) == injections_into(recs, t0, t1, number), (recs, t0, t1, number)
