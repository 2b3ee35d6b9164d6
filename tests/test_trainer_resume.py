"""Bit-exact auto-resume of the bundled trainer with real mpiexec ranks on CPU/gloo.

Real SIGKILLs land between saves, found by env tag. A kill also lands inside a save, at a fault
point in the shard write."""
import json
import os

import pytest

from restartlab.analysis import state_compare
from restartlab.contracts import ckptdir, layout
from restartlab.contracts import state_record as SR
from restartlab.contracts.envvars import STATE_DIR_VAR, STATE_EVERY_VAR
from tests.helpers import final_crc, losses, rows, run_trainer, shared_trainer_run, start_and_kill_at

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]

ITERS, SAVE = 24, 6


def args_for(d, tp=1, extra=()):
    return ["--model", "tiny", "--train-iters", str(ITERS), "--save-interval", str(SAVE),
            "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", os.path.join(d, "out"),
            "--tp", str(tp), "--log-interval", "1000", *extra]


LAYOUTS = {"fsdp4": (1, ()), "fsdp2xtp2": (2, ()), "hsdp2x2": (1, ("--dp-replicate", "2")),
           "hsdp2x1xtp2": (2, ("--dp-replicate", "2")), "fsdp2xtp2-raw": (2, ("--ckpt-format", "raw"))}


def reference(tmp_path_factory, mesh):
    """The uninterrupted 4-rank run of a layout, run once per session (tests/helpers.shared_run).

    The kill test of that layout and the layout-change tests read the same one."""
    tp, extra = LAYOUTS[mesh]
    return shared_trainer_run(tmp_path_factory, f"trainer-resume-{mesh}", 4, lambda d: args_for(d, tp, extra))


def check_same_as_reference(ref_dir, run_dir):
    ref = dict(losses(os.path.join(ref_dir, "out", layout.metrics_name(0))))
    got = losses(os.path.join(run_dir, "out", layout.metrics_name(0)))
    assert len(ref) == ITERS
    assert {it for it, _ in got} == set(ref)
    for it, loss in got:  # every row, recomputed steps included
        assert loss == ref[it], f"step {it}: {loss!r} != {ref[it]!r}"
    assert final_crc(os.path.join(run_dir, "out", layout.metrics_name(0))) == \
        final_crc(os.path.join(ref_dir, "out", layout.metrics_name(0)))


@pytest.mark.parametrize("mesh", list(LAYOUTS))
def test_kill_between_saves_and_inside_save_resumes_bit_exact(tmp_path, tmp_path_factory, mesh):
    tp, extra = LAYOUTS[mesh]
    ref, run = reference(tmp_path_factory, mesh), str(tmp_path / "run")

    metrics = os.path.join(run, "out", layout.metrics_name(0))
    # attempt 1: SIGKILL all ranks between the saves at 6 and 12
    receipt, rc, out = start_and_kill_at(4, args_for(run, tp, extra), metrics, 9)
    assert rc != 0 and len(receipt.pids) >= 4, (receipt, out[-2000:])
    assert ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == 6
    # attempt 2: SIGKILL inside the save at step 12 (first shard bytes written, no .complete)
    r = run_trainer(4, args_for(run, tp, extra), env={"RESTARTLAB_FAULT": "write:12"})
    assert r.returncode != 0 and "RESUMED from step=6" in r.stdout, r.stdout[-3000:]
    assert os.path.isdir(ckptdir.step_path(os.path.join(run, "ckpts"), 12))
    assert not ckptdir.is_complete(os.path.join(run, "ckpts"), 12)
    # attempt 3: resumes from 6 again (the torn step-12 is never loaded) and finishes
    r = run_trainer(4, args_for(run, tp, extra))
    assert r.returncode == 0 and "RESUMED from step=6" in r.stdout, r.stdout[-3000:]
    check_same_as_reference(ref, run)

    # restart_seconds: only on the first row of each resumed attempt, measured from launch
    rs = [m for m in rows(metrics) if "train/restart_seconds" in m]
    assert [m["train/iter"] for m in rs] == [7, 7]
    assert all(m["train/restart_seconds"] >= m["startup/import_s"] > 0 for m in rs)


def test_truncated_shard_without_complete_is_skipped(tmp_path):
    d = str(tmp_path)
    a = ["--model", "tiny", "--train-iters", "10", "--save-interval", "5",
         "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", os.path.join(d, "out")]
    r = run_trainer(2, a)
    assert r.returncode == 0, r.stdout[-2000:]
    s10 = ckptdir.step_path(os.path.join(d, "ckpts"), 10)
    os.unlink(os.path.join(s10, ".complete"))
    shard = os.path.join(s10, "__0_0.distcp")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    r = run_trainer(2, a + ["--train-iters", "12"])
    assert r.returncode == 0 and "RESUMED from step=5" in r.stdout, r.stdout[-2000:]


