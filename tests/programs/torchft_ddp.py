"""A torchft program written the way torchft 0.2.0's own example trains (torchft's
DistributedDataParallel and OptimizerWrapper over a plain module, one rank per replica group), used
by tests/test_ft.py to make a torchft behaviour happen on purpose: group 1 exits after step
--die-at's quorum, before its gradients, so group 0 meets a dead peer inside DDP's gradient
allreduce (several buckets: bucket_cap_mb is tiny).

    python torchft_ddp.py GROUP DIE_AT   (TORCHFT_LIGHTHOUSE names the lighthouse)"""
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torchft import DistributedDataParallel, Manager, ProcessGroupGloo
from torchft.optim import OptimizerWrapper

group, die_at = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
torch.set_num_threads(1)
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
timeout = datetime.timedelta(seconds=10)
manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1,
                  load_state_dict=lambda sd: module.load_state_dict(sd["m"]), state_dict=lambda: {"m": module.state_dict()},
                  use_async_quorum=False, rank=0, world_size=1, store_addr="127.0.0.1", store_port=store.port,
                  lighthouse_addr=os.environ["TORCHFT_LIGHTHOUSE"], replica_id=f"ddp_g{group}", timeout=timeout,
                  quorum_timeout=datetime.timedelta(seconds=30))
model = DistributedDataParallel(manager, module, bucket_cap_mb=0.01)
optim = OptimizerWrapper(manager, torch.optim.SGD(model.parameters(), lr=0.01))
while manager.current_step() < 20:
    optim.zero_grad()  # the quorum
    if group == 1 and manager.current_step() == die_at:
        print(f"group 1: exiting at step {die_at}, after the quorum, before the gradients", flush=True)
        os._exit(9)
    model(torch.randn(8, 64)).sum().backward()
    optim.step()
    print(f"group {group}: step {manager.current_step()}", flush=True)
print(f"group {group}: done", flush=True)
manager.shutdown(wait=False)
os._exit(0)
