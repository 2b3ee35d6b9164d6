"""The built-in adapters. `restartlab`: the bundled trainer (it writes restartlab's metrics rows
itself; its checkpoints follow ckptdir's contract). `generic`: any program, configured entirely by
the scenario's `trainer.program` keys."""
from ..contracts import ckptdir
from ..contracts.trainer_options import WARM_PRELOAD
from . import ezpz_check
from .base import ADAPTERS, Adapter, OwnMetricsFile


@ADAPTERS.register
class Restartlab(Adapter):
    name = "restartlab"
    doc = "the bundled DCP trainer (restartlab.trainer): step-N/.complete, its own metrics rows"
    tap = False
    preload = WARM_PRELOAD
    defaults = {"checkpoints": r"{ckpt_dir}/step-(?P<step>\d+)", "complete": "file:" + ckptdir.COMPLETE,
                "selects": "newest_complete", "progress": None, "resumed": r"RESUMED from step=(?P<step>\d+)"}


@ADAPTERS.register
class Generic(Adapter):
    name = "generic"
    doc = "any program: progress and checkpoint patterns from trainer.program"
    defaults = {"complete": "exists", "selects": "newest_complete"}


@ADAPTERS.register
class Accelerate(Adapter):
    """Hugging Face Accelerate's save_state with automatic checkpoint naming.

    Read from accelerate 1.15.0.

    A save writes project_dir/checkpoints/checkpoint_<K>, where K counts saves. Files are written in
    place, with no marker. Rank 0's random_states_0.pkl comes after the model and optimizer files.
    With total_limit, the oldest folders are deleted before the new one is written. load_state()
    takes the highest-numbered folder without a check. The scenario gives progress and save_every."""
    name = "accelerate"
    preload = "torch,accelerate"  # accelerate 1.15.0: 2.5 s here, one thread after it (measured)
    doc = "Hugging Face Accelerate save_state/load_state (automatic checkpoint naming; project_dir = {ckpt_dir})"
    defaults = {"checkpoints": r"{ckpt_dir}/checkpoints/checkpoint_(?P<step>\d+)",
                "complete": "file:model.safetensors,optimizer.bin,random_states_0.pkl",
                "selects": "highest", "counts": "saves"}


@ADAPTERS.register
class Lightning(Adapter):
    """PyTorch Lightning's ModelCheckpoint and fit(ckpt_path="last").

    Read from lightning 2.6.6 and fsspec 2026.9.0.

    Each save is torch.save into memory. Then a temp file from tempfile.mkstemp() ($TMPDIR) is moved
    into place by shutil.move: a rename on the same file system, else a copy. There is no fsync. The
    top-k file comes first, then last.ckpt.

    "last" resumes from the newest last*.ckpt by modification time, unchecked. It starts fresh (with
    a warning) when there is none. The step of last.ckpt is read from inside it (torchzip). The
    scenario gives progress."""
    name = "lightning"
    preload = "torch,lightning.pytorch"  # lightning 2.6.6: 6.1 s here, one thread after it (measured)
    doc = "PyTorch Lightning ModelCheckpoint(dirpath={ckpt_dir}, save_last=True) + fit(ckpt_path='last')"
    defaults = {"checkpoints": r"{ckpt_dir}/(?:[^/]*?step=?(?P<step>\d+)[^/]*|last(?:-v\d+)?)\.ckpt",
                "complete": "torchzip", "selects": "last",
                "resumed": r"Restored all states from the checkpoint at (?P<path>\S+)"}


