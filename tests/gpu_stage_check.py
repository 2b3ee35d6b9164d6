"""GPU only: the async checkpointer's staging copies overlap the next step.
The parameters are not written before the copies have read them. tests/test_gpu.py runs it.

One process, world size 1 (nccl for training, the checkpointer's own gloo group). A 1 GiB
parameter is staged. The training stream then runs matrix products (the "next forward/backward").
Finally it writes the parameter in place (the "optimizer step"). The parts:
- guarded: before_param_update() runs first. The staged copy must equal the value at the save.
- unguarded: the write is queued right after the staging, with no wait. The copy may see the new
  values. This is printed, not asserted: it shows what the guarantee prevents.
- overlap: host seconds the loop is blocked by staging (queued copies) vs a blocking copy. Also
  wall seconds of stage + compute, queued vs blocking.

Prints one JSON line `GPU_STAGE {...}` and exits 0 when the guarded copy is exact."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from restartlab.trainer import dist as rdist
from restartlab.trainer.checkpoint import Checkpointer


def main(tmp):
    info = rdist.RankInfo(0, 1, 0, "none")
    device = rdist.init(info, "cuda", "nccl")
    ck = Checkpointer(os.path.join(tmp, "c"), rank=0, world_size=1, mesh_info={}, mode="async",
                      stage_dir=os.path.join(tmp, "stage"), log=lambda m: None)
    n = 256 * 1024 * 1024  # 1 GiB of float32
    x = torch.randn(n, device=device)
    a = torch.randn(8192, 8192, device=device)
    out = {}

    def compute():
        y = a
        for _ in range(20):
            y = torch.tanh(y @ a)
        return y

    def stage(step):
        with ck.stager.stream():
            staged = ck.stager.stage({"x": x}, "p")["x"]
        return staged, ck.stager.event

    stage(0)  # allocate the pinned buffer, warm up
    torch.cuda.synchronize()
    # guarded: the in-place write waits for the staging copy
    want = x.cpu()
    staged, ev = stage(1)
    ck.before_param_update()
    x.add_(1.0)
    ev.synchronize()
    out["guarded_exact"] = bool(torch.equal(staged, want))
    torch.cuda.synchronize()
    # unguarded (the control): the write is queued on the training stream with no wait
    want = x.cpu()
    staged, ev = stage(2)
    x.add_(1.0)
    ev.synchronize()
    torch.cuda.synchronize()
    out["unguarded_exact"] = bool(torch.equal(staged, want))
    ck.stager.event = None
    # overlap: blocking copy + compute vs queued copy + compute
    for rep in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with ck.stager.stream():
            ck.stager.stage({"x": x}, "p")
        torch.cuda.current_stream().synchronize()
        ck.stager.event.synchronize()
        t1 = time.perf_counter()
        compute()
        ck.before_param_update()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        t3 = time.perf_counter()
        with ck.stager.stream():
            ck.stager.stage({"x": x}, "p")
        t4 = time.perf_counter()
        compute()
        ck.before_param_update()
        torch.cuda.synchronize()
        t5 = time.perf_counter()
        out.setdefault("blocking_stall_s", []).append(t1 - t0)
        out.setdefault("blocking_total_s", []).append(t2 - t0)
        out.setdefault("overlap_stall_s", []).append(t4 - t3)
        out.setdefault("overlap_total_s", []).append(t5 - t3)
    c0 = time.perf_counter()
    compute()
    torch.cuda.synchronize()
    out["compute_only_s"] = time.perf_counter() - c0
    out["bytes"] = n * 4
    ck.close()
    print("GPU_STAGE " + json.dumps(out), flush=True)
    dist.barrier()
    rdist.clean_exit(0 if out["guarded_exact"] else 1)


if __name__ == "__main__":
    main(sys.argv[1])
