"""The checkpoint's bytes and their checksums, after the save got cheaper (#15).

- The fast crc32 (ISA-L) is zlib's CRC-32, also for running and segment crcs.
- torch.save's own zip CRC is off while restartlab writes, and only then. Our crc32 covers the same
  bytes.
- Items are written so that they load with torch.load.
- manifest.json's crc of each item is zlib's crc of its bytes on disk."""
import io
import json
import os
import random
import zipfile
import zlib

import pytest

from restartlab.contracts import ckptdir
from tests.helpers import run_trainer


def test_fast_crc32_is_zlibs_crc32_running_and_by_segment():
    rnd = random.Random(7)
    data = bytes(rnd.getrandbits(8) for _ in range(300_000))
    assert ckptdir.crc32(data) == zlib.crc32(data)
    running, marks = 0, {0: 0}
    cuts = sorted(rnd.sample(range(1, len(data)), 40)) + [len(data)]
    start = 0
    for end in cuts:  # as HashingStream sees the writes
        running = ckptdir.crc32(memoryview(data)[start:end], running)
        marks[end] = running
        start = end
    assert running == zlib.crc32(data)
    a, b = cuts[5], cuts[30]
    assert ckptdir.crc32_segment(marks[a], marks[b], b - a) == zlib.crc32(data[a:b])


def _zip_crcs(blob):
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        return {i.filename.split("/", 1)[-1]: i.CRC for i in z.infolist()}


def test_torch_zip_crc_is_off_while_we_write_and_only_then():
    torch = pytest.importorskip("torch")
    import torch.utils.serialization.config as cfg

    from restartlab.trainer.ckpt_io import _torch_zip_crc_off
    t = torch.arange(1000, dtype=torch.float32)

    def saved():
        f = io.BytesIO()
        torch.save(t, f)
        return f.getvalue()
    assert _zip_crcs(saved())["data/0"] != 0
    with _torch_zip_crc_off():
        assert cfg.save.compute_crc32 is False
        blob = saved()
    assert cfg.save.compute_crc32 is True  # restored: nobody else's torch.save is changed
    assert _zip_crcs(blob)["data/0"] == 0
    assert torch.equal(torch.load(io.BytesIO(blob), weights_only=True), t)


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_saved_items_carry_no_zip_crc_and_the_manifest_crc_is_zlibs(tmp_path):
    torch = pytest.importorskip("torch")
    d = str(tmp_path)
    r = run_trainer(2, ["--model", "tiny", "--train-iters", "2", "--save-interval", "2", "--ckpt-dir",
                        os.path.join(d, "ck"), "--outdir", os.path.join(d, "out")])
    assert r.returncode == 0, r.stdout[-3000:]
    path = ckptdir.step_path(os.path.join(d, "ck"), 2)
    with open(os.path.join(path, ckptdir.MANIFEST)) as f:
        files = json.load(f)["files"]
    tensors = 0
    for name, info in files.items():
        with open(os.path.join(path, name), "rb") as f:
            whole = f.read()
        assert zlib.crc32(whole) == info["crc32"], name
        for off, n, crc, *_record in info.get("items", ()):
            item = whole[off:off + n]
            assert zlib.crc32(item) == crc, (name, off)
            if item[:2] == b"PK":  # torch.save's zip: tensors, and DCP's other values
                assert set(_zip_crcs(item).values()) == {0}, (name, off)
                tensors += isinstance(torch.load(io.BytesIO(item), weights_only=True), torch.Tensor)
    assert tensors > 10


def test_without_the_isal_wheel_zlibs_crc32_is_used():
    """A site whose Python cannot install `isal`: restartlab still imports and checksums alike."""
    import subprocess
    import sys
    code = ("import sys, zlib; sys.modules['isal'] = None; sys.modules['isal.isal_zlib'] = None\n"
            "from restartlab.contracts import ckptdir\n"
            "assert ckptdir.crc32 is zlib.crc32\n"
            "print(ckptdir.crc32(b'restartlab'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == zlib.crc32(b"restartlab") == ckptdir.crc32(b"restartlab")
