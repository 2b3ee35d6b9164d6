"""A damaged checkpoint is never loaded.

- Every item's crc32 is checked as DCP reads it. The crc32 comes from manifest.json, computed as
  the bytes were written.
- Any rank's failure to load makes all ranks fall back to the previous complete checkpoint.
- When complete checkpoints exist and none loads, the trainer stops with exit 3 and names each.
  It does not start from step 0 over them. The relaunch loop does not relaunch it."""
import json
import os
import pathlib
import shutil
import stat
import subprocess

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.job import render
from restartlab import scenario
from tests.helpers import final_crc, losses, run_trainer

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]
HERE = os.path.dirname(os.path.abspath(__file__))


def args(d, iters=12, extra=()):
    return ["--model", "tiny", "--train-iters", str(iters), "--save-interval", "4", "--ckpt-dir",
            os.path.join(d, "ckpts"), "--outdir", os.path.join(d, "out"), "--log-interval", "1000", *extra]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ref"))
    r = run_trainer(2, args(d))
    assert r.returncode == 0, r.stdout[-3000:]
    return d


@pytest.fixture(scope="module")
def raw_reference(tmp_path_factory):
    """The same run with --ckpt-format raw: the same losses, checkpoints of the raw layout."""
    d = str(tmp_path_factory.mktemp("raw"))
    r = run_trainer(2, args(d, extra=["--ckpt-format", "raw"]))
    assert r.returncode == 0, r.stdout[-3000:]
    return d


def _copy_upto(ref, d, step):
    """The reference's checkpoints up to `step` (so `step` is the newest complete one)."""
    os.makedirs(os.path.join(d, "ckpts"))
    for s in ckptdir.complete_steps(os.path.join(ref, "ckpts")):
        if s <= step:
            shutil.copytree(ckptdir.step_path(os.path.join(ref, "ckpts"), s), ckptdir.step_path(os.path.join(d, "ckpts"), s))


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def _items(step_dir, name):
    with open(os.path.join(step_dir, ckptdir.MANIFEST)) as f:
        return json.load(f)["files"][name]["items"]


def _damage_tensor_data(step_dir):
    off, n, *_ = max(_items(step_dir, "__1_0.distcp"), key=lambda x: x[1])
    _flip(os.path.join(step_dir, "__1_0.distcp"), off + n // 2)   # same size, inside the data
    return "__1_0.distcp: checksum mismatch"


def _damage_zip_header(step_dir):
    off, *_ = min(_items(step_dir, "__0_0.distcp"))
    _flip(os.path.join(step_dir, "__0_0.distcp"), off + 6)        # a torch.save zip local header
    return "__0_0.distcp: checksum mismatch"


def _damage_metadata(step_dir):
    _flip(os.path.join(step_dir, ".metadata"), os.path.getsize(os.path.join(step_dir, ".metadata")) // 2)
    return ".metadata: checksum mismatch"


@pytest.mark.parametrize("fmt,damage", [("dcp", _damage_tensor_data), ("dcp", _damage_zip_header),
                                        ("dcp", _damage_metadata), ("raw", _damage_tensor_data),
                                        ("raw", _damage_metadata)],
                         ids=["tensor-data", "zip-header", "metadata", "raw-tensor-data", "raw-metadata"])
def test_damaged_checkpoint_is_skipped_and_the_run_stays_exact(tmp_path, request, reference, fmt, damage):
    """raw-tensor-data: a raw tensor item is read straight into the model's own tensor.

    So the damaged bytes are in the model when the checksum fails. The fallback load overwrites them."""
    d = str(tmp_path)
    _copy_upto(reference if fmt == "dcp" else request.getfixturevalue("raw_reference"), d, 8)
    why = damage(ckptdir.step_path(os.path.join(d, "ckpts"), 8))
    r = run_trainer(2, args(d))
    assert r.returncode == 0, r.stdout[-3000:]
    assert "skipping step-00000008" in r.stdout and why in r.stdout, r.stdout[-3000:]
    assert "RESUMED from step=4" in r.stdout, r.stdout[-3000:]
    ref = dict(losses(os.path.join(reference, "out", layout.metrics_name(0))))
    got = losses(os.path.join(d, "out", layout.metrics_name(0)))
    assert [it for it, _ in got] == list(range(5, 13))
    assert all(loss == ref[it] for it, loss in got)
    assert final_crc(os.path.join(d, "out", layout.metrics_name(0))) == final_crc(os.path.join(reference, "out", layout.metrics_name(0)))


def test_no_loadable_checkpoint_stops_with_exit_3_unless_allowed(tmp_path, reference):
    d = str(tmp_path)
    _copy_upto(reference, d, 12)
    ck = os.path.join(d, "ckpts")
    for s in ckptdir.complete_steps(ck):
        for name in os.listdir(ckptdir.step_path(ck, s)):
            if name.endswith(".distcp"):
                os.truncate(os.path.join(ckptdir.step_path(ck, s), name), 100)
    before = {s: os.path.getmtime(ckptdir.step_path(ck, s)) for s in ckptdir.complete_steps(ck)}
    r = run_trainer(2, args(d))
    assert r.returncode == 3, r.stdout[-3000:]
    assert "3 complete checkpoint(s)" in r.stdout and "none loads" in r.stdout
    for s in (4, 8, 12):
        assert f"step-{s:08d}: __0_0.distcp: 100 bytes on disk" in r.stdout
    assert not os.path.exists(os.path.join(d, "out", layout.metrics_name(0)))  # no step was taken
    assert {s: os.path.getmtime(ckptdir.step_path(ck, s)) for s in ckptdir.complete_steps(ck)} == before
    r = run_trainer(2, args(d, extra=["--allow-fresh-start"]))
    assert r.returncode == 0 and "starting from step 0 (--allow-fresh-start)" in r.stdout, r.stdout[-3000:]
    assert final_crc(os.path.join(d, "out", layout.metrics_name(0))) == final_crc(os.path.join(reference, "out", layout.metrics_name(0)))


def test_relaunch_loop_does_not_relaunch_exit_3(tmp_path):
    """The job script stops a phase at once when the trainer says no checkpoint loads (exit 3).

    A launcher stub stands in for mpiexec and exits 3."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "mpiexec"
    stub.write_text("#!/bin/bash\necho 'restartlab.trainer: error: none loads' >&2\nexit 3\n")
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    sc = scenario.load(os.path.join(os.path.dirname(HERE), "scenarios", "local.yaml"),
                       ["phases=[{name: sync, checkpoint: sync, failures: false}]", "collection.report=false"])
    expt = tmp_path / "expt"
    text, _ = render.render(sc, "local", str(expt))
    pathlib.Path(layout.Expt(tmp_path).job_script).write_text(text)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(layout.Expt(tmp_path).job_script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "not relaunching" in r.stderr, r.stdout + r.stderr
    assert os.listdir(layout.Expt(expt).phase("sync").attempts_dir) == ["1"]
