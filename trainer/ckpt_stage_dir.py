"""The node's private stage dir of the async save.

It is private as restartlab.contracts.private makes it: this user's, 0700, never through a
symlink. Every rank agrees on it, and its owner removes it at the end. Local rank 0 of each node
owns it.

- `fresh`: the owner removes the stage dirs of this job's dead attempts on its node. Then it makes
  a new one with an unguessable name under `where`.
- Otherwise `where` is the stage dir itself. It is created if absent, and refused if it is not
  private.

Two owners may still meet in one given path. This happens with a stage dir on a shared file
system, or with several scheduler nodes on one host, as in the tests. Nothing they do may fail on
the other."""
import glob
import os
from typing import Optional, Tuple

import torch.distributed as dist

from restartlab.contracts import ckptdir, private
from restartlab.contracts.envvars import node_name
from restartlab.trainer.ckpt_io import describe_error
from restartlab.trainer.testpoints import delay

STAGE_MARKER = ".restartlab-stage"  # in a stage dir restartlab created (and so may remove)
STAGE_PARENT = "/tmp"  # node-local: where the default stage dirs are made


def stage_prefix() -> str:
    """The default stage dirs' names begin with it (the rest: the node and an unguessable part)."""
    from restartlab import schedulers
    return f"restartlab-{schedulers.job_id(os.environ)}-"


def _make(where: str, fresh: bool, log) -> str:
    """Local rank 0: this node's stage dir under (fresh) or at `where`; OSError (UnsafePath too)."""
    if fresh:
        prefix = f"{stage_prefix()}{node_name()}-"
        for old in glob.glob(os.path.join(glob.escape(where), glob.escape(prefix) + "*")):
            try:  # a dead attempt's stage; what is not private to us is not ours: left alone
                private.check_dir(old)
                if os.path.exists(os.path.join(old, STAGE_MARKER)):
                    private.remove_tree(old)
            except FileNotFoundError:
                pass
            except private.UnsafePath as e:
                log(f"async: left alone: {e}")
        path = private.make_dir(where, prefix)
        private.open_new(os.path.join(path, STAGE_MARKER)).close()
        return path
    if private.ensure_dir(where):
        private.open_new(os.path.join(where, STAGE_MARKER)).close()  # ours: a relaunch removes it too
    for s in ckptdir.list_steps(where):  # stages of dead attempts on this node
        private.remove_tree(ckptdir.step_path(where, s))
    return where


def agree(where: str, fresh: bool, rank: int, local_rank: int, world_size: int, log) -> Tuple[Optional[str], Optional[str]]:
    """(this node's stage dir, None), or (None, why it was refused: the first refusal on any node).
    Every rank calls it (one all-gather on the default group)."""
    node = node_name()  # the scheduler's name: several Slurm nodes may share one host (tests)
    path, err = None, None
    if local_rank == 0:
        delay("stage-open", 0, rank)  # the other ranks of the node wait for it below
        try:
            path = _make(where, fresh, log)
        except OSError as e:  # UnsafePath included: one line naming the path and its owner
            err = str(e) if isinstance(e, private.UnsafePath) else f"stage dir {where}: {describe_error(e)}"
    every = [None] * world_size
    dist.all_gather_object(every, (node, local_rank, path, err))
    mine = next(p for n, lr, p, _ in every if n == node and lr == 0)
    errs = list(dict.fromkeys(e for *_, e in every if e))
    if errs:
        if local_rank == 0 and fresh and path:
            private.remove_tree(path)
        return None, errs[0]
    return mine, None


def remove(stage_dir: str, local_rank: int, group, log) -> None:
    """Checkpoint thread, at exit: the owner removes the stage dir it created.

    It waits until every rank is past its last save (a barrier on the checkpoint group). It removes
    the dir only if empty, never one with data of others."""
    dist.barrier(group=group)
    marker = os.path.join(stage_dir, STAGE_MARKER) if stage_dir else None
    if local_rank == 0 and marker and os.path.exists(marker):
        try:
            os.unlink(marker)
            os.rmdir(stage_dir)
        except OSError as e:
            log(f"stage dir {stage_dir} left in place: {e.strerror}")
