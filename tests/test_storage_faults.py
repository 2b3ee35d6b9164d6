"""Storage faults through `restartlab run` (#62).

- The preload reaches the bundled trainer's DCP saves (sync and async), a plain DCP program's saves,
  and the Hugging Face Trainer's torch.save files.
- A torn checkpoint is named, and the resume stays off it. Where the program's own rule picks it,
  the verdict says so.
- A stalled save shows as a save stall of its length.
- ENOSPC ends the phase with the reason, not a crash loop.
- Nothing is left armed or running afterwards."""
import json
import os
import subprocess
import sys

import pytest

from restartlab.contracts import layout
from restartlab.runtime import killer
from tests.helpers import cleanup_tag, job_tag

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def expt(tmp_path):
    d = str(tmp_path / "expt")
    yield d
    if os.path.exists(layout.Expt(d).job_script):
        cleanup_tag(job_tag(d))


def run(d, *sets, scenario="scenarios/local.yaml"):
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "run", scenario, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false", *[x for s in sets for x in ("--set", s)]],
                       capture_output=True, text=True, timeout=550, cwd=ROOT)
    return r


def summary(d, phase):
    with open(layout.Expt(d).summary) as f:
        return next(s for s in json.load(f)["phases"] if s["phase"] == phase)


def settled(d, phase):
    """Nothing armed, nothing of the job running."""
    assert not os.path.exists(layout.Expt(d).phase(phase).iofault_ctl)
    assert killer.find_tagged(job_tag(d), standby=True) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_bundled_trainer_torn_then_stalled_or_slowed(expt, mode):
    """A torn file kills rank 1 inside the save of step 15, then rank 1's writes stall or crawl.

    The relaunch resumes from step 10, and the torn checkpoint is named. Then rank 1's writes stall
    3 s (sync) or crawl at 200 kB/s for 3 s (async). The save that met it took that long, and the
    phase finished."""
    second = "stall_writes" if mode == "sync" else "slow_storage"
    r = run(expt, f"phases=[{{name: {mode}, checkpoint: {mode}}}]", "trainer.train_iters=40",
            "trainer.save_interval=5", "trainer.keep=0", f"failures.schedule.at_steps=[{{step: 10, kind: torn}}, {{step: 25, kind: {second}}}]",
            "failures.rank=1", "failures.duration=3s", "failures.rate=200kbps")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = summary(expt, mode)
    v = s["survival"]
    assert [x["outcome"] for x in v["restarts"]] == ["first", "newest"] and v["survived"], v
    # As failures: the torn strike alone, from its cut (not its arming) to the attempt's end.
    # The stall or the crawl ended no attempt and is no failure. The storage table accounts for it.
    ev, = s["failures"]
    assert ev["kind"] == "torn" and ev["attempt"] == 1 and 0 <= ev["detection_s"] < 5, ev
    torn, slow = s["storage_faults"]
    # Armed once step 10 is complete, it strikes the first save whose files open after that.
    # That is step 15's, or under load in async mode step 20's, since 15's files were open already.
    assert (torn["kind"], torn["rank"], torn["attempt"]) == ("torn", 1, 1), torn
    step = int(torn["checkpoint"].split("-")[1])
    assert step in (15, 20) and torn["file"] == f"{torn['checkpoint']}/__1_0.distcp" and torn["bytes"] > 0, torn
    assert f"attempt 2 resumed from step {step - 5}, not the struck {torn['checkpoint']}" in torn["followed"], torn
    assert (slow["kind"], slow["rank"], slow["attempt"]) == (second, 1, 2), slow
    assert slow["followed"] == "the attempt went on and finished", slow
    if mode == "sync":
        assert 3.0 <= slow["blocked_s"] < 4.5, slow
    # The save that met it took that long, from its marker's save start to .complete.
    # In sync mode that is the stall. In async mode it is ~600 kB of rank 1's shard at 200 kB/s in the background.
    with open(os.path.join(layout.Expt(expt).phase(mode).ckpts, slow["checkpoint"], ".complete")) as f:
        marker = json.load(f)
    assert marker["complete_ts"] - marker["save_start"] >= (3.0 if mode == "sync" else 2.0), (marker, slow)
    report = open(layout.Expt(expt).report).read()
    assert "## Storage faults" in report and "cut at byte" in report
    settled(expt, mode)


