"""A small PyTorch Lightning program, written as Lightning's documentation shows: DDP on CPU (gloo),
ModelCheckpoint(every_n_train_steps=..., save_last=True) and trainer.fit(ckpt_path="last"). Under
restartlab the ranks get torchrun-style variables, so Lightning takes its TorchElastic cluster
environment and starts no processes of its own. A callback prints `step N loss X` on rank 0.

    python train.py --ckpt DIR --steps 40 --save-every 5"""
import argparse
import os
import sys
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self, width):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Checkpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint with one fault point for the tests: --pause-before-last sleeps
    between the step file and last.ckpt, the gap every save of Lightning's has (its
    on_train_batch_end writes the top-k file, then last.ckpt), so that a kill lands there on
    purpose. Off by default; overrides a private method of lightning 2.6.6."""

    def __init__(self, pause, **kw):
        super().__init__(**kw)
        self.pause = pause

    def _save_last_checkpoint(self, trainer, monitor_candidates):
        if self.pause:
            time.sleep(self.pause)
        super()._save_last_checkpoint(trainer, monitor_candidates)


class Progress(Callback):
    def __init__(self, step_time):
        self.step_time = step_time

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        time.sleep(self.step_time)
        if trainer.is_global_zero:
            print(f"step {trainer.global_step} loss {module.last_loss.item():.10f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batches-per-epoch", type=int, default=10)
    p.add_argument("--pause-before-last", type=float, default=0.0,
                   help="a fault point: seconds between the step file and last.ckpt")
    a = p.parse_args()
    L.seed_everything(7, verbose=False)
    g = torch.Generator().manual_seed(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    n = a.batches_per_epoch * 4 * world
    x = torch.randn(n, 8, generator=g)
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.5), batch_size=4, shuffle=False)
    callbacks = [Progress(a.step_time)]
    if a.save_every:
        callbacks.append(Checkpoint(a.pause_before_last, dirpath=a.ckpt, filename="step{step}",
                                    auto_insert_metric_name=False, every_n_train_steps=a.save_every,
                                    save_top_k=-1, save_last=True))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    trainer = L.Trainer(accelerator="cpu", devices=local, num_nodes=max(1, world // local),
                        strategy="ddp" if world > 1 else "auto", max_steps=a.steps, callbacks=callbacks,
                        enable_progress_bar=False, enable_model_summary=False, logger=False,
                        enable_checkpointing=bool(a.save_every), default_root_dir=a.ckpt)
    trainer.fit(Net(a.width), data, ckpt_path="last" if a.save_every else None)
    # Lightning 2.6.6's Trainer leaves the process group up at exit (it never calls fabric's
    # _destroy_dist_connection); left to interpreter exit, one rank once aborted after the last
    # step ("terminate called without an active exception", .ci/run 2026-12-03)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
