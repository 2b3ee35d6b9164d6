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
changes; a program started with -S, -E or -I never reads this file and keeps Python's own buffering.

Where restartlab asks for training-state fingerprints (RESTARTLAB_STATE_DIR), the program's
`import torch` is followed by restartlab.trainer.state_probe's install (_AfterTorch below); where a
scenario slows one rank's checkpoint writes (RESTARTLAB_SLOW_WRITES), by restartlab.trainer.slow_writes'."""
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

_HERE = os.path.dirname(os.path.abspath(__file__))


def _line_buffered() -> None:
    out: Any = sys.stdout  # whatever the program put there: one without reconfigure() is let be
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


class _AfterTorch:
    """A meta path finder that lets `import torch` run as always and then installs restartlab's
    training-state probe (restartlab.trainer.state_probe) in this process: the program's
    optimizers, data loaders and gradient scaler are observed, not changed. Only where restartlab
    asked for it (RESTARTLAB_STATE_DIR); a program that never imports torch never loads it."""

    def find_spec(self, name: str, path: Optional[Sequence[str]] = None,
                  target: "Optional[ModuleType]" = None) -> "Optional[ModuleSpec]":
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: "ModuleType") -> None:
            run(module)
            _arm()
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # wraps this spec's loader on purpose
        return spec


def _probe_wanted() -> bool:
    return bool(os.environ.get("RESTARTLAB_STATE_DIR")) and os.environ.get("RESTARTLAB_STATE_EVERY") != "0"


def _arm() -> None:
    """The state probe and the slowed writer, as a warm rank gets them (restartlab.trainer.rank_hooks)."""
    try:
        from restartlab.trainer import rank_hooks  # type: ignore[import-not-found]  # setup.cfg maps trainer/ here
        rank_hooks.install_from_env()
    except Exception as e:  # never the program's failure
        sys.stderr.write(f"restartlab: rank hooks off: {type(e).__name__}: {e}\n")


_line_buffered()
_chain()
if (_probe_wanted() or os.environ.get("RESTARTLAB_SLOW_WRITES")) and "torch" not in sys.modules:
    import importlib.util
    sys.meta_path.insert(0, _AfterTorch())
