"""One rank of restartlab's smoke job (restartlab submit --smoke).

    python -m restartlab.trainer.smoke --outdir DIR --device DEV [--hold S]

The rank says where it runs: the scheduler's name for its node, and the launcher's rank variables.
It imports torch and counts the scenario's devices. It forms the process group on the scenario's
backend and all-reduces once across every rank. Its record goes to DIR/rank-<R>.json, whole or not
at all. With --hold it then waits, to be found and killed by the job's killers."""
import argparse
import dataclasses
import os
import socket
import sys
import time
import traceback

from restartlab import launchers
from restartlab.contracts import ckptdir, layout
from restartlab.contracts.envvars import TAG_VAR, node_name
from restartlab.contracts.smoke import SmokeRank
from restartlab.trainer import dist as rdist


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m restartlab.trainer.smoke")
    p.add_argument("--outdir", required=True)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "xpu"))
    p.add_argument("--device-order", default="local", choices=("local", "reverse"))
    p.add_argument("--hold", type=float, default=0.0, help="seconds to wait after the all-reduce (to be killed)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the group may take to form")
    a = p.parse_args(argv)
    info = rdist.discover_ranks()
    ln = launchers.get(info.launcher) if info.launcher != "none" else None
    names = [v for v in ((ln.rank_var, ln.size_var, ln.local_rank_var, *ln.local_size_vars) if ln else ()) if v]
    rec = SmokeRank(rank=info.rank, world_size=info.world_size, local_rank=info.local_rank, launcher=info.launcher,
                    host=node_name(), hostname=socket.gethostname(), pid=os.getpid(),
                    rank_vars={k: os.environ[k] for k in names if k in os.environ}, tag=os.environ.get(TAG_VAR))
    code = 0
    try:
        import torch
        rec = dataclasses.replace(rec, torch=torch.__version__)
        device_type, backend = rdist.pick_device(a.device)
        rec = dataclasses.replace(rec, device=device_type, backend=backend, device_order=a.device_order,
                                  devices=getattr(torch, device_type).device_count() if device_type != "cpu" else 0)
        t0 = time.time()
        device = rdist.init(info, device_type, backend, timeout_s=a.timeout, order=a.device_order)
        import torch.distributed as tdist
        x = torch.full((1,), float(info.rank + 1), device=device)
        tdist.all_reduce(x)
        want = info.world_size * (info.world_size + 1) / 2
        rec = dataclasses.replace(rec, allreduce=float(x.item()), allreduce_expected=want,
                                  allreduce_ok=float(x.item()) == want, group_s=round(time.time() - t0, 3))
    except Exception as e:  # the record says what failed on this rank; the job's report names it
        rec = dataclasses.replace(rec, error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                                  where=tuple(traceback.format_exc().strip().splitlines()[-3:-1]))
        code = 1
    os.makedirs(a.outdir, exist_ok=True)
    ckptdir.write_atomic(os.path.join(a.outdir, layout.smoke_record_name(info.rank)), rec.to_json().encode())
    print(f"restartlab smoke: rank {info.rank}/{info.world_size} on {rec.host}: "
          + (rec.error or f"all-reduce {rec.allreduce:g} (want {rec.allreduce_expected:g})"), flush=True)
    if code == 0 and a.hold > 0:
        time.sleep(a.hold)
    if code == 0:
        rdist.clean_exit(0, barrier=False)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
