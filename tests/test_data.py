"""Real token data (`--data`).

- The byte-level file writer.
- The sample order as a pure function of (seed, step, data-parallel rank).
- Exact resume after a SIGKILL on real text.
- Bad files."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.trainer import data
from restartlab.trainer import prepare_data
from tests.helpers import final_crc, losses, run_trainer, start_and_kill_at

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "restartlab", "scenario", "validate.py")]


@pytest.fixture
def token_file(tmp_path):
    out = str(tmp_path / "text.bin")
    r = subprocess.run([sys.executable, "-m", "restartlab.trainer.prepare_data", out, *TEXTS],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_prepare_data_writes_bytes_and_end_of_text(token_file):
    raw = [open(p, "rb").read() for p in TEXTS]
    tokens = np.fromfile(token_file, dtype=np.uint16)
    want = np.concatenate([np.concatenate([np.frombuffer(b, np.uint8).astype(np.uint16), [prepare_data.EOT]])
                           for b in raw])
    assert np.array_equal(tokens, want)
    meta = json.load(open(data.sidecar(token_file)))
    assert meta["dtype"] == "uint16" and meta["tokens"] == len(want) and meta["vocab"] == 257


def test_prepare_data_uint32_and_bad_input(tmp_path):
    out = str(tmp_path / "t32.bin")
    prepare_data.write(out, TEXTS[:1], "uint32")
    assert os.path.getsize(out) == 4 * (os.path.getsize(TEXTS[0]) + 1)
    assert data.check_file(out, "auto", 512, 32)[0] == "uint32"  # from the sidecar
    r = subprocess.run([sys.executable, "-m", "restartlab.trainer.prepare_data", out, str(tmp_path / "nope.txt")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "nope.txt: no such file" in r.stderr and "Traceback" not in r.stderr


def test_batches_are_a_pure_function_of_their_coordinates(token_file):
    src = data.TokenFile(token_file, "auto", 512, 16)
    raw = np.fromfile(token_file, dtype=np.uint16).astype(np.int64)
    x1, y1 = src.batch(7, 3, 1, 4, 16)
    x2, y2 = data.TokenFile(token_file, "auto", 512, 16).batch(7, 3, 1, 4, 16)  # a new process' view
    assert (x1 == x2).all() and (y1 == y2).all()
    assert not (src.batch(7, 3, 0, 4, 16)[0] == x1).all()  # another data-parallel rank
    assert not (src.batch(7, 4, 1, 4, 16)[0] == x1).all()  # another step
    assert (x1[:, 1:] == y1[:, :-1]).all()  # targets are the next tokens
    for row in x1.numpy():  # every row is a window of the file
        starts = np.flatnonzero(raw[: len(raw) - 16] == row[0])
        assert any((raw[s:s + 16] == row).all() for s in starts)


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_kill_and_resume_on_real_text_is_bit_exact(tmp_path, token_file):
    def args(d):
        return ["--model", "tiny", "--train-iters", "16", "--save-interval", "4", "--data", token_file,
                "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", d, "--log-interval", "1000"]
    ref, run = str(tmp_path / "ref"), str(tmp_path / "run")
    r = run_trainer(2, args(ref))
    assert r.returncode == 0 and f"data={token_file}" in r.stdout, r.stdout[-3000:]
    metrics = layout.Attempt(run).metrics(0)
    # a kill that comes 1 s after step 6 was seen (a loaded machine's): the run waits for it there
    receipt, rc, out = start_and_kill_at(2, args(run), metrics, 6, before_kill=1.0)
    assert rc != 0 and ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == 4, out[-2000:]
    r = run_trainer(2, args(run))
    assert r.returncode == 0 and "RESUMED from step=4" in r.stdout, r.stdout[-3000:]
    base = dict(losses(layout.Attempt(ref).metrics(0)))
    assert dict(losses(metrics)) == base
    assert final_crc(metrics) == final_crc(layout.Attempt(ref).metrics(0))
    synthetic = str(tmp_path / "syn")
    assert run_trainer(2, ["--model", "tiny", "--train-iters", "2", "--outdir", synthetic]).returncode == 0
    assert dict(losses(layout.Attempt(synthetic).metrics(0)))[1] != base[1]  # the data is used


@pytest.mark.parametrize("case", ["missing", "ragged", "short", "vocab", "token"])
def test_bad_token_files_stop_with_one_line(tmp_path, case):
    path = str(tmp_path / "bad.bin")
    if case == "ragged":
        open(path, "wb").write(b"\x01\x00\x02")
    elif case == "short":
        np.arange(10, dtype=np.uint16).tofile(path)
    elif case == "vocab":
        np.arange(1000, dtype=np.uint16).tofile(path)
        json.dump({"dtype": "uint16", "vocab": 50257}, open(data.sidecar(path), "w"))
    elif case == "token":  # no sidecar: found when a batch reads it
        np.full(1000, 60000, dtype=np.uint16).tofile(path)
    r = run_trainer(1, ["--model", "tiny", "--train-iters", "3", "--seq-len", "16", "--data", path,
                        "--outdir", str(tmp_path)])
    want = {"missing": "No such file", "ragged": "not a whole number of uint16 tokens",
            "short": "fewer than one sequence", "vocab": "vocabulary (50257",
            "token": "token id 60000"}[case]
    assert r.returncode == 2 and want in r.stdout and "Traceback" not in r.stdout, r.stdout[-2000:]
