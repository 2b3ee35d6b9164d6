"""GPU diagnostic: what the async checkpointer wrote vs the live state vs the sync checkpointer."""
import os
import sys

import torch
import torch.distributed.checkpoint as dcp  # noqa: F401
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

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


def main(tmp, variant):
    info = rdist.RankInfo(0, 1, 0, "none")
    device = rdist.init(info, "cuda", "nccl")
    mesh = build_mesh("cuda", 1, 1)
    cfg = PRESETS["debug"]
    model = build_model(cfg, mesh, device, 1, False, 0)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = Synthetic(cfg.vocab).batch(1, 1, 0, 4, 32)
    loss = torch.nn.functional.cross_entropy(model(x.to(device)).float().reshape(-1, cfg.vocab), y.to(device).reshape(-1))
    loss.backward()
    optim.step()
    st = TrainState(model, optim, 0, 1)
    live = {k: v.full_tensor().cpu() if hasattr(v, "full_tensor") else v.cpu() for k, v in flat(st.state_dict())}
    out = {}
    for mode in ("sync", "async"):
        ck = Checkpointer(os.path.join(tmp, mode), rank=0, world_size=1, mesh_info={}, mode=mode,
                          stage_dir=os.path.join(tmp, "stage"), log=print)
        if variant == "syncstage" and mode == "async":
            orig = ck._staging_stream

            import contextlib

            @contextlib.contextmanager
            def synced():
                with orig():
                    yield
                torch.cuda.synchronize()
            ck._staging_stream = synced
        ck.save(1, st)
        ck.close()
        pt = os.path.join(tmp, f"{mode}.pt")
        dcp_to_torch_save(os.path.join(tmp, mode, "step-00000001"), pt)
        saved = dict(flat(torch.load(pt, weights_only=False)))
        bad = [k for k in live if k in saved and not torch.equal(saved[k].float(), live[k].float())]
        nan = [k for k, v in saved.items() if v.is_floating_point() and not torch.isfinite(v).all()]
        out[mode] = (len(saved), len(bad), bad[:6], nan[:6], sorted(set(live) - set(saved))[:4])
    print("DIAG", variant, out, flush=True)
    rdist.clean_exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
