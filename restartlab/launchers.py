"""Launcher plug-ins: one class per MPI launcher, registered by name in LAUNCHERS.

A launcher owns:
- its argv, built from the ranks, the layout and the ranks' environment;
- how it passes a host file;
- the variables its ranks find their rank, world size, local rank and local size in (the trainer
  reads them from here, and this module never imports torch);
- how it reports a rank killed by a signal.

`rank_env` reaches the training ranks only, never the launcher's own environment. That is how the
job tag stays off the launcher and the injector.

Each launcher forwards the variables already in its own environment by its own mechanism. They are
RESTARTLAB_LAUNCH_TS, MASTER_ADDR/PORT and `forward`, the scenario's secrets, which are never
written on a command line. Hydra, PALS and srun (--export=ALL) pass the launcher's environment on.
Open MPI needs `-x NAME`."""
import os
import random
import re
import socket
from typing import Dict, List, Mapping, Optional, Tuple

from .contracts.envvars import LAUNCH_TS_VAR, SLOW_WRITES_VAR, STATE_DIR_VAR, STATE_EVERY_VAR
from .contracts.registry import Registry

FORWARD = (LAUNCH_TS_VAR, "MASTER_ADDR", "MASTER_PORT", STATE_DIR_VAR, STATE_EVERY_VAR, SLOW_WRITES_VAR)


class Launcher:
    name = ""
    title = ""                        # what it is, in a finding's words
    # how its own `--version` names it (None: it cannot be told by it: PALS's is not known here)
    version_pattern: Optional[str] = None
    launchable = True                 # False: its ranks are recognised, but scenarios cannot render it
    rank_var = size_var = local_rank_var = ""
    size_fallbacks: Tuple[str, ...] = ()   # other variables that may hold the world size
    local_size_vars: Tuple[str, ...] = ()  # ranks on this node (first one set wins)

    def argv(self, nodes: int, ppn: int, rank_env: Dict[str, str], cpu_bind: Optional[str] = None,
             depth: Optional[int] = None, hostfile: Optional[str] = None, forward: Tuple[str, ...] = ()) -> List[str]:
        raise ValueError(f"launcher {self.name!r} cannot be used to launch a scenario's ranks")

    def matches(self, env: Mapping[str, str]) -> bool:
        """True when this process was started by this launcher."""
        return self.rank_var in env

    def signal_of(self, rc: int) -> int:
        """The signal that killed a rank, from the launcher's exit code (0: none). A shell
        reports death by signal N as 128+N (255 and above name no signal)."""
        return rc - 128 if 128 < rc < 128 + 65 else 0

    def fanout_argv(self, hosts: List[str], argv: List[str]) -> List[str]:
        """argv that runs `argv` once on each of `hosts` (the injector's `--fanout mpiexec`)."""
        raise ValueError(f"launcher {self.name!r} cannot fan a command out to chosen hosts")


LAUNCHERS: Registry[Launcher] = Registry("launcher")
register = LAUNCHERS.register


# Registration order is the order in which rank discovery tries them.
@register
class Torchrun(Launcher):
    name = "torchrun"
    launchable = False  # per-node agent with its own rendezvous; restartlab renders MPI launchers
    rank_var, size_var, local_rank_var = "RANK", "WORLD_SIZE", "LOCAL_RANK"
    local_size_vars = ("LOCAL_WORLD_SIZE",)


class Mpiexec(Launcher):
    """An `mpiexec` flavour: only its flags differ."""
    hostfile_flag = "--hostfile"
    hosts_flag = "--hosts"
    depth_flag: Optional[str] = None
    bind_flag = "--cpu-bind"

    def fanout_argv(self, hosts, argv):
        return ["mpiexec", "-n", str(len(hosts)), *self.per_node(1), self.hosts_flag, ",".join(hosts), *argv]

    def per_node(self, ppn: int) -> List[str]:
        return ["--ppn", str(ppn)]

    def env_args(self, rank_env: Dict[str, str], forward=()) -> List[str]:
        """Flags that set rank_env for the ranks (`forward`: names passed on from the launcher's
        own environment, by default for this flavour)."""
        return [t for k, v in rank_env.items() for t in ("--env", f"{k}={v}")]

    def argv(self, nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None, forward=()):
        argv = ["mpiexec", "-n", str(nodes * ppn), *self.per_node(ppn)]
        if hostfile:
            argv += [self.hostfile_flag, hostfile]
        if depth and self.depth_flag:
            argv += [self.depth_flag, str(depth)]
        if cpu_bind:
            argv += [self.bind_flag, cpu_bind]
        return argv + self.env_args(rank_env, forward)


