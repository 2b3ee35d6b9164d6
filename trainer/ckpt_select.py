"""What to load: the newest complete checkpoint that every rank reads without error.

It falls back to older ones. Rank 0 lists the candidates and broadcasts them. A candidate is
complete, with the manifest matching the files' sizes. Each rank verifies every item's checksum as
it reads (ckpt_io.VerifyingReader). All ranks agree on the verdict before moving on."""
import json
import os

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from restartlab.contracts import ckptdir
from restartlab.trainer.ckpt_io import VerifyingReader


def load_newest(ckpt_dir: str, state, rank: int, world_size: int, log=print):
    """Load into `state` (a TrainState); (step loaded or None, [(step, why it was rejected)])."""
    listing = [None]
    if rank == 0:
        listing[0] = candidates(ckpt_dir, log)
    dist.broadcast_object_list(listing, src=0)
    steps, rejected = listing[0]
    for step in steps:
        problem = try_load(ckpt_dir, state, step, rank)
        verdicts = [None] * world_size
        dist.all_gather_object(verdicts, problem)
        bad = [f"rank {r}: {v}" for r, v in enumerate(verdicts) if v]
        if not bad:
            return step, rejected
        rejected.append((step, "; ".join(bad[:4]) + (f" (+{len(bad) - 4} ranks)" if len(bad) > 4 else "")))
        log(f"skipping {ckptdir.step_dirname(step)}: {rejected[-1][1]}")
    return None, rejected


def candidates(ckpt_dir: str, log=print):
    """Rank 0: complete steps, newest first, whose manifest matches the files' sizes."""
    found, rejected = [], []
    for step, problem in ckptdir.checked_complete_steps(ckpt_dir):
        if problem:
            rejected.append((step, problem))
            log(f"skipping {ckptdir.step_dirname(step)}: {problem}")
        else:
            found.append(step)
    return found, rejected


def try_load(ckpt_dir: str, state, step: int, rank: int):
    """Load one step into `state`; None on success, else why not (any error, on this rank)."""
    path = ckptdir.step_path(ckpt_dir, step)
    got = [None]
    if rank == 0:  # one reader of the manifest; every rank then takes the same road
        try:
            with open(os.path.join(path, ckptdir.MANIFEST)) as f:
                got[0] = json.load(f)
        except (OSError, ValueError) as e:
            got[0] = f"unreadable {ckptdir.MANIFEST}: {e}"
    dist.broadcast_object_list(got, src=0)
    if not isinstance(got[0], dict):
        return str(got[0])
    manifest = got[0]
    try:
        sd = state.state_dict()
        dcp.load(sd, storage_reader=VerifyingReader(path, manifest))
        state.load_state_dict(sd)
        if state.step != step:
            return f"holds step {state.step}"
        return None
    except dcp.api.CheckpointException as e:  # failures: {rank: (exception, traceback)}
        first = next(iter(e.failures.values()), e)
        first = first[0] if isinstance(first, tuple) else first
        return f"{type(first).__name__}: {str(first)[:300]}"
    except (Exception, dcp.api.CheckpointException) as e:  # noqa: BLE001  any failure to load means: not this checkpoint
        return f"{type(e).__name__}: {str(e)[:300]}"
