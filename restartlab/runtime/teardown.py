"""Teardown: a signal to whatever of one job's ranks is left, on every node (found by their
tag): the supervisor's last word on an attempt that failed or hung (SIGKILL: a stopped rank
too), and its walltime warning (the trainer's preemption signal). Also `restartlab teardown`."""
import signal
import sys

from .. import failures
from ..contracts.signals import parse_signal
from . import killer
from .fanout import fan_out, killer_argv, read_nodefile


def teardown(tag: str, sig_name: str = "KILL", fanout: str = "local", nodefile=None,
             launcher: str = "hydra", standby: bool = False) -> int:
    """Signal the ranks tagged `tag` on every node of the node file (`standby`: the warm standby
    pool too); prints one line, returns 1 when a node could not be reached (0 otherwise)."""
    sig = parse_signal(sig_name)
    hosts, slots = read_nodefile(nodefile)
    if fanout == "local":  # this node only: no second interpreter
        receipts = [killer.kill_ranks(tag, sig, standby=standby)]
    else:
        argv = killer_argv(sys.executable, tag, sig_name, failures.get("kill")) + (["--standby"] if standby else [])
        receipts = fan_out(fanout, hosts, range(len(hosts)), argv, slots, launcher)
    killed = sorted({(r.get("host"), p) for r in receipts for p in r.get("pids", [])})
    ranks = {(r.get("host"), p) for r in receipts for p in r.get("roots", r.get("pids", []))}
    errors = [r["error"] for r in receipts if r.get("error")]
    verb = "killed" if sig == signal.SIGKILL else f"sent SIG{signal.Signals(sig).name.removeprefix('SIG')}"
    print(f"restartlab teardown: {len(killed)} process(es) in {len(ranks)} tree(s) of {tag} {verb} on {len(hosts)} node(s)"
          + (f"; errors: {'; '.join(errors)}" if errors else ""), flush=True)
    return 1 if errors else 0
