"""Async checkpointing with real mpiexec ranks on CPU/gloo.

SIGKILL lands during staging, during the node-local write, during the durable copy, and between the
copy and the marker. Every relaunch resumes from the newest `.complete`, and the final parameters
equal an uninterrupted run. Then 50 consecutive async saves run at the shortest interval without a
hang, because every wait has a timeout."""
import glob
import json
import os
import subprocess
import sys

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.trainer.ckpt_stage_dir import STAGE_PARENT
from tests.helpers import final_crc, losses, raw_rows, rows, run_trainer, shared_trainer_run

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


def args(d, iters=16, save=4, stage=None, fmt="dcp"):
    return ["--model", "tiny", "--train-iters", str(iters), "--save-interval", str(save), "--async-ckpt",
            "--ckpt-dir", os.path.join(d, "ckpts"), "--ckpt-stage-dir", stage or os.path.join(d, "stage"),
            "--outdir", os.path.join(d, "out"), "--log-interval", "1000", "--ckpt-format", fmt]


def reference(tmp_path_factory):
    """The uninterrupted run the kill tests compare against, once per session (helpers.shared_run):
    staged or direct, DCP's format or raw, the training is the same."""
    return shared_trainer_run(tmp_path_factory, "async-ckpt-ref", 2, args)


@pytest.mark.parametrize("stage,fmt", [(None, "dcp"), ("none", "dcp"), (None, "raw"), ("none", "raw")],
                         ids=["staged", "direct", "staged-raw", "direct-raw"])
def test_kills_inside_async_save_resume_exactly(tmp_path, tmp_path_factory, stage, fmt):
    """Killed at each point of an async save.

    The direct save writes straight into the durable dir. Its torn files then lie where a checkpoint
    belongs, and only the missing .complete keeps them from loading."""
    ref, run = reference(tmp_path_factory), str(tmp_path / "run")
    expect_resume = [None, 4, 4, 4, 4]
    points = ["stage:8", "write:8", "copy:8:1", "mark:8"] if stage is None else ["stage:8", "write:8", "mark:8"]
    for i, point in enumerate(points):
        r = run_trainer(2, args(run, stage=stage, fmt=fmt), env={"RESTARTLAB_FAULT": point})
        assert r.returncode != 0 and f"FAULT {point.split(':')[0]}" in r.stdout, (point, r.stdout[-3000:])
        if expect_resume[i]:
            assert f"RESUMED from step={expect_resume[i]}" in r.stdout, (point, r.stdout[-2000:])
        assert ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == 4, point
        assert not ckptdir.is_complete(os.path.join(run, "ckpts"), 8)
    if stage == "none":  # the torn direct write of step 8 is in the durable dir, without .complete
        assert os.path.isdir(ckptdir.step_path(os.path.join(run, "ckpts"), 8))
    r = run_trainer(2, args(run, stage=stage, fmt=fmt))
    assert r.returncode == 0 and "RESUMED from step=4" in r.stdout, r.stdout[-3000:]
    ref_l = dict(losses(os.path.join(ref, "out", layout.metrics_name(0))))
    for it, loss in losses(os.path.join(run, "out", layout.metrics_name(0))):
        assert loss == ref_l[it], it
    assert final_crc(os.path.join(run, "out", layout.metrics_name(0))) == final_crc(os.path.join(ref, "out", layout.metrics_name(0)))
    # exit waited for the last save: the final step is complete
    assert ckptdir.newest_complete_step(os.path.join(run, "ckpts"), checksums=True) == 16


def test_a_save_past_its_timeout_stops_the_run_and_a_warm_rank_reads_the_timeout_of_its_attempt(tmp_path):
    """RESTARTLAB_CKPT_TIMEOUT bounds the wait for the save in flight. The ranks are warm (forked
    from a pool that imported the trainer before this attempt's environment existed): the
    timeout is read when it is used, not when the module was imported (it was, and a warm rank
    waited 600 s)."""
    d = str(tmp_path)
    r = run_trainer(2, args(d, iters=6, save=2), env={"RESTARTLAB_CKPT_TIMEOUT": "0.5",
                                                     "RESTARTLAB_DELAY": "staged:2:*:4"})
    assert r.returncode != 0 and "TimeoutError" in r.stdout, r.stdout[-3000:]
    assert ckptdir.newest_complete_step(os.path.join(d, "ckpts")) in (None, 2)