@ADAPTERS.register
class Transformers(Adapter):
    """The Hugging Face Trainer.

    Read from transformers 5.25.0: trainer.py _save_checkpoint and trainer_utils.get_last_checkpoint.
    Run here with accelerate 1.15.0.

    A save writes output_dir/checkpoint-<N>, where N is the global step. It writes, in this order:
    - the model (model.safetensors) first;
    - then optimizer.pt, scheduler.pt, and each rank's rng_state_<rank>.pth;
    - trainer_state.json last, from rank 0.
    There is no barrier before trainer_state.json, no marker and no rename.
    So another rank's rng_state can still be being written when trainer_state.json lands.
    Complete here therefore means all of these hold:
    - trainer_state.json is there;
    - every torch.save file in the folder is whole;
    - there is one rng_state_<r>.pth per process that its training_args.bin counts.
    In the rule's words: file:trainer_state.json+torchzips+hfrngs.

    The documented resume is train(resume_from_checkpoint=get_last_checkpoint(output_dir)).
    It takes the highest-numbered checkpoint-<N> folder without a check.
    A folder without trainer_state.json then fails the start at every relaunch.
    The failure is a ValueError or FileNotFoundError.

    With log_level="info", rank 0 logs these lines:
    - "Resuming training from checkpoint with epoch E and global step N" on a resume;
    - "Saving model checkpoint to <dir>/checkpoint-N" as a save starts.
    No line marks a save's end. So the stall is estimated from the step times (`saving`).

    Its own log lines round the loss to 4 significant digits and carry no step.
    Without a progress pattern, the steps come from the training-state probe.
    The loss then comes from those lines (`loss_line`).
    A scenario that wants full values gives progress. The example prints them from a TrainerCallback."""
    name = "transformers"
    requires = ("transformers",)
    extra = "transformers"
    preload = "torch,transformers"
    doc = ("Hugging Face Trainer (output_dir = {ckpt_dir}: checkpoint-<N>, trainer_state.json last; "
           "train(resume_from_checkpoint=get_last_checkpoint(output_dir)))")
    defaults = {"checkpoints": r"{ckpt_dir}/checkpoint-(?P<step>\d+)", "complete": "file:trainer_state.json+torchzips+hfrngs",
                "selects": "highest",
                "resumed": r"Resuming training from checkpoint with epoch \d+ and global step (?P<step>\d+)",
                "saving": r"Saving model checkpoint to \S*checkpoint-\d+",
                # its own log line (transformers 5.25.0, logging_steps): {'loss': '5.399', 'grad_norm': ...}
                "loss_line": r"^\{'loss': '?(?P<loss>[-+0-9.eE]+|nan|inf)'?[,}]"}


@ADAPTERS.register
class Deepspeed(Adapter):
    """DeepSpeed's engine checkpoints.

    Read from deepspeed 0.19.8: runtime/engine.py save_checkpoint and load_checkpoint.
    Run here on CPU (DS_ACCELERATOR=cpu, gloo).

    save_checkpoint(dir) writes dir/<tag>/. The default tag is global_step<N>, where N is the
    engine's optimizer steps. It writes these files with torch.save:
    - mp_rank_00_model_states.pt from rank 0;
    - zero_pp_rank_<r>_mp_rank_00_optim_states.pt from every rank.
    Then rank 0 writes the tag into dir/latest, before the barrier that waits for the other ranks' shards.

    load_checkpoint(dir) loads the tag `latest` names, without a check. Where there is none, it
    returns None and the program starts fresh. So `latest` can name a tag whose other ranks' shards
    are still being written, or not yet begun. Complete here therefore means all of these hold:
    - `latest` names the tag;
    - every .pt file in it is whole;
    - there is one ZeRO optimizer shard per rank there, as many as its model states file's
      dp_world_size x mp_world_size.
    In the rule's words: pointer:latest+torchzips+dsshards. A kill in that window is a finding
    (failures.slow_writes widens it).

    At INFO, rank 0 logs "[Torch] Checkpoint <tag> is about to be saved!" as a save starts. Its
    workers' logger defaults to WARNING. No line marks a save's end. So the stall is estimated from
    the step times (`saving`). The scenario gives progress."""
    name = "deepspeed"
    requires = ("deepspeed",)
    extra = "deepspeed"
    doc = ("DeepSpeed save_checkpoint/load_checkpoint (dir = {ckpt_dir}: global_step<N>/, the `latest` file "
           "names the tag a restart loads)")
    defaults = {"checkpoints": r"{ckpt_dir}/global_step(?P<step>\d+)", "complete": "pointer:latest+torchzips+dsshards",
                "selects": "pointer",
                "saving": r"Checkpoint \S+ is about to be saved|Saving model checkpoint: \S+"}


