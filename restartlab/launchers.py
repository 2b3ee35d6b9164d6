"""Launcher plug-ins: pure functions from (ranks, layout, env for the ranks) to argv tokens.

`rank_env` reaches the training ranks only (never the launcher's own environment), which is how
the job tag stays off the launcher and the injector. Variables already in the launcher's
environment (RESTARTLAB_LAUNCH_TS, MASTER_ADDR/PORT) are forwarded by each launcher's own mechanism."""
import socket
from typing import Callable, Dict, List

LAUNCHERS: Dict[str, Callable] = {}
FORWARD = ("RESTARTLAB_LAUNCH_TS", "MASTER_ADDR", "MASTER_PORT")


def launcher(name):
    def deco(fn):
        LAUNCHERS[name] = fn
        return fn
    return deco


@launcher("pals")
def pals(nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None) -> List[str]:
    argv = ["mpiexec", "-n", str(nodes * ppn), "--ppn", str(ppn)]
    if depth:
        argv += ["--depth", str(depth)]
    if cpu_bind:
        argv += ["--cpu-bind", cpu_bind]
    for k, v in rank_env.items():
        argv += ["--env", f"{k}={v}"]
    return argv


@launcher("hydra")
def hydra(nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None) -> List[str]:
    argv = ["mpiexec", "-n", str(nodes * ppn), "-ppn", str(ppn)]
    if hostfile:
        argv += ["-f", hostfile]
    if cpu_bind:
        argv += ["-bind-to", cpu_bind]
    for k, v in rank_env.items():
        argv += ["-genv", k, v]
    return argv


@launcher("openmpi")
def openmpi(nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None) -> List[str]:
    argv = ["mpiexec", "-n", str(nodes * ppn), "--map-by", f"ppr:{ppn}:node"]
    if hostfile:
        argv += ["--hostfile", hostfile]
    if cpu_bind:
        argv += ["--bind-to", cpu_bind]
    for k in FORWARD:
        argv += ["-x", k]
    for k, v in rank_env.items():
        argv += ["-x", f"{k}={v}"]
    return argv


@launcher("srun")
def srun(nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None) -> List[str]:
    # --export=ALL,K=V cannot carry a value with a comma: such values are refused at render time
    for k, v in rank_env.items():
        if "," in v:
            raise ValueError(f"launch.env.{k}: srun --export cannot carry a comma in a value")
    argv = ["srun", "-N", str(nodes), "-n", str(nodes * ppn), f"--ntasks-per-node={ppn}",
            "--kill-on-bad-exit=1", "--mpi=pmi2"]
    if cpu_bind:
        argv += [f"--cpu-bind={cpu_bind}"]
    argv.append("--export=" + ",".join(["ALL"] + [f"{k}={v}" for k, v in rank_env.items()]))
    return argv


def build(name, **kw) -> List[str]:
    return LAUNCHERS[name](**kw)


def local_rendezvous_env() -> Dict[str, str]:
    """MASTER_ADDR/PORT for ranks on this host only (tests, benchmarks): loopback, a free port.
    Given these, the trainer never initializes MPI (see templates/body.j2 for why that matters)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
