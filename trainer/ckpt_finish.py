"""The steps every save takes around its write, sync or async.

Both trainer/checkpoint.py and ckpt_async.py use them. The steps are:

- remove a torn directory before anybody writes;
- agree on every rank's error;
- on rank 0, write the manifest, then `.complete` (atomic, last), then prune;
- after a failed save, remove its partial directory.

The layout and the marker are `restartlab.contracts.ckptdir`'s."""
import dataclasses
import json
import os
import shutil
import time

import torch.distributed as dist

from restartlab.contracts import ckptdir
from restartlab.contracts import metric_keys as K
from restartlab.trainer.ckpt_io import describe_error
from restartlab.trainer.ckpt_retention import Retention
from restartlab.trainer.testpoints import fault, trace


class SaveError(RuntimeError):
    """A save failed and --on-save-error is abort."""


class SaveSteps:
    def __init__(self, ckpt_dir, *, rank, world_size, mesh_info, mode, ckpt_format, retention: Retention, log,
                 on_save_error):
        self.ckpt_dir = ckpt_dir
        self.rank, self.world_size = rank, world_size
        self.mesh_info, self.mode, self.ckpt_format = mesh_info, mode, ckpt_format
        self.retention = retention
        self.log = log
        self.on_save_error = on_save_error

    def prepare_dir(self, root, step):
        """Rank 0 removes a torn directory from an earlier attempt; nobody writes before it's gone."""
        path = ckptdir.step_path(root, step)
        if self.rank == 0 and os.path.exists(path):
            shutil.rmtree(path)
        return path

    def agree(self, err, group=None):
        """Every rank's error (None: fine) -> the list of 'rank r: error' lines, the same on all."""
        errs = [None] * self.world_size
        dist.all_gather_object(errs, err, group=group)
        return [f"rank {r}: {e}" for r, e in enumerate(errs) if e]

    def failed(self, step, path, errs):
        """After a failed sync save (all ranks agree on it): no .complete was written; rank 0 removes
        the partial directory; the previous complete checkpoint is untouched. Returns the row's
        fields, or raises SaveError with --on-save-error abort."""
        if self.rank == 0:
            self.log(f"SAVE FAILED at step={step} ({path}): {'; '.join(errs[:4])}")
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                self.log(f"could not remove the partial {path}: {describe_error(e)} (it has no .complete: "
                         f"never loaded)")
        self.abort_if_asked(step, errs)
        return self.failure_row(step, errs)

    def abort_if_asked(self, step, errs):
        if self.on_save_error == "abort":
            raise SaveError(f"save at step {step} failed: {errs[0]}")

    @staticmethod
    def failure_row(step, errs):
        return {K.CKPT_FAILED: step, K.CKPT_ERROR: errs[0][:300]}

    def finalize(self, path, step, gathered, t0, metadata_path):
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
        info = dataclasses.replace(ckptdir.Marker(step=step, mode=self.mode, save_start=t0, world_size=self.world_size),
                                   durable_ts=max(g["durable_ts"] for g in gathered),  # the last rank's files durable
                                   complete_ts=time.time())
        trace("marker", step, self.rank)
        ckptdir.mark_complete(path, info)
        trace("complete", step, self.rank)
        fault("complete", step, self.rank)
        self.retention.after_complete(step)
