"""Storage faults below every writer (runtime/iofault).

The preload is built from its source. Each kind is made on real files written by real processes:
Python's open, torch.save's C++ stream, safetensors' Rust writer, os.rename and os.fsync. A fault
strikes only under the checkpoint directory, once per rank and strike. Where it cannot be made, it
is refused with the reason."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from restartlab.contracts import iofaults
from restartlab.runtime import iofault

WRITER = textwrap.dedent('''
    import json, os, sys, time
    what, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = {}
    t0 = time.time()
    try:
        if what == "open":
            with open(path, "wb") as f:
                for i in range(0, n, 4096):
                    f.write(bytes([i % 251]) * min(4096, n - i))
                    f.flush()
                f.flush()
                os.fsync(f.fileno())
            os.rename(path, path + ".done")
        elif what == "torch":
            import torch
            torch.save({"w": torch.arange(n // 8, dtype=torch.float64)}, path)
        elif what == "safetensors":
            import torch
            from safetensors.torch import save_file
            save_file({"w": torch.arange(n // 8, dtype=torch.float64)}, path)
    except OSError as e:
        out["errno"] = e.errno
    out["seconds"] = time.time() - t0
    out["end"] = time.time()
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return iofault.build(str(tmp_path_factory.mktemp("lib")))


@pytest.fixture
def site(tmp_path, lib):
    """A checkpoint directory, a file beside it (not ours), the control file and the log."""
    (tmp_path / "ckpts").mkdir()
    (tmp_path / "w.py").write_text(WRITER)
    ctl, log = tmp_path / "strike", tmp_path / "iofaults.jsonl"

    def run(what, name, n, rank=0, inside=True):
        env = dict(os.environ, RANK=str(rank), **iofault.rank_env(lib, str(tmp_path / "ckpts"), str(ctl), str(log)))
        path = str(tmp_path / ("ckpts" if inside else "") / name)
        r = subprocess.run([sys.executable, str(tmp_path / "w.py"), what, path, str(n)], env=env,
                           capture_output=True, text=True, timeout=120)
        return r, path, (json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None)

    def events():
        return iofaults.read(str(log), [])
    return run, str(ctl), events


def test_the_preload_is_built_once_and_nothing_armed_changes_nothing(site, lib, tmp_path):
    run, ctl, events = site
    assert os.path.basename(lib).startswith("libiofault-") and iofault.build(os.path.dirname(lib)) == lib
    r, path, out = run("open", "a.bin", 100_000)
    assert r.returncode == 0, r.stderr
    data = open(path + ".done", "rb").read()
    assert len(data) == 100_000 and data[:1] == bytes([0]) and data[4096:4097] == bytes([4096 % 251])
    assert events() == [] and not os.path.exists(ctl)


def test_a_stall_blocks_that_ranks_writes_once_and_only_under_the_checkpoint_dir(site):
    run, ctl, events = site
    iofault.arm(ctl, 7, "stall_writes", rank=1, seconds=2.0)
    r, _, out = run("open", "other.bin", 10_000, rank=1, inside=False)   # not ours: no stall
    assert out["seconds"] < 1.0 and events() == []
    r, _, out = run("open", "a.bin", 10_000, rank=0)                    # another rank: no stall
    assert out["seconds"] < 1.0 and events() == []
    r, _, out = run("open", "b.bin", 10_000, rank=1)
    assert out["seconds"] >= 2.0 and "errno" not in out, (out, r.stderr)
    ev = events()
    assert [(e.event, e.rank, e.kind) for e in ev] == [("begin", 1, "stall"), ("end", 1, "stall")]
    assert 2.0 <= ev[1].at - ev[0].at < 3.0 and ev[0].file.endswith("ckpts/b.bin")
    r, _, out = run("open", "c.bin", 10_000, rank=1)                    # the rank's next process: taken already
    assert out["seconds"] < 1.0 and len(events()) == 2
    assert os.path.exists(f"{ctl}.7.r1")


def test_write_errors_fail_after_their_bytes_and_fsync_and_rename_too(site):
    run, ctl, events = site
    iofault.arm(ctl, 8, "write_errors", rank=0, errno_name="EIO", after=10_000, duration=0)
    r, path, out = run("open", "a.bin", 50_000)
    assert out["errno"] == 5, (out, r.stderr)
    assert os.path.getsize(path) == 10_000 and not os.path.exists(path + ".done")
    ev = events()
    assert [e.event for e in ev] == ["begin", "error"] and ev[1].bytes == 10_000 and ev[1].errno == 5
    # for good: the rank's next process fails from its first byte, ENOSPC as well
    iofault.arm(ctl, 9, "write_errors", rank=0, errno_name="ENOSPC", after=0, duration=0)
    r, path, out = run("open", "b.bin", 5000)
    assert out["errno"] == 28 and os.path.getsize(path) == 0
    r, path, out = run("open", "c.bin", 5000)
    assert out["errno"] == 28, "an error strike for good holds in the rank's later processes"


def test_a_window_closes_and_a_rename_into_the_dir_fails_inside_it(site, tmp_path):
    run, ctl, events = site
    iofault.arm(ctl, 10, "write_errors", rank=0, errno_name="EIO", after=0, duration=1.5)
    r, path, out = run("open", "a.bin", 100)
    assert out["errno"] == 5
    time.sleep(1.6)
    r, path, out = run("open", "b.bin", 100)
    assert "errno" not in out and os.path.getsize(path + ".done") == 100, out


def test_torn_cuts_the_file_at_its_byte_and_kills_the_rank_there(site):
    run, ctl, events = site
    iofault.arm(ctl, 11, "torn", rank=0, after=12_345)
    r, path, out = run("open", "a.bin", 50_000)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert os.path.getsize(path) == 12_345 and not os.path.exists(path + ".done")
    ev = events()
    assert [e.event for e in ev] == ["begin", "cut"] and ev[1].bytes == 12_345
    r, path, out = run("open", "b.bin", 50_000)                         # once: the next process writes whole
    assert r.returncode == 0 and os.path.getsize(path + ".done") == 50_000


@pytest.mark.parametrize("writer", ["torch", "safetensors"])
def test_torch_save_and_safetensors_are_reached(site, writer):
    """torch.save to a path writes through libstdc++'s stream (fopen, then write), safetensors
    through Rust's File: both are ours, neither is Python's open."""
    run, ctl, events = site
    iofault.arm(ctl, 12, "torn", rank=0, after=3000)
    r, path, out = run(writer, "m.bin", 80_000)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    cut = [e for e in events() if e.event == "cut"]
    assert len(cut) == 1 and cut[0].bytes == 3000
    data = open(cut[0].file, "rb").read()
    if writer == "torch":  # torch.save writes the path itself: it is the torn file, 3000 bytes long
        assert cut[0].file == path and len(data) == 3000 == cut[0].size
    else:
        # safetensors 0.8.0 writes a temporary file beside the path and renames it when whole, so the
        # path never appears torn. It sizes the file first. So the torn file has its full length, with
        # zeros from the cut on.
        assert os.path.basename(cut[0].file).startswith(".tmp") and not os.path.exists(path)
        assert len(data) == 80_072 == cut[0].size and data[3000:] == bytes(len(data) - 3000) and data[:8] != bytes(8)
    iofault.arm(ctl, 13, "slow_storage", rank=0, rate=100_000.0, duration=30)
    r, path, out = run(writer, "n.bin", 80_000)
    assert r.returncode == 0 and out["seconds"] >= 0.6, (out, r.stderr[-2000:])  # ~80 kB at 100 kB/s


def test_the_kinds_and_their_settings_are_refused_where_they_cannot_be_made(tmp_path):
    def check(*sets, env=None):
        r = subprocess.run([sys.executable, "-m", "restartlab.cli", "validate", "scenarios/local.yaml",
                            *[x for s in sets for x in ("--set", s)]], capture_output=True, text=True,
                           env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return r.returncode, r.stdout + r.stderr
    at = "failures.schedule.at_steps=[{step: 10, kind: torn}]"
    rc, out = check(at)
    assert rc == 0, out
    rc, out = check(at, "relaunch.warm=true")
    assert rc != 0 and "warm phase" in out and "Traceback" not in out, out
    rc, out = check(at, "failures.rank=9")
    assert rc != 0 and "failures.rank" in out and "out of range for 2 rank(s)" in out, out
    rc, out = check("failures.schedule.at_steps=[{step: 10, kind: slow_storage}]", "failures.rate=fast")
    assert rc != 0 and "failures.rate" in out and "is not a rate" in out, out
    rc, out = check("failures.schedule.at_steps=[{step: 10, kind: stall_writes}]", "failures.duration=0")
    assert rc != 0 and "failures.duration" in out, out
    rc, out = check("failures.schedule.at_steps=null", "failures.schedule.fuzz=3", "failures.kind=torn")
    assert rc == 0, out  # a fuzz draws torn: it ends the attempt it strikes
    rc, out = check("failures.schedule.at_steps=null", "failures.schedule.fuzz=3", "failures.kind=stall_writes")
    assert rc != 0 and "may not end its attempt" in out and "failures.kind" in out, out
    rc, out = check("failures.schedule.at_steps=null", "failures.schedule.fuzz=3", "failures.fuzz_kinds=kill,hang")
    assert rc != 0 and "failures.fuzz_kinds" in out and "hang" in out, out
    rc, out = check(at, env=dict(os.environ, PATH="/nonexistent"))
    assert rc != 0 and "C compiler" in out and "none found" in out, out


def test_two_processes_of_one_rank_race_for_a_strike_one_takes_it_both_meet_it(site, tmp_path, lib):
    """Two processes of rank 1 reach the strike together: exactly one takes it, both meet it.

    The two might be a program's writer and its helper, or a relaunch beside a straggler. Each is held
    in the take between making its marker and linking it (the fault point
    RESTARTLAB_IOFAULT_TAKE_DELAY). Exactly one takes the strike. The other reads the whole time of
    the take, never an empty marker, and its writes block until the same end."""
    run, ctl, events = site
    iofault.arm(ctl, 14, "stall_writes", rank=1, seconds=2.0)
    env = dict(os.environ, RANK="1", RESTARTLAB_IOFAULT_TAKE_DELAY="0.5",
               **iofault.rank_env(lib, str(tmp_path / "ckpts"), ctl, str(tmp_path / "iofaults.jsonl")))
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "w.py"), "open", str(tmp_path / "ckpts" / f"{n}.bin"),
                               "1000"], env=env, stdout=subprocess.PIPE, text=True) for n in ("a", "b")]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    took = time.time() - t0
    begins = [e for e in events() if e.event == "begin"]
    assert len(begins) == 1 and begins[0].rank == 1, events()
    end = begins[0].at + 2.0
    assert all(o["end"] >= end - 0.01 for o in outs), (outs, end)  # both met the stall, to its end
    assert all(o["end"] <= end + 0.3 for o in outs), (outs, end)  # and neither waited past it (its own take)
    assert took < (end - t0) + 1.5, (took, end - t0)
    assert float(open(f"{ctl}.14.r1").read()) == pytest.approx(begins[0].at, abs=1e-3)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