@pytest.mark.parametrize("n", [2, 4])
def test_fifty_consecutive_async_saves_no_hang(tmp_path, n):
    d = str(tmp_path)
    r = run_trainer(n, args(d, iters=50, save=1), timeout=400,
                    env={"RESTARTLAB_CKPT_TIMEOUT": "120"})
    assert r.returncode == 0, r.stdout[-3000:]
    ms = rows(os.path.join(d, "out", layout.metrics_name(0)))
    stages = [m for m in ms if "train/ckpt_stage_seconds" in m]
    assert len(stages) == 50 and all(m["train/ckpt_bytes"] > 0 for m in stages)
    assert ckptdir.complete_steps(os.path.join(d, "ckpts")) == list(range(1, 51))
    finals = [m["train/ckpt_finalize_seconds"] for m in ms if "train/ckpt_finalize_seconds" in m]
    assert len(finals) == 50
    # .complete is stamped when every rank's copy is durable, not at the next save.
    # durable_ts (from the gather) is the last rank's durable copy; complete_ts is the marker.
    # Between the two, the training loop finished at most two steps.
    # Row timestamps are taken at the end of each step.
    step_ts = sorted(r["timestamp"] for r in raw_rows(os.path.join(d, "out", layout.metrics_name(0)))
                     if "train/loss" in r["metrics"])
    for s in range(1, 51):
        with open(os.path.join(ckptdir.step_path(os.path.join(d, "ckpts"), s), ckptdir.COMPLETE)) as f:
            info = json.load(f)
        assert info["durable_ts"] <= info["complete_ts"], (s, info)
        between = sum(info["durable_ts"] < t <= info["complete_ts"] for t in step_ts)
        assert between <= 2, (s, between, info["complete_ts"] - info["durable_ts"])


# The stage-dir race. In the issue, 1 relaunch in 7 died with FileExistsError in DCP's mkdir.
# It is forced here. Rank 1 finds the step's stage dir already created by rank 0. Before rank 1
# checks it again, rank 2 cleans the stage dir, and creates it again only later.
# When any rank may remove the node-shared directory, this fails every time.
# With one owner per node (local rank 0), ordered by a barrier on the checkpoint group,
# nobody removes what another may be using.
RACE = "mkdir:4:1:0.5,mkdir-exists:4:1:1.5,stage-clean:4:2:1.0,mkdir:4:2:3.0"


def test_stage_dir_has_one_owner_per_node(tmp_path):
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    r = run_trainer(4, args(ref, iters=8, save=2))
    assert r.returncode == 0, r.stdout[-3000:]
    r = run_trainer(4, args(run, iters=8, save=2), env={"RESTARTLAB_DELAY": RACE})
    assert "DELAY mkdir-exists at step=4 rank=1" in r.stdout, r.stdout[-3000:]
    assert r.returncode == 0 and "TRAINING DONE" in r.stdout, r.stdout[-4000:]
    assert ckptdir.complete_steps(os.path.join(run, "ckpts")) == [2, 4, 6, 8]
    assert final_crc(os.path.join(run, "out", layout.metrics_name(0))) == final_crc(os.path.join(ref, "out", layout.metrics_name(0)))
    # what a run creates it removes: no step left in the stage dir, and the dir itself is gone
    assert not os.path.exists(os.path.join(run, "stage")), os.listdir(os.path.join(run, "stage"))


