"""A small Hugging Face Accelerate program, written as its documentation shows: `save_state()` with
automatic checkpoint naming (project_dir/checkpoints/checkpoint_<K>, K counting saves), an optional
`total_limit`, and `load_state()` on a restart, which takes the highest-numbered folder. CPU, gloo,
one rank per process (Accelerator(cpu=True) under torchrun-style variables). Rank 0 prints
`step N loss X` and, after a load, `resumed from step N`.

    python train.py --project-dir DIR --steps 40 --save-every 5 [--total-limit 1]"""
import argparse
import os
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed


def batch(step, n=16, d=8):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--project-dir", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--total-limit", type=int, default=None)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--width", type=int, default=256, help="hidden width: 2048 makes a save of ~50 MB")
    a = p.parse_args()
    cfg = ProjectConfiguration(project_dir=a.project_dir, automatic_checkpoint_naming=True, total_limit=a.total_limit)
    acc = Accelerator(cpu=True, project_config=cfg)
    set_seed(7)
    w = a.width
    model = torch.nn.Sequential(torch.nn.Linear(8, w), torch.nn.Tanh(), torch.nn.Linear(w, w), torch.nn.Tanh(),
                                torch.nn.Linear(w, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    start = 0
    ckdir = os.path.join(a.project_dir, "checkpoints")
    if a.save_every and os.path.isdir(ckdir) and os.listdir(ckdir):
        acc.load_state()  # the highest-numbered checkpoint_<K>, as Accelerate picks it
        k = max(int(n.split("_")[-1]) for n in os.listdir(ckdir))
        acc.project_configuration.iteration = k + 1  # Accelerate does not restore it (its docs say to)
        start = (k + 1) * a.save_every
        acc.print(f"resumed from step {start}")
    for step in range(start + 1, a.steps + 1):
        x, y = batch(step)
        shard = slice(acc.process_index, None, acc.num_processes)
        loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        time.sleep(a.step_time)
        full = torch.nn.functional.mse_loss(model(x), y).detach()
        acc.print(f"step {step} loss {full.item():.10f}")
        if a.save_every and step % a.save_every == 0:
            acc.save_state()
    acc.wait_for_everyone()
    acc.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
