"""CUDA only. These tests are skipped on machines without a GPU, and nothing else in the suite needs one.
They check exact resume of the trainer on cuda/nccl after a SIGKILL and inside a save, sync and
async. They also check the async staging overlap with its "safe to train" guarantee
(tests/gpu_stage_check.py). One GPU: world size 1, the trainer started without a launcher."""
import json
import os
import subprocess
import sys
import uuid

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.runtime import killer
from tests.helpers import final_crc, losses, rows, wait_for

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"),
              pytest.mark.timeout(900)]
HERE = os.path.dirname(os.path.abspath(__file__))
ITERS, SAVE = 24, 6


def _env(tag, extra=None):
    env = dict(os.environ, **{killer.TAG_VAR: tag}, **(extra or {}))
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    return env


def _cwd(args):
    """The run's own directory. `python -m` puts the cwd first on sys.path.
    A checkout's root holds a `restartlab/` without the trainer (it is installed from trainer/ or
    linked in)."""
    d = args[args.index("--outdir") + 1]
    os.makedirs(d, exist_ok=True)
    return d


def _args(d, mode, deterministic=True):
    return ["--model", "debug", "--device", "cuda"] + (["--deterministic"] if deterministic else []) + [ "--train-iters", str(ITERS), "--save-interval", str(SAVE),
            "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", d, "--log-interval", "1000"] + \
        (["--async-ckpt", "--ckpt-stage-dir", os.path.join(d, "stage")] if mode == "async" else [])


def _run(args, extra=None):
    tag = f"gpu-{uuid.uuid4().hex[:8]}"
    try:
        return subprocess.run([sys.executable, "-m", "restartlab.trainer"] + args, env=_env(tag, extra), cwd=_cwd(args),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    finally:
        killer.kill_ranks(tag)


def _kill_at(args, metrics, step, ready=lambda: True):
    tag = f"gpu-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen([sys.executable, "-m", "restartlab.trainer"] + args, env=_env(tag), cwd=_cwd(args),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (any(r.get("train/iter", 0) >= step for r in rows(metrics)) and ready())
                 or p.poll() is not None, 300, f"step {step}", 0.01)
        killer.kill_ranks(tag)
        p.communicate(timeout=60)
        return p.returncode
    finally:
        killer.kill_ranks(tag)


def _kill_resume(d, mode, deterministic=True):
    metrics = layout.Attempt(d).metrics(0)
    # Killed after step 9 once step 6's checkpoint is complete. On a GPU the steps are fast, so an
    # async save may still be in flight three steps later.
    ckpts = os.path.join(d, "ckpts")
    assert _kill_at(_args(d, mode, deterministic), metrics, 9,
                    ready=lambda: (ckptdir.newest_complete_step(ckpts) or 0) >= 6) != 0
    assert ckptdir.newest_complete_step(os.path.join(d, "ckpts")) >= 6
    r = _run(_args(d, mode, deterministic), {"RESTARTLAB_FAULT": "write:18"} if mode == "sync" else {})
    assert "RESUMED from step=" in r.stdout, r.stdout[-3000:]
    if r.returncode != 0:  # killed inside the save at 18: one more attempt
        r = _run(_args(d, mode, deterministic))
    assert r.returncode == 0, r.stdout[-3000:]
    return metrics


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cuda_kill_and_resume_is_bit_exact(tmp_path, mode):
    """With --deterministic the resumed run repeats the uninterrupted one bit for bit. Printed
    beside it (a measurement for README, not asserted): the same without --deterministic."""
    for det in (True, False):
        ref, run = str(tmp_path / f"ref{det}"), str(tmp_path / f"run{det}")
        r = _run(_args(ref, mode, det))
        assert r.returncode == 0 and "device=cuda" in r.stdout, r.stdout[-3000:]
        metrics = _kill_resume(run, mode, det)
        base = dict(losses(layout.Attempt(ref).metrics(0)))
        got = dict(losses(metrics))
        diff = max(abs(got[i] / base[i] - 1) for i in base)
        same_crc = final_crc(metrics) == final_crc(layout.Attempt(ref).metrics(0))
        print(f"cuda {mode} deterministic={det}: max relative loss difference after kill and resume "
              f"{diff:.3e}; params_crc {'equal' if same_crc else 'DIFFER'}")
        if det:
            assert got == base and same_crc


def test_async_staging_overlaps_and_never_reads_a_written_parameter(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "gpu_stage_check.py"), str(tmp_path)], cwd=str(tmp_path),
                       env=_env(f"gpu-{uuid.uuid4().hex[:8]}"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("GPU_STAGE ")]
    assert line, r.stdout[-3000:]
    res = json.loads(line[-1][len("GPU_STAGE "):])
    print("gpu staging:", json.dumps(res))
    assert res["guarded_exact"], res
    assert r.returncode == 0, r.stdout[-3000:]


def test_async_checkpoint_holds_the_state_at_the_save_on_cuda(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(HERE, "stage_content_check.py"), str(tmp_path), "cuda"],
                       env=_env(f"gpu-{uuid.uuid4().hex[:8]}"), cwd=str(tmp_path), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("STAGE_CONTENT ")]
    assert line, r.stdout[-3000:]
    print("cuda stage content:", line[-1])
    assert r.returncode == 0, r.stdout[-3000:]
