"""Run by tests/test_resume_state.py (test_the_whole_fingerprint_is_one_however_the_tensor_is_laid_out) under mpiexec -n 4: the whole fingerprint of a tensor is the
same however it is laid out over the 4 ranks (FSDP, HSDP, tensor parallel, FSDP2 over tensor
parallel: _StridedShard), and one changed element changes it. Prints one line on rank 0."""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from restartlab.trainer import dist as rdist
from restartlab.trainer.state_probe import MASK, _shard_part

rank, world = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
flat, grid = init_device_mesh("cpu", (4,)), init_device_mesh("cpu", (2, 2))
LAYOUTS = [
    (flat, [Shard(0)]), (flat, [Shard(1)]), (flat, [Replicate()]),
    (grid, [Replicate(), Shard(0)]), (grid, [Shard(0), Shard(0)]), (grid, [Shard(0), Shard(1)]),
    (grid, [_StridedShard(0, split_factor=2), Shard(0)]),  # FSDP2 (dp) over tensor parallel (tp), rows
    (grid, [_StridedShard(1, split_factor=2), Shard(1)]),
]


def whole(full, mesh, placements):
    part = _shard_part(3, distribute_tensor(full, mesh, placements, src_data_rank=None))[1]
    t = torch.tensor([part], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t) & MASK


torch.manual_seed(0)
bad = []
for shape in [(7, 5), (9, 4, 3), (8, 6), (3, 2)]:
    full = torch.randn(shape)
    ref = whole(full, flat, [Replicate()])
    for mesh, pl in LAYOUTS:
        if whole(full, mesh, pl) != ref:
            bad.append(f"{shape} {pl}")
    other = full.clone()
    other.view(-1)[full.numel() // 2] += 1
    if whole(other, grid, LAYOUTS[6][1]) == ref:
        bad.append(f"{shape}: a changed element not seen")
# real FSDP2 over tensor parallel models: their parameters' whole fingerprints against their
# full_tensor()'s (gathered by torch: no part of the probe's index arithmetic in it). The meshes: a
# 2-D one made directly; the same unflattened from a 1-D world mesh (torchtitan's way: its root is
# the 1-D mesh); HSDP 2 x 1 over tensor parallel 2. The LayerNorm is left to FSDP alone: on the
# data-parallel slice, one copy in each tensor-parallel slice (counted once).
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def model_on(tp_mesh, dp_mesh):
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.LayerNorm(10), torch.nn.Linear(10, 7))
    parallelize_module(m, tp_mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(m, mesh=dp_mesh)
    return m


direct = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
unflat = init_device_mesh("cpu", (4,), mesh_dim_names=("world",))._unflatten(0, (2, 2), ("dp", "tp"))
hsdp = init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("dp_replicate", "dp_shard", "tp"))
# the unflattened first: its slices equal the direct mesh's (the probe keeps one answer per mesh)
MODELS = {"fsdp2+tp unflattened": (unflat["tp"], unflat["dp"]), "fsdp2+tp": (direct["tp"], direct["dp"]),
          "hsdp+tp": (hsdp["tp"], hsdp["dp_replicate", "dp_shard"])}
for what, (tp_mesh, dp_mesh) in MODELS.items():
    kinds = set()
    for name, p in model_on(tp_mesh, dp_mesh).named_parameters():
        kinds.add(str(p.placements))
        ref = whole(p.full_tensor().detach(), flat, [Replicate()])
        t = torch.tensor([_shard_part(3, p)[1]], dtype=torch.int64)
        dist.all_reduce(t)
        if int(t) & MASK != ref:
            bad.append(f"{what} {name} {p.placements}")
    if not any("_StridedShard" in k for k in kinds):
        bad.append(f"{what}: no strided placement in {sorted(kinds)}")
if rank == 0:
    print("whole:", "; ".join(bad) or "all equal", flush=True)
# The trainer's way out (trainer/dist.clean_exit: flush, barrier, os._exit). Tearing the gloo groups
# down at interpreter exit can abort a rank ("terminate called without an active exception"). This
# script's rank 0 was then SIGKILLed by Hydra after it had printed "whole: all equal". That happened
# twice in the full suite on 2026-12-07.
rdist.clean_exit(0)
