"""A torchft program of yours, written the way torchft 0.2.0's own train_ddp.py example is
(REPLICA_GROUP_ID, torchrun's variables, a Manager, torchft's OptimizerWrapper); one rank per
replica group. scenarios/examples/torchft.yaml runs it as a torchft phase's program
(trainer.program.adapter: torchft), and tests/test_ft.py makes torchft's behaviours happen on
purpose with its flags:

  (default)        gradients averaged with Manager.allreduce: a killed group is relaunched and heals
  --ddp            torchft's DistributedDataParallel (several buckets: bucket_cap_mb is tiny)
  --die-at K       group 1's first attempt exits after the quorum of step K (or the first after it:
                   a group that joins late heals past K), before its gradients
  --pg-transport   heals through torchft's PGTransport (the state over the replica process group)
  --late S         group 1's first attempt sleeps S seconds before it makes its Manager
  --late-after K --gate DIR
                   group 1's first attempt joins only after group 0 has committed step K, and group
                   0 waits there until group 1 is up (two marker files in DIR): its first quorum
                   heals it, however slowly either group starts
  --timeout S      torchft's timeout for collectives and heals
  --no-numpy       numpy hidden before torch is imported, as if it were not installed
  --async-quorum   torchft's default (use_async_quorum=True): the quorum runs beside the forward
                   pass and a heal is applied at should_commit (without it: before the forward)

    python train.py --steps N [--delay S] [...]"""
import argparse
import datetime
import os
import sys
import time

if "--no-numpy" in sys.argv:  # as if numpy were not installed (torchft 0.2.0 does not declare it)
    sys.modules["numpy"] = None

import torch  # noqa: E402
from torchft import DistributedDataParallel, Manager, ProcessGroupGloo  # noqa: E402
from torchft.optim import OptimizerWrapper  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, required=True)
p.add_argument("--delay", type=float, default=0.0)
p.add_argument("--ddp", action="store_true")
p.add_argument("--die-at", type=int, default=-1)
p.add_argument("--pg-transport", action="store_true")
p.add_argument("--late", type=float, default=0.0)
p.add_argument("--late-after", type=int, default=-1)
p.add_argument("--gate", help="a directory both groups see, for --late-after's markers")
p.add_argument("--no-numpy", action="store_true")
p.add_argument("--async-quorum", action="store_true", help="torchft's default: the quorum runs beside the forward")
p.add_argument("--timeout", type=float, default=10.0, help="torchft's timeout (s): collectives, heals")
a = p.parse_args()
group = int(os.environ.get("REPLICA_GROUP_ID", 0))
first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
late = a.late_after >= 0 and first_attempt
if late and not a.gate:
    p.error("--late-after needs --gate DIR")


def wait_for(marker, who):
    path = os.path.join(a.gate, marker)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"group {group}: {who} not seen in 120 s ({path})")
        time.sleep(0.05)


def mark(marker):
    open(os.path.join(a.gate, marker), "w").close()


if group == 1 and first_attempt and a.late:
    time.sleep(a.late)
if late and group == 1:
    wait_for("g0-committed", f"group 0's step {a.late_after}")
torch.manual_seed(group)  # different initial weights: only torchft's sync or a heal makes them equal
torch.set_num_threads(1)
module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
timeout = datetime.timedelta(seconds=a.timeout)
pg = ProcessGroupGloo(timeout=timeout)
transport = None
if a.pg_transport:
    from torchft.checkpointing.pg_transport import PGTransport
    transport = PGTransport(pg, timeout=timeout, device=torch.device("cpu"))


def load_state_dict(sd):
    module.load_state_dict(sd["model"])
    optimizer.load_state_dict(sd["optim"])


manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict,
                  state_dict=lambda: {"model": module.state_dict(), "optim": optimizer.state_dict()},
                  use_async_quorum=a.async_quorum, replica_id=f"user_g{group}", timeout=timeout,
                  quorum_timeout=datetime.timedelta(seconds=30), checkpoint_transport=transport)
model = DistributedDataParallel(manager, module, bucket_cap_mb=0.01) if a.ddp else module
optim = OptimizerWrapper(manager, optimizer)
if late and group == 1:
    mark("g1-up")  # its Manager heartbeats from here: the lighthouse counts it in the next quorum
while manager.current_step() < a.steps:
    if late and group == 0 and manager.current_step() == a.late_after:
        mark("g0-committed")
        wait_for("g1-up", "group 1")
        late = False
    optim.zero_grad()  # the quorum
    if group == 1 and first_attempt and a.die_at >= 0 and manager.current_step() >= a.die_at:
        print(f"group 1: exiting at step {manager.current_step()}, after the quorum, before the gradients", flush=True)
        os._exit(9)
    g = torch.Generator().manual_seed(manager.current_step() * 100 + (manager.participating_rank() or 0))
    loss = model(torch.randn(8, 64, generator=g)).square().mean()
    loss.backward()
    if not a.ddp:
        for q in module.parameters():
            manager.allreduce(q.grad).wait()
    optim.step()  # only if should_commit()
    if a.delay:
        time.sleep(a.delay)
print(f"group {group}: done at step {manager.current_step()}", flush=True)
manager.shutdown(wait=False)
sys.exit(0)
