"""The experiment directory's first files: the rendered job script and the resolved scenario.
`restartlab submit` and `restartlab run` both create experiments here, and `render -o` writes
the same pair next to a chosen path."""
import os
from typing import Optional, Tuple

from ..contracts import ckptdir, layout
from ..contracts.scenario_record import Scenario
from .script_context import ScriptContext
from . import render
from ..scenario import dump_resolved


def render_script(sc: Scenario, scheduler: Optional[str] = None,
                  expt_dir: Optional[str] = None) -> Tuple[str, ScriptContext, str]:
    """(script text, render context, resolved scenario YAML)."""
    text, ctx = render.render(sc, scheduler, expt_dir)
    return text, ctx, dump_resolved(ctx.sc)  # the scenario as rendered: its expt_dir set


def write_script(path: str, text: str, resolved: str, resolved_path: str) -> None:
    """Write the job script and the resolved scenario, each whole or not at all.

    A reader that polls for the job script, a watcher, or a render cut short never sees half of
    one. The resolved scenario goes first, so a job script that exists has its scenario beside it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ckptdir.write_atomic(resolved_path, resolved.encode())
    ckptdir.write_atomic(path, text.encode(), mode=0o755)


def create(sc: Scenario, scheduler: Optional[str] = None, expt_dir: Optional[str] = None,
           smoke: bool = False) -> Tuple[str, ScriptContext]:
    """Make the experiment's job script and resolved scenario; returns (job script path, context).
    smoke: the smoke job's script instead (render.render_smoke), with the same resolved scenario."""
    if smoke:
        text, ctx = render.render_smoke(sc, scheduler, expt_dir)
        resolved = dump_resolved(ctx.sc)
    else:
        text, ctx, resolved = render_script(sc, scheduler, expt_dir)
    expt = layout.Expt(ctx.expt_dir)
    os.makedirs(expt.root, exist_ok=True)
    write_script(expt.job_script, text, resolved, expt.scenario)
    return expt.job_script, ctx
