"""Checkpointer: save / poll / load_newest / close, sync or async, over PyTorch DCP.

Layout and marker protocol are `restartlab.ckptdir`'s: shards + .metadata + manifest.json, then
`.complete` last and atomically. Only the newest directory with `.complete` is ever loaded.

sync   dcp.save on the training group straight into <ckpt>/step-N; per-file crc32 is computed
       as the bytes are written (a hashing stream under DCP's FileSystemWriter).
async  the training loop blocks only to copy each rank's state into host buffers allocated once
       and reused; one background thread per rank then runs dcp.save into the node-local stage
       dir on a *dedicated* gloo group, copies its files to <ckpt> (tmp + rename, crc on the fly),
       gathers every rank's file list on that same group from that same thread, and rank 0 stamps
       `.complete`. The main thread never issues a collective for checkpointing while a save is
       in flight; it only looks at its own future. At most one save is in flight.
"""
import io
import json
import os
import shutil
import signal
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.tensor import DTensor

from restartlab import ckptdir

WAIT_TIMEOUT_S = float(os.environ.get("RESTARTLAB_CKPT_TIMEOUT", "600"))


def fault(point: str, step: int, rank: int):
    """Test-only fault points: RESTARTLAB_FAULT=point:step[:rank] SIGKILLs this process there
    (stage, write, copy, mark). Used by the tests to kill at exact places inside a save."""
    spec = os.environ.get("RESTARTLAB_FAULT")
    if not spec:
        return
    parts = spec.split(":")
    want_rank = int(parts[2]) if len(parts) > 2 else 0
    if parts[0] == point and int(parts[1]) == step and want_rank == rank:
        print(f"FAULT {point} at step={step} rank={rank}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


class _HashingStream(io.RawIOBase):
    """A write-only file that keeps a running crc32 and byte count of what passes through."""

    def __init__(self, f, on_first_write=None):
        self._f = f
        self.crc = 0
        self.nbytes = 0
        self._on_first_write = on_first_write

    def writable(self):
        return True

    def write(self, b):
        mv = memoryview(b).cast("B")
        self.crc = zlib.crc32(mv, self.crc)
        self.nbytes += len(mv)
        n = self._f.write(mv)
        if self._on_first_write:
            cb, self._on_first_write = self._on_first_write, None
            self._f.flush()
            cb()
        return n

    def tell(self):
        return self._f.tell()

    def fileno(self):
        return self._f.fileno()

    def flush(self):
        if not self._f.closed:
            self._f.flush()

    def close(self):
        if not self._f.closed:
            self._f.close()
        super().close()


class _HashingFileSystem(FileSystem):
    """DCP's FileSystem, recording {file name: (bytes, crc32)} of every shard written."""

    def __init__(self, on_first_write=None):
        super().__init__()
        self.files = {}
        self._on_first_write = on_first_write

    @contextmanager
    def create_stream(self, path, mode):
        name = os.path.basename(str(path))
        if "w" not in mode or not name.endswith(".distcp"):
            with super().create_stream(path, mode) as s:
                yield s
            return
        with open(path, mode) as f:
            hs = _HashingStream(f, self._on_first_write)
            self._on_first_write = None
            yield hs
            self.files[name] = {"bytes": hs.nbytes, "crc32": hs.crc}


def _writer(path, on_first_write=None):
    w = dcp.FileSystemWriter(path, sync_files=True)
    w.fs = _HashingFileSystem(on_first_write)
    return w


def _copy_durable(src: str, dst: str) -> dict:
    """Copy src to dst as tmp + fsync + rename, computing crc32 on the way."""
    tmp = dst + ".tmp"
    with open(tmp, "wb") as fo:
        info = ckptdir.file_crc32(src, sink=fo)
        fo.flush()
        os.fsync(fo.fileno())
    os.replace(tmp, dst)
    return info


class Checkpointer:
    def __init__(self, ckpt_dir, *, rank, world_size, mesh_info, mode="sync", stage_dir=None,
                 local_rank=0, keep=0, log=print):
        self.ckpt_dir = ckpt_dir
        self.rank, self.world_size = rank, world_size
        self.mesh_info = mesh_info
        self.mode = mode
        self.keep = keep
        self.log = log
        self._buffers = {}  # key -> (spec, host buffer, staged tensor over it)
        self._staged_bytes = None
        self._future = None
        self._inflight_step = None
        self._pool = None
        self._group = None
        self.last_finalized = {}
        if rank == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
        if mode == "async":
            self.stage_dir = stage_dir
            # a group of its own, for the background thread only (on the training group
            # dcp.async_save hangs; a main-thread probe on a shared group deadlocks)
            self._group = dist.new_group(backend="gloo")
            if local_rank == 0:  # stage dirs of dead attempts on this node
                shutil.rmtree(stage_dir, ignore_errors=True)
            dist.barrier()
            os.makedirs(stage_dir, exist_ok=True)
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt")

    # ------------------------------------------------------------------ save
    def save(self, step: int, state) -> dict:
        """Save the training state (a TrainState) at `step`. Returns the metrics for that step's row."""
        state.step = step
        if self.mode == "sync":
            return self._save_sync(step, state)
        return self._save_async(step, state)

    def _start_marker_info(self, step, t0):
        return {"step": step, "mode": self.mode, "save_start": t0, "world_size": self.world_size}

    def _prepare_dir(self, root, step):
        """Rank 0 removes a torn directory from an earlier attempt; nobody writes before it's gone."""
        path = ckptdir.step_path(root, step)
        if self.rank == 0 and os.path.exists(path):
            shutil.rmtree(path)
        return path

    def _save_sync(self, step, state):
        t0 = time.time()
        path = self._prepare_dir(self.ckpt_dir, step)
        dist.barrier()
        sd = state.state_dict()
        w = _writer(path, on_first_write=lambda: fault("write", step, self.rank))
        dcp.save(sd, storage_writer=w)
        files = w.fs.files
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object({"files": files, "durable_ts": time.time()}, gathered, dst=0)
        if self.rank == 0:
            self._finalize(path, step, gathered, t0, os.path.join(path, ".metadata"))
        nbytes = sum(f["bytes"] for f in files.values())
        return {"train/ckpt_save_seconds": time.time() - t0, "train/ckpt_bytes": nbytes}

    def _finalize(self, path, step, gathered, t0, metadata_path):
        """Rank 0: manifest.json, then .complete (atomic), then prune."""
        all_files = {}
        for g in gathered:
            all_files.update(g["files"])
        all_files[".metadata"] = ckptdir.file_crc32(metadata_path)
        manifest = dict(self._start_marker_info(step, t0), mesh=self.mesh_info, files=all_files,
                        total_bytes=sum(f["bytes"] for f in all_files.values()),
                        trainer_version="0.1.0")
        ckptdir.write_atomic(os.path.join(path, ckptdir.MANIFEST),
                             json.dumps(manifest, indent=1).encode())
        fault("mark", step, self.rank)
        info = self._start_marker_info(step, t0)
        info["durable_ts"] = max(g["durable_ts"] for g in gathered)  # the last rank's files durable
        info["complete_ts"] = time.time()
        ckptdir.mark_complete(path, info)
        if self.keep > 0:
            ckptdir.prune(self.ckpt_dir, self.keep)

    # ------------------------------------------------------------------ async
    def _stage(self, obj, key, step):
        """Copy tensors into reusable host buffers; DTensors keep their metadata. The buffers and
        the DTensor wrappers around them are built on the first save and reused afterwards
        (rebuilding ~200 wrappers per save cost as much as the copy itself)."""
        if isinstance(obj, dict):
            return {k: self._stage(v, f"{key}/{k}", step) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._stage(v, f"{key}/{i}", step) for i, v in enumerate(obj))
        if isinstance(obj, torch.Tensor):
            return self._buffer(key, obj)
        return obj

    def _buffer(self, key, t):
        """The staged copy of `t`: a preallocated host tensor (a DTensor over one, for a DTensor)."""
        is_dt = isinstance(t, DTensor)
        local = t.to_local() if is_dt else t
        spec = (local.shape, local.dtype, t.shape, t.placements, t.device_mesh) if is_dt \
            else (local.shape, local.dtype)
        cached = self._buffers.get(key)
        if cached is None or cached[0] != spec:
            buf = torch.empty(local.shape, dtype=local.dtype, device="cpu",
                              pin_memory=local.device.type == "cuda")
            staged = DTensor.from_local(buf, t.device_mesh, t.placements, run_check=False,
                                        shape=t.shape, stride=t.stride()) if is_dt else buf
            cached = self._buffers[key] = (spec, buf, staged)
            self._staged_bytes = None
        cached[1].copy_(local.detach(), non_blocking=local.device.type == "cuda")
        return cached[2]

    def staged_bytes(self):
        if self._staged_bytes is None:
            self._staged_bytes = sum(b.numel() * b.element_size() for _, b, _ in self._buffers.values())
        return self._staged_bytes

    def _save_async(self, step, state):
        t0 = time.time()
        drain = self.wait(timeout=WAIT_TIMEOUT_S)  # at most one save in flight
        t1 = time.time()
        staged = {}
        for i, (name, part) in enumerate(state.parts.items()):
            staged[name] = self._stage(part.state_dict(), name, step)
            if i == 0:
                fault("stage", step, self.rank)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t2 = time.time()
        self._inflight_step = step
        self._future = self._pool.submit(self._background_save, step, staged, t0)
        row = {"train/ckpt_stage_seconds": t2 - t1, "train/ckpt_drain_seconds": drain,
               "train/ckpt_bytes": self.staged_bytes()}
        row.update(self.last_finalized)
        return row

    def _background_save(self, step, staged, t0):
        """Runs on the checkpoint thread: stage-dir write, durable copy, gather, mark."""
        stage_path = ckptdir.step_path(self.stage_dir, step)
        shutil.rmtree(stage_path, ignore_errors=True)
        w = _writer(stage_path, on_first_write=lambda: fault("write", step, self.rank))
        dcp.save(staged, storage_writer=w, process_group=self._group)
        dst = ckptdir.step_path(self.ckpt_dir, step)
        if self.rank == 0 and os.path.exists(dst):
            shutil.rmtree(dst)
        dist.barrier(group=self._group)
        os.makedirs(dst, exist_ok=True)
        files = {}
        for i, name in enumerate(sorted(w.fs.files)):
            files[name] = _copy_durable(os.path.join(stage_path, name), os.path.join(dst, name))
            if i == 0:
                fault("copy", step, self.rank)
        if self.rank == 0:
            _copy_durable(os.path.join(stage_path, ".metadata"), os.path.join(dst, ".metadata"))
        ckptdir.fsync_dir(dst)
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object({"files": files, "durable_ts": time.time()}, gathered, dst=0,
                           group=self._group)
        if self.rank == 0:
            self._finalize(dst, step, gathered, t0, os.path.join(dst, ".metadata"))
        shutil.rmtree(stage_path, ignore_errors=True)
        return time.time() - t0

    def poll(self) -> dict:
        """Non-blocking: metrics for a save that finished since the last poll (no collectives)."""
        if self._future is not None and self._future.done():
            return self._collect()
        return {}

    def _collect(self):
        latency = self._future.result()  # re-raises a background failure here
        out = {"train/ckpt_finalized_step": self._inflight_step,
               "train/ckpt_finalize_seconds": latency}
        self._future, self._inflight_step = None, None
        return out

    def wait(self, timeout=WAIT_TIMEOUT_S) -> float:
        """Block until the in-flight save (if any) is durable; returns the seconds waited."""
        self.last_finalized = {}
        if self._future is None:
            return 0.0
        t0 = time.time()
        self._future.result(timeout=timeout)  # TimeoutError rather than a silent hang
        self.last_finalized = self._collect()
        return time.time() - t0

    def close(self) -> dict:
        """Exit path: wait for the last save (no truncated final checkpoint)."""
        self.wait()
        if self._pool:
            self._pool.shutdown(wait=True)
        return self.last_finalized

    # ------------------------------------------------------------------ load
    def load_newest(self, state):
        """Rank 0 picks the newest complete step and broadcasts it; all ranks load it into
        `state` (a TrainState). Returns the step loaded, or None for a fresh start."""
        pick = [None]
        if self.rank == 0:
            pick[0] = ckptdir.newest_complete_step(self.ckpt_dir, verify=True, log=self.log)
        dist.broadcast_object_list(pick, src=0)
        step = pick[0]
        if step is None:
            return None
        sd = state.state_dict()
        dcp.load(sd, checkpoint_id=ckptdir.step_path(self.ckpt_dir, step))
        state.load_state_dict(sd)
        if state.step != step:
            raise RuntimeError(f"checkpoint step-{step} holds step {state.step}")
        return step