def test_complete_marker_with_mismatching_manifest_is_skipped(tmp_path):
    d = str(tmp_path)
    a = ["--model", "tiny", "--train-iters", "10", "--save-interval", "5",
         "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", os.path.join(d, "out")]
    assert run_trainer(2, a).returncode == 0
    shard = os.path.join(ckptdir.step_path(os.path.join(d, "ckpts"), 10), "__1_0.distcp")
    with open(shard, "r+b") as f:
        f.truncate(100)
    r = run_trainer(2, a + ["--train-iters", "11"])
    assert r.returncode == 0 and "RESUMED from step=5" in r.stdout, r.stdout[-2000:]
    assert "skipping step-00000010" in r.stdout


def test_metric_names(tmp_path):
    d = str(tmp_path)
    r = run_trainer(2, ["--model", "tiny", "--train-iters", "4", "--save-interval", "2",
                        "--ckpt-dir", os.path.join(d, "c"), "--outdir", d])
    assert r.returncode == 0, r.stdout[-2000:]
    ms = rows(layout.Attempt(d).metrics(0))
    first = ms[0]
    for k in ("train/iter", "train/loss", "train/dt", "startup/import_s", "startup/dist_init_s",
              "startup/build_s", "startup/load_s", "startup/first_step_s"):
        assert k in first, k
    assert "train/restart_seconds" not in first  # fresh start, not a resume
    saves = [m for m in ms if "train/ckpt_save_seconds" in m]
    assert [m["train/iter"] for m in saves] == [2, 4]
    assert all(m["train/ckpt_bytes"] > 0 for m in saves)


@pytest.mark.multirank
def test_kill_right_after_complete_keeps_the_steps_record(tmp_path):
    """Killed just after .complete of step 8 (before the save returned): the resume starts at 8,
    so step 8 is never computed again; its row must already be on record (it is written before
    the save). Found by the kill-anywhere fuzzer's bookkeeping."""
    d = str(tmp_path)
    a = ["--model", "tiny", "--train-iters", "12", "--save-interval", "4", "--ckpt-dir", os.path.join(d, "c"),
         "--outdir", d, "--log-interval", "1000"]
    r = run_trainer(2, a, env={"RESTARTLAB_FAULT": "complete:8"})
    assert r.returncode != 0 and "FAULT complete at step=8" in r.stdout, r.stdout[-2000:]
    r = run_trainer(2, a)
    assert r.returncode == 0 and "RESUMED from step=8" in r.stdout, r.stdout[-2000:]
    assert [it for it, _ in losses(layout.Attempt(d).metrics(0))] == list(range(1, 13))


def test_shrink_resume_keeps_the_global_batch(tmp_path, tmp_path_factory):
    """4 ranks killed after step 22; the resume runs on 2 ranks with --dp-global 4.

    Each rank accumulates the micro-batches of a missing rank. So every loss matches the
    uninterrupted 4-rank run within 1e-6, relative. The measured difference is about 8e-8, because
    the reduction order changes. The same resume without --dp-global trains on half the samples,
    and its losses differ by far more.

    #63.3: the state verdict across the change compares 4 ranks' records against 2's, whole.
    With --dp-global, every piece it can compare is equal, and the RNG streams are said not
    comparable. Without it, the batch is named: the data position did not follow the change."""
    ref, run, half = reference(tmp_path_factory, "fsdp4"), str(tmp_path / "run"), str(tmp_path / "half")
    base = dict(losses(os.path.join(ref, "out", layout.metrics_name(0))))
    verdicts = {}
    for d, extra in ((run, ["--dp-global", "4"]), (half, [])):
        metrics = os.path.join(d, "out", layout.metrics_name(0))
        probe = {STATE_EVERY_VAR: "1"}
        for k in (1, 2):
            os.makedirs(f"{d}/a{k}")
        receipt, rc, out = start_and_kill_at(4, args_for(d), metrics, 9, env={**probe, STATE_DIR_VAR: f"{d}/a1"})
        assert rc != 0 and ckptdir.newest_complete_step(os.path.join(d, "ckpts")) == 6, out[-2000:]
        r = run_trainer(2, args_for(d, extra=extra), env={**probe, STATE_DIR_VAR: f"{d}/a2"})
        assert r.returncode == 0 and "RESUMED from step=6" in r.stdout, r.stdout[-3000:]
        recs = [{rank: SR.read(f) for rank, f in layout.Attempt(f"{d}/a{k}").state_files().items()} for k in (1, 2)]
        assert sorted(recs[0]) == [0, 1, 2, 3] and sorted(recs[1]) == [0, 1], recs
        verdicts[d] = state_compare.compare(2, recs[1], 6, recs[0], against="attempt 1's")
    rs = verdicts[run]
    assert rs.across == (4, 2) and rs.forgot == [] and set(rs.not_observed) == {"rng_device", "scale"}, rs.text()
    assert set(rs.equal) == {"params", "opt_state", "batch", "opt_step", "lr"}, rs.text()
    assert set(rs.incomparable) == {"rng_torch", "rng_python", "rng_numpy"}, rs.text()
    assert rs.text().startswith("state at the resume (step 7) against attempt 1's, across a change from 4 ranks to 2 "
                                "(compared whole: "), rs.text()
    assert "not comparable across the change: Python's RNG, NumPy's RNG, torch's CPU RNG (one stream per rank: " \
        "each rank's is its own)" in rs.text(), rs.text()
    rs = verdicts[half]
    assert rs.forgot == ["batch"] and rs.differ_step == 7 and rs.differ["batch"][0][1] * 2 == rs.differ["batch"][1][1], rs
    assert "the batch differs: the samples of all ranks at this step (8) are not attempt 1's (16): the data position " \
        "did not follow the change from 4 ranks to 2" in rs.text(), rs.text()
    after = [(it, loss) for it, loss in losses(os.path.join(run, "out", layout.metrics_name(0))) if it > 6]
    assert len(after) >= ITERS - 6
    assert max(abs(loss / base[it] - 1) for it, loss in after) <= 1e-6
    control = [(it, loss) for it, loss in losses(os.path.join(half, "out", layout.metrics_name(0))) if it > 6]
    assert max(abs(loss / base[it] - 1) for it, loss in control) > 1e-4