def test_enospc_ends_the_phase_with_the_reason_or_is_a_finding_when_the_trainer_goes_on(expt, tmp_path):
    """--on-save-error abort: the trainer exits at the failed save; the supervisor reads why and does
    not relaunch into a full disk. continue (the default): the training goes on without its saves and
    the verdict says so: a phase that 'finished' with no checkpoint since step 10 is no clean survival."""
    common = ("phases=[{name: sync, checkpoint: sync}]", "trainer.train_iters=30", "trainer.save_interval=5",
              "failures.schedule.at_steps=[{step: 10, kind: write_errors}]", "failures.errno=ENOSPC",
              "failures.duration=0", "failures.all_ranks=true")
    r = run(expt, *common, "trainer.on_save_error=abort")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    s = summary(expt, "sync")
    assert s["attempts"] == 1, s["attempts"]
    finding = s["survival"]["findings"][-1]
    assert "failed in attempt 1: a rank's write failed for want of space" in finding and \
        "No space left on device" in finding and "relaunching could not help" in finding, finding
    assert {f["kind"] for f in s["storage_faults"]} == {"write_errors"}
    assert any(f["errno"] == "ENOSPC" for f in s["storage_faults"]), s["storage_faults"]
    settled(expt, "sync")
    d2 = str(tmp_path / "expt2")
    try:
        r = run(d2, *common)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        v = summary(d2, "sync")["survival"]
        assert not v["survived"] and v["finished"], v
        assert any(f.startswith("4 save(s) failed (steps 15, 20, 25, 30;") and "ENOSPC" in f for f in v["findings"]), v
        settled(d2, "sync")
    finally:
        if os.path.exists(layout.Expt(d2).job_script):
            cleanup_tag(job_tag(d2))


def test_a_plain_dcp_program_torn_then_failing_with_eio(expt):
    """examples/dcp (dcp.save, .metadata last): a torn shard, then an EIO.

    The torn shard kills rank 1. An EIO for 2 s crashes the next attempt's save. Each relaunch
    resumes from the newest checkpoint holding .metadata."""
    r = run(expt, "phases=[{name: restart, checkpoint: sync, args: [--save-every, '5']}]",
            "failures.schedule.at_steps=[{step: 10, kind: torn}, {step: 20, kind: write_errors}]",
            "failures.rank=1", "failures.duration=2s", scenario="scenarios/examples/dcp.yaml")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = summary(expt, "restart")
    assert [x["outcome"] for x in s["survival"]["restarts"]] == ["first", "newest", "newest"], s["survival"]
    torn, eio = s["storage_faults"]
    assert torn["kind"] == "torn" and "resumed from step 10, not the struck step-15" in torn["followed"], torn
    assert eio["errno"] == "EIO" and "resumed from step 20, not the struck step-25" in eio["followed"], eio
    settled(expt, "restart")


def test_the_transformers_trainer_torn_in_a_ranks_rng_state_crash_loops_and_the_verdict_names_the_file(expt):
    """The Hugging Face Trainer's checkpoint-15, with rank 1's rng_state_1.pth torn.

    The file is cut at byte 1000 (torch.save's own stream), and rank 1 is killed. Rank 0 wrote
    trainer_state.json already. So the Trainer's own rule picks checkpoint-15 on every relaunch, and
    each one crashes loading it. The verdict names the torn file and the complete checkpoint it
    should have taken."""
    r = run(expt, "phases=[{name: restart, checkpoint: sync, args: [--save-steps, '5']}]",
            "failures.schedule.at_steps=[{step: 10, kind: torn}]", "failures.rank=1", "failures.after_bytes=1000",
            "relaunch.max_attempts=3", scenario="scenarios/examples/transformers.yaml")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    s = summary(expt, "restart")
    (torn,) = s["storage_faults"]
    assert torn["file"] == "checkpoint-15/rng_state_1.pth" and torn["bytes"] == 1000, torn
    assert "attempt 2 took no step" in torn["followed"], torn
    texts = [x["text"] for x in s["survival"]["restarts"][1:]]
    assert texts and all("checkpoint-15" in t and "rng_state_1.pth cut short" in t and
                         "the newest complete checkpoint, step 10" in t for t in texts), texts
    settled(expt, "restart")


def test_fuzz_draws_kills_and_torn_files_and_each_resume_takes_the_newest_complete(expt):
    """restartlab fuzz --kinds kill,torn.

    Each strike's kind is drawn from the seed. A torn one cuts a file of the next save at a byte
    drawn from the seed, and kills the rank there. Every relaunch resumes from the newest complete
    checkpoint. The fuzz table says where each cut landed."""
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "fuzz", "scenarios/local.yaml", "--kills", "3",
                        "--kinds", "kill,torn", "--seed", "1", "--no-baseline", "--expt-dir", expt, "--plain",
                        "--set", "trainer.save_interval=5"], capture_output=True, text=True, timeout=550, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(expt).fuzz_summary) as f:
        rows = json.load(f)["kills"]
    assert len(rows) == 3 and {x["kind"] for x in rows} == {"kill", "torn"}, rows
    # "first": struck before any checkpoint was complete, it starts over, as it should.
    # "startup_kill": the next strike (a kill) landed in that attempt's start-up, before it could resume.
    # That gives no verdict and no finding.
    for x in rows:
        assert x["next"] in ("newest", "first", "startup_kill") and not x["finding"], x
        if x["kind"] == "torn":
            assert x["where"].startswith("save (torn: step-") and "cut at byte" in x["where"], x
    cuts = [e for e in __import__("restartlab.contracts.iofaults", fromlist=["read"]).read(
        layout.Expt(expt).phase("sync").iofaults, []) if e.event == "cut"]
    assert len(cuts) == sum(x["kind"] == "torn" for x in rows) and all(0 < c.bytes < 1 << 20 for c in cuts), cuts
    settled(expt, "sync")
