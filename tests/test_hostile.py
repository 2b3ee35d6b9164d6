"""Hostile input (tests/data/hostile/).
The cases are broken scenarios through `validate` and `render`, broken experiment directories
through `report`, and schedulers that are missing or fail. Each case gets one clear message naming
the file, and the line and key where there is one. The exit is 2, or 3 for a missing scheduler
tool, or 1 for a scheduler that answers with an error. There is no traceback, no hang and nothing
executed, and the input is left as it was."""
import contextlib
import hashlib
import io
import os
import stat
import subprocess
import sys

import pytest

from restartlab import cli
from restartlab.contracts import layout

pytestmark = pytest.mark.timeout(120)
HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(HERE, "data", "hostile", "scenarios")
EXPT = os.path.join(HERE, "data", "hostile", "experiments")

# file -> (line, what the message must say)
SCENARIOS = {
    "01-binary.yaml": (1, "not a UTF-8 text file"),
    "02-latin1.yaml": (1, "not a UTF-8 text file (byte 0xe9"),
    "03-recursive-alias.yaml": (1, "phases[0].failures: an alias refers to a node that contains it"),
    "04-complex-key.yaml": (2, "a key must be a plain name, not a list"),
    "05-inf-duration.yaml": (3, "relaunch.hang_timeout: duration must be a finite number"),
    "06-nan-duration.yaml": (3, "relaunch.hang_timeout: duration must be a finite number"),
    "07-billion-laughs.yaml": (4, "expands to more than 100,000 values"),
    "08-deep-nesting.yaml": (1, "nested too deeply"),
    "09-save-interval-0-gated.yaml": (3, "trainer.save_interval: 0 saves no checkpoint, but phase 'sync' checkpoints"),
    "10-bad-signal.yaml": (3, "failures.signal: 'NOTASIG' is not a signal name"),
    "11-every-0s.yaml": (3, "failures.schedule.every: must be > 0"),
    "12-seq-len-0.yaml": (3, "trainer.seq_len: must be >= 1"),
    "13-batch-size-0.yaml": (3, "trainer.batch_size: must be >= 1"),
    "14-lr-nan.yaml": (3, "trainer.lr: expected a finite number, got nan"),
    "15-walltime-99-minutes.yaml": (3, "job.walltime: expected a duration"),
    "16-every-steps-0.yaml": (3, "failures.schedule.every_steps: must be > 0"),
    "17-at-steps-empty.yaml": (3, "failures.schedule.at_steps: an empty list would make no kill"),
    "18-mtbf-0.yaml": (3, "failures.schedule.mtbf: must be > 0"),
    "19-max-kills-0.yaml": (3, "failures.max_kills: must be > 0"),
    "20-hang-timeout-0.yaml": (3, "relaunch.hang_timeout: must be > 0"),
    "21-negative-iters.yaml": (3, "trainer.train_iters: must be >= 0, got -5"),
    "22-tp-0.yaml": (3, "trainer.tp: must be >= 1"),
    "23-name-path.yaml": (1, "name: '../../etc': use letters"),
    "24-phase-name-path.yaml": (2, "phases[0].name: 'a/../b': use letters"),
    "25-top-level-list.yaml": (1, "a scenario is a mapping of keys"),
    "26-empty-file.yaml": (1, "phases: at least one phase is needed"),
    "27-extends-binary.yaml": (1, "01-binary.yaml:1: not a UTF-8 text file"),
    "28-extends-self.yaml": (2, "extends: cycle through"),
    "29-extends-list.yaml": (2, "extends: expected a file name"),
    "30-model-list.yaml": (3, "trainer.model: expected a string, got a list"),
    "31-lr-string.yaml": (3, "trainer.lr: expected a finite number, got '0.1; rm -rf /'"),
    "32-env-bad-name.yaml": (3, "launch.env: expected a mapping of VARIABLE_NAME: value"),
    "33-node-out-of-range.yaml": (6, "failures.node: node 7 is out of range for 2 nodes"),
    "34-at-steps-nonpositive.yaml": (3, "failures.schedule.at_steps: expected a list of positive step numbers"),
    "35-max-attempts-0.yaml": (3, "relaunch.max_attempts: must be >= 1"),
    "36-empty-stage-dir.yaml": (5, "phases[0].stage_dir: expected a non-empty path"),
    "37-huge-int.yaml": (3, "trainer.train_iters: 99999999999999999999999 is too large"),
    "38-duplicate-key.yaml": (2, "name: duplicate key"),
    "39-mtbf-report-0.yaml": (3, "collection.mtbf: must be > 0"),
    "40-bad-gate.yaml": (4, "failures.gate: 'maybe' is not one of complete, none"),
    "41-directive-newline.yaml": (4, "job.directives[0]: a scheduler directive value cannot contain a newline"),
    "42-timed-gate-without-checkpoints.yaml": (5, "phase 'base' saves no checkpoints, so a kill gated on .complete"),
    "43-sync-save-interval-0.yaml": (3, "trainer.save_interval: 0 saves no checkpoint, but phase 'sync' "
                                        "checkpoints (sync): every kill would restart it from step 0"),
    # the conflict is named where it arose (this file, line 5), with where the first value came from
    "44-extends-schedule-conflict.yaml": (5, "failures.schedule.every: give exactly one of every, at_steps, "
                                             "every_steps, mtbf, fuzz (got at_steps from "),
    "45-program-regex-without-step.yaml": (5, "trainer.program.progress: 'iter (\\\\d+) loss (?P<loss>\\\\S+)' has "
                                              "no (?P<step>...) group"),
    "46-program-bad-regex.yaml": (5, "trainer.program.progress: 'step (?P<step>\\\\d+' is not a valid regular "
                                     "expression (missing ), unterminated subpattern"),
    "47-program-bad-complete.yaml": (7, "trainer.program.complete: 'file:../escape' is not one of exists, dcp, torchzip, "
                                        "torchzips, dsshards, hfrngs, file:NAME[,NAME...], pointer:FILE, or several joined by +"),
    "48-args-without-program.yaml": (4, "phases[1].args: only for trainer.program"),
    "49-program-without-steps.yaml": (3, "trainer.program.steps: required key is missing"),
    "50-slow-writes-hold.yaml": (6, "failures.slow_writes.hold: 'after' is not one of inside, before"),
}

