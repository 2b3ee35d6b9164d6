"""Preflight's checks, one class each. job/preflight.py runs them in order.

A check reads the scenario through the preflight it is given (`pf`). That holds the scenario,
where each key is, the scheduler and how tools are asked. The check adds its findings there. It
keeps no state of its own beyond what the next check is handed: the program's Pythons, for the
environment check."""
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Protocol, Set

from ...contracts.scenario_record import Scenario

ERROR, WARNING, OK = "error", "warning", "ok"


@dataclass
class Finding:
    level: str
    check: str
    text: str

    def line(self) -> str:
        return f"{self.level}: {self.check}: {self.text}"


class Preflight(Protocol):
    """What a check reads and writes of the preflight that runs it (job/preflight.Preflight)."""
    sc: Scenario                       # the loaded scenario
    where: Callable[..., str]          # 'file:line' of a key
    sched: Any                         # the scheduler (schedulers.Scheduler)
    site: str                          # the site's name, as a finding says it
    env: Mapping[str, str]             # the environment the job's shell starts from, as near as known
    root: str                          # the experiment root (render.expt_root)
    run: Callable[..., Any]            # how the scheduler's tools are asked
    probe_fn: Callable[..., Any]       # how the job's setup, launcher and Python are asked (probe.run)
    ignore_jobs: Set[str]              # jobs not counted against a queue's per-user limit
    chosen_queue: Optional[str]        # job.queue: auto's choice, set by the queue check

    def add(self, level: str, check: str, text: str) -> None: ...

    def key(self, *path: Any) -> str: ...


class Check:
    """One check. `run()` adds its findings to the preflight.

    A finding names its check by the check's own word: bytes, where, program, python, launcher,
    skipped ..."""

    def __init__(self, pf: "Preflight") -> None:
        self.pf, self.sc = pf, pf.sc
        self.add, self.key, self.where = pf.add, pf.key, pf.where
        self.sched, self.site, self.env = pf.sched, pf.site, pf.env
