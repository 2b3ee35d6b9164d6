"""Checkpointer: save / poll / load_newest / close, sync or async, over PyTorch DCP.

Layout and marker protocol are `restartlab.contracts.ckptdir`'s: shards + .metadata + manifest.json, then
`.complete` last and atomically. Only the newest directory with `.complete` is ever loaded.

sync   dcp.save on the training group straight into <ckpt>/step-N; per-file crc32 is computed
       as the bytes are written (a hashing stream under DCP's FileSystemWriter).
async  the training loop blocks only to copy each rank's state into host buffers allocated once
       and reused (on a GPU it does not even wait for that: the copies are queued on a side
       stream into pinned buffers and overlap the next forward/backward; `before_param_update`
       makes the optimizer's stream wait for them, and the background thread waits for them
       before it reads the buffers); one background thread per rank then runs dcp.save into the
       node-local stage dir on a *dedicated* gloo group, copies its files to <ckpt> (tmp +
       rename, crc on the fly), gathers every rank's file list on that same group from that same
       thread, and rank 0 stamps `.complete`. Without a stage dir (`--ckpt-stage-dir none`,
       "direct") the background dcp.save writes straight into <ckpt>/step-N: one write instead of
       two; the torn files of a killed direct save lie in the durable dir without .complete, so
       they are never loaded. The main thread never issues a collective for checkpointing while a
       save is in flight; it only looks at its own future. At most one save is in flight.

This module is the writer: the sync save, the async save's background write, copy, gather and
mark. Beside it, each its own module: the stager (ckpt_staging: the host buffers and the GPU side
stream), the stage dir (ckpt_stage_dir: private, agreed, removed), the retention policy
(ckpt_retention: the prune behind the saves) and the selection of what to load (ckpt_select).
"""
import dataclasses
import datetime
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from restartlab.contracts import ckptdir
from restartlab.trainer import ckpt_select, ckpt_stage_dir
from restartlab.trainer.ckpt_io import ChecksumError, copy_durable, describe_error, writer
from restartlab.trainer.ckpt_retention import Retention
from restartlab.trainer.ckpt_staging import HostStager
from restartlab.trainer.testpoints import delay, fault, trace
from restartlab.contracts import metric_keys as K


def wait_timeout_s() -> float:
    """How long a save in flight may take before the wait for it fails (RESTARTLAB_CKPT_TIMEOUT,
    600 s). Read at each use: a warm rank imported this module in its pool, before its attempt's
    environment reached os.environ."""
    return float(os.environ.get("RESTARTLAB_CKPT_TIMEOUT", "600"))


class SaveError(RuntimeError):
    """A save failed and --on-save-error is abort."""


