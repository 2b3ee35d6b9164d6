"""Teardown: a signal to whatever of one job's ranks is left, on every node (found by their
tag): the supervisor's last word on an attempt that failed or hung (SIGKILL: a stopped rank
too), and its walltime warning (the trainer's preemption signal). Also `restartlab teardown`."""
import signal
import sys
import time
from typing import List, Optional, Tuple

from .. import failures
from ..contracts.signals import parse_signal
from . import killer
from .fanout import fan_out, killer_argv, read_nodefile


def teardown(tag: str, sig_name: str = "KILL", fanout: str = "local", nodefile: Optional[str] = None,
             launcher: str = "hydra", standby: bool = False, timeout: float = 15.0) -> int:
    """`restartlab teardown`: signal_all, its exit status 1 when a node could not be reached or a
    killer failed (0 otherwise)."""
    lost, errors = signal_all(tag, sig_name, fanout, nodefile, launcher, standby, timeout)
    return 1 if errors else 0


def signal_all(tag: str, sig_name: str = "KILL", fanout: str = "local", nodefile: Optional[str] = None,
               launcher: str = "hydra", standby: bool = False, timeout: float = 15.0) -> Tuple[List[str], List[str]]:
    """Signal the ranks tagged `tag` on every node of the node file.

    `standby`: the warm standby pool too. Each node gets `timeout` seconds to answer. It prints one
    line, with its time, the seconds it took and the nodes that did not answer. Returns (the nodes
    that did not answer, the errors)."""
    sig = parse_signal(sig_name)
    hosts, slots = read_nodefile(nodefile)
    t0 = time.time()
    if fanout == "local":  # this node only: no second interpreter
        receipts = [killer.kill_ranks(tag, sig, standby=standby)]
    else:
        argv = killer_argv(sys.executable, tag, sig_name, failures.get(failures.Kill.name)) + (["--standby"] if standby else [])
        receipts = fan_out(fanout, hosts, range(len(hosts)), argv, slots, launcher, timeout=timeout)
    killed = sorted({(r.host, p) for r in receipts for p in r.pids})
    ranks = {(r.host, p) for r in receipts for p in r.trees}
    errors = [r.error for r in receipts if r.error]
    lost = [str(r.host) for r in receipts if r.unreachable]
    verb = "killed" if sig == signal.SIGKILL else f"sent SIG{signal.Signals(sig).name.removeprefix('SIG')}"
    print(f"[{time.strftime('%H:%M:%S', time.localtime(t0))}] restartlab teardown: {len(killed)} process(es) in "
          f"{len(ranks)} tree(s) of {tag} {verb} on {len(hosts) - len(lost)} of {len(hosts)} node(s) in "
          f"{time.time() - t0:.1f}s" + (f"; unreachable: {', '.join(lost)}" if lost else "")
          + (f"; errors: {'; '.join(errors)}" if errors else ""), flush=True)
    return lost, errors
