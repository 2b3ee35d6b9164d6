"""Put on a Python rank's PYTHONPATH by restartlab (runtime/pystdio.py): its standard output becomes
line-buffered, so each line reaches the launcher in one write and another rank's output can never
land inside it.

Why: restartlab sets PYTHONUNBUFFERED=1 for a program whose progress it reads from the output
(lines as they happen, nothing lost in a buffer at a SIGKILL). Unbuffered, Python's print() is two
writes, the text and then its newline, and a launcher (mpiexec, srun) merges the ranks' outputs at
write boundaries: another rank's line landed between them in a soak here ("step 1 loss
3.290171837500rank 1/2 local 1") and that step's loss was lost to the verdict. Line-buffered,
print() is one write per line and still leaves at once.

Then the sitecustomize this one hides (a site's or a distribution's, e.g. Debian's) runs as it would
have: this directory leaves sys.path and the next `sitecustomize` on it is imported. Nothing else
changes; a program started with -S, -E or -I never reads this file and keeps Python's own buffering."""
import importlib
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _line_buffered() -> None:
    out = sys.stdout
    if out is None or getattr(out, "line_buffering", True):
        return
    try:
        out.reconfigure(write_through=False, line_buffering=True)
    except (AttributeError, ValueError, OSError):
        pass


def _chain() -> None:
    """The hidden sitecustomize, if any, imported in our place."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    me = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")  # the next one on the path
    except ImportError as e:
        if e.name != "sitecustomize":  # the hidden one failed: as site.py would, say so
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")
        if me is not None:
            sys.modules["sitecustomize"] = me
    except Exception as e:  # as site.py says a failing sitecustomize, and goes on
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n")


_line_buffered()
_chain()
