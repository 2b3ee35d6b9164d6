"""How the sync save and the verified load grow with the checkpoint's size and the rank count.

For 1, 2 and 4 ranks (one mpiexec job each) and three model presets (tiny ~2 MB, debug ~100 MB,
small ~300 MB of checkpoint with AdamW state): restartlab's sync save and its verifying load
(warm cache), slowest rank, median over repeats after one warm-up, with MB/s. On this machine
the ranks share 2 cores, so more ranks add parallel writers but no compute.

Usage: python bench/scaling.py [--repeats 3] [--json F]
"""
import json
import os
import sys
import time

import mpibench

MODELS = ("tiny", "debug", "small")
RANKS = (1, 2, 4)


def worker(a):
    import torch

    from async_ckpt import _slowest

    from restartlab.contracts import ckptdir
    from restartlab.trainer import dist as rdist
    from restartlab.trainer.checkpoint import Checkpointer
    from restartlab.trainer.ckpt_io import VerifyingReader
    from restartlab.trainer.data import Synthetic
    from restartlab.trainer.model import PRESETS
    from restartlab.trainer.parallel import build_mesh, build_model
    from restartlab.trainer.state import TrainState
    import torch.distributed.checkpoint as dcp
    info = rdist.discover_ranks()
    device = rdist.init(info, "cpu", "gloo")
    mesh = build_mesh("cpu", info.world_size, 1)
    res = {}
    for name in MODELS:
        cfg = PRESETS[name]
        model = build_model(cfg, mesh, device, 1234, False, info.rank)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = Synthetic(cfg.vocab).batch(1234, 1, info.rank, 2, 16)
        torch.nn.functional.cross_entropy(model(x).float().reshape(-1, cfg.vocab), y.reshape(-1)).backward()
        optim.step()
        state = TrainState(model, optim, info.rank, 1)
        root = os.path.join(a.dir, name)
        ck = Checkpointer(root, rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                          mesh_info={}, keep=1, log=lambda m: None)
        for rep in range(a.repeats + 1):
            t0 = time.perf_counter()
            ck.save(rep + 1, state)
            save = _slowest(time.perf_counter() - t0)
            path = ckptdir.step_path(root, rep + 1)
            with open(os.path.join(path, ckptdir.MANIFEST)) as f:
                manifest = json.load(f)
            t0 = time.perf_counter()
            dcp.load(state.state_dict(), storage_reader=VerifyingReader(path, manifest))
            load = _slowest(time.perf_counter() - t0)
            if rep:
                res.setdefault(f"{name}/save", []).append(save)
                res.setdefault(f"{name}/load", []).append(load)
                res[f"{name}/bytes"] = [float(manifest["total_bytes"])]
        del model, optim, state
    if info.rank == 0:
        mpibench.emit({"ranks": info.world_size, "results": res})
    rdist.clean_exit(0)


def main():
    a = mpibench.parser(__doc__, 3).parse_args()
    if a.worker:
        return worker(a)
    table = {}
    for n in RANKS:
        a.ranks, a.model = n, "scaling"
        res = mpibench.run_workers(a, __file__, f"scaling, {n} rank(s)")
        if res is None:
            return 1
        table[n] = res["medians"]
    print("sync save / verified load (warm), slowest rank, median; MB/s in brackets")
    print(f"  {'checkpoint':>18s} " + " ".join(f"{f'{n} rank(s)':>30s}" for n in RANKS))
    out = {}
    for name in MODELS:
        mb = table[RANKS[0]][f"{name}/bytes"] / 1e6
        cells = []
        for n in RANKS:
            s, l = table[n][f"{name}/save"], table[n][f"{name}/load"]
            cells.append(f"{s:6.3f} ({mb / s:5.0f}) / {l:6.3f} ({mb / l:5.0f})")
            out[f"{name}@{n}"] = {"MB": mb, "save_s": s, "load_s": l}
        print(f"  {name + f' {mb:7.1f} MB':>18s} " + " ".join(f"{c:>30s}" for c in cells))
    mpibench.write_json(a, {"table": out, "repeats": a.repeats})
    return 0


if __name__ == "__main__":
    sys.exit(main())
