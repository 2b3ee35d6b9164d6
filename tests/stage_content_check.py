"""What the async checkpointer writes is the state at the save, bit for bit, on any device.

One process, world size 1. A model is trained one step, then saved by the async and by the sync
checkpointer. Each checkpoint is read back whole (dcp_to_torch_save) and compared with the live
state.

`--moving-from-local` (CPU) makes DTensor.from_local copy its local tensor, as it does for a mesh
on a GPU. The defect found on an H200 then shows on any machine. In that defect the staged
DTensors read a GPU copy made once, not the host buffers.

Prints `STAGE_CONTENT {...}`. Exits 0 when both checkpoints equal the live state."""
import json
import os
import sys

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.tensor import DTensor

from restartlab.trainer import dist as rdist
from restartlab.trainer.checkpoint import Checkpointer
from restartlab.trainer.data import Synthetic
from restartlab.trainer.model import PRESETS
from restartlab.trainer.parallel import build_mesh, build_model
from restartlab.trainer.state import TrainState


def flat(d, pre=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, f"{pre}{k}/")
        elif isinstance(v, torch.Tensor):
            yield f"{pre}{k}", v


def moving_from_local():
    orig = DTensor.from_local

    def from_local(local, *args, **kw):
        return orig(local.clone(), *args, **kw)  # a copy, as for a mesh on another device
    DTensor.from_local = staticmethod(from_local)


def train_step(model, optim, cfg, device, step):
    x, y = Synthetic(cfg.vocab).batch(1, step, 0, 4, 32)
    loss = torch.nn.functional.cross_entropy(model(x.to(device)).float().reshape(-1, cfg.vocab),
                                             y.to(device).reshape(-1))
    loss.backward()
    optim.step()
    optim.zero_grad(set_to_none=True)


def main(tmp, device_type, moving):
    if moving:
        moving_from_local()
    info = rdist.RankInfo(0, 1, 0, "none")
    backend = {"cuda": "nccl", "cpu": "gloo"}[device_type]
    device = rdist.init(info, device_type, backend)
    mesh = build_mesh(device_type, 1, 1)
    cfg = PRESETS["tiny"]
    model = build_model(cfg, mesh, device, 1, False, 0)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    st = TrainState(model, optim, 0, 0)
    cks = {m: Checkpointer(os.path.join(tmp, m), rank=0, world_size=1, mesh_info={}, mode=m.split("-")[0],
                           stage_dir=None if m == "async-direct" else os.path.join(tmp, "stage"), log=print)
           for m in ("sync", "async", "async-direct")}
    out = {}
    for step in (1, 2):  # the second save reuses the staged buffers and their wrappers
        train_step(model, optim, cfg, device, step)
        st.step = step  # what save() sets first
        live = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
                for k, v in flat(st.state_dict())}
        for mode, ck in cks.items():
            ck.save(step, st)
            ck.wait()
            pt = os.path.join(tmp, f"{mode}-{step}.pt")
            dcp_to_torch_save(os.path.join(tmp, mode, f"step-{step:08d}"), pt)
            saved = dict(flat(torch.load(pt, weights_only=False)))
            differ = [k for k in live if k not in saved or not torch.equal(saved[k], live[k])]
            out[f"{mode}@{step}"] = {"tensors": len(live), "differ": len(differ), "first": differ[:3]}
    for ck in cks.values():
        ck.close()
    print("STAGE_CONTENT " + json.dumps(out), flush=True)
    rdist.clean_exit(0 if all(v["differ"] == 0 for v in out.values()) else 1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--moving-from-local" in sys.argv)