class Checkpointer:
    def __init__(self, ckpt_dir, *, rank, world_size, mesh_info, mode="sync", stage_dir=None,
                 local_rank=0, keep=0, log=print, pg_timeout_s=600.0, on_save_error="continue",
                 ckpt_format="dcp", stage_fresh=False):
        self.ckpt_dir = ckpt_dir
        self.rank, self.world_size = rank, world_size
        self.mesh_info = mesh_info
        self.mode = mode
        self.keep = keep
        self.log = log
        self.on_save_error = on_save_error
        self.ckpt_format = ckpt_format  # ckpt_io.FORMATS: how tensor items lie in the shard files
        self.stager = HostStager(rank)
        self.retention = Retention(ckpt_dir, keep, rank, wait_timeout_s)
        self._future = None
        self._inflight_step = None
        self._pool = None
        self._group = None
        self.last_finalized = {}
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
        self.direct = mode == "async" and stage_dir is None  # async without a stage: one write
        self._stage_refused = None  # why the stage dir was refused (with --on-save-error abort)
        self.stage_dir = None
        if mode == "async":
            self.local_rank = local_rank
            # a group of its own, for the background thread only (on the training group
            # dcp.async_save hangs; a main-thread probe on a shared group deadlocks)
            self._group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=pg_timeout_s))
            if not self.direct:
                self._open_stage_dir(stage_dir, stage_fresh)
            dist.barrier()
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt")

    def _open_stage_dir(self, where, fresh):
        """The node's private stage dir (ckpt_stage_dir), agreed by every rank. A refusal anywhere:
        every rank writes straight to the checkpoint dir (--on-save-error continue) or every save
        fails with the refusal (abort)."""
        self.stage_dir, err = ckpt_stage_dir.agree(where, fresh, self.rank, self.local_rank, self.world_size, self.log)
        if err:
            if self.rank == 0:
                self.log(f"async: stage dir refused: {err}; "
                         + ("every save fails (--on-save-error abort)" if self.on_save_error == "abort"
                            else f"writing straight to {self.ckpt_dir}"))
            self._stage_refused = err
            self.direct = True

    # ------------------------------------------------------------------ save
    def save(self, step: int, state) -> dict:
        """Save the training state (a TrainState) at `step`. Returns the metrics for that step's row."""
        state.step = step
        delay("save", step, self.rank)
        trace("stage" if self.mode == "async" else "write", step, self.rank)
        row = self._save_sync(step, state) if self.mode == "sync" else self._save_async(step, state)
        trace("loop-resumed", step, self.rank)  # sync: the save is over; async: it goes on behind
        return row

    def _start_marker_info(self, step, t0):
        return ckptdir.Marker(step=step, mode=self.mode, save_start=t0, world_size=self.world_size)

    def _prepare_dir(self, root, step):
        """Rank 0 removes a torn directory from an earlier attempt; nobody writes before it's gone."""
        path = ckptdir.step_path(root, step)
        if self.rank == 0 and os.path.exists(path):
            shutil.rmtree(path)
        return path

    def _save_sync(self, step, state):
        t0 = time.time()
        path = ckptdir.step_path(self.ckpt_dir, step)
        err, files = None, {}
        try:
            self._prepare_dir(self.ckpt_dir, step)
        except OSError as e:
            err = describe_error(e)
        errs = self._agree(err)  # also: nobody writes before a torn directory is gone
        if not errs:
            try:
                w = writer(path, step, self.rank, on_first_write=lambda: fault("write", step, self.rank),
                           fmt=self.ckpt_format)
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
                        self._finalize(path, step, gathered, t0, os.path.join(path, ".metadata"))
                    except OSError as e:
                        err = describe_error(e)
            errs = self._agree(err)
        row = {K.SAVE_S: time.time() - t0,
               K.CKPT_BYTES: sum(f["bytes"] for f in files.values())}
        if errs:
            row.update(self._failed(step, path, errs))
        return row

    def _agree(self, err, group=None):
        """Every rank's error (None: fine) -> the list of 'rank r: error' lines, the same on all."""
        errs = [None] * self.world_size
        dist.all_gather_object(errs, err, group=group)
        return [f"rank {r}: {e}" for r, e in enumerate(errs) if e]

    def _failed(self, step, path, errs):
        """After a failed save (all ranks agree on it): no .complete was written; rank 0 removes
        the partial directory; the previous complete checkpoint is untouched."""
        if self.rank == 0:
            self.log(f"SAVE FAILED at step={step} ({path}): {'; '.join(errs[:4])}")
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                self.log(f"could not remove the partial {path}: {describe_error(e)} (it has no .complete: "
                         f"never loaded)")
        if self.on_save_error == "abort":
            raise SaveError(f"save at step {step} failed: {errs[0]}")
        return {K.CKPT_FAILED: step, K.CKPT_ERROR: errs[0][:300]}

    def _finalize(self, path, step, gathered, t0, metadata_path):
        """Rank 0: manifest.json, then .complete (atomic), then prune."""
        all_files = {}
        for g in gathered:
            all_files.update(g["files"])
        all_files[".metadata"] = ckptdir.file_crc32(metadata_path)
        manifest = dict(step=step, mode=self.mode, save_start=t0, world_size=self.world_size, mesh=self.mesh_info,
                        format=self.ckpt_format,
                        files=all_files,
                        total_bytes=sum(f["bytes"] for f in all_files.values()),
                        trainer_version="0.1.0")
        trace("manifest", step, self.rank)
        ckptdir.write_atomic(os.path.join(path, ckptdir.MANIFEST),
                             json.dumps(manifest, indent=1).encode())
        fault("mark", step, self.rank)
        info = dataclasses.replace(self._start_marker_info(step, t0),
                                   durable_ts=max(g["durable_ts"] for g in gathered),  # the last rank's files durable
                                   complete_ts=time.time())
        trace("marker", step, self.rank)
        ckptdir.mark_complete(path, info)
        trace("complete", step, self.rank)
        fault("complete", step, self.rank)
        self.retention.after_complete(step)

    # ------------------------------------------------------------------ async
    def staged_bytes(self):
        return self.stager.staged_bytes()

    def _save_async(self, step, state):
        if self._stage_refused and self.on_save_error == "abort":  # every rank knows: every rank stops
            raise SaveError(f"save at step {step} failed: {self._stage_refused}")
        t0 = time.time()
        drain = self.wait()  # at most one save in flight
        t1 = time.time()
        staged = self.stager.stage_state(state, step)
        t2 = time.time()
        self._inflight_step = step
        self._future = self._pool.submit(self._background_save, step, staged, t0, self.stager.event)
        row = {K.STAGE_S: t2 - t1, K.DRAIN_S: drain,
               K.CKPT_BYTES: self.staged_bytes()}
        row.update(self.last_finalized)
        return row

    def before_param_update(self):
        """The "safe to train" guarantee (ckpt_staging.HostStager.before_param_update)."""
        self.stager.before_param_update()

    def _background_save(self, step, staged, t0, event=None):
        """Runs on the checkpoint thread: stage-dir write, durable copy, gather, mark. Returns
        (seconds to .complete, [errors]): a failed save is agreed on by every rank and cleaned up
        here, never left half-done.

        The step's stage directory is shared by the ranks of a node: only its owner (local
        rank 0) cleans and creates it, and removes it, each time behind a collective on the
        checkpoint group, so no rank ever removes what another may be using."""
        stage_path = None if self.direct else ckptdir.step_path(self.stage_dir, step)
        dst = ckptdir.step_path(self.ckpt_dir, step)
        err = None
        if event is not None:
            event.synchronize()  # the staging copies have landed in the host buffers
        try:
            if self.local_rank == 0 and not self.direct:
                delay("stage-clean", step, self.rank)
                shutil.rmtree(stage_path, ignore_errors=True)  # a torn stage of a dead attempt
                delay("stage-mkdir", step, self.rank)
                os.makedirs(stage_path, mode=0o700, exist_ok=True)  # another owner sharing the path may be first
            self._prepare_dir(self.ckpt_dir, step)  # a torn durable directory of a dead attempt
        except OSError as e:
            err = describe_error(e)
        errs = self._agree(err, self._group)  # both exist (or are gone) before anybody writes
        if not errs:
            err = self._write_and_copy(step, staged, stage_path, dst, t0)
            errs = self._agree(err, self._group)  # every rank of every node is done with its stage dir
        latency = time.time() - t0
        if self.local_rank == 0 and not self.direct:
            shutil.rmtree(stage_path, ignore_errors=True)
        if errs and self.rank == 0:
            self.log(f"SAVE FAILED at step={step} ({dst}): {'; '.join(errs[:4])}")
            shutil.rmtree(dst, ignore_errors=True)
        delay("saved", step, self.rank)  # a rank whose save thread finishes later than the others'
        return latency, errs

    def _write_and_copy(self, step, staged, stage_path, dst, t0):
        """dcp.save into the stage dir, copy to the durable dir, gather, rank 0 marks (direct:
        dcp.save straight into the durable dir, no copy). Returns this rank's error or None;
        every rank takes part in the same collectives either way."""
        try:
            w = writer(dst if self.direct else stage_path, step, self.rank,
                       on_first_write=lambda: fault("write", step, self.rank), fmt=self.ckpt_format,
                       private=not self.direct)
            trace("write", step, self.rank)
            dcp.save(staged, storage_writer=w, process_group=self._group)  # fails on all ranks alike
        except (Exception, dcp.api.CheckpointException) as e:  # noqa: BLE001
            return describe_error(w.fs.error or e)
        err, files = None, {}
        if not self.direct:
            delay("staged", step, self.rank)
        trace("copy", step, self.rank)
        try:
            if self.direct:  # the files are where they belong, with their crcs from the write
                files = dict(w.fs.files)
                ckptdir.fsync_dir(dst)
            else:
                files = self._copy_to_durable(w, stage_path, dst, step)
        except (OSError, ChecksumError) as e:
            err = describe_error(e)
        gathered = [None] * self.world_size if self.rank == 0 else None
        trace("gather", step, self.rank)
        dist.gather_object({"files": files, "durable_ts": time.time(), "error": err}, gathered, dst=0,
                           group=self._group)
        if self.rank == 0 and not any(g["error"] for g in gathered):
            try:
                self._finalize(dst, step, gathered, t0, os.path.join(dst, ".metadata"))
            except OSError as e:
                err = describe_error(e)
        return err

    def _copy_to_durable(self, w, stage_path, dst, step):
        """The staged files into the durable dir (tmp + fsync + rename each, crc on the way,
        checked against the crc of the write); returns their manifest entries."""
        files = {}
        os.makedirs(dst, exist_ok=True)
        for i, name in enumerate(sorted(w.fs.files)):
            files[name] = copy_durable(os.path.join(stage_path, name), os.path.join(dst, name))
            if files[name]["crc32"] != w.fs.files[name]["crc32"]:
                raise ChecksumError(f"{name}: the stage copy read back differs from what was written")
            files[name]["items"] = w.fs.files[name]["items"]
            if i == 0:
                fault("copy", step, self.rank)
        if self.rank == 0:
            copy_durable(os.path.join(stage_path, ".metadata"), os.path.join(dst, ".metadata"))
        ckptdir.fsync_dir(dst)
        return files

    def in_flight(self) -> bool:
        """An async save is running in the background right now."""
        return self._future is not None and not self._future.done()

    def save_done(self) -> bool:
        """This rank's background save has finished and its result is not taken yet."""
        return self._future is not None and self._future.done()

    def poll(self) -> dict:
        """Non-blocking: metrics for a save that finished since the last poll (no collectives). With
        --on-save-error abort it raises SaveError for a failed one: call it on every rank after the
        same step (the trainer does once every rank's save_done() agreed), or the ranks part."""
        if self._future is not None and self._future.done():
            return self._collect()
        return {}

    def _collect(self):
        latency, errs = self._future.result()  # re-raises an unexpected background failure here
        step = self._inflight_step
        self._future, self._inflight_step = None, None
        if errs:
            if self.on_save_error == "abort":
                raise SaveError(f"save at step {step} failed: {errs[0]}")
            return {K.CKPT_FAILED_STEP: step, K.CKPT_ERROR: errs[0][:300]}
        return {K.CKPT_FINALIZED_STEP: step, K.CKPT_FINALIZE_S: latency}

    def wait(self, timeout=None) -> float:
        """Block until the in-flight save (if any) is durable; returns the seconds waited."""
        timeout = wait_timeout_s() if timeout is None else timeout
        self.last_finalized = {}
        if self._future is None:
            return 0.0
        t0 = time.time()
        self._future.result(timeout=timeout)  # TimeoutError rather than a silent hang
        self.last_finalized = self._collect()
        return time.time() - t0

    def close(self) -> dict:
        """Exit path: wait for the last save (no truncated final checkpoint), then remove the
        stage dir this run created, and wait for the last prune's deletions."""
        self.wait()
        if self._pool:
            stage = None if self.direct else self.stage_dir
            self._pool.submit(ckpt_stage_dir.remove, stage, self.local_rank, self._group,
                              self.log).result(timeout=wait_timeout_s())
            self._pool.shutdown(wait=True)
        self.retention.close()
        return self.last_finalized

    # ------------------------------------------------------------------ load
    def load_newest(self, state):
        """Load the newest complete checkpoint every rank reads without error into `state` (a
        TrainState), falling back to older ones (ckpt_select). Returns (step loaded or None,
        [(step, why it was rejected)])."""
        return ckpt_select.load_newest(self.ckpt_dir, state, self.rank, self.world_size, self.log)
