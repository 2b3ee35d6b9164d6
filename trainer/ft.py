"""python -m restartlab.trainer.ft: the bundled model trained by one torchft replica group.

This gives recovery without a restart (torchft 0.2.0, https://github.com/pytorch/torchft). A job
is several replica groups. Each group is its own launch (`mpiexec -n G ...`), and torchft's
lighthouse joins them all. Inside a group the ranks shard the model with FSDP2 over the group's own
process group. Between groups, each rank allreduces its gradient shards with the same rank of every
other group. It does this through torchft's Manager, a gloo process group that torchft
reconfigures at every quorum change. The result is HSDP whose replicate dimension survives a
group's death.

When a group dies, the others never restart. Their allreduce fails, and that step is not committed
(torchft's `should_commit`). The next quorum leaves the dead group out, and they train on.
restartlab relaunches the dead group. It heals from a survivor (torchft's HTTP state transfer,
rank to same rank) and rejoins.

Every rank writes what restartlab needs to account for it to `ft-rank{R}.jsonl` in --outdir. It
writes one line per step attempted. Each line is flushed, so a SIGKILL loses at most the line being
written. A line holds these keys:

- "t": end time.
- "t0": start time.
- "tq": its quorum's end.
- "step": the step attempted (committed steps before it + 1).
- "commit": torchft's should_commit.
- "quorum": quorum id.
- "participants": replica groups in this step.
- "slot": this group's place among them (null: not participating, e.g. healing).
- "healed": this step's quorum healed this group from a peer (state transfer).
- "heal_s": how long the quorum with the transfer took.
- "crc": crc32 of this rank's parameter shards after it. It is set at the first step of each
  quorum and the last step, else null.

The group's rank 0 also writes the restartlab metrics rows (train/iter = committed steps). So the
relaunch loop's watchdog and attempt record read its progress as any attempt's.

The step's batch is a pure function of (seed, step, slot * G + group rank). So the replica groups of
one step read disjoint batches, whichever of them are alive."""
import argparse
import datetime
import os
import sys
import time
import zlib
from typing import Optional

from restartlab.contracts import layout
from restartlab.contracts.ft_records import FtStep
from restartlab.contracts.envvars import LAUNCH_TS_VAR
from restartlab.contracts.exits import EXIT_FAILED, EXIT_USAGE
from restartlab.trainer.metrics import MetricsWriter  # torch-free
from restartlab.contracts import metric_keys as K


GROUPS_VAR = "RESTARTLAB_FT_GROUPS"  # the replica groups on this node (the torchft phase sets it)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(EXIT_USAGE, f"restartlab.trainer.ft: error: {message}\n")


def parse_args(argv=None):
    p = _Parser(prog="python -m restartlab.trainer.ft",
                description="one torchft replica group of restartlab's FSDP2 trainer")
    p.add_argument("--model", default="tiny")
    p.add_argument("--train-iters", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--outdir", required=True, help="the attempt's directory (metrics and ft records)")
    p.add_argument("--lighthouse", default=os.environ.get("TORCHFT_LIGHTHOUSE"),
                   help="http://HOST:PORT of torchft's lighthouse (default: $TORCHFT_LIGHTHOUSE)")
    p.add_argument("--replica-group", type=int, required=True, help="this group's number (0, 1, ...)")
    p.add_argument("--min-replicas", type=int, default=1,
                   help="torchft's min_replica_size: a step commits only with this many groups in it")
    p.add_argument("--timeout", type=float, default=30.0, help="torchft's timeout for collectives and heals (s)")
    p.add_argument("--quorum-timeout", type=float, default=120.0, help="torchft's quorum timeout (s)")
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="sleep this long in each step (a stand-in for a longer step on a small model)")
    p.add_argument("--log-interval", type=int, default=5)
    a = p.parse_args(argv)
    if not a.lighthouse:
        p.error("--lighthouse (or TORCHFT_LIGHTHOUSE) is required")
    if a.train_iters < 1 or a.min_replicas < 1 or a.replica_group < 0:
        p.error("--train-iters and --min-replicas must be >= 1, --replica-group >= 0")
    return a


def tensor_crc(t, crc: int = 0) -> int:
    """crc32 of a tensor's bytes continuing `crc` (a host copy if on a device; no numpy: a program
    of yours may run without it)."""
    import ctypes
    t = t.detach().cpu().contiguous()
    n = t.numel() * t.element_size()
    return zlib.crc32(ctypes.string_at(t.data_ptr(), n) if n else b"", crc)


def state_crc(state) -> int:
    """crc32 of every tensor in a (nested) state dict, in key order; DTensors as their local
    shards, device tensors copied to the host."""
    import torch
    crc = 0

    def walk(v):
        nonlocal crc
        if isinstance(v, dict):
            for k in sorted(v, key=str):
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, torch.Tensor):
            crc = tensor_crc(v.to_local() if hasattr(v, "to_local") else v, crc)
    walk(state)
    return crc


