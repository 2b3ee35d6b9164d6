"""The async save (trainer/checkpoint.py's `mode="async"`).

The loop blocks only to stage the state into host buffers (ckpt_staging.HostStager). Then one
background thread per rank does the rest, on a group of its own:

- it runs dcp.save into the node's stage dir;
- it copies the files to the checkpoint dir (tmp + rename, crc on the fly);
- it gathers every rank's file list on that group, from that thread;
- rank 0 marks `.complete` (ckpt_finish.SaveSteps).

Without a stage dir ("direct"), dcp.save writes straight into the checkpoint dir. The main thread
never issues a collective for checkpointing while a save is in flight. It only looks at its own
future. At most one save is in flight."""
import datetime
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from restartlab.contracts import ckptdir
from restartlab.contracts import metric_keys as K
from restartlab.trainer import ckpt_stage_dir
from restartlab.trainer.ckpt_finish import SaveError, SaveSteps
from restartlab.trainer.ckpt_io import ChecksumError, copy_durable, describe_error, writer
from restartlab.trainer.ckpt_staging import HostStager
from restartlab.trainer.testpoints import delay, fault, trace


class AsyncSave:
    def __init__(self, steps: SaveSteps, stager: HostStager, *, stage_dir, local_rank, stage_fresh, pg_timeout_s,
                 wait_timeout_s):
        self.steps = steps
        self.stager = stager
        self.rank, self.world_size, self.local_rank = steps.rank, steps.world_size, local_rank
        self.ckpt_dir, self.log = steps.ckpt_dir, steps.log
        self.wait_timeout_s = wait_timeout_s
        self._future = None
        self._inflight_step = None
        self.last_finalized = {}
        self.direct = stage_dir is None  # without a stage: one write
        self._stage_refused = None  # why the stage dir was refused (with --on-save-error abort)
        self.stage_dir = None
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
                         + ("every save fails (--on-save-error abort)" if self.steps.on_save_error == "abort"
                            else f"writing straight to {self.ckpt_dir}"))
            self._stage_refused = err
            self.direct = True

    def save(self, step, state):
        """Stage the state and start its background write; returns the step's row (the stall)."""
        if self._stage_refused and self.steps.on_save_error == "abort":  # every rank knows: every rank stops
            raise SaveError(f"save at step {step} failed: {self._stage_refused}")
        t0 = time.time()
        drain = self.wait()  # at most one save in flight
        t1 = time.time()
        staged = self.stager.stage_state(state, step)
        t2 = time.time()
        self._inflight_step = step
        self._future = self._pool.submit(self._background_save, step, staged, t0, self.stager.event)
        row = {K.STAGE_S: t2 - t1, K.DRAIN_S: drain,
               K.CKPT_BYTES: self.stager.staged_bytes()}
        row.update(self.last_finalized)
        return row

    def _background_save(self, step, staged, t0, event=None):
        """Run on the checkpoint thread: stage-dir write, durable copy, gather, mark.

        Returns (seconds to .complete, [errors]). Every rank agrees on a failed save. It is cleaned
        up here, never left half-done.

        The ranks of a node share the step's stage directory. Only its owner (local rank 0) cleans
        and creates it, and removes it. Each time, this happens behind a collective on the
        checkpoint group. So no rank ever removes what another may be using."""
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
            self.steps.prepare_dir(self.ckpt_dir, step)  # a torn durable directory of a dead attempt
        except OSError as e:
            err = describe_error(e)
        errs = self.steps.agree(err, self._group)  # both exist (or are gone) before anybody writes
        if not errs:
            err = self._write_and_copy(step, staged, stage_path, dst, t0)
            errs = self.steps.agree(err, self._group)  # every rank of every node is done with its stage dir
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
                       on_first_write=lambda: fault("write", step, self.rank), fmt=self.steps.ckpt_format,
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
                self.steps.finalize(dst, step, gathered, t0, os.path.join(dst, ".metadata"))
            except OSError as e:
                err = describe_error(e)
        return err

    def _copy_to_durable(self, w, stage_path, dst, step):
        """Copy the staged files into the durable dir and return their manifest entries.

        Each file goes as tmp + fsync + rename, with its crc computed on the way. That crc is
        checked against the crc of the write."""
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
        """A save is running in the background right now."""
        return self._future is not None and not self._future.done()

    def save_done(self) -> bool:
        """This rank's background save has finished and its result is not taken yet."""
        return self._future is not None and self._future.done()

    def poll(self) -> dict:
        """Non-blocking: metrics for a save that finished since the last poll (no collectives)."""
        if self._future is not None and self._future.done():
            return self._collect()
        return {}

    def _collect(self):
        latency, errs = self._future.result()  # re-raises an unexpected background failure here
        step = self._inflight_step
        self._future, self._inflight_step = None, None
        if errs:
            self.steps.abort_if_asked(step, errs)
            return {K.CKPT_FAILED_STEP: step, K.CKPT_ERROR: errs[0][:300]}
        return {K.CKPT_FINALIZED_STEP: step, K.CKPT_FINALIZE_S: latency}

    def wait(self, timeout=None) -> float:
        """Block until the save in flight (if any) is durable; returns the seconds waited."""
        timeout = self.wait_timeout_s() if timeout is None else timeout
        self.last_finalized = {}
        if self._future is None:
            return 0.0
        t0 = time.time()
        self._future.result(timeout=timeout)  # TimeoutError rather than a silent hang
        self.last_finalized = self._collect()
        return time.time() - t0

    def close(self):
        """After the last wait: remove the stage dir this run created, from the checkpoint thread."""
        stage = None if self.direct else self.stage_dir
        self._pool.submit(ckpt_stage_dir.remove, stage, self.local_rank, self._group,
                          self.log).result(timeout=self.wait_timeout_s())
        self._pool.shutdown(wait=True)
