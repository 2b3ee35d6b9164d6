"""The phase's injector as a process of the supervisor's.

It starts with the phase's failure settings and where its ranks are. It stops at the phase's end.
It stops by itself once the phase's done marker exists. When it does not, it gets TERM, then KILL."""
import subprocess
import sys
from typing import List, Optional

from ..contracts import layout
from ..tools import verbs

INJECTOR_GRACE_S = 5.0           # the injector stops by itself once the done marker exists


class InjectorProcess:
    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self, args: List[str], phase: layout.Phase) -> None:
        argv = verbs.argv(sys.executable, "inject", *args)
        with open(phase.injector_log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def terminate(self) -> None:
        if self.proc is not None:
            self.proc.terminate()

    def stop(self, grace: float = INJECTOR_GRACE_S) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
