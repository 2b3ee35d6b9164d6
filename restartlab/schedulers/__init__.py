"""Scheduler plug-ins (PSI/J-style pure hooks): header directives, submit command and parser,
status command for many ids and parser, cancel command, per-node fan-out command."""
from . import local, pbs, slurm

SCHEDULERS = {"pbs": pbs, "slurm": slurm, "local": local}


def get(name):
    return SCHEDULERS[name]
