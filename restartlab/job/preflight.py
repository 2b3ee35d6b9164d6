"""restartlab preflight: on the login node, before anything is queued, whether the job a scenario
describes can work where it is going. Each finding is one line: what is wrong, where (file:line:
key where a key is at fault) and what to do. `submit` runs it first and submits nothing on an
error (exit 2). `--no-preflight` skips it, and the experiment records that it was skipped.

It checks the account a site requires and the queue's own limits, as its server reports them.
It checks the checkpoint bytes the run keeps against the free space and quota where it writes. It
checks where it writes: a site's project space, not $HOME. It looks for the program as the ranks
will, in their attempt directory. It asks the job's Python (torch, the device support the scenario
asks for, restartlab, torchft for torchft phases) and the launcher, both after the scenario's
setup lines. It checks the fan-out tool. It prints the most node-hours the job can be charged."""
import os
import shutil
import subprocess
import sys
from typing import Callable, List, Optional

from .. import programs, schedulers
from ..contracts import placeholders, pycmd
from ..contracts.scenario_record import Scenario
from ..scenario.source import fmt_path
from ..schedulers.base import run_tool
from . import probe as probe_mod, render
from .checks import ERROR, OK, WARNING, Finding  # re-exported: callers take the levels and Finding from here
from .checks.environment import EnvironmentCheck, lacks_framework
from .checks.program import Found, ProgramCheck
from .checks.queue import QueueCheck
from .checks.simple import AccountCheck, CostCheck, FanoutCheck
from .checks.storage import StorageCheck


class Preflight:
    """The checks over one loaded scenario, and what they share.

    The checks are in job/checks/, one class each. They share:
    - the scenario;
    - `where(path)`: the 'file:line' of a key (scenario.load_located);
    - the scheduler;
    - `run`: how the scheduler's tools are asked;
    - `probe`: how the job's setup, launcher and Python are asked;
    - the findings."""

    def __init__(self, sc: Scenario, where: Callable, scheduler: Optional[str] = None, run=run_tool,
                 probe=probe_mod.run, environ=os.environ, ignore_jobs=()):
        self.sc, self.where, self.run, self.probe_fn, self.env = sc, where, run, probe, environ
        self.sched = schedulers.get(scheduler or sc.scheduler)
        self.site = sc.site.name or f"this {self.sched.title or self.sched.name} site"
        self.findings: List[Finding] = []
        self.root = render.expt_root(sc)
        self.chosen_queue: Optional[str] = None  # job.queue: auto's choice, once queue() has run
        # jobs not counted against a queue's per-user limit (submit --after: the ones it waits for)
        self.ignore_jobs = {j.split(".")[0] for j in ignore_jobs}

    def add(self, level, check, text):
        self.findings.append(Finding(level, check, text))

    def key(self, *path) -> str:
        """'file:line: a.b.c' of a key, as validation errors name it ('--set a.b.c' for a value given so)."""
        w, k = self.where(path), fmt_path(path)
        return w if w == f"--set {k}" else f"{w}: {k}"

    def queue(self) -> None:
        """The queue check alone (submit's job.queue: auto asks it first): its findings, and
        chosen_queue for auto."""
        QueueCheck(self).run()

    def check(self, environment=True) -> List[Finding]:
        AccountCheck(self).run()
        QueueCheck(self).run()
        StorageCheck(self).run()
        found = Found()
        ProgramCheck(self).run(found)
        if environment:
            EnvironmentCheck(self).run(found)
        FanoutCheck(self).run()
        CostCheck(self).run()
        return self.findings


def torchft_missing(sc: Scenario, where: Callable) -> List[Finding]:
    """`restartlab run`'s own check: a torchft phase without torchft installed.

    Its job runs this Python, so such a phase is refused before anything runs. Validation leaves
    what is installed to preflight."""
    import importlib.util
    for i, ph in enumerate(sc.phases):
        if ph.torchft and importlib.util.find_spec("torchft") is None:
            return [Finding(ERROR, "python", f"{where(('phases', i, 'recovery', 'strategy'))}: "
                            f"{fmt_path(('phases', i, 'recovery', 'strategy'))}: torchft is not installed for {sys.executable} "
                            "(pip install 'restartlab[torchft]', which keeps the torch that is there)")]
    return []


def framework_missing(sc: Scenario, where: Callable) -> List[Finding]:
    """Refuse, before anything runs, a scenario whose Pythons lack what it needs.

    That is a program adapter naming a framework (transformers, deepspeed) that the program's
    Python cannot import, or a torchft phase without torchft. `restartlab run` and `fuzz` run the
    job here, with these Pythons."""
    out = torchft_missing(sc, where)
    prog = sc.trainer.program
    adapter = programs.ADAPTERS.get(prog.adapter) if prog else None
    if not prog or not adapter or not adapter.requires:
        return out
    sdir = os.path.dirname(os.path.abspath(sc.source))
    cmd = placeholders.fill(prog.command[0], {placeholders.SCENARIO_DIR: sdir})
    # the ranks find a bare `python` on the job's PATH, which `restartlab run` starts with its own
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    exe = shutil.which(cmd, path=path) if pycmd.IS_PYTHON.match(os.path.basename(cmd)) else sys.executable
    if not exe:
        return out  # the program check (preflight) names a command that is not there
    code = ("import importlib.util, sys; "
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    try:
        r = subprocess.run([exe, "-c", code, *adapter.requires], capture_output=True, text=True, timeout=120)
        gone = r.stdout.split() if r.returncode == 0 else list(adapter.requires)
    except (OSError, subprocess.SubprocessError):
        gone = list(adapter.requires)
    if gone:
        key = ("trainer", "program", "command")
        out.append(Finding(ERROR, "python", lacks_framework(f"{where(key)}: {fmt_path(key)}", exe, gone, adapter)))
    return out


def errors(findings: List[Finding]) -> List[Finding]:
    return [f for f in findings if f.level == ERROR]


def report(findings: List[Finding], out=None, quiet_ok=False, refused="nothing submitted") -> str:
    """Print each finding (errors first) and a last line; returns the text (the experiment keeps it)."""
    order = {ERROR: 0, WARNING: 1, OK: 2}
    lines = [f"preflight: {f.line()}" for f in sorted(findings, key=lambda f: order[f.level])
             if not (quiet_ok and f.level == OK)]
    n_err, n_warn = len(errors(findings)), sum(f.level == WARNING for f in findings)
    lines.append(f"preflight: {n_err} error(s), {n_warn} warning(s)" + (f": {refused}" if n_err else ""))
    text = "\n".join(lines) + "\n"
    (out or sys.stderr).write(text)
    return text


def main(a) -> int:
    from .. import scenario
    sc, where = scenario.load_located(a.scenario, a.set)
    findings = Preflight(sc, where, a.scheduler).check()
    report(findings, out=sys.stdout)
    return 2 if errors(findings) else 0