@ADAPTERS.register
class Torchtitan(Adapter):
    """torchtitan's checkpointing.

    Read from two sources:
    - pytorch/torchtitan at commit 0128b99: torchtitan/components/checkpoint.py;
    - torchtitan 0.3.0's wheel: components/checkpointer/dcp.py and components/metrics.py.

    DCP saves into <dump_folder>/<checkpoint.folder>/step-<N>. That folder is the checkpoint dir here.
    A restart loads the highest step-<N> that holds DCP's .metadata.
    In 0.3.0 a folder with an HF model.safetensors.index.json also qualifies. This adapter does not count that.

    The lines it logs:
    - On a restart: "Loading the checkpoint at step N." (0128b99).
      Or "Loading the checkpoint from <dir>/step-N." (0.3.0).
    - After a save: "Finished saving the checkpoint (or staging if async is enabled)in S seconds." (0128b99).
      Or "Finished saving|staging the checkpoint in S seconds." (0.3.0). It says staging when async.
    - After the last step's save, which is always sync: "Last step checkpoint completed in S.SSs" (0.3.0).
    - From rank 0: "step: N  loss: X ...". ANSI colour codes sit between label and number.

    0.3.0 was run here on CPU, one rank (tests/data/torchtitan/record.sh). It recorded, in its own words:
    - its seed checkpoint (step-0: .metadata and __0_0.distcp);
    - a relaunch that loads step-0 over a step-5 cut short (no .metadata).
    The adapter is tested on what it wrote and logged.
    It does not train on CPU: llama3 takes FlexAttention, which has no CPU backward.
    So progress lines are tested in the format its source logs."""
    name = "torchtitan"
    doc = "torchtitan (DCP step-<N> folders, .metadata written last; its 'step: N  loss: X' log lines)"
    defaults = {"checkpoints": r"{ckpt_dir}/step-(?P<step>\d+)", "complete": "dcp", "selects": "newest_complete",
                "progress": r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf)",
                "resumed": r"Loading the checkpoint (?:at step (?P<step>\d+)|from (?P<path>\S+?))\.?\s*$",
                "saved": r"(?:Finished (?P<kind>saving|staging) the checkpoint (?:\(or staging if async is enabled\)\s*)?"
                         r"|Last step checkpoint completed )in (?P<seconds>[0-9.]+)(?: seconds|s\b)"}


@ADAPTERS.register
class Megatron(Adapter):
    """Megatron-LM's checkpointing.

    Read from NVIDIA/Megatron-LM at commit 0032978: megatron/training/checkpointing.py.

    Checkpoints are iter_<7 digits> folders under --save, the checkpoint dir here. The tracker file
    latest_checkpointed_iteration.txt names the iteration a restart loads. read_metadata takes an
    integer, or "release". Anything else prints "ERROR: Invalid metadata file" and calls sys.exit(),
    exit status 0.

    The lines it logs:
    - the load: "successfully loaded checkpoint from DIR [ t i/n, p j/m ] at iteration N";
    - training: "iteration N/ M | ... | lm loss: X |".

    It is tested from recorded lines and a recorded layout, since it needs GPUs to run."""
    name = "megatron"
    doc = "Megatron-LM (iter_<N> folders, latest_checkpointed_iteration.txt names the one loaded)"
    defaults = {"checkpoints": r"{ckpt_dir}/iter_(?P<step>\d+)", "complete": "pointer:latest_checkpointed_iteration.txt",
                "selects": "pointer",
                "progress": r"iteration\s+(?P<step>\d+)/\s*\d+\s*\|.*?\blm loss: (?P<loss>[-+0-9.eE]+|nan|inf)",
                "resumed": r"successfully loaded checkpoint from \S+ \[ t \d+/\d+, p \d+/\d+ \] at iteration (?P<step>\d+)"}


