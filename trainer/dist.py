"""Rank discovery from every launcher, device/backend choice (xpu: xccl or oneCCL), process-group init, clean exit."""
import datetime
import importlib
import importlib.util
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Optional

from restartlab import launchers


@dataclass
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str


def discover_ranks(env=None) -> RankInfo:
    """Rank, world size and local rank from whichever launcher started us.

    With no launcher, this is a single process. Each launcher's variables come from the torch-free
    registry in restartlab.launchers, tried in registration order."""
    env = os.environ if env is None else env
    try:
        found = launchers.discover(env)
    except ValueError as e:
        raise RuntimeError(str(e))
    if found:
        return RankInfo(*found)
    return RankInfo(0, 1, 0, "none")


def rendezvous(info: RankInfo, env=None):
    """MASTER_ADDR/MASTER_PORT: from the environment, else rank 0's host and a free port,
    broadcast with mpi4py (when importable)."""
    env = os.environ if env is None else env
    if "MASTER_ADDR" in env and "MASTER_PORT" in env:
        return env["MASTER_ADDR"], int(env["MASTER_PORT"])
    if info.world_size == 1:
        return "127.0.0.1", launchers.free_port()
    try:
        from mpi4py import MPI
    except ImportError:
        raise SystemExit("restartlab.trainer: MASTER_ADDR/MASTER_PORT are not set and mpi4py is not "
                         "installed to agree on them; export both, or `pip install mpi4py`")
    addr, port = None, None
    if info.rank == 0:
        addr, port = socket.gethostname(), launchers.free_port()
    addr, port = MPI.COMM_WORLD.bcast((addr, port), root=0)
    # MPI has done its one job. A caveat, measured with MPICH Hydra: once ranks have initialized
    # MPI, the first to exit gets its slower peers SIGKILLed, finalized or not. Then mpiexec may
    # report "EXIT CODE: 9" after a successful run. This fallback is only for hand-launched runs,
    # since restartlab's job scripts export MASTER_ADDR and MASTER_PORT.
    MPI.Finalize()
    return addr, port


