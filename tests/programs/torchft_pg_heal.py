"""A torchft program whose groups heal through torchft's PGTransport (the state over the replica
process group, not HTTP), run with numpy absent (`sys.modules["numpy"] = None` before torch:
what an environment that installed torchft 0.2.0 alone has, since torchft does not declare numpy).
Used by tests/test_ft.py: group 1 starts late, so its first quorum heals it from group 0, and the
heal needs `Tensor.numpy()` (torchft/checkpointing/pg_transport.py, recv_checkpoint).

    python torchft_pg_heal.py GROUP STEPS   (TORCHFT_LIGHTHOUSE names the lighthouse)"""
import sys

sys.modules["numpy"] = None  # noqa: E402  as if numpy were not installed

import datetime  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchft import Manager, ProcessGroupGloo  # noqa: E402
from torchft.checkpointing.pg_transport import PGTransport  # noqa: E402

group, steps = int(sys.argv[1]), int(sys.argv[2])
if group == 1:
    time.sleep(4)  # join late: the first quorum heals this group from group 0
torch.manual_seed(group)  # different initial weights: only a heal makes them equal
torch.set_num_threads(1)
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
model = torch.nn.Linear(16, 1)
timeout = datetime.timedelta(seconds=10)
pg = ProcessGroupGloo(timeout=timeout)
manager = Manager(pg=pg, min_replica_size=1, load_state_dict=lambda sd: model.load_state_dict(sd["m"]),
                  state_dict=lambda: {"m": model.state_dict()}, use_async_quorum=False, rank=0, world_size=1,
                  store_addr="127.0.0.1", store_port=store.port, lighthouse_addr=os.environ["TORCHFT_LIGHTHOUSE"],
                  replica_id=f"pg_g{group}", timeout=timeout,
                  checkpoint_transport=PGTransport(pg, timeout=timeout, device=torch.device("cpu")))
committed = 0
for _ in range(steps):
    manager.start_quorum()
    model.zero_grad()
    model(torch.ones(4, 16)).sum().backward()
    for p in model.parameters():
        manager.allreduce(p.grad).wait()
    if manager.should_commit():
        committed += 1
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
    time.sleep(0.2)
print(f"group {group}: committed {committed} of {steps}, step {manager.current_step()}", flush=True)
manager.shutdown(wait=False)
os._exit(0)
