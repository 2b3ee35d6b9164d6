"""The slow-writer failure ingredient (trainer/slow_writes.py): on the rank it names, a torch.save
file exists half-written for the time asked, then is byte for byte what torch.save writes; other
ranks, file objects and an unset variable are left alone. The end-to-end use is
tests/test_transformers_deepspeed.py (DeepSpeed's `latest` naming a torn tag)."""
import io
import threading
import time

import pytest

torch = pytest.importorskip("torch")
from restartlab.trainer import slow_writes  # noqa: E402
from restartlab.programs import torchzip  # noqa: E402
from restartlab.contracts import envvars  # noqa: E402


@pytest.fixture
def restore_save():
    whole = torch.save
    yield
    torch.save = whole


def test_the_named_rank_writes_half_holds_then_the_rest(tmp_path, restore_save, capfd):
    obj = {"step": 7, "w": torch.arange(50000, dtype=torch.float32)}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = tmp_path / "a" / "ckpt.pt"  # the same name: torch.save names the archive inside after the file
    torch.save(obj, plain)
    slow = tmp_path / "b" / "ckpt.pt"
    seen = []  # while torch.save serialises (into the temp dir), the path is there already, empty
    real = torch.save

    def spy(o, path, *a, **kw):
        seen.append((slow.exists(), slow.exists() and slow.stat().st_size))
        return real(o, path, *a, **kw)
    torch.save = spy
    assert not slow_writes.install_from_env({"RESTARTLAB_SLOW_WRITES": "1:0.8", "RANK": "0"})  # not this rank
    assert slow_writes.install_from_env({"RESTARTLAB_SLOW_WRITES": "1:0.8", "RANK": "1"})
    t = threading.Thread(target=torch.save, args=(obj, str(slow)))
    t0 = time.monotonic()
    t.start()
    while not slow.exists() or slow.stat().st_size == 0:
        time.sleep(0.01)
    assert not torchzip.whole(str(slow)) and 0 < slow.stat().st_size < plain.stat().st_size  # torn, for now
    t.join()
    assert seen == [(True, 0)]  # mutation: the path opened only when its first half is written -> (False, False)
    assert time.monotonic() - t0 >= 0.8
    assert slow.read_bytes() == plain.read_bytes() and torchzip.whole(str(slow))
    assert torch.load(slow)["step"] == 7
    buf = io.BytesIO()  # a file object is not slowed
    t0 = time.monotonic()
    torch.save(obj, buf)
    assert time.monotonic() - t0 < 0.5 and buf.getvalue()
    assert f"restartlab: slow write: {slow} held half-written" in capfd.readouterr().err


def test_held_before_the_file_is_begun(tmp_path, restore_save, capfd):
    """hold: before: a rank late to its save. For the time asked the path is not there at all (what
    the Trainer's other processes' rng_state_<r>.pth look like when rank 0 writes trainer_state.json
    first), then it is torch.save's own file."""
    obj = {"step": 3, "w": torch.arange(1000, dtype=torch.float32)}
    plain = tmp_path / "a" / "rng.pth"
    plain.parent.mkdir()
    torch.save(obj, plain)
    assert envvars.slow_writes_value(1, 0.8, "before") == "1:0.8:before"
    assert slow_writes.install_from_env({"RESTARTLAB_SLOW_WRITES": "1:0.8:before", "RANK": "1"})
    late = tmp_path / "b" / "rng.pth"
    late.parent.mkdir()
    t = threading.Thread(target=torch.save, args=(obj, str(late)))
    t0 = time.monotonic()
    t.start()
    looked = 0
    while time.monotonic() - t0 < 0.6:  # well inside the hold: nothing there
        assert not late.exists()
        looked += 1
        time.sleep(0.02)
    t.join()
    assert looked > 5 and time.monotonic() - t0 >= 0.8
    assert late.read_bytes() == plain.read_bytes()
    assert f"restartlab: slow write: {late} not begun for 0.8 s" in capfd.readouterr().err


def test_off_and_malformed(restore_save, capfd):
    assert slow_writes.parse("") is None and slow_writes.parse("1:0") is None
    assert slow_writes.parse("2:1.5") == (2, 1.5, "inside") and slow_writes.parse("2:1.5:before") == (2, 1.5, "before")
    assert envvars.slow_writes_value(2, 1.5) == "2:1.5" and envvars.slow_writes_value(2, 0, "before") == ""
    assert not slow_writes.install_from_env({"RANK": "1"})
    for bad in ("one:3", "1:3:after", "1:3:before:x", "3"):
        assert not slow_writes.install_from_env({"RESTARTLAB_SLOW_WRITES": bad, "RANK": "1"}), bad
        assert "slow writes off" in capfd.readouterr().err
    assert not hasattr(torch.save, "_restartlab_slow")