# the experiment's files as the report names them (relative to the experiment: layout's names)
M1 = layout.Phase("sync").attempt(1).metrics(0)
A1 = layout.Phase("sync").attempt(1).record
INJ = layout.Phase("sync").injections
SC = layout.Expt("").scenario
# directory -> what the warning must say (file and line where there is one)
EXPERIMENTS = {
    "01-iter-not-a-number": f"{M1}:5: malformed train/iter 'abc'",
    "02-dt-not-a-number": f"{M1}:5: malformed train/dt 'slow'",
    "03-metrics-is-a-directory": f"{M1}: malformed: not a file",
    "04-attempt-json-is-a-list": f"{A1}: malformed (a list, not a mapping)",
    "05-injection-time-not-a-number": f"{INJ}:1: skipped a malformed line (time 'x' is not a number)",
    "06-scenario-yaml-invalid": f"{SC}: malformed {SC}",
    "07-scenario-yaml-a-list": f"{SC}: malformed {SC}",
    "08-marker-not-a-mapping": "step-00000004/.complete: malformed marker",
    "09-metrics-line-is-a-list": f"{M1}:5: skipped a malformed line",
    "10-timestamp-not-a-number": f"{M1}:5: skipped a malformed line (TypeError: timestamp",
    "11-attempts-entry-is-a-file": f"{layout.Phase('sync').attempt(2).path}: malformed attempts entry",
    "12-injections-line-garbage": f"{INJ}:1: skipped a malformed line",
    "13-metrics-binary-garbage": f"{M1}:5: skipped a malformed line",
    "14-not-a-directory": "not an experiment directory",
}


