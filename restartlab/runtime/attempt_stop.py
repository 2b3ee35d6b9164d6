"""Stop what is left of an attempt.

A signal goes to the job's ranks on every node, found by the tag. A hung attempt first tells where
it was before the KILL."""
import contextlib
import time
from typing import Any, Callable, List, Optional

from ..contracts import layout
from ..contracts.trainer_options import STACKS_SIGNAL

STACKS_WAIT_S = 2.0              # a hung attempt's ranks' time to write their stacks before the KILL


def teardown(cfg: Any, att: layout.Attempt, sig: str = "KILL") -> List[str]:  # cfg: supervise.Config (it imports us)
    """Send `sig` to whatever is left of this job's ranks, on every node (found by the tag).

    The attempt's teardown log records it. Returns the nodes that did not answer."""
    from .teardown import signal_all
    with open(att.teardown_log, "a") as log, contextlib.redirect_stdout(log):
        return signal_all(cfg.tag, sig, cfg.fanout, cfg.nodefile, cfg.launcher, timeout=cfg.teardown_timeout)[0]


def dump_stacks(cfg: Any, att: layout.Attempt, launcher_pid: Optional[int], say: Callable[..., None]) -> None:
    """Make a hung attempt tell where it was, before the KILL.

    - Its processes on this node go into layout.Attempt.hang_procs (procsnap). These are the
      launcher's tree and the tagged processes, each with its state and the kernel function it sleeps in.
    - The bundled trainer's ranks that can still run write their threads' Python stacks into the
      attempt's output (trainer_options.STACKS_SIGNAL).

    A program of the user's gets no signal. Its signals are its own."""
    from . import procsnap
    try:
        procsnap.write(att.hang_procs, launcher_pid if launcher_pid is not None else -1, cfg.tag)
    except OSError as e:
        say(f"cannot record the hung attempt's processes: {e}", err=True)
    if cfg.program:
        return
    teardown(cfg, att, STACKS_SIGNAL)
    time.sleep(STACKS_WAIT_S)
