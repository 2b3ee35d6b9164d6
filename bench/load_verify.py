"""Checksums verified while loading: what they cost a load. One `small` checkpoint (~300 MB with
AdamW state) saved once by restartlab's sync path, then loaded `--repeats` times each way,
interleaved: restartlab's verifying reader (every item's bytes read once, crc32-checked against
manifest.json, then parsed) and plain `dcp.load` (no check). Slowest rank, median over repeats,
warm page cache (the files were just written and read). Target: verified / plain <= 1.10.

Usage: python bench/load_verify.py [--ranks 4] [--repeats 5] [--model small]
"""
import json
import os
import sys
import time

import mpibench

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = 1.10


def worker(a):
    import torch.distributed.checkpoint as dcp

    from async_ckpt import _build, _slowest

    from restartlab.contracts import ckptdir
    from restartlab.trainer import dist as rdist
    from restartlab.trainer.checkpoint import Checkpointer
    from restartlab.trainer.ckpt_io import VerifyingReader
    from restartlab.trainer.state import TrainState
    info, mesh, model, optim, device_type, cfg = _build(a)
    ck = Checkpointer(os.path.join(a.dir, "ck"), rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                      mesh_info={"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names)}, log=lambda m: None)
    state = TrainState(model, optim, info.rank, 1)
    row = ck.save(1, state)
    path = ckptdir.step_path(os.path.join(a.dir, "ck"), 1)
    with open(os.path.join(path, ckptdir.MANIFEST)) as f:
        manifest = json.load(f)
    res = {"verified": [], "plain": []}
    for rep in range(a.repeats + 1):  # rep 0 warms the page cache and the allocator
        for kind in ("verified", "plain") if rep % 2 else ("plain", "verified"):
            sd = state.state_dict()
            t0 = time.perf_counter()
            if kind == "verified":
                dcp.load(sd, storage_reader=VerifyingReader(path, manifest))
            else:
                dcp.load(sd, checkpoint_id=path)
            t = _slowest(time.perf_counter() - t0)
            if rep:
                res[kind].append(t)
    if info.rank == 0:
        mpibench.emit({"ranks": info.world_size, "model": a.model, "device": device_type,
                       "ckpt_bytes": manifest["total_bytes"], "save_s": row["train/ckpt_save_seconds"],
                       "repeats": a.repeats, "results": res})
    rdist.clean_exit(0)


def report(a, res):
    med = res["medians"]
    ratio = med["verified"] / max(med["plain"], 1e-9)
    mb = res["ckpt_bytes"] / 1e6
    print(f"checkpoint: {mb:.0f} MB, {res['ranks']} ranks, {res['device']}; slowest rank, median of {res['repeats']}, warm cache")
    print(f"  plain dcp.load                  {med['plain']:8.3f} s  ({mb / med['plain']:.0f} MB/s)")
    print(f"  verified (crc32 of every item)  {med['verified']:8.3f} s  ({mb / med['verified']:.0f} MB/s)")
    print(f"  verified / plain                {ratio:8.3f}x  (target <= {TARGET:g}x: {'met' if ratio <= TARGET else 'MISSED'})")
    mpibench.write_json(a, dict(res, ratio=ratio))
    return 0


if __name__ == "__main__":
    sys.exit(mpibench.main(__doc__, 5, "load verification benchmark", __file__, worker, report))