@register
class Pals(Mpiexec):
    """Cray PALS mpiexec (Aurora, Sunspot, Polaris)."""
    name = "pals"
    rank_var, size_var, local_rank_var = "PALS_RANKID", "PALS_SIZE", "PALS_LOCAL_RANKID"
    size_fallbacks = ("PMI_SIZE",)  # PALS does not export a size of its own on every system
    local_size_vars = ("PALS_LOCAL_SIZE",)
    depth_flag = "--depth"


@register
class OpenMPI(Mpiexec):
    name = "openmpi"
    title = "Open MPI"
    version_pattern = r"Open MPI|OpenRTE|Open RTE"  # 'mpiexec (Open MPI) X' (its man page; not run here)
    rank_var, size_var, local_rank_var = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK")
    local_size_vars = ("OMPI_COMM_WORLD_LOCAL_SIZE",)
    bind_flag, hosts_flag = "--bind-to", "--host"

    def per_node(self, ppn):
        return ["--map-by", f"ppr:{ppn}:node"]

    def env_args(self, rank_env, forward=()):
        return [t for k in (*FORWARD, *forward) for t in ("-x", k)] + \
            [t for k, v in rank_env.items() for t in ("-x", f"{k}={v}")]


@register
class Hydra(Mpiexec):
    """MPICH's mpiexec (the pip `mpich` wheel ships it)."""
    name = "hydra"
    title = "MPICH's Hydra"
    version_pattern = r"HYDRA build details"  # the `mpich` wheel's, run here
    rank_var, size_var, local_rank_var = "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"
    local_size_vars = ("MPI_LOCALNRANKS",)
    hostfile_flag, bind_flag, hosts_flag = "-f", "-bind-to", "-hosts"

    def per_node(self, ppn):
        return ["-ppn", str(ppn)]

    def env_args(self, rank_env, forward=()):
        return [t for k, v in rank_env.items() for t in ("-genv", k, v)]

    def matches(self, env):
        # `srun --mpi=pmi2` sets PMI_RANK too, but no local rank: srun's entry has it
        return self.rank_var in env and not (self.local_rank_var not in env and "SLURM_PROCID" in env)

    def signal_of(self, rc):
        # Hydra exits with N itself when a rank died of signal N (measured: 9 after a SIGKILL)
        return rc if rc in (6, 9, 15) else super().signal_of(rc)


@register
class Srun(Launcher):
    name = "srun"
    title = "Slurm's srun"
    version_pattern = r"^slurm(-wlm)? \d"  # Debian 12's 'slurm-wlm 22.05.8', run here
    rank_var, size_var, local_rank_var = "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"
    local_size_vars = ("SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")  # the latter: "2(x2)"

    def matches(self, env):
        # The batch script, and what it starts directly, carry SLURM_PROCID=0 too, but no step id
        # (measured on the private Slurm). Only a task of an srun step is an srun rank.
        return self.rank_var in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env)

    def argv(self, nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None, forward=()):
        # --export=ALL,K=V cannot carry a value with a comma: such values are refused at render time
        for k, v in rank_env.items():
            if "," in v:
                raise ValueError(f"launch.env.{k}: srun --export cannot carry a comma in a value")
        argv = ["srun", "-N", str(nodes), "-n", str(nodes * ppn), f"--ntasks-per-node={ppn}",
                "--kill-on-bad-exit=1", "--mpi=pmi2"]
        if hostfile:
            argv += [f"--nodefile={hostfile}"]
        if cpu_bind:
            argv += [f"--cpu-bind={cpu_bind}"]
        argv.append("--export=" + ",".join(["ALL"] + [f"{k}={v}" for k, v in rank_env.items()]))
        return argv


