"""The supervisor's SIGTERM and SIGINT: the first one stops the phase, a later one does not stop
the stopping.

A scheduler signals every process of a job. PBS sends SIGTERM to all of them at a qdel or at the
walltime (docs/pbs.md). The job script's trap then passes its own TERM on to the supervisor, a few
milliseconds later. Before this module, the second TERM raised again inside the first one's cleanup.
The attempt being stopped got no record. The injector, the warm pools and an armed storage fault
could be left behind.

- The first signal raises `Interrupted`, at once, or at the end of a `held()` section: the drain and
  record of an attempt that has ended, which a raise would leave without its record.
- A later one is noted and ignored. The cleanup it would cut short is bounded (a stop's grace,
  relaunch.teardown_timeout), and SIGKILL still ends the supervisor at once. A second Ctrl-C does not
  break out of it."""
import contextlib
import signal
from types import FrameType
from typing import Iterator, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupts:
    def __init__(self) -> None:
        self.got: Optional[int] = None  # the first signal, once one has come
        self.raised = False
        self.holding = 0

    def install(self) -> None:
        for s in SIGNALS:
            signal.signal(s, self.on_signal)

    def on_signal(self, signum: int, _frame: Optional[FrameType] = None) -> None:
        if self.got is not None:  # already stopping
            return
        self.got = signum
        if not self.holding:
            self._raise()

    def _raise(self) -> None:
        assert self.got is not None
        self.raised = True
        raise Interrupted(self.got)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A section a signal does not cut short: one that comes inside raises at its end."""
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1
        if not self.holding and self.got is not None and not self.raised:
            self._raise()
