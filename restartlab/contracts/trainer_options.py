"""The one table of the bundled trainer's options (contracts.options' model, as the tools' are).
The trainer's argparse, the scenario schema (`trainer:` keys) and the renderer's trainer argv are
all generated from it, so they cannot drift. Torch-free: the orchestration side reads it on a
login node."""
import argparse
import dataclasses
from typing import Any, Dict, List, Optional

from . import options
from .models import PRESETS
from .options import Opt
from .scenario_record import Trainer

MODELS = tuple(PRESETS)

# the relaunch loop sends this to a hung attempt's ranks before it kills them: each dumps every
# thread's Python stack into the attempt's output (faulthandler). Its default action is to ignore
# it, so a rank that has not registered yet loses nothing; never one of --preempt-signal's choices.
STACKS_SIGNAL = "WINCH"

# what a warm standby pool imports for the bundled trainer (torch, the trainer; no process group)
WARM_PRELOAD = "restartlab.trainer.warmup"

# The options the renderer sets from the phase and the experiment layout. Every other one is the
# scenario key trainer.<key>, or trainer.<group>.<rest> for a group's (--wandb-project: trainer.wandb.project).
PHASE_SET = ("--ckpt-dir", "--async-ckpt", "--ckpt-stage-dir", "--no-resume", "--outdir", "--dp-global")
GROUPS = ("wandb",)


def _scenario_key(o: Opt) -> Optional[str]:
    if o.flag in PHASE_SET:
        return None
    group = next((g for g in GROUPS if o.key.startswith(g + "_")), None)
    return f"trainer.{group}.{o.key[len(group) + 1:]}" if group else f"trainer.{o.key}"


