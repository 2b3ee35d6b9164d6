"""A plain PyTorch Distributed Checkpoint program, saving as torchtitan does: every --save-every
steps all ranks dcp.save() the model and optimizer into CKPT/step-N (DCP writes its .metadata
last, through a temp file renamed into place); a restart loads the highest step-N that holds
.metadata. No restartlab import: the ranks take RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
from the environment (restartlab maps them from the launcher's). Gradients are averaged over the
ranks by hand (an all_reduce), each rank's batch comes from the step and the rank, so a resumed
run's losses equal an unbroken run's bit for bit.

    python train.py --ckpt DIR --steps 40 --save-every 5"""
import argparse
import os
import re
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def newest_complete(ckpt):
    steps = [int(m.group(1)) for m in (re.fullmatch(r"step-(\d+)", n) for n in
                                        (os.listdir(ckpt) if os.path.isdir(ckpt) else [])) if m]
    done = [s for s in steps if os.path.exists(os.path.join(ckpt, f"step-{s}", ".metadata"))]
    return max(done, default=None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--step-time", type=float, default=0.05)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, a.width), torch.nn.Tanh(), torch.nn.Linear(a.width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    start = newest_complete(a.ckpt) if a.save_every else None
    if start is not None:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=os.path.join(a.ckpt, f"step-{start}"))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    for step in range(1 if start is None else start + 1, a.steps + 1):
        g = torch.Generator().manual_seed(step * world + rank)
        x = torch.randn(8, 16, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True) * 0.25)
        opt.zero_grad()
        loss.backward()
        for q in model.parameters():
            dist.all_reduce(q.grad)
            q.grad /= world
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        time.sleep(a.step_time)
        if rank == 0:
            print(f"step {step} loss {mean.item() / world:.10f}", flush=True)
        if a.save_every and step % a.save_every == 0:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(a.ckpt, f"step-{step}"))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