@ADAPTERS.register
class Ezpz(Adapter):
    """ezpz's FSDP2 + tensor-parallel example, ezpz.examples.fsdp_tp.

    Read from saforem2/ezpz at commit 1229a17, version 0.26.1: src/ezpz/examples/fsdp_tp.py and
    examples/_checkpoint.py.

    With --ckpt-dir DIR --save-interval N, it saves DCP into DIR/step-<N>. Rank 0 first removes a
    stale .complete, then writes meta.json and .complete last. A restart loads the highest step-<N>
    holding .complete (latest_checkpoint). It logs "RESUMED from step=N (epoch=...)".

    Rank 0's lines:
    - Its progress line is History.log_metrics's "iter=N epoch=E bidx=B loss=X(±std) dt=Y(±std) ..."
      (train/ stripped).
    - After a save it logs "train/ckpt_save_seconds=S (sync save @ step N)". With --async-ckpt it
      logs "train/ckpt_stage_seconds=S (async stage @ step N)".
    - The async drain is not booked: it has no line of its own.

    Its History JSONL is rewritten per launch in the launch's directory. The tap reads the console.
    The report sets that file's own timers beside restartlab's (own_metrics).

    It runs here for real on CPU (scenarios/examples/ezpz-cpu.yaml, tests/test_ezpz.py). ezpz
    0.26.1's output is what the source suggested, in colour. The preflight (programs/ezpz_check.py)
    refuses what would not start or would hang in start-up."""
    name = "ezpz"
    doc = ("ezpz's fsdp_tp example (--ckpt-dir {ckpt_dir}: step-<N>/.complete written last; 'iter=N ... loss=X' "
           "lines; its own timers from its History JSONL)")
    defaults = {"checkpoints": r"{ckpt_dir}/step-(?P<step>\d+)", "complete": "file:.complete",
                "selects": "newest_complete",
                "progress": r"\biter=(?P<step>\d+)\s.*?\bloss=(?P<loss>[-+0-9.eE]+|nan|inf)"
                            r"(?:.*?\bdt=(?P<dt>[0-9.eE+-]+))?",
                "resumed": r"RESUMED from step=(?P<step>\d+)",
                "saved": r"train/ckpt_(?P<kind>save|stage)_seconds=(?P<seconds>[0-9.]+) \((?:sync save|async stage) "
                         r"@ step (?P<step>\d+)\)"}

    # History's JSONL, rewritten per launch in the launch's directory (an attempt's: its cwd)
    own_metrics = OwnMetricsFile("outputs/ezpz.examples.fsdp_tp/*/metrics-0.jsonl", restart="train/restart_seconds",
                                 save="train/ckpt_save_seconds", stage="train/ckpt_stage_seconds",
                                 drain="train/ckpt_drain_seconds")

    def preflight(self, argv, env):
        return ezpz_check.problem(argv, env)


@ADAPTERS.register
class Torchft(Adapter):
    """A torchft program of yours (torchft 0.2.0's Manager), only in a phase whose recovery is torchft.

    Each replica group runs it through restartlab.trainer.ft_hook. The hook observes the Manager
    (quorums, commits, heals, errors). It writes restartlab's metrics rows and the phase's ft
    records, so no progress pattern is needed.

    Its command starts with its Python, because the hook runs in that interpreter. It reads
    REPLICA_GROUP_ID and NUM_REPLICA_GROUPS (torchft's examples' names), and torchrun's RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT. TORCHFT_LIGHTHOUSE names the phase's lighthouse.
    A torchft phase keeps no checkpoints, so the keys below are unused."""
    name = "torchft"
    tap = False
    doc = ("a torchft program of yours (torchft.Manager), in a torchft phase: restartlab's hook on its Manager "
           "reads its steps, commits, heals and errors")
    defaults = {"checkpoints": r"{ckpt_dir}/step-(?P<step>\d+)", "complete": "exists", "selects": "newest_complete"}
