"""Imports a process keeps for good, made the way CPython's gc docs advise.

The advice is for a process that forks or lives long. No cyclic collection runs while the imports
come in. Importing torch makes ~300k objects, and the collector's passes over them were about a
fifth of its CPU here. Then all of it is frozen, so that no later collection, in this process or a
fork of it, scans those objects again. The bundled trainer's start-up and the warm pool's preload
use it. Standard library only."""
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