def shards_crc(model) -> int:
    """crc32 of this rank's parameter shards in name order: equal on the same rank of two groups
    iff their shards are bit-identical."""
    return state_crc(dict(model.named_parameters()))


class Replica:
    """The model, optimizer and torchft Manager of this rank.

    It also gives the state torchft sends a healing peer. That state is this rank's shards as plain
    tensors, since the peer's same rank has the same layout."""

    def __init__(self, a, info):
        import torch
        from torch.distributed.device_mesh import init_device_mesh

        from restartlab.trainer import dist as rdist
        from restartlab.trainer.data import Synthetic
        from restartlab.trainer.model import PRESETS
        from restartlab.trainer.parallel import build_model
        threads = rdist.intra_op_threads()
        if threads:  # the node's CPUs are split among the groups on it too (each is a launch of its own)
            torch.set_num_threads(max(1, threads // int(os.environ.get(GROUPS_VAR) or 1)))
        self.a, self.info = a, info
        # the group's own store (rank 0's), which torchft's Manager also uses to find its server
        os.environ["MASTER_ADDR"], port = rdist.rendezvous(info)
        os.environ["MASTER_PORT"] = str(port)
        self.device = rdist.init(info, "cpu", "gloo", a.timeout * 4)
        mesh = init_device_mesh("cpu", (info.world_size,), mesh_dim_names=("dp",))
        self.cfg = PRESETS[a.model]
        self.data = Synthetic(self.cfg.vocab)
        self.model = build_model(self.cfg, mesh, self.device, a.seed, False, info.rank)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=a.lr, weight_decay=0.0)
        self.healed_at = None
        self.last_quorum = None  # the quorum of this rank's previous step
        from torchft import Manager, ProcessGroupGloo
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=datetime.timedelta(seconds=a.timeout)),
            load_state_dict=self.load_state_dict, state_dict=self.state_dict,
            min_replica_size=a.min_replicas, use_async_quorum=False,
            timeout=datetime.timedelta(seconds=a.timeout),
            quorum_timeout=datetime.timedelta(seconds=a.quorum_timeout),
            connect_timeout=datetime.timedelta(seconds=a.timeout),
            rank=info.rank, world_size=info.world_size,
            lighthouse_addr=a.lighthouse, replica_id=f"restartlab_g{a.replica_group}")

    def state_dict(self) -> dict:
        """This rank's shards and optimizer state, DTensors as their local tensors."""
        def local(v):
            return v.to_local() if hasattr(v, "to_local") else v
        osd = self.optim.state_dict()
        return {"model": {k: local(p.detach()) for k, p in self.model.named_parameters()},
                "optim": {"state": {i: {k: local(v) for k, v in s.items()} for i, s in osd["state"].items()},
                          "param_groups": osd["param_groups"]}}

    def load_state_dict(self, sd: dict) -> None:
        import torch
        from torch.distributed.tensor import DTensor
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for k, t in sd["model"].items():
                params[k].to_local().copy_(t)
        order = [p for group in self.optim.param_groups for p in group["params"]]
        state = {}
        for i, s in sd["optim"]["state"].items():
            p = order[int(i)]
            state[int(i)] = {k: (DTensor.from_local(v, p.device_mesh, p.placements, run_check=False,
                                                    shape=p.shape, stride=p.stride())
                                 if isinstance(p, DTensor) and v.dim() > 0 else v) for k, v in s.items()}
        self.optim.load_state_dict({"state": state, "param_groups": sd["optim"]["param_groups"]})
        self.healed_at = time.time()

    def step(self) -> dict:
        """Run one attempted step.

        The step runs the quorum (a heal happens here), then forward and backward on this group's
        batch. The gradients are averaged across the groups in the quorum. Then it commits or not."""
        import torch
        a, m, G = self.a, self.manager, self.info.world_size
        t0 = time.time()
        self.healed_at = None
        self.optim.zero_grad(set_to_none=True)
        m.start_quorum()  # synchronous (use_async_quorum=False): a heal is applied before the batch
        t_quorum = time.time()
        step = m.current_step() + 1
        slot = m.participating_rank()
        n = m.num_participants()
        loss = torch.tensor(0.0)
        if a.step_delay:
            time.sleep(a.step_delay)
        if slot is not None:
            x, y = self.data.batch(a.seed, step, slot * G + self.info.rank, a.batch_size, a.seq_len)
            logits = self.model(x)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, self.cfg.vocab), y.reshape(-1))
            loss.backward()
        # One allreduce of every gradient shard, flattened into a bucket as DDP's. torchft averages
        # it over the groups in the quorum. A group not participating contributes zeros.
        grads = []
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad)
        flat = torch.cat([g.reshape(-1) for g in grads])
        m.allreduce(flat).wait()
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        commit = m.should_commit()
        if commit:
            self.optim.step()
        healed, quorum = self.healed_at is not None, m._quorum_id
        # Compute the shards' crc (a pass over every parameter byte) only where the verdict compares
        # it. That is the first step of a quorum, and the last step. A healed group's first step is
        # the first of a quorum. So is the survivors' same step, as the groups' quorum changes at
        # the same step.
        checked = healed or quorum != self.last_quorum or step == a.train_iters
        self.last_quorum = quorum
        return FtStep(t0=t0, tq=t_quorum, t=time.time(), step=step, commit=bool(commit), quorum=quorum, participants=n,
                      slot=slot, healed=healed, heal_s=(t_quorum - t0) if healed else None,
                      crc=shards_crc(self.model) if checked else None, loss=float(loss.detach()))


