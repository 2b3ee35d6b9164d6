"""How a Python rank's output leaves it: at once, and one whole line per write.

restartlab reads a program's progress from its output as it happens, so a Python rank gets
PYTHONUNBUFFERED=1. Unbuffered, print() writes the text and its newline apart. A launcher that
merges the ranks' outputs can then put another rank's line between them. A soak here lost a step's
loss that way. The sitecustomize in linebuf/ (put first on PYTHONPATH) makes such a rank's stdout
line-buffered instead: each line in one write, still at once.

This module uses the standard library only, because rankenv imports it before every rank."""
import os
from typing import MutableMapping

LINEBUF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "linebuf")


def line_buffered(env: MutableMapping[str, str]) -> None:
    """Make `env` give a Python program line-buffered output.

    `env` is a rank's, before its program starts. It gets PYTHONUNBUFFERED=1 unless that is set. A
    program started with -S keeps that. linebuf/ goes first on PYTHONPATH, once."""
    env.setdefault("PYTHONUNBUFFERED", "1")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if LINEBUF_DIR not in parts:
        env["PYTHONPATH"] = os.pathsep.join([LINEBUF_DIR] + parts)
