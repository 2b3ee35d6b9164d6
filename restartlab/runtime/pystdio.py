"""How a Python rank's output leaves it: at once, and one whole line per write.

restartlab reads a program's progress from its output as it happens, so a Python rank gets
PYTHONUNBUFFERED=1; unbuffered, print() writes the text and its newline apart and a launcher that
merges the ranks' outputs can put another rank's line between them (a soak here lost a step's loss
so). The sitecustomize in linebuf/ (put first on PYTHONPATH) makes such a rank's stdout
line-buffered instead: each line in one write, still at once. Standard library only: rankenv
imports it before every rank."""
import os
from typing import MutableMapping

LINEBUF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "linebuf")


def line_buffered(env: MutableMapping[str, str]) -> None:
    """`env` (a rank's, before its program starts) made to give a Python program line-buffered
    output: PYTHONUNBUFFERED=1 unless set (a program started with -S keeps that), linebuf/ first on
    PYTHONPATH (once)."""
    env.setdefault("PYTHONUNBUFFERED", "1")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if LINEBUF_DIR not in parts:
        env["PYTHONPATH"] = os.pathsep.join([LINEBUF_DIR] + parts)