def test_stage_dir_of_a_killed_attempt_is_removed_by_the_relaunch(tmp_path):
    """A relaunch cleans the stage steps a killed attempt left.

    At its end, it removes the stage dir the first attempt created. A stage dir the user made, with
    files of their own, stays."""
    run = str(tmp_path / "run")
    r = run_trainer(2, args(run, iters=8, save=2), env={"RESTARTLAB_FAULT": "copy:4:1"})
    assert r.returncode != 0 and os.path.isdir(os.path.join(run, "stage", ckptdir.step_dirname(4)))
    r = run_trainer(2, args(run, iters=8, save=2))
    assert r.returncode == 0 and "RESUMED from step=2" in r.stdout, r.stdout[-3000:]
    assert not os.path.exists(os.path.join(run, "stage"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    a = args(str(tmp_path / "run2"), iters=4, save=2)
    a[a.index("--ckpt-stage-dir") + 1] = str(mine)
    r = run_trainer(2, a)
    assert r.returncode == 0, r.stdout[-3000:]
    assert sorted(os.listdir(mine)) == ["notes.txt"]


def test_two_owners_sharing_one_stage_path(tmp_path):
    """Two node groups whose owners share one stage path (a stage dir on a shared file system,
    or several scheduler nodes on one host: the private Slurm's walltime test met it as
    FileExistsError in the owner's mkdir). Hydra's fork launcher makes two "hosts" here (local
    ranks 0,1 on each: owners are ranks 0 and 2). Forced: rank 2 cleans step 4's stage dir, then
    waits while rank 0 creates it, then creates it too; both owners create the stage root at
    start-up. Every save completes and the stage dir is gone at the end."""
    import subprocess
    import sys

    from restartlab import launchers
    from tests.helpers import MPIEXEC, cleanup_tag
    run = str(tmp_path / "run")
    env = dict(launchers.local_rendezvous_env(), RESTARTLAB_DELAY="stage-mkdir:4:2:1.0",
               RESTARTLAB_JOB_TAG=f"t-shared-{os.getpid()}")
    argv = [MPIEXEC, "-launcher", "fork", "-hosts", "node-a,node-b", "-ppn", "2", "-n", "4"]
    for k, v in env.items():
        argv += ["-genv", k, v]
    try:
        r = subprocess.run(argv + [sys.executable, "-m", "restartlab.trainer", *args(run, iters=8, save=2)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    finally:
        cleanup_tag(env["RESTARTLAB_JOB_TAG"])
    assert "DELAY stage-mkdir at step=4 rank=2" in r.stdout, r.stdout[-3000:]
    assert r.returncode == 0 and "TRAINING DONE" in r.stdout, r.stdout[-4000:]
    assert ckptdir.complete_steps(os.path.join(run, "ckpts")) == [2, 4, 6, 8]
    assert not os.path.exists(os.path.join(run, "stage")), os.listdir(os.path.join(run, "stage"))


@pytest.mark.parametrize("moving", [False, True], ids=["plain", "from_local-copies"])
def test_async_checkpoint_holds_the_state_at_the_save(tmp_path, moving):
    """The async checkpoint read back whole equals the live state at the save.

    This holds at the first save and at a second one that reuses the staged buffers. Here
    DTensor.from_local is made to copy, as it does for a GPU mesh. The test failed this way before
    the staged wrappers were pointed at the host buffers: every sharded tensor differed. It was
    found on an H200, where it gave NaN after a resume."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stage_content_check.py")
    env = dict(os.environ)
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    r = subprocess.run([sys.executable, script, str(tmp_path), "cpu"] + (["--moving-from-local"] if moving else []),
                       env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("STAGE_CONTENT ")]
    assert line, r.stdout[-3000:]
    res = json.loads(line[-1][len("STAGE_CONTENT "):])
    assert all(v["differ"] == 0 for v in res.values()), res
    assert r.returncode == 0


def test_default_stage_is_skipped_on_the_checkpoints_own_file_system(tmp_path):
    """Without --ckpt-stage-dir, the async save stages only when /tmp is another file system.

    It stages in a fresh private dir under /tmp when /tmp is on another file system than the
    checkpoint dir, e.g. node-local disk vs a parallel file system. On the same file system, the
    background save writes straight to the checkpoint dir. tests/test_shared_node.py tests the
    staged default itself, with the checkpoint dir on /dev/shm."""
    assert ckptdir.same_file_system(str(tmp_path / "a" / "b"), str(tmp_path))
    assert not ckptdir.same_file_system("/proc/self", str(tmp_path))
    d = str(tmp_path)
    job = f"t{os.getpid()}"
    a = ["--model", "tiny", "--train-iters", "4", "--save-interval", "2", "--async-ckpt",
         "--ckpt-dir", os.path.join(d, "c"), "--outdir", d]
    r = run_trainer(2, a, env={"PBS_JOBID": job})
    same = ckptdir.same_file_system(STAGE_PARENT, os.path.join(d, "c"))
    assert r.returncode == 0, r.stdout[-2000:]
    assert ("writing straight to" in r.stdout) == same, r.stdout[-2000:]
    assert ckptdir.newest_complete_step(os.path.join(d, "c"), checksums=True) == 4
    assert not glob.glob(os.path.join(STAGE_PARENT, f"restartlab-{job}-*"))
