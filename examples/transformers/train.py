"""A small Hugging Face Trainer program, written as transformers' documentation and its language
modelling example (examples/pytorch/language-modeling/run_clm.py) show: `TrainingArguments` with
`save_steps`, `get_last_checkpoint(output_dir)` at the start, `trainer.train(resume_from_checkpoint=
that)`. A GPT-2 of 2 layers and 64 dims on random tokens; CPU, gloo (ddp_backend), one rank per
process under torchrun-style variables. The Trainer prints its logs rounded to 4 digits and without
the step, so a `TrainerCallback` (the documented `on_log` hook) prints `step N loss X` at full
precision on rank 0 (`--no-step-lines`: it does not, as an unmodified Trainer script).

    python train.py --output-dir DIR --steps 40 --save-steps 5 [--save-total-limit 1]"""
import argparse
import gc
import os
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        self.x = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class PrintLoss(TrainerCallback):
    """Every logged step's loss (the mean over the ranks), whole; `lines` False: nothing printed (the
    Trainer as it comes: its own log lines only), the steps only slowed."""

    def __init__(self, step_time, lines=True, hold=()):
        self.step_time, self.lines, self.hold, self.start = step_time, lines, set(hold), 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = state.global_step  # where this launch began (a resume: its checkpoint's step)

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.step_time)

    def on_save(self, args, state, control, **kwargs):
        # a test's kill, aimed at this save, lands here however loaded the machine (up to 120 s)
        if state.global_step in self.hold and state.global_step > self.start:
            time.sleep(120)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.lines and state.is_world_process_zero and logs and "loss" in logs:
            print(f"step {state.global_step} loss {logs['loss']!r}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--output-dir", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    p.add_argument("--save-total-limit", type=int, default=None)
    p.add_argument("--step-time", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--width", type=int, default=64, help="n_embd: 1024 makes a save of ~150 MB")
    p.add_argument("--hold-at", default="", help="comma-separated steps: after saving one of them (not resumed "
                   "from it) the run waits up to 120 s, for a kill aimed there")
    p.add_argument("--no-step-lines", action="store_true", help="print no `step N loss X` lines: the Trainer's "
                   "own log lines only (restartlab then takes the steps from its training-state probe)")
    a = p.parse_args()
    set_seed(7)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = TrainingArguments(
        output_dir=a.output_dir, max_steps=a.steps, per_device_train_batch_size=a.batch, learning_rate=1e-3,
        logging_steps=1, save_strategy="steps" if a.save_steps else "no", save_steps=a.save_steps or 500,
        save_total_limit=a.save_total_limit, use_cpu=True, ddp_backend="gloo", report_to="none",
        disable_tqdm=True, log_level="info", seed=7, dataloader_num_workers=0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=a.width, n_layer=2, n_head=2,
                                        bos_token_id=0, eos_token_id=0))
    data = RandomTokens(a.steps * a.batch * world, 32, 256)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[PrintLoss(a.step_time, not a.no_step_lines, [int(x) for x in a.hold_at.split(",") if x])])
    last = get_last_checkpoint(a.output_dir) if a.save_steps and os.path.isdir(a.output_dir) else None
    trainer.train(resume_from_checkpoint=last)
    # The Trainer (transformers 5.25.0, accelerate 1.15.0) leaves the gloo process group up; after
    # destroy_process_group(), with the Trainer, its accelerator and its DDP model gone, gloo's
    # threads (gloo_tcp_loop, pt_gloo_runloop) still run, and their teardown at interpreter exit
    # aborted a rank after the last step ("terminate called without an active exception", SIGABRT:
    # 2 of 3 launches of one run without destroy_process_group(), 1 of about 40 with it, under
    # mpiexec; 1 of 1 under torchrun). The training is over and saved: this program ends without
    # the interpreter's teardown, as the job would otherwise see a crash.
    del trainer, model
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
