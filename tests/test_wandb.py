"""Weights & Biases, offline (no network here).

- There is one run per attempt, grouped by experiment and phase.
- It has the same metric names as the JSONL, with the resume step and the restart cost in the
  config.
- There is no wandb import when it is off.
- `restartlab report --wandb` logs the summary."""
import glob
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from restartlab.runtime import killer
from restartlab.contracts import layout
from tests.helpers import cleanup_tag, raw_rows, trainer_cmd
from tests.wandb_records import offline_runs

pytestmark = [pytest.mark.timeout(600)]


def _run(n, args, env, tag):
    r = subprocess.run(trainer_cmd(n, args, tag, env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    left = _left_running(tag)  # nothing of the attempt (the wandb service included) outlives it
    cleanup_tag(tag)
    return r, left


LEFT_BOUND_S = 10.0


def _left_running(tag):
    """What of the attempt still runs LEFT_BOUND_S after its launcher returned, each with its
    command line.

    The trainer's wandb.teardown() waits for the service process. Yet a fresh-clone CI run (944da2d,
    2026-12-05) found one tagged process alive at the first look right after mpiexec returned. Its
    command line was not recorded then. Here, 6 runs beside two busy loops found nothing after
    2-3 ms. A leak (an orphaned service) lives on, so the bound tells it from a process still ending."""
    import psutil
    deadline = time.time() + LEFT_BOUND_S
    while True:
        left = killer.find_tagged(tag)
        if not left or time.time() > deadline:
            break
        time.sleep(0.05)
    out = []
    for pid in left:
        try:
            out.append((pid, " ".join(psutil.Process(pid).cmdline())[:200]))
        except psutil.Error:
            pass
    return out


@pytest.mark.multirank
def test_one_offline_run_per_attempt_with_the_jsonl_rows(tmp_path, wandb_offline):
    d = str(tmp_path / "out")
    args = ["--model", "tiny", "--train-iters", "12", "--save-interval", "4", "--ckpt-dir", str(tmp_path / "c"),
            "--outdir", d, "--log-interval", "1000", "--wandb-project", "rl-test", "--wandb-mode", "offline"]
    ctx = {"RESTARTLAB_EXPT": "exp1", "RESTARTLAB_PHASE": "sync"}
    metrics = layout.Attempt(d).metrics(0)
    # attempt 1 ends after step 6, attempt 2 resumes from its checkpoint. (Attempts that end by a
    # signal are not used here: a SIGKILL or SIGTERM to the rank's process tree also ends wandb's
    # service process, whose offline transaction log is buffered: such a run may hold nothing.
    # The JSONL is the record; docs/trainer.md says so.)
    tags = [f"test-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    r, left = _run(2, args[:3] + ["6"] + args[4:], dict(ctx, RESTARTLAB_ATTEMPT="1"), tags[0])
    assert r.returncode == 0 and left == [], (left, r.stdout[-2000:])
    stop = 6
    r, left = _run(2, args, dict(ctx, RESTARTLAB_ATTEMPT="2"), tags[1])
    assert r.returncode == 0 and f"RESUMED from step={stop}" in r.stdout, r.stdout[-3000:]
    assert left == [], f"left running after the attempt: {left}"

    runs = list(offline_runs(d).values())
    assert len(runs) == 2, list(offline_runs(d))
    runs.sort(key=lambda run: run["config"]["attempt"])
    first, second = runs
    assert {run["run"].run_group for run in runs} == {"exp1/sync"}
    assert [run["run"].display_name for run in runs] == ["sync-attempt-1", "sync-attempt-2"]
    assert first["config"]["resume_step"] == 0 and second["config"]["resume_step"] == stop
    assert [h["_step"] for h in first["history"] if "train/loss" in h] == list(range(1, 7))
    jsonl = [row["metrics"] for row in raw_rows(metrics)]
    restart = [m["train/restart_seconds"] for m in jsonl if "train/restart_seconds" in m]
    assert second["config"]["restart_seconds"] == pytest.approx(restart[-1])
    assert second["config"]["resumed_from"] == stop
    # the second attempt's rows: every JSONL key and value under the same name, at the same step
    mine = [m for m in jsonl[[i for i, m in enumerate(jsonl) if "train/restart_seconds" in m][-1]:]]
    logged = {}
    for h in second["history"]:
        logged.setdefault(h["_step"], {}).update({k: v for k, v in h.items() if not k.startswith("_")})
    for m in mine:
        got = logged[m["train/iter"]]
        for k, v in m.items():
            assert got[k] == pytest.approx(v) if isinstance(v, float) else got[k] == v, (m["train/iter"], k)
    assert sorted(logged) == list(range(stop + 1, 13))
    assert any("train/ckpt_save_seconds" in h for h in second["history"])


@pytest.mark.multirank
def test_off_means_no_wandb_import(tmp_path):
    """Without --wandb-project the trainer never imports wandb: a `wandb` package placed first on
    the path would leave a mark if it were imported."""
    fake = tmp_path / "fake" / "wandb"
    fake.mkdir(parents=True)
    mark = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")])}
    r, _ = _run(2, ["--model", "tiny", "--train-iters", "3", "--outdir", str(tmp_path / "o")], env,
                f"test-{uuid.uuid4().hex[:8]}")
    assert r.returncode == 0, r.stdout[-2000:]
    assert not mark.exists()
    # the control: the same fake is imported once W&B is asked for (the trainer goes on without it)
    r, _ = _run(2, ["--model", "tiny", "--train-iters", "3", "--outdir", str(tmp_path / "o2"),
                    "--wandb-project", "p", "--wandb-mode", "offline"], env, f"test-{uuid.uuid4().hex[:8]}")
    assert r.returncode == 0 and mark.exists(), r.stdout[-2000:]
    assert "W&B logging off for this attempt" in r.stdout


def test_scenario_wandb_mapping_renders_flags(tmp_path):
    from restartlab.job import render
    from restartlab import scenario
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntrainer:\n  wandb:\n    project: agpt\n    mode: offline\nphases: [{name: a}]\n")
    sc = scenario.load(str(p))
    _, ctx = render.render(sc, "local", "/expt/x")
    argv = ctx.phases[0].argv
    assert argv[argv.index("--wandb-project") + 1] == "agpt" and argv[argv.index("--wandb-mode") + 1] == "offline"
    assert "--wandb-entity" not in argv
    p.write_text("name: t\ntrainer:\n  wandb:\n    mode: sometimes\nphases: [{name: a}]\n")
    with pytest.raises(scenario.ScenarioError, match=r":4: trainer.wandb.mode: 'sometimes' is not one of"):
        scenario.load(str(p))


def test_report_takes_the_project_from_the_experiments_scenario_and_the_flags_over_it(tmp_path):
    """`report EXPT_DIR --wandb` takes trainer.wandb from the experiment's own copy of its scenario.

    Each flag goes over its key. The report reads that copy as a record. This failed with an
    AttributeError when the reader still took it for a mapping."""
    from restartlab import scenario
    from restartlab.analysis import report_wandb
    p = tmp_path / "s.yaml"
    p.write_text("name: t\ntrainer:\n  wandb:\n    project: agpt\n    mode: offline\nphases: [{name: a}]\n")
    sc = scenario.load(str(p))
    sc.expt_dir = str(tmp_path)
    copy = tmp_path / "copy.yaml"
    copy.write_text(scenario.dump_resolved(sc))
    back = scenario.read_resolved(str(copy))
    got = report_wandb.settings(back)
    assert (got.project, got.entity, got.mode) == ("agpt", None, "offline")
    got = report_wandb.settings(back, project="rl", entity="me")
    assert (got.project, got.entity, got.mode) == ("rl", "me", "offline")
    with pytest.raises(report_wandb.WandbReportError, match="no project"):
        report_wandb.settings(None)


@pytest.mark.multirank
def test_report_logs_its_tables_and_plots(tmp_path, wandb_offline):
    d = str(tmp_path / "run")
    r, _ = _run(2, ["--model", "tiny", "--train-iters", "8", "--save-interval", "4", "--ckpt-dir", str(tmp_path / "c"),
                    "--outdir", d], {}, f"test-{uuid.uuid4().hex[:8]}")
    assert r.returncode == 0, r.stdout[-2000:]
    out = str(tmp_path / "rep")
    cmd = [sys.executable, "-m", "restartlab.cli", "report", "--sync", os.path.join(d, "metrics-*.jsonl"), "--out", out]
    r = subprocess.run(cmd + ["--wandb"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no project" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run(cmd + ["--wandb", "--wandb-project", "rl", "--wandb-mode", "offline"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = offline_runs(out).values()
    assert run["run"].job_type == "report"
    logged = {k: v for h in run["history"] for k, v in h.items()}  # nested keys joined with "/"
    assert logged["report/phases/_type"] == "table-file" and logged["report/failures/_type"] == "table-file"
    images = {k for k, v in logged.items() if k.endswith("/_type") and v == "image-file"}
    assert {f"report/{os.path.basename(p)[:-4]}/_type" for p in glob.glob(os.path.join(out, "*.png"))} == images
    assert images
    table = glob.glob(os.path.join(out, "wandb", "offline-run-*", "files", logged["report/phases/path"]))
    (rows,) = [json.load(open(t))["data"] for t in table]
    assert rows[0][0] == "sync" and rows[0][2] == 8  # phase, steps
