"""What an async save costs the training beyond its stall: the steps that run while it is in the
background, per save, for a background thread and for a background process.

It runs 4 ranks with the `small` model (298 MB checkpoint), training on CPU/gloo. For each save
and variant, the loop saves, then trains on until the save is durable. Each of those steps is
compared with the median of the same variant's idle steps (no save in flight), measured in the
same round. The variants:
  restartlab   restartlab's async checkpointer (background thread, its own gloo group)
  torch-thread dcp.async_save on a gloo group of its own, background thread (torch's default)
  torch-proc   dcp.async_save with AsyncCheckpointerType.PROCESS (a checkpoint process per rank)
Each save reports four figures. The stall is the time the loop is blocked. The busy steps are those
run while the save is in flight. Their extra seconds over idle steps are the background
interference. Stall + interference is the whole cost to the loop. Figures are for the slowest rank,
the median over saves, after one warm-up save of each.

Usage: python bench/interference.py [--ranks 4] [--repeats 3] [--json F]
"""
import os
import statistics
import sys
import time

import mpibench

IDLE_STEPS = 4


def worker(a):
    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    from async_ckpt import _build, _slowest

    from restartlab.trainer import dist as rdist
    from restartlab.trainer.checkpoint import Checkpointer
    from restartlab.trainer.data import Synthetic
    from restartlab.trainer.state import TrainState
    info, mesh, model, optim, device_type, cfg = _build(a)
    data = Synthetic(cfg.vocab)
    state = TrainState(model, optim, info.rank, 1)
    ck = Checkpointer(os.path.join(a.dir, "rl"), rank=info.rank, world_size=info.world_size, local_rank=info.local_rank,
                      mesh_info={}, mode="async", stage_dir=None, log=lambda m: None)
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=600))
    it = [100]

    def step():
        it[0] += 1
        t0 = time.perf_counter()
        x, y = data.batch(1, it[0], info.rank, 4, 64)
        loss = torch.nn.functional.cross_entropy(model(x).float().reshape(-1, cfg.vocab), y.reshape(-1))
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        dist.all_reduce(loss.detach())  # the step's own collective, as in the trainer
        return time.perf_counter() - t0

    def start(kind, n):
        """Begin a save; returns (stall s, done() -> bool)."""
        t0 = time.perf_counter()
        if kind == "restartlab":
            ck.save(n, state)
            return time.perf_counter() - t0, lambda: not ck.in_flight()
        path = os.path.join(a.dir, kind, f"s{n}")
        typ = AsyncCheckpointerType.PROCESS if kind == "torch-proc" else AsyncCheckpointerType.THREAD
        resp = dcp.async_save(state.state_dict(), checkpoint_id=path, process_group=group,
                              async_checkpointer_type=typ)
        fut = getattr(resp, "upload_completion", resp)
        return time.perf_counter() - t0, fut.done

    res = {}
    kinds = ["restartlab", "torch-thread", "torch-proc"]
    for rep in range(a.repeats + 1):
        for kind in (kinds if rep % 2 else kinds[::-1]):
            dist.barrier()
            idle = [step() for _ in range(IDLE_STEPS)]
            stall, done = start(kind, rep + 1)
            busy = []
            while True:  # every rank steps until every rank's save is durable
                flag = torch.tensor([0.0 if done() else 1.0])
                dist.all_reduce(flag)
                if flag.item() == 0:
                    break
                busy.append(step())
            if kind == "restartlab":
                ck.wait()
            base = statistics.median(idle)
            extra = sum(b - base for b in busy)
            if rep:  # rep 0 is the warm-up, on every rank alike
                for k, v in (("stall", stall), ("busy_steps", float(len(busy))), ("interference", extra),
                             ("idle_step", base), ("busy_step", statistics.mean(busy) if busy else base)):
                    res.setdefault(f"{kind}/{k}", []).append(_slowest(v))
    ck.close()
    if info.rank == 0:
        mpibench.emit({"ranks": info.world_size, "model": a.model, "repeats": a.repeats, "results": res})
    rdist.clean_exit(0)


def report(a, res):
    m = res["medians"]
    print(f"{res['ranks']} ranks, {res['model']}, CPU/gloo; per save, slowest rank, median of {res['repeats']}")
    print(f"  {'variant':14s} {'stall s':>8s} {'busy steps':>10s} {'idle step s':>11s} {'busy step s':>11s} "
          f"{'interference s':>14s} {'whole cost s':>12s}")
    out = {}
    for kind in ("restartlab", "torch-thread", "torch-proc"):
        g = {k: m[f"{kind}/{k}"] for k in ("stall", "busy_steps", "idle_step", "busy_step", "interference")}
        g["whole"] = g["stall"] + g["interference"]
        out[kind] = g
        print(f"  {kind:14s} {g['stall']:8.3f} {g['busy_steps']:10.0f} {g['idle_step']:11.3f} {g['busy_step']:11.3f} "
              f"{g['interference']:14.3f} {g['whole']:12.3f}")
    best = min(out, key=lambda k: out[k]["whole"])
    print(f"  least whole cost to the loop: {best}")
    mpibench.write_json(a, dict(res, whole_cost=out, least=best))
    return 0


if __name__ == "__main__":
    sys.exit(mpibench.main(__doc__, 3, "async save interference", __file__, worker, report))
