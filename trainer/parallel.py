"""Device mesh, tensor parallel plan and FSDP2 wrapping (meta-device init for large presets)."""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

from .model import ModelConfig, Transformer

META_INIT_THRESHOLD = 1_000_000_000  # parameters; `--meta-init auto` turns on above this


def build_mesh(device_type: str, world_size: int, tp: int):
    if tp > 1:
        return init_device_mesh(device_type, (world_size // tp, tp), mesh_dim_names=("dp", "tp"))
    return init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp",))


def dp_rank_of(mesh) -> int:
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
        dp_mesh = mesh["dp"]
    else:
        dp_mesh = mesh
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    if meta_init:
        model.to_empty(device=device)
        model.init_local_weights(seed, rank)
    return model