def _shard_bytes(ckpts, step):
    with open(os.path.join(ckptdir.step_path(ckpts, step), ckptdir.MANIFEST)) as fh:
        files = json.load(fh)["files"]
    return sum(f["bytes"] for name, f in files.items() if name.endswith(".distcp"))


def test_hsdp_keeps_replicas_equal_and_writes_replicated_state_once(tmp_path):
    """HSDP 2 x 2 keeps the replicas equal and writes each replicated shard once.

    Meta init seeds each replica's shards by their place in the replica. After training, ranks 0
    and 2 (and 1 and 3) hold bit-identical shards; the params_crc is per rank. The checkpoint holds
    each replicated shard once. Its shard bytes are those of the FSDP-over-4 checkpoint, not twice
    as many."""
    h, f = str(tmp_path / "hsdp"), str(tmp_path / "fsdp")
    for d, extra in ((h, ["--dp-replicate", "2"]), (f, [])):
        r = run_trainer(4, args_for(d, extra=extra + ["--meta-init", "on", "--train-iters", "6"]))
        assert r.returncode == 0, r.stdout[-3000:]
    crc = final_crc(os.path.join(h, "out", layout.metrics_name(0)))
    per_rank = [crc[i:i + 8] for i in range(0, len(crc), 8)]
    assert per_rank[0] == per_rank[2] and per_rank[1] == per_rank[3], per_rank
    assert per_rank[0] != per_rank[1]
    hs, fs = _shard_bytes(os.path.join(h, "ckpts"), 6), _shard_bytes(os.path.join(f, "ckpts"), 6)
    assert hs <= 1.1 * fs, (hs, fs)


# HSDP resumed under another layout. The data position is a pure function of the flattened
# data-parallel rank, so HSDP 2 x 2 and FSDP 4 train on the same samples. Only the order of the
# floating-point reductions changes. Measured: the max relative loss difference against the
# uninterrupted HSDP run is ~1e-7 for both resumes. The test asserts below 1e-6.
LAYOUT_CHANGE_TOL = 1e-6


@pytest.mark.parametrize("n,extra", [(4, []), (2, ["--dp-global", "4"])], ids=["to-fsdp4", "to-fsdp2"])
def test_hsdp_checkpoint_resumes_under_another_layout(tmp_path, tmp_path_factory, n, extra):
    ref, run = reference(tmp_path_factory, "hsdp2x2"), str(tmp_path / "run")
    hsdp = LAYOUTS["hsdp2x2"][1]
    base = dict(losses(os.path.join(ref, "out", layout.metrics_name(0))))
    metrics = os.path.join(run, "out", layout.metrics_name(0))
    receipt, rc, out = start_and_kill_at(4, args_for(run, extra=hsdp), metrics, 9)
    assert rc != 0 and ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == 6, out[-2000:]
    r = run_trainer(n, args_for(run, extra=extra))
    assert r.returncode == 0 and "RESUMED from step=6" in r.stdout, r.stdout[-3000:]
    after = [(it, loss) for it, loss in dict(losses(metrics)).items() if it > 6]  # the resumed rows
    assert [it for it, _ in after] == list(range(7, ITERS + 1))
    worst = max(abs(loss / base[it] - 1) for it, loss in after)
    print(f"HSDP 2x2 -> {n} ranks {' '.join(extra)}: max relative loss difference {worst:.2e}")
    assert worst <= LAYOUT_CHANGE_TOL


