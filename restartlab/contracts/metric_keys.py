"""The keys of a metrics row, spelled here and nowhere else.

A row (layout.Attempt.metrics(rank)) is {"timestamp", "rank", "metrics": {KEY: value}}. The bundled
trainer and the torchft trainer write the keys. The tap writes them for a program of yours, from its
output. The collector, the verdict, the plots, the relaunch loop and the live views read them. A
key's meaning is its comment."""

# every progress row
ITER = "train/iter"                        # the step this row is about (a final row: the last step)
LOSS = "train/loss"                        # the step's loss (a row with ITER and LOSS is a step taken)
LOSS_LOGGED = "train/loss_logged"          # the loss the program's own log line gave for step ITER (not a step:
#                                            runtime/tap.py, where the steps come from the state probe)
DT = "train/dt"                            # seconds the step took

# the first step of an attempt
RESTART_S = "train/restart_seconds"        # launch -> first step done
RESUMED_FROM = "train/resumed_from"        # the checkpoint step it loaded (0: none)
RESUME_EVIDENCE = "program/resume_evidence"  # a tapped program's: "line" (it said so) or "inferred"
STARTUP = "startup/"                       # the prefix of the start-up phases' seconds, below
STARTUP_LAUNCH_TS = "startup/launch_ts"    # when the launcher started (the relaunch loop's clock)
STARTUP_IMPORT_S = "startup/import_s"         # the bundled trainer: torch, torch._dynamo (in build_s before 2026-12-07)
STARTUP_DIST_INIT_S = "startup/dist_init_s"
STARTUP_BUILD_S = "startup/build_s"           # the model, sharded
STARTUP_LOAD_S = "startup/load_s"
STARTUP_FIRST_STEP_S = "startup/first_step_s"
STARTUP_WARM = "startup/warm"              # 1: the rank was forked by a warm standby pool

# saves
SAVE_S = "train/ckpt_save_seconds"         # a synchronous save's stall
STAGE_S = "train/ckpt_stage_seconds"       # an asynchronous save's stall (the copy to host memory)
DRAIN_S = "train/ckpt_drain_seconds"       # waiting for the previous background write before staging
SAVE_ESTIMATED = "train/ckpt_estimated"    # true: the row's save stall was estimated from step times (tap)
CKPT_BYTES = "train/ckpt_bytes"
CKPT_INFLIGHT = "train/ckpt_inflight"      # 1: a background save was writing during this step
CKPT_FAILED = "train/ckpt_failed"          # a save that failed (its step)
CKPT_FAILED_STEP = "train/ckpt_failed_step"  # a background save that failed (its step)
CKPT_ERROR = "train/ckpt_error"
CKPT_FINALIZED_STEP = "train/ckpt_finalized_step"  # a background save made complete (its step)
CKPT_FINALIZE_S = "train/ckpt_finalize_seconds"

# the end of an attempt
PARAMS_CRC = "train/params_crc"            # rank 0's final row: the parameters' checksum at the last step
FINISHED = "train/finished"                # a tapped program's final row: it ended after the last step (tap.py)
PREEMPTED = "train/preempted"              # the step of the emergency checkpoint (preemption, walltime)

# torchft replica groups (trainer/ft.py)
FT_FIRST_STEP = "ft/first_step"
FT_ATTEMPTED = "ft/attempted"


def ckpt_seconds(kind: str) -> str:
    """The stall key of a save of `kind` (save, stage, drain)."""
    return {"save": SAVE_S, "stage": STAGE_S, "drain": DRAIN_S}[kind]
