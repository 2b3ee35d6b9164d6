"""`restartlab diff A B` (trainer/ckpt_diff.py) compares two checkpoints key by key.

A checkpoint is a torch.save file, a DCP directory, or a framework's folder of files. It says what
differs and by how much, and what one side lacks. The exit is 0 when identical, 1 when different,
and 2 when unreadable (a clear line, no traceback)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _diff(*args):
    return subprocess.run([sys.executable, "-m", "restartlab.cli", "diff", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def _state(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(4, 3, generator=g), "b": torch.zeros(3)},
            "optimizer": {"state": {0: {"step": torch.tensor(5.0), "exp_avg": torch.randn(4, 3, generator=g)}},
                          "param_groups": [{"lr": 0.1, "params": [0]}]},
            "step": 5, "rng": torch.get_rng_state()}


def test_files_identical_then_one_tensor_and_one_scalar_off_then_a_key_missing(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(_state(), a)
    torch.save(_state(), b)
    r = _diff(a, b)
    assert r.returncode == 0 and "0 differ, 0 only in the first, 0 only in the second" in r.stdout, r
    s = _state()
    s["model"]["w"][1, 2] += 0.5
    s["optimizer"]["param_groups"][0]["lr"] = 0.2
    del s["step"]
    torch.save(s, b)
    r = _diff(a, b, "--json", tmp_path / "d.json")
    assert r.returncode == 1, r
    assert "differs   model.w: max |a-b| 0.5 at 1 of 12 elements" in r.stdout
    assert "differs   optimizer.param_groups.0.lr: 0.1 vs 0.2" in r.stdout
    assert "only in the first: step" in r.stdout
    assert "optimizer.state.0.exp_avg" not in r.stdout  # equal keys are counted, not listed


def test_a_dcp_directory_and_a_frameworks_folder(tmp_path):
    import torch.distributed.checkpoint as dcp
    for name in ("x", "y"):
        dcp.save({"model": _state()["model"]}, checkpoint_id=str(tmp_path / name))  # one process, no group
    assert _diff(tmp_path / "x", tmp_path / "y").returncode == 0
    s = {"model": _state()["model"]}
    s["model"]["b"] = torch.ones(3)
    dcp.save(s, checkpoint_id=str(tmp_path / "z"))
    r = _diff(tmp_path / "x", tmp_path / "z")
    assert r.returncode == 1 and "model.b: max |a-b| 1 at 3 of 3 elements" in r.stdout, r
    for name, lr in (("f1", 0.1), ("f2", 0.1)):  # Accelerate's checkpoint_<K>/: files matched by name
        d = tmp_path / name
        d.mkdir()
        torch.save({"w": torch.ones(2)}, d / "pytorch_model.bin")
        torch.save({"param_groups": [{"lr": lr}]}, d / "optimizer.bin")
    torch.save({"extra": 1}, tmp_path / "f2" / "scheduler.bin")
    r = _diff(tmp_path / "f1", tmp_path / "f2")
    assert r.returncode == 1 and "only in the second: scheduler.bin.extra" in r.stdout and "2 key(s) equal" in r.stdout


def test_what_cannot_be_read_is_said_with_its_path(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "torn.pt").write_bytes(b"PK\x03\x04 not a whole zip")
    for a, want in ((tmp_path / "nothing", "no such file or directory"),
                    (tmp_path / "empty", "no .metadata (not a DCP checkpoint)"),
                    (tmp_path / "torn.pt", "torn.pt: ")):
        r = _diff(a, a)
        assert r.returncode == 2 and want in r.stderr and "Traceback" not in r.stderr, r
    r = _diff(tmp_path / "x")  # a usage error, before torch starts
    assert r.returncode == 2 and "usage: restartlab diff" in r.stderr