def discover(env: Mapping[str, str], exclude: Tuple[str, ...] = ()) -> Optional[Tuple[int, int, int, str]]:
    """(rank, world size, local rank, launcher name) from whichever launcher started this process,
    tried in registration order (but those in `exclude`); None when none did. ValueError when a
    rank variable is set without a world size."""
    for ln in LAUNCHERS.all():
        if ln.name not in exclude and ln.matches(env):
            size = next((env[v] for v in (ln.size_var, *ln.size_fallbacks) if env.get(v)), None)
            if size is None:
                raise ValueError(f"launcher {ln.name}: {ln.rank_var} is set but no world size ({ln.size_var}) is")
            return int(env[ln.rank_var]), int(size), int(env.get(ln.local_rank_var, 0)), ln.name
    return None


def local_size(env: Mapping[str, str]) -> Optional[int]:
    """Ranks on this node, from the first launcher variable that holds it ("2(x2)" reads 2)."""
    for k in (v for ln in LAUNCHERS.all() for v in ln.local_size_vars):
        digits = env.get(k, "").split("(")[0].split(",")[0]
        if digits.isdigit() and int(digits) > 0:
            return int(digits)
    return None


def identify(version_text: str) -> Optional[str]:
    """The launcher whose --version output this is (None: none that names itself: PALS, or another)."""
    return next((ln.name for ln in LAUNCHERS.all() if ln.version_pattern
                 and re.search(ln.version_pattern, version_text, re.I | re.M)), None)


def get(name: str) -> Launcher:
    return LAUNCHERS.get(name)


def names(launchable_only: bool = True) -> List[str]:
    return [x.name for x in LAUNCHERS.all() if x.launchable or not launchable_only]


def build(name, **kw) -> List[str]:
    return get(name).argv(**kw)


# A rendezvous port is drawn below the kernel's ephemeral range. Every bind to port 0 takes its
# port from that range: gloo's pair listeners, a TCPStore on port 0, this very check. So does every
# outgoing connection. Any of them may take a port picked from that range in the seconds between
# the pick and rank 0's bind. CI saw it on 2026-12-04: rank 0 failed with EADDRINUSE, and the other
# rank connected to a stranger's listener and waited 15 minutes. Below the range, only another
# explicit pick can collide.
PORT_FLOOR = 20000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_range(path: str = EPHEMERAL_RANGE) -> Tuple[int, int]:
    """The kernel's ephemeral port range (Linux; 32768-60999 by default, and where it cannot be read)."""
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def port_pool(path: str = EPHEMERAL_RANGE) -> Tuple[int, int]:
    """The ports free_port draws from.

    That is [PORT_FLOOR, the ephemeral range's start). When a site's range starts so low that too
    few ports are left below it, it is the ports above the range's end."""
    lo, hi = ephemeral_range(path)
    if lo - PORT_FLOOR >= 1000:
        return PORT_FLOOR, lo - 1
    if 65535 - hi >= 1000:
        return hi + 1, 65535
    return PORT_FLOOR, 65535  # the range covers nearly everything: draw anywhere, checked below


def free_port(host: str = "", rng=None, pool: Optional[Tuple[int, int]] = None, tries: int = 100) -> int:
    """A TCP port free right now on this host, for a rendezvous store.

    It is drawn at random from port_pool(), outside the ephemeral range, and checked by binding it.
    It is still a pick, not a reservation. The trainer's rank 0 reports a port taken before its
    bind, and its peers refuse a listener that is not rank 0's store (trainer/dist.py)."""
    rng = rng or random.SystemRandom()
    lo, hi = pool or port_pool()
    for _ in range(tries):
        port = rng.randint(lo, hi)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded host: let the kernel choose
        s.bind((host, 0))
        return s.getsockname()[1]


def local_rendezvous_env() -> Dict[str, str]:
    """MASTER_ADDR/PORT for ranks on this host only (tests, benchmarks): loopback, a free port.
    Given these, the trainer never initializes MPI (see templates/body.j2 for why that matters)."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port("127.0.0.1"))}


def master_addr(first_host: str, suffix: str, env=None) -> str:
    """Where the ranks meet: an exported MASTER_ADDR as it is, else rank 0's host with
    launch.master_addr_suffix (Aurora: its Slingshot name, first_host.hsn.cm.aurora.alcf.anl.gov). With
    a suffix the host's own domain goes first: a node file's names are whole
    (x4000c2s6b0n0.hostmgmt2000.cm.aurora.alcf.anl.gov), the Slingshot name is the short one's."""
    env = os.environ if env is None else env
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    return first_host.split(".")[0] + suffix if suffix else first_host
