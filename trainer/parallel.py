"""Device mesh, tensor parallel plan and FSDP2 wrapping (meta-device init for large presets)."""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from .model import ModelConfig, Transformer

META_INIT_THRESHOLD = 1_000_000_000  # parameters; `--meta-init auto` turns on above this


def mesh_layout(world_size: int, tp: int, replicate: int = 1):
    """(shape, dim names) of the device mesh: data parallel (one dim "dp", or "dp_replicate" x
    "dp_shard" for HSDP), then "tp" when tp > 1. Ranks are laid out row-major: a TP group is
    consecutive ranks (one node), a shard group the next level, replicas the outermost."""
    dp = world_size // tp
    if replicate > 1:
        shape, names = [replicate, dp // replicate], ["dp_replicate", "dp_shard"]
    else:
        shape, names = [dp], ["dp"]
    if tp > 1:
        shape, names = shape + [tp], names + ["tp"]
    return tuple(shape), tuple(names)


def build_mesh(device_type: str, world_size: int, tp: int, replicate: int = 1):
    shape, names = mesh_layout(world_size, tp, replicate)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def dp_mesh_of(mesh):
    """The data-parallel part of the mesh: 1-D (FSDP) or 2-D replicate x shard (HSDP).

    fully_shard takes HSDP as a 2-D mesh. It all-reduces across replicas and reduce-scatters within
    a shard group."""
    names = mesh.mesh_dim_names or ()
    if "dp_replicate" in names:
        return mesh["dp_replicate", "dp_shard"]
    return mesh["dp"] if "tp" in names else mesh


def dp_rank_of(mesh) -> int:
    """The flattened data-parallel rank (replica-major).

    The data position is a pure function of it. So FSDP over 4 and HSDP 2 x 2 read the same samples
    on the same ranks."""
    names = mesh.mesh_dim_names or ()
    if "dp_replicate" in names:
        return mesh.get_local_rank("dp_replicate") * mesh["dp_shard"].size() + mesh.get_local_rank("dp_shard")
    return mesh.get_local_rank("dp")


def use_meta_init(mode: str, cfg: ModelConfig) -> bool:
    return mode == "on" or (mode == "auto" and cfg.n_params() > META_INIT_THRESHOLD)


def build_model(cfg: ModelConfig, mesh, device, seed: int, meta_init: bool, rank: int):
    """Build, tensor-parallelize (if the mesh has 'tp'), fully_shard, and initialize.

    Without meta init the whole model is initialized on CPU from `seed` before sharding, so the
    result is the same for any world size. With meta init only local shards are ever allocated."""
    if meta_init:
        with torch.device("meta"):
            model = Transformer(cfg)
    else:
        torch.manual_seed(seed)
        model = Transformer(cfg).to(device)
    if "tp" in (mesh.mesh_dim_names or ()):
        tp_mesh = mesh["tp"]
        for block in model.layers:
            parallelize_module(block, tp_mesh, {
                "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(),
            })
    dp_mesh = dp_mesh_of(mesh)
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    if meta_init:
        model.to_empty(device=device)
        model.init_local_weights(seed, rank)
    return model
