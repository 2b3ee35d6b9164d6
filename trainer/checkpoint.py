"""Checkpointer: save / poll / load_newest / close, sync or async, over PyTorch DCP.

The layout and marker protocol are `restartlab.contracts.ckptdir`'s: shards + .metadata +
manifest.json, then `.complete` last and atomically. Only the newest directory with `.complete` is
ever loaded.

- sync: dcp.save runs on the training group straight into <ckpt>/step-N. The per-file crc32 is
  computed as the bytes are written, by a hashing stream under DCP's FileSystemWriter.
- async: the training loop blocks only to copy each rank's state into host buffers. These are
  allocated once and reused. On a GPU the loop does not even wait for that. The copies are queued
  on a side stream into pinned buffers and overlap the next forward/backward.
  `before_param_update` makes the optimizer's stream wait for them. The background thread waits
  for them before it reads the buffers. Then one background thread per rank does the rest, on a
  *dedicated* gloo group. It runs dcp.save into the node-local stage dir. It copies its files to
  <ckpt> (tmp + rename, crc on the fly). It gathers every rank's file list on that same group, from
  that same thread. Then rank 0 stamps `.complete`.

Without a stage dir (`--ckpt-stage-dir none`, "direct"), the background dcp.save writes straight
into <ckpt>/step-N. That is one write instead of two. The torn files of a killed direct save lie in
the durable dir without .complete, so they are never loaded.

The main thread never issues a collective for checkpointing while a save is in flight. It only
looks at its own future. At most one save is in flight.

This module is the checkpointer the trainer calls, and the sync save. Beside it, each in its own
module, are:

- the async save (ckpt_async): the background write, copy, gather and mark;
- the steps every save takes around its write (ckpt_finish): the torn directory, the agreement on
  errors, the manifest and `.complete`;
- the stager (ckpt_staging): the host buffers and the GPU side stream;
- the stage dir (ckpt_stage_dir): private, agreed, removed;
- the retention policy (ckpt_retention): the prune behind the saves;
- the selection of what to load (ckpt_select).
"""
import os
import time

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from restartlab.contracts import ckptdir
from restartlab.trainer import ckpt_select
from restartlab.trainer.ckpt_async import AsyncSave
from restartlab.trainer.ckpt_finish import SaveError, SaveSteps  # noqa: F401 (SaveError: the trainer's to catch)
from restartlab.trainer.ckpt_io import describe_error, writer
from restartlab.trainer.ckpt_retention import Retention
from restartlab.trainer.ckpt_staging import HostStager
from restartlab.trainer.testpoints import delay, fault, trace
from restartlab.contracts import metric_keys as K


def wait_timeout_s() -> float:
    """How long a save in flight may take before the wait for it fails (RESTARTLAB_CKPT_TIMEOUT,
    600 s). Read at each use: a warm rank imported this module in its pool, before its attempt's
    environment reached os.environ."""
    return float(os.environ.get("RESTARTLAB_CKPT_TIMEOUT", "600"))


