"""Scheduler plug-ins: every module in this package that registers a `Scheduler` subclass (see
base.py). Modules are found by name, so a new scheduler is one file here."""
import importlib
import os
import pkgutil
import shutil
from typing import List, Mapping, Optional

from .base import SCHEDULERS, Scheduler, SchedulerError, register, run_tool  # noqa: F401

for _m in pkgutil.iter_modules([os.path.dirname(__file__)]):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


def get(name: str) -> Scheduler:
    return SCHEDULERS.get(name)


def names(queued_only: bool = False) -> List[str]:
    return [s.name for s in SCHEDULERS.all() if s.has_queue or not queued_only]


def jobid_vars() -> List[str]:
    """Every scheduler's job-id variable (the job script and the trainer read the first set)."""
    return [s.jobid_var for s in SCHEDULERS.all() if s.jobid_var]


def from_env(env: Mapping[str, str]) -> Optional[Scheduler]:
    """The scheduler whose job we are running inside, if any."""
    return next((s for s in SCHEDULERS.all() if s.jobid_var and env.get(s.jobid_var)), None)


def job_id(env: Mapping[str, str], default: str = "local") -> str:
    s = from_env(env)
    return env[s.jobid_var] if s and s.jobid_var else default


def on_path() -> List[Scheduler]:
    """On a login node: the schedulers whose query tool is on PATH."""
    return [s for s in SCHEDULERS.all() if s.query_tool and shutil.which(s.query_tool)]
