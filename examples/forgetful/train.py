"""A small PyTorch training loop that can forget one piece of its state at a resume, on purpose:
the programs restartlab's "what did the resume forget?" verdict is proved on (tests/test_resume_state.py).

What it trains: a two-layer MLP with dropout (torch's RNG) on a fixed random regression set, through
a DataLoader that shuffles with its own generator, AdamW with a LambdaLR schedule, inputs jittered
by NumPy's global RNG and a Python `random` draw per step (which samples it masks). Every
--save-every steps it saves, as many programs do, a torch.save of everything a resume needs: the
model, the optimizer, the scheduler, the three RNG states and the data position (epoch, batches
into it, the sampler generator's state at the epoch's start); written to a temp file and renamed,
so a checkpoint is absent or whole. On a relaunch it loads the newest and prints
`resumed from step N`; each step prints `step N loss X` (full precision).

--forget PIECE leaves one piece out of the load, as the bugs users meet do:
  scheduler   the scheduler's state is not loaded (the learning rate restarts its schedule)
  rng         the RNG states are not restored
  sampler     the epoch restarts from its first batch (the data position is lost)
  optimizer   the optimizer's state is not loaded (moments, step count and its groups' learning rate)
  step        the optimizer's state is loaded but its step count reset (Adam's bias correction restarts)
  sched_ahead the scheduler is loaded, then stepped once more before the first step (pytorch issue 140900,
              DeepSpeed issues 5788/3875: the learning rate jumps on resume)
  epoch       a mid-epoch resume keeps the position within the epoch but resets the epoch to 0: the
              batches are epoch 0's (accelerate PR 4071)
  rng_draw    the RNG states are restored, then a DataLoader iterator is made, which draws its base
              seed from torch's RNG: one draw the run from step 0 never made there (Megatron-Bridge
              issue 5257; transformers PR 46628: skip_first_batches consumes RNG after the restore)
  epoch_skip  a resume at an epoch's end moves on to the next epoch at its load, and the loop moves on
              once more: a whole epoch skipped, and the run still ends well (verl issue 7401)
  initial_lr  the optimizer's param groups come back without `initial_lr` (DCP's optimizer state dict
              drops it: pytorch issue 140900) and the scheduler is made after the load at the step
              resumed from (last_epoch), which needs it: every relaunch fails in its start-up
  rng_saved_late  the save takes torch's RNG state one draw later than the rest of its state (inside
              fork_rng: the run itself is unchanged), as a save made after another draw does (a
              validation pass, the next batch's augmentation): the load restores what the checkpoint
              holds, and that is not the run's state at its step; a bug of the save, not of the load
  none        nothing (the control: an exact resume)
One rank is enough (the pieces are per rank); under a launcher each rank trains the same copy."""
import argparse
import os
import random
import re
import sys
import time

import numpy as np
import torch

PIECES = ("none", "scheduler", "rng", "sampler", "optimizer", "step", "sched_ahead", "epoch", "rng_draw", "epoch_skip",
          "initial_lr", "rng_saved_late")


def batches_of(loader_gen_state, dataset, batch, skip):
    """The epoch's batches in the order the sampler's generator (at `loader_gen_state`) gives, the
    first `skip` left out: a resume continues the epoch where it was."""
    g = torch.Generator()
    g.set_state(loader_gen_state)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, generator=g)
    it = iter(loader)
    for _ in range(skip):
        next(it)
    return it


def next_epoch(gen, epoch_gen_state, n):
    """The sampler generator's state at the next epoch's start: the epoch that ended used one draw."""
    gen.set_state(epoch_gen_state)
    torch.randperm(n, generator=gen)
    return gen.get_state()


