"""A small DeepSpeed program, written as DeepSpeed's getting-started guide shows:
`deepspeed.initialize(model, model_parameters, config)` with ZeRO stage 2, `engine.backward(loss)`,
`engine.step()`, `engine.save_checkpoint(dir, client_state=...)` every N steps and, at the start,
`engine.load_checkpoint(dir)`, which loads the tag the `latest` file names (and returns None for a
dir without one). CPU (DS_ACCELERATOR=cpu: gloo), one rank per process under torchrun-style
variables (deepspeed.init_distributed reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0
prints `step N loss X` and, after a load, `resumed from step N`. DeepSpeed's own logger is set to
INFO (its workers' default is WARNING): its line as a save starts ("[Torch] Checkpoint <tag> is about
to be saved!") is what the deepspeed adapter estimates a save's stall from.

    DS_ACCELERATOR=cpu python train.py --ckpt DIR --steps 40 --save-every 5"""
import argparse
import os
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402


def batch(step, n=16, d=8):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--local_rank", type=int, default=-1)  # the deepspeed launcher passes it (unused: LOCAL_RANK)
    a = p.parse_args()
    deepspeed.utils.set_log_level_from_string("info")
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(7)
    w = a.width
    model = torch.nn.Sequential(torch.nn.Linear(8, w), torch.nn.Tanh(), torch.nn.Linear(w, w), torch.nn.Tanh(),
                                torch.nn.Linear(w, 1))
    world = torch.distributed.get_world_size()
    config = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 16 // world,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": 2}, "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    rank = torch.distributed.get_rank()
    start = 0
    if a.save_every:
        path, client = engine.load_checkpoint(a.ckpt)
        if path is not None:
            start = client["step"]
            if rank == 0:
                print(f"resumed from step {start}", flush=True)
    for step in range(start + 1, a.steps + 1):
        x, y = batch(step)
        shard = slice(rank, None, world)
        loss = torch.nn.functional.mse_loss(engine(x[shard]), y[shard])
        engine.backward(loss)
        engine.step()
        time.sleep(a.step_time)
        with torch.no_grad():
            full = torch.nn.functional.mse_loss(engine(x), y)
        if rank == 0:
            print(f"step {step} loss {full.item():.10f}", flush=True)
        if a.save_every and step % a.save_every == 0:
            engine.save_checkpoint(a.ckpt, client_state={"step": step})
    torch.distributed.destroy_process_group()  # as the Trainer's and Lightning's examples here (an abort at exit)
    # and, as examples/transformers/train.py does, no interpreter teardown: gloo's threads outlive
    # destroy_process_group() and their teardown at exit aborted a rank after its last save
    # ("terminate called without an active exception", SIGABRT: fresh-clone CI, 2026-12-06, 1 of 1
    # failure in tests/test_transformers_deepspeed.py::test_deepspeed_through_run_resumes_exactly)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