def _run_cli(argv):
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _tree_digest(path):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def test_the_corpus_is_complete():
    assert sorted(SCENARIOS) == sorted(f for f in os.listdir(SCEN) if f.endswith(".yaml"))
    assert sorted(EXPERIMENTS) == sorted(os.listdir(EXPT))
    assert len(SCENARIOS) + len(EXPERIMENTS) >= 40


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("verb", ["validate", "render"])
def test_broken_scenario(name, verb, tmp_path):
    line, frag = SCENARIOS[name]
    path = os.path.join(SCEN, name)
    argv = [verb, path] + (["-o", str(layout.Expt(tmp_path).job_script)] if verb == "render" else [])
    rc, out, err = _run_cli(argv)
    assert rc == 2, (rc, err)
    assert frag in err, err
    if name != "27-extends-binary.yaml":  # the error is in the file it extends
        assert f"{path}:{line}:" in err or f"{name}:{line}:" in err, err
    assert not os.path.exists(layout.Expt(tmp_path).job_script) and out == ""


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_broken_experiment_report(name, tmp_path):
    path = os.path.join(EXPT, name)
    before = _tree_digest(path)
    out_dir = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "report", path, "--out", str(out_dir)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and EXPERIMENTS[name] in r.stderr, r.stderr
    assert _tree_digest(path) == before  # nothing lost, nothing changed
    if name != "14-not-a-directory":     # the rest of the experiment is still reported
        assert os.path.exists(layout.Expt(out_dir).report) and EXPERIMENTS[name] in open(layout.Expt(out_dir).report).read()


def _stub(bindir, name, body):
    p = bindir / name
    p.write_text("#!/bin/bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_scheduler_missing_or_failing(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("python3", "bash", "env"):  # a PATH with nothing scheduler-like on it
        os.symlink(subprocess.check_output(["which", tool], text=True).strip(), bindir / tool)
    monkeypatch.setenv("PATH", str(bindir))
    scen = os.path.join(os.path.dirname(HERE), "scenarios", "agpt2b.yaml")
    rc, _, err = _run_cli(["submit", scen, "--set", f"expt_root={tmp_path / 'expt'}", "--no-preflight"])
    assert rc == 3 and "`qsub` is not on PATH" in err, err
    rc, _, err = _run_cli(["status", "1.srv", "--scheduler", "pbs"])
    assert rc == 1 and "`qstat` is not on PATH" in err, err
    rc, _, err = _run_cli(["cancel", "42", "--scheduler", "slurm"])
    assert rc == 1 and "`scancel` is not on PATH" in err, err
    rc, _, err = _run_cli(["status", "42"])
    assert rc == 3 and "pass --scheduler" in err, err
    # a scheduler that answers with an error: its message, exit 1, the experiment dir kept
    _stub(bindir, "qsub", "echo 'qsub: Unauthorized Request' >&2\nexit 159\n")
    rc, _, err = _run_cli(["submit", scen, "--set", f"expt_root={tmp_path / 'expt'}", "--no-preflight"])
    assert rc == 1 and "qsub refused the job (exit 159): qsub: Unauthorized Request" in err, err
    # one line, with qsub's own message (after the line saying the preflight was skipped)
    assert err.strip().splitlines()[1:] == [next(x for x in err.splitlines() if "qsub refused" in x)], err
    assert len(os.listdir(tmp_path / "expt")) == 1
    (expt,) = os.listdir(tmp_path / "expt")  # kept, and marked as never submitted
    assert "Unauthorized Request" in open(tmp_path / "expt" / expt / "NOT-SUBMITTED").read()
    # the experiment records that its preflight was skipped
    assert "skipped (restartlab submit --no-preflight)" in open(tmp_path / "expt" / expt / "preflight.txt").read()