class StepLog:
    """What a replica group's rank writes per step attempted.

    Every rank writes its ft-rank<R>.jsonl line. The group's rank 0 also writes:

    - restartlab's metrics rows for a committed step (train/iter = the step);
    - a console line every log_interval steps, for a step not committed and for a heal.

    The bundled trainer (main below) and the hook on a program of yours (ft_hook) share it."""

    def __init__(self, outdir: str, rank: int, group: int, log_interval: int):
        os.makedirs(outdir, exist_ok=True)
        self.rank, self.group, self.log_interval = rank, group, log_interval
        self.rec = open(os.path.join(outdir, layout.ft_record_name(rank)), "a", buffering=1)
        # Rank 0's metrics file is opened at the first commit. The relaunch loop's watchdog takes a
        # metrics file as "stepped": the startup timeout applies before it, the hang timeout after.
        self.outdir, self.metrics = outdir, None
        self.t_launch = float(os.environ.get(LAUNCH_TS_VAR) or time.time())
        self.first = True
        self.attempted = 0

    def write(self, row: FtStep) -> None:
        self.attempted += 1
        self.rec.write(row.to_json() + "\n")
        if self.rank == 0 and row.commit and self.first:
            self.metrics = MetricsWriter(self.outdir, 0)
        if self.metrics and row.commit:
            m = {K.ITER: row.step, K.DT: row.t - row.t0}
            if row.loss is not None:
                m[K.LOSS] = row.loss
            if self.first:
                m.update({K.STARTUP_LAUNCH_TS: self.t_launch, K.FT_FIRST_STEP: row.step})
                if row.step > 1:
                    m.update({K.RESTART_S: row.t - self.t_launch, K.RESUMED_FROM: row.step - 1})
                self.first = False
            self.metrics.write(m, ts=row.t)
        if self.rank == 0 and (row.step % self.log_interval == 0 or not row.commit or row.healed):
            print(f"[g{self.group} rank0] step={row.step} commit={row.commit} "
                  f"participants={row.participants} quorum={row.quorum}"
                  + (f" healed in {row.heal_s:.2f}s" if row.healed and row.heal_s is not None else "")
                  + (f" error: {row.error}" if row.error else ""), flush=True)

    def close(self, last_step: int, crc: Optional[int], finished: bool = False) -> None:
        """Write the final row (rank 0): the last step and the state's crc.

        `finished` means a program of yours ended normally. The relaunch loop's "completed" is this
        row at the last step."""
        if self.metrics:
            final = {K.ITER: last_step, K.FT_ATTEMPTED: self.attempted}
            if crc is not None:
                final[K.PARAMS_CRC] = f"{crc:08x}"
            if finished:
                final[K.FINISHED] = True
            self.metrics.write(final)
            self.metrics.close(0)
            self.metrics = None
        self.rec.close()


def main(argv=None):
    a = parse_args(argv)
    from restartlab.trainer import dist as rdist
    info = rdist.discover_ranks()
    try:
        import numpy  # noqa: F401  torchft's heal needs it and does not declare it
        import torchft  # noqa: F401
    except ImportError as e:
        if info.rank == 0:
            print(f"restartlab.trainer.ft: error: {e} (pip install 'restartlab[torchft]')", file=sys.stderr, flush=True)
        os._exit(EXIT_USAGE)
    try:
        rep = Replica(a, info)
    except rdist.RendezvousError as e:
        print(f"restartlab.trainer.ft: error: rank {info.rank}: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_FAILED)
    log = StepLog(a.outdir, info.rank, a.replica_group, a.log_interval)
    while rep.manager.current_step() < a.train_iters:
        log.write(rep.step())
    log.close(a.train_iters, shards_crc(rep.model))
    if info.rank == 0:
        print(f"[g{a.replica_group} rank0] TRAINING DONE step={a.train_iters} attempted={log.attempted}", flush=True)
    rep.manager.shutdown(wait=False)
    rdist.clean_exit(0)


if __name__ == "__main__":
    main()