_TABLE: List[Opt] = [
    Opt("--model", "str", "tiny", "model preset", choices=MODELS),
    Opt("--vocab", "int", 0, "vocabulary size (0: the model preset's; what ezpz's fsdp_tp calls --vocab-size)",
        min=0),
    Opt("--train-iters", "int", 100, "optimizer steps in total", min=1),
    Opt("--save-interval", "int", 0, "save every N steps and at the last step (0: no checkpoints; "
        "phases with checkpoint: none never save)", scenario_default=10, min=0),
    Opt("--keep", "int", 0, "keep the newest N complete checkpoints (0: keep all; a scenario's default keeps 3, "
        "so that no run fills a file system by itself)", scenario_default=3, min=0),
    Opt("--tp", "int", 1, "tensor-parallel degree (2-D mesh dp x tp)", min=1),
    Opt("--dp-replicate", "int", 1, "HSDP: replicas of the data-parallel group (a replicate x shard "
        "mesh: parameters sharded within a replica, gradients all-reduced across replicas; 1: FSDP)",
        min=1),
    Opt("--seq-len", "int", 32, "tokens per sequence", min=1),
    Opt("--batch-size", "int", 4, "sequences per data-parallel rank", min=1),
    Opt("--data", "str", None, "train on this flat binary file of token ids (uint16/uint32, "
        "memory-mapped; `python -m restartlab.trainer.prepare_data` writes one) instead of synthetic "
        "tokens; the sample order stays a pure function of (seed, step, data-parallel rank). A "
        "scenario's relative path is relative to the scenario file"),
    Opt("--data-dtype", "str", "auto", "token width of --data (auto: the .json beside it, else uint16)",
        choices=("auto", "uint16", "uint32")),
    Opt("--lr", "float", 1e-3, "AdamW learning rate", min=0.0),
    Opt("--seed", "int", 1234, "seed for the weights and the data"),
    Opt("--meta-init", "str", "auto", "build on the meta device (auto: above 1B parameters)",
        choices=("auto", "on", "off")),
    Opt("--device", "str", "auto", "auto: xpu, else cuda, else cpu", choices=("auto", "cpu", "cuda", "xpu")),
    Opt("--device-order", "str", "local", "which of its node's devices a rank takes: local (device = the local "
        "rank, modulo the devices) or reverse (the last for local rank 0: ALCF Polaris, whose GPU 3 is nearest "
        "cores 0-7, so ranks bound in order by --cpu-bind depth take the GPU beside their cores)",
        choices=("local", "reverse")),
    Opt("--deterministic", "flag", False, "deterministic kernels (torch.use_deterministic_algorithms, "
        "CUBLAS_WORKSPACE_CONFIG): on GPUs a resumed run then repeats the uninterrupted one bit for bit, "
        "at some speed cost; CPU runs are deterministic without it"),
    Opt("--log-interval", "int", 10, "print a line every N steps", min=1),
    Opt("--ckpt-format", "str", "dcp", "how tensors lie in the checkpoint's shard files: dcp (DCP's "
        "own, each tensor a torch.save record: plain dcp.load and torch's format tools read it) or raw "
        "(each tensor its bytes, DCP's planning and metadata unchanged: no per-tensor torch.save/"
        "torch.load, so cheaper saves and loads; only restartlab reads it). A resume reads either, "
        "from manifest.json", choices=("dcp", "raw")),
    Opt("--on-save-error", "str", "continue", "a save that fails (disk full, I/O error, read-only): "
        "log it, record train/ckpt_failed and train on (continue), or stop (abort, exit 4)",
        choices=("continue", "abort")),
    Opt("--preempt-signal", "str", "TERM", "on this signal (a scheduler's preemption or walltime "
        "warning): finish the step, write an emergency checkpoint, exit 5", choices=("TERM", "INT", "USR2", "URG")),
    Opt("--pg-timeout", "int", 600, "seconds a collective waits for a peer before this rank fails "
        "(a stopped or dead peer never blocks the job forever)", min=1),
    Opt("--allow-fresh-start", "flag", False, "when complete checkpoints exist but none loads, start "
        "from step 0 instead of stopping with exit 3"),
    # Weights & Biases (optional: pip install restartlab[wandb]); a scenario's trainer.wandb mapping
    Opt("--wandb-project", "str", None, "log rank 0's metrics to this W&B project too (one run per "
        "attempt, grouped by experiment and phase; the JSONL stays the collector's input)"),
    Opt("--wandb-entity", "str", None, "W&B entity (team or user; default: yours)"),
    Opt("--wandb-mode", "str", None, "online, offline (a run directory to `wandb sync` later: compute "
        "nodes without internet) or disabled; default: WANDB_MODE, else online",
        choices=("online", "offline", "disabled")),
    # set by the renderer from the phase and the experiment layout, not by a scenario key (PHASE_SET)
    Opt("--ckpt-dir", "str", "ckpts", "checkpoint directory (in an experiment: the phase's)"),
    Opt("--async-ckpt", "flag", False, "asynchronous checkpointing (phase checkpoint: async)"),
    Opt("--ckpt-stage-dir", "str", None, "node-local stage dir for --async-ckpt (phase stage_dir; "
        "private to this user (0700, never through a symlink) or refused; default: a fresh private dir "
        "/tmp/restartlab-<jobid>-<node>-<random>, or none when /tmp is on --ckpt-dir's file system); none: the "
        "background save writes straight to --ckpt-dir (one write instead of two)"),
    Opt("--no-resume", "flag", False, "start fresh even if a checkpoint exists (phase checkpoint: none)"),
    Opt("--outdir", "str", ".", "each rank appends its metrics file here (in an experiment: the attempt's directory)"),
    Opt("--dp-global", "int", 0, "the data-parallel width the global batch is defined for: with fewer "
        "data-parallel ranks (a job shrunk after a node loss) each rank accumulates gradients over "
        "dp-global/dp micro-batches, those the missing ranks would have taken, so the global batch "
        "and its samples stay the same (0: the current width)", min=0),
]


OPTIONS: List[Opt] = [dataclasses.replace(o, scenario=_scenario_key(o)) for o in _TABLE]


def scenario_options() -> List[Opt]:
    return [o for o in OPTIONS if o.scenario]


def add_to_parser(parser: argparse.ArgumentParser) -> None:
    """The trainer's argparse arguments, from the table (a value below its minimum: an argparse
    error, one line)."""
    options.add_to_parser(parser, OPTIONS)


def scenario_value(trainer: Trainer, o: Opt) -> Any:
    """An option's value in a loaded scenario's `trainer:` section (an option that has a scenario key)."""
    assert o.scenario is not None, o.flag
    return options.scenario_value(trainer, o.scenario.split(".", 1)[1])


def trainer_argv(trainer: Trainer, checkpoint: str, ckpt_dir: str,
                 stage_dir: Optional[str] = None, outdir: str = ".", dp_global: int = 0) -> List[str]:
    """The trainer's arguments for one phase: every scenario option, then the phase's own."""
    vals = {o.key: scenario_value(trainer, o) for o in scenario_options()}
    vals.update(ckpt_dir=ckpt_dir, outdir=outdir, dp_global=dp_global or None)
    if checkpoint == "none":
        vals.update(save_interval=0, no_resume=True)
    elif checkpoint == "async":
        vals.update(async_ckpt=True, ckpt_stage_dir=stage_dir)
    return options.to_argv(OPTIONS, vals, defaults=True) + list(trainer.extra_args)