def intra_op_threads(env=None, cpus=None) -> Optional[int]:
    """CPU threads per rank: the CPUs this process may use, split among the ranks on its node.

    Returns None when OMP_NUM_THREADS is set, as torch honours it. Without this, each rank takes
    every core and the CPUs are oversubscribed. Measured on 2 cores with 4 ranks under srun, 1 run
    in 8 had parameters that differ in the last bits from run to run. With 1 thread per rank, 18 in
    18 were identical."""
    env = os.environ if env is None else env
    if env.get("OMP_NUM_THREADS"):
        return None
    local = launchers.local_size(env) or 1
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))
    return max(1, cpus // local)


class BackendError(RuntimeError):
    """The requested device or its collective backend is not available (one line, exit 2)."""


def load_ipex(find_spec=importlib.util.find_spec, import_module=importlib.import_module) -> bool:
    """Import Intel Extension for PyTorch, only when installed and only on the xpu path.

    Without it, torch before 2.4 has no native torch.xpu. On newer torch it adds fused kernels."""
    if find_spec("intel_extension_for_pytorch") is None:
        return False
    import_module("intel_extension_for_pytorch")
    return True


def xpu_backend(torch_dist, import_module=importlib.import_module) -> str:
    """The collective backend for Intel GPUs: torch's native xccl when this torch has it, else
    oneCCL's `ccl` (registered by importing oneccl_bindings_for_pytorch), else a clear error."""
    is_xccl = getattr(torch_dist, "is_xccl_available", None)
    if is_xccl is not None and is_xccl():
        return "xccl"
    try:
        import_module("oneccl_bindings_for_pytorch")  # registers the "ccl" backend
        return "ccl"
    except ImportError as e:
        why = str(e) or type(e).__name__
    raise BackendError(
        "--device xpu: no collective backend for Intel GPUs: this torch has no xccl "
        "(torch.distributed.is_xccl_available() is false or missing) and oneccl_bindings_for_pytorch "
        f"does not import ({why}). On Aurora/Sunspot: `module load frameworks`; elsewhere a torch "
        "built with XPU support (xccl), or `pip install oneccl_bind_pt` matching this torch")


def _xpu_available(torch) -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def pick_device(requested: str, find_spec=importlib.util.find_spec, import_module=importlib.import_module):
    """(device type, backend) for `--device`: auto takes xpu, else cuda, else cpu; cpu -> gloo,
    cuda -> nccl, xpu -> xccl or ccl (xpu_backend). IPEX is imported only for xpu."""
    import torch
    import torch.distributed as tdist
    if requested == "auto":
        if _xpu_available(torch) or (load_ipex(find_spec, import_module) and _xpu_available(torch)):
            requested = "xpu"
        elif torch.cuda.is_available():
            requested = "cuda"
        else:
            requested = "cpu"
    if requested == "cpu":
        return "cpu", "gloo"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise BackendError("--device cuda: torch.cuda.is_available() is false (no GPU, or a CPU build "
                               f"of torch {torch.__version__})")
        return "cuda", "nccl"
    load_ipex(find_spec, import_module)
    if not _xpu_available(torch):
        raise BackendError(f"--device xpu: torch.xpu.is_available() is false (torch {torch.__version__}; "
                           "on Aurora/Sunspot `module load frameworks` provides an XPU build)")
    return "xpu", xpu_backend(tdist, import_module)


class RendezvousError(RuntimeError):
    """The ranks could not form their group (one line: the store's address and what went wrong)."""


# a real store answers a client's connect and ping in milliseconds; past this, whatever listens on
# MASTER_PORT is not rank 0's store (a process that took the port between the pick and rank 0's bind).
# RESTARTLAB_STORE_CONNECT_S overrides it (the test that puts a stranger on the port sets 5 s).
STORE_CONNECT_S = 30.0
STORE_CONNECT_VAR = "RESTARTLAB_STORE_CONNECT_S"


def device_index(local_rank: int, count: int, order: str = "local") -> int:
    """The device a rank takes among its node's `count`: its local rank (local), or counted from the
    last (reverse: ALCF Polaris's set_affinity_gpu_polaris.sh, `gpu=$((num_gpus - 1 - PMI_LOCAL_RANK %
    num_gpus))`, argonne-lcf/user-guides at 7d04a3f9, docs/polaris/running-jobs/using-gpus.md:25-33,
    "need to assign GPUs in reverse order due to topology"). Unverified here: no GPUs."""
    if count <= 0:
        return local_rank
    return count - 1 - local_rank % count if order == "reverse" else local_rank % count


def init(info: RankInfo, device_type: str, backend: str, timeout_s: float = 600.0,
         connect_s: Optional[float] = None, order: str = "local"):
    import torch
    import torch.distributed as dist
    if connect_s is None:
        connect_s = float(os.environ.get(STORE_CONNECT_VAR) or STORE_CONNECT_S)
    addr, port = rendezvous(info)
    if device_type != "cpu":
        index = device_index(info.local_rank, getattr(torch, device_type).device_count(), order)
        getattr(torch, device_type).set_device(index)
        device = torch.device(device_type, index)
    else:
        device = torch.device("cpu")
    store = create_store(info, addr, port, timeout_s, connect_s)
    dist.init_process_group(backend=backend, store=store, rank=info.rank, world_size=info.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return device


def create_store(info: RankInfo, addr: str, port: int, timeout_s: float, connect_s: float):
    """Create the group's store: rank 0 listens on addr:port.

    The other ranks wait for a listener there. Then they connect with a short timeout before taking
    the collective one. Both ways, a port that someone else took ends this rank in seconds with one
    line. Otherwise rank 0 would die on EADDRINUSE, and its peers would talk to a stranger's socket
    until the group's timeout. That is because torch's own tcp:// rendezvous retries that
    connection for the whole timeout. Every rank that fails exits. The supervisor relaunches with a
    new port."""
    import torch.distributed as dist
    where = f"{addr}:{port}"
    if info.rank == 0:
        try:
            return dist.TCPStore(addr, port, info.world_size, is_master=True, wait_for_workers=False,
                                 timeout=datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, OSError) as e:
            in_use = "EADDRINUSE" in str(e) or "address already in use" in str(e).lower()
            raise RendezvousError(
                f"rank 0 cannot listen on {where} (MASTER_ADDR:MASTER_PORT): "
                + ("the port is in use: another process took it after it was picked" if in_use
                   else " ".join(str(e).split())[:300])) from None
    if not wait_for_listener(addr, port, timeout=timeout_s):
        raise RendezvousError(f"nothing listens on {where} (MASTER_ADDR:MASTER_PORT) after {timeout_s:.0f} s: "
                              "rank 0 did not start its store (see its output)")
    bound = min(connect_s, timeout_s)
    try:
        store = dist.TCPStore(addr, port, info.world_size, is_master=False, timeout=datetime.timedelta(seconds=bound))
    except (RuntimeError, OSError) as e:
        raise RendezvousError(
            f"{where} (MASTER_ADDR:MASTER_PORT) accepts connections but is not rank 0's store "
            f"(no answer to torch's store handshake in {bound:.0f} s: "
            f"{' '.join(str(e).split())[:200]}); another process holds the port") from None
    store.set_timeout(datetime.timedelta(seconds=timeout_s))
    return store


def wait_for_listener(addr, port, timeout=600.0, interval=0.02) -> bool:
    """Poll until something accepts connections on addr:port (True), or until timeout (False).

    torch's own client retries with a backoff that cost up to ~1 s per restart here. Measured: with
    rank 0 1.0 s late, the others joined after 2.3 s. With this poll, they joined after 1.0 s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1.0).close()
            return True
        except OSError:
            time.sleep(interval)
    return False


def clean_exit(code: int = 0, barrier: bool = False):
    """Flush, barrier, os._exit.

    Tearing the gloo group down at interpreter exit aborted about one run in seven on CPU. So we
    never reach it. The barrier runs on success, and on a failure where every rank meets at the same
    point (barrier=True). Then no rank is torn down by the launcher before it has said why it
    stops."""
    import torch.distributed as dist
    sys.stdout.flush()
    sys.stderr.flush()
    if dist.is_initialized() and (code == 0 or barrier):
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