def test_raw_checkpoint_resumes_under_another_layout_and_format(tmp_path, tmp_path_factory):
    """A raw checkpoint of FSDP 2 x TP 2 (4 ranks), resumed on 2 ranks without TP.

    The resume runs FSDP 2: the same data-parallel width, so the same samples. It writes DCP's own
    format.
    - Every tensor item is narrowed across the TP cut. On dim 1 the targets are not contiguous, so
      they are read through a buffer.
    - The format is taken from manifest.json.
    - The losses follow the uninterrupted run within LAYOUT_CHANGE_TOL.

    #63.3: the state verdict across the change compares 4 ranks' records against 2's.
    - The parameters and moments are equal whole. They are sharded FSDP2 over TP (_StridedShard)
      before, and FSDP after.
    - The batch is equal, with a TP pair's batch counted once.
    - The RNG streams are not comparable."""
    ref, run = reference(tmp_path_factory, "fsdp2xtp2-raw"), str(tmp_path / "run")
    raw = LAYOUTS["fsdp2xtp2-raw"][1]
    base = dict(losses(os.path.join(ref, "out", layout.metrics_name(0))))
    metrics = os.path.join(run, "out", layout.metrics_name(0))
    for k in (1, 2):
        os.makedirs(f"{run}/a{k}")
    probe = {STATE_EVERY_VAR: "1"}
    receipt, rc, out = start_and_kill_at(4, args_for(run, tp=2, extra=raw), metrics, 9,
                                         env={**probe, STATE_DIR_VAR: f"{run}/a1"})
    assert rc != 0 and ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == 6, out[-2000:]
    with open(os.path.join(ckptdir.step_path(os.path.join(run, "ckpts"), 6), ckptdir.MANIFEST)) as f:
        assert json.load(f)["format"] == "raw"
    r = run_trainer(2, args_for(run, extra=["--ckpt-format", "dcp"]), env={**probe, STATE_DIR_VAR: f"{run}/a2"})
    assert r.returncode == 0 and "RESUMED from step=6" in r.stdout, r.stdout[-3000:]
    assert "fingerprints not taken" not in out + r.stdout, (out + r.stdout)[-3000:]
    recs = [{rank: SR.read(f) for rank, f in layout.Attempt(f"{run}/a{k}").state_files().items()} for k in (1, 2)]
    rs = state_compare.compare(2, recs[1], 6, recs[0], against="attempt 1's")
    assert rs.across == (4, 2) and rs.forgot == [], rs.text()
    assert set(rs.equal) == {"params", "opt_state", "batch", "opt_step", "lr"}, rs.text()
    after = [(it, loss) for it, loss in dict(losses(metrics)).items() if it > 6]
    assert [it for it, _ in after] == list(range(7, ITERS + 1))
    worst = max(abs(loss / base[it] - 1) for it, loss in after)
    print(f"raw FSDP 2 x TP 2 -> 2 ranks FSDP: max relative loss difference {worst:.2e}")
    assert worst <= LAYOUT_CHANGE_TOL
    with open(os.path.join(ckptdir.step_path(os.path.join(run, "ckpts"), 12), ckptdir.MANIFEST)) as f:
        assert json.load(f)["format"] == "dcp"


@pytest.mark.multirank
def test_a_prune_deletes_behind_the_save_and_the_run_ends_after_it(tmp_path):
    """--keep 1: the save at step 4 prunes step 2.

    A delay point holds the delete of its files 4 s on purpose. The save returns without it, and
    training goes on. The next prune, the final save's at 5, waits for it. The run's end waits for
    that one's. Nothing is left behind."""
    d = str(tmp_path)
    ck = os.path.join(d, "c")
    r = run_trainer(2, ["--model", "tiny", "--train-iters", "5", "--save-interval", "2", "--keep", "1",
                        "--ckpt-dir", ck, "--outdir", d, "--log-interval", "1"],
                    env={"RESTARTLAB_DELAY": "prune-delete:4:0:4"})
    assert r.returncode == 0, r.stdout[-2000:]
    assert "DELAY prune-delete at step=4 rank=0: 4s" in r.stdout
    saves = {m["train/iter"]: m["train/ckpt_save_seconds"] for m in rows(layout.Attempt(d).metrics(0))
             if "train/ckpt_save_seconds" in m}
    assert sorted(saves) == [2, 4, 5] and saves[4] < 4, saves  # had the save waited, >= 4 s
    assert os.listdir(ck) == [ckptdir.step_dirname(5)]  # 2 and 4 deleted, no trash: the end waited