class Checkpointer:
    def __init__(self, ckpt_dir, *, rank, world_size, mesh_info, mode="sync", stage_dir=None,
                 local_rank=0, keep=0, log=print, pg_timeout_s=600.0, on_save_error="continue",
                 ckpt_format="dcp", stage_fresh=False):
        self.ckpt_dir = ckpt_dir
        self.rank, self.world_size = rank, world_size
        self.mode = mode
        self.log = log
        self.stager = HostStager(rank)
        self.retention = Retention(ckpt_dir, keep, rank, wait_timeout_s)
        self.steps = SaveSteps(ckpt_dir, rank=rank, world_size=world_size, mesh_info=mesh_info, mode=mode,
                               ckpt_format=ckpt_format, retention=self.retention, log=log, on_save_error=on_save_error)
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
        self._async = AsyncSave(self.steps, self.stager, stage_dir=stage_dir, local_rank=local_rank,
                                stage_fresh=stage_fresh, pg_timeout_s=pg_timeout_s,
                                wait_timeout_s=wait_timeout_s) if mode == "async" else None

    # ------------------------------------------------------------------ save
    def save(self, step: int, state) -> dict:
        """Save the training state (a TrainState) at `step`. Returns the metrics for that step's row."""
        state.step = step
        delay("save", step, self.rank)
        trace("stage" if self.mode == "async" else "write", step, self.rank)
        row = self._async.save(step, state) if self._async else self._save_sync(step, state)
        trace("loop-resumed", step, self.rank)  # sync: the save is over; async: it goes on behind
        return row

    def _save_sync(self, step, state):
        """dcp.save on the training group straight into <ckpt>/step-N, then the marker."""
        t0 = time.time()
        path = ckptdir.step_path(self.ckpt_dir, step)
        err, files = None, {}
        try:
            self.steps.prepare_dir(self.ckpt_dir, step)
        except OSError as e:
            err = describe_error(e)
        errs = self.steps.agree(err)  # also: nobody writes before a torn directory is gone
        if not errs:
            try:
                w = writer(path, step, self.rank, on_first_write=lambda: fault("write", step, self.rank),
                           fmt=self.steps.ckpt_format)
                dcp.save(state.state_dict(), storage_writer=w)  # a failure here is every rank's (DCP)
                files = w.fs.files
            except (Exception, dcp.api.CheckpointException) as e:  # noqa: BLE001  a failed save must not end the training
                err = describe_error(w.fs.error or e)
            if err is None:
                gathered = [None] * self.world_size if self.rank == 0 else None
                trace("gather", step, self.rank)
                dist.gather_object({"files": files, "durable_ts": time.time()}, gathered, dst=0)
                if self.rank == 0:
                    try:
                        self.steps.finalize(path, step, gathered, t0, os.path.join(path, ".metadata"))
                    except OSError as e:
                        err = describe_error(e)
            errs = self.steps.agree(err)
        row = {K.SAVE_S: time.time() - t0,
               K.CKPT_BYTES: sum(f["bytes"] for f in files.values())}
        if errs:
            row.update(self.steps.failed(step, path, errs))
        return row

    # ------------------------------------------------------------------ an async save in flight
    def staged_bytes(self):
        return self.stager.staged_bytes()

    def before_param_update(self):
        """The "safe to train" guarantee (ckpt_staging.HostStager.before_param_update)."""
        self.stager.before_param_update()

    @property
    def last_finalized(self) -> dict:
        """The row of the async save the last wait() saw finish ({}: none, or a sync checkpointer)."""
        return self._async.last_finalized if self._async else {}

    def in_flight(self) -> bool:
        """An async save is running in the background right now."""
        return bool(self._async and self._async.in_flight())

    def save_done(self) -> bool:
        """This rank's background save has finished and its result is not taken yet."""
        return bool(self._async and self._async.save_done())

    def poll(self) -> dict:
        """Non-blocking: metrics for a save that finished since the last poll (no collectives). With
        --on-save-error abort it raises SaveError for a failed one: call it on every rank after the
        same step (the trainer does once every rank's save_done() agreed), or the ranks part."""
        return self._async.poll() if self._async else {}

    def wait(self, timeout=None) -> float:
        """Block until the in-flight save (if any) is durable; returns the seconds waited."""
        return self._async.wait(timeout) if self._async else 0.0

    def close(self) -> dict:
        """Exit path: wait for the last save, so that no final checkpoint is truncated.

        Then remove the stage dir this run created, and wait for the last prune's deletions."""
        self.wait()
        if self._async:
            self._async.close()
        self.retention.close()
        return self.last_finalized

    # ------------------------------------------------------------------ load
    def load_newest(self, state):
        """Load the newest complete checkpoint every rank reads without error into `state` (a
        TrainState), falling back to older ones (ckpt_select). Returns (step loaded or None,
        [(step, why it was rejected)])."""
        return ckpt_select.load_newest(self.ckpt_dir, state, self.rank, self.world_size, self.log)
