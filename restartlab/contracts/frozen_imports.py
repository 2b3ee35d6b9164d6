"""Imports a process keeps for good, made the way CPython's gc docs advise for a process that
forks or lives long: no cyclic collection while they come in (torch's imports make ~300k objects,
and the collector's passes over them were about a fifth of their CPU here), then all of it frozen,
so that no later collection, in this process or a fork of it, scans those objects again. Used by
the bundled trainer's start-up and by the warm pool's preload. Standard library only."""
import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen_imports() -> Iterator[None]:
    """The block's imports without the collector, then frozen; the collector back on after (if it
    was on), whatever the block raised."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
