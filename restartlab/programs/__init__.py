"""Training programs restartlab can put through an experiment.

There is one adapter per program, registered by name (as schedulers and launchers are). An adapter
knows one program's conventions. It says where progress comes from, which checkpoints exist and
which are complete. It says which one the program will load (its own rule) and what its resume
looks like. The package is torch-free: the job's supervisor, the injector and the report use it
on a login node.

    spec = programs.resolve({"adapter": "generic", "progress": ..., "checkpoints": ..., ...})  # a programs.Spec
    programs.list_ckpts(spec, ckpt_dir) -> [Ckpt]; programs.newest_complete(...), programs.will_load(...)
"""
from .base import (ADAPTERS, KEYS, UNKNOWN_STEP, Adapter, Ckpt, COMPLETE_RULES, SELECT_RULES, clean_line,  # noqa: F401
                   parse_record, parse_saved, parse_saving, PROGRESS_FORMATS, preflight,
                   from_argv, in_flight, list_ckpts, newest_complete, parse_progress, parse_resumed, resolve,
                   save_interval, spec_errors, taps, why_not_complete, will_load, Progress, Saved)
from ..contracts.program_spec import Spec  # noqa: F401,E402
from . import builtin  # noqa: F401,E402  (registers the built-in adapters)

__all__ = ["ADAPTERS", "KEYS", "UNKNOWN_STEP", "Adapter", "Ckpt", "COMPLETE_RULES", "SELECT_RULES", "clean_line",
           "in_flight", "list_ckpts", "newest_complete", "parse_progress", "parse_record",
           "parse_resumed", "parse_saved", "Progress", "Saved",
           "parse_saving",
           "PROGRESS_FORMATS", "from_argv", "preflight", "resolve",
           "save_interval", "Spec", "spec_errors", "taps", "why_not_complete", "will_load", "names", "get"]


def names():
    return ADAPTERS.names()


def get(name: str) -> Adapter:
    return ADAPTERS.get(name)