def newest(d):
    found = []
    for name in os.listdir(d) if os.path.isdir(d) else []:
        m = re.fullmatch(r"ckpt-(\d+)\.pt", name)
        if m:
            found.append((int(m.group(1)), os.path.join(d, name)))
    return max(found) if found else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--forget", choices=PIECES, default="none")
    p.add_argument("--step-time", type=float, default=0.02, help="seconds each step sleeps (a real step takes time)")
    p.add_argument("--hold-at", type=int, default=0, help="a run from step 0 waits after this step, up to 120 s, "
                   "for the kill aimed there (a test's kill lands where it is aimed however loaded the machine)")
    a = p.parse_args()

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    data_gen = torch.Generator().manual_seed(1)
    xs = torch.randn(96, 8, generator=data_gen)
    dataset = torch.utils.data.TensorDataset(xs, xs.sum(dim=1, keepdim=True).sin())
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.97 ** s)
    sampler_gen = torch.Generator().manual_seed(2)
    epoch, into, start = 0, 0, 0
    epoch_gen_state = sampler_gen.get_state()

    found = newest(a.ckpt) if a.save_every else None
    if found:
        ck = torch.load(found[1], weights_only=False)
        model.load_state_dict(ck["model"])
        if a.forget != "optimizer":
            opt.load_state_dict(ck["optimizer"])
        if a.forget == "step":
            for st in opt.state.values():
                st["step"] = torch.zeros_like(st["step"])
        if a.forget == "initial_lr":  # the groups as DCP gives them back; the scheduler made after the load
            for g in opt.param_groups:
                g.pop("initial_lr", None)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.97 ** s, last_epoch=ck["step"])
        elif a.forget != "scheduler":
            sched.load_state_dict(ck["scheduler"])
        if a.forget == "sched_ahead":
            sched.step()
        if a.forget != "rng":
            torch.set_rng_state(ck["rng"]["torch"])
            np.random.set_state(ck["rng"]["numpy"])
            random.setstate(ck["rng"]["python"])
        if a.forget == "rng_draw":  # a loader made after the restore: its iterator draws a base seed
            iter(torch.utils.data.DataLoader(dataset, batch_size=8))
        epoch, into, start = ck["data"]["epoch"], ck["data"]["into"], ck["step"]
        epoch_gen_state = ck["data"]["gen_state"]
        if a.forget == "sampler":
            into = 0
        if a.forget == "epoch":  # epoch 0's order, the position within the epoch kept
            epoch, epoch_gen_state = 0, torch.Generator().manual_seed(2).get_state()
        if a.forget == "epoch_skip" and into == len(dataset) // 8:  # the epoch is done: on to the next one
            epoch, epoch_gen_state = epoch + 1, next_epoch(sampler_gen, epoch_gen_state, len(dataset))
        print(f"resumed from step {start}", flush=True)
    os.makedirs(a.ckpt, exist_ok=True)

    per_epoch = len(dataset) // 8
    it = batches_of(epoch_gen_state, dataset, 8, into)
    for n in range(start + 1, a.steps + 1):
        if into == per_epoch:  # the next epoch: its order from where the generator now is
            epoch, into = epoch + 1, 0
            epoch_gen_state = next_epoch(sampler_gen, epoch_gen_state, len(dataset))
            it = batches_of(epoch_gen_state, dataset, 8, 0)
        x, y = next(it)
        into += 1
        x = x + torch.from_numpy(np.random.normal(0, 0.01, size=tuple(x.shape))).float()
        if random.random() < 0.5:
            x = x.flip(0).flip(0)  # a draw of Python's RNG every step (the data is unchanged)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        time.sleep(a.step_time)
        print(f"step {n} loss {loss.item():.12f}", flush=True)
        if a.save_every and n % a.save_every == 0:
            save(a.ckpt, n, model, opt, sched, epoch, into, epoch_gen_state, late=a.forget == "rng_saved_late")
        if n == a.hold_at and start == 0:
            time.sleep(120)
    return 0


def save(d, n, model, opt, sched, epoch, into, epoch_gen_state, late=False):
    """Everything a resume needs, as one torch.save, written aside and renamed into place (late: torch's
    RNG state as one more draw would leave it, the run's own left as it is)."""
    rng_torch = torch.get_rng_state()
    if late:
        with torch.random.fork_rng(devices=[]):
            torch.rand(1)
            rng_torch = torch.get_rng_state()
    ck = {"step": n, "model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
          "rng": {"torch": rng_torch, "numpy": np.random.get_state(), "python": random.getstate()},
          "data": {"epoch": epoch, "into": into, "gen_state": epoch_gen_state}}
    tmp = os.path.join(d, f".tmp-ckpt-{n}.pt")
    torch.save(ck, tmp)
    os.replace(tmp, os.path.join(d, f"ckpt-{n}.pt"))
    print(f"saved step {n}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
