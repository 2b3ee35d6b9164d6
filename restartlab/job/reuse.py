"""restartlab run --baseline-from EXPT_DIR: an earlier experiment's baseline phase (checkpoint:
none) copied into this one instead of run again.

The baseline is the same for every sync/async variant of a scenario, so a user comparing several
pays for it once. It is taken only when it finished and ran the same command. The same command
means the same launch spec (tools/launch.LaunchSpec): the launcher and its ranks, the program,
every argument, and the environment the launcher passes to the ranks. Only each experiment's own
directory in the program's words, and its job tag, may differ.

Its attempts keep their recorded times. The phase holds a `reused-from` file naming the experiment
(layout.Phase.reused), which the supervisor and the report show."""
import dataclasses
import os
import shutil
from typing import Dict, List

from . import experiment
from ..contracts import layout
from ..contracts.envvars import TAG_VAR
from ..tools.launch import SPEC_KEYS, LaunchSpec
from .script_context import PhasePlan, ScriptContext
from .. import scenario


class ReuseError(Exception):
    """A baseline that cannot be reused, with the reason (one line)."""


def _spec(ctx: ScriptContext, phase: PhasePlan) -> LaunchSpec:
    """A phase's launch as a spec, with what makes it this experiment's left out.

    One part left out is the job's tag, an environment variable of its ranks. The other is the
    experiment's directory, in the program's words, the ranks' environment and the host file.
    relaunch.on_node_loss spares or shrink writes a host file there.

    The spec is as the supervisor gets it (--launch and the program's words). There, launch.depth
    0 and unset are one launch, as they are on the launcher's line."""
    spec = LaunchSpec.from_json(phase.launch, phase.program)

    def own(w: str) -> str:
        return w.replace(ctx.expt_dir, "{expt_dir}")
    return dataclasses.replace(spec, env={k: own(v) for k, v in spec.env.items() if k != TAG_VAR},
                               program=tuple(own(w) for w in spec.program),
                               hostfile=own(spec.hostfile) if spec.hostfile else spec.hostfile)


def check(ctx: ScriptContext, other_dir: str) -> Dict[str, str]:
    """{phase name: the other experiment's phase dir} for each baseline phase of the experiment
    being made.

    `ctx` is that experiment's render context. ReuseError when other_dir is no experiment or has
    no such baseline, or its baseline did not finish or ran another command."""
    other = layout.Expt(os.path.abspath(other_dir))
    if not os.path.isfile(other.scenario):
        raise ReuseError(f"{other_dir}: not an experiment directory (no {os.path.basename(other.scenario)})")
    mine = [p for p in ctx.phases if p.checkpoint == "none"]
    if not mine:
        raise ReuseError("this scenario has no baseline phase (checkpoint: none) to take from another experiment")
    try:
        sc = scenario.load(other.scenario, [], resolved=True)
    except scenario.ScenarioError as e:
        raise ReuseError(f"{other_dir}: its scenario does not load: {e}") from None
    _, theirs, _ = experiment.render_script(sc, "local", other.root)
    by_name = {p.name: p for p in theirs.phases if p.checkpoint == "none"}
    for p in mine:
        q = by_name.get(p.name)
        if q is None:
            raise ReuseError(f"{other.scenario}: no baseline phase named {p.name!r} (its baselines: "
                             f"{', '.join(by_name) or 'none'})")
        src = layout.Phase(q.dir)
        if not os.path.exists(src.completed):
            raise ReuseError(f"{src.path}: that baseline did not finish (no `completed` marker): nothing to reuse")
        mine_spec, their_spec = _spec(ctx, p), _spec(theirs, q)
        if mine_spec != their_spec:
            a, b = list(mine_spec.program), list(their_spec.program)
            if a == b:  # the same program, launched otherwise
                key = next(k for k in SPEC_KEYS if getattr(mine_spec, k) != getattr(their_spec, k))
                raise ReuseError(f"{other_dir}: its baseline {p.name!r} was launched otherwise, so it is not this "
                                 f"scenario's: its launch's {key} is {getattr(their_spec, key)!r} there, "
                                 f"{getattr(mine_spec, key)!r} here")
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            flag = f" (after {a[i - 1]})" if 0 < i <= len(a) and a[i - 1].startswith("-") else ""
            raise ReuseError(f"{other_dir}: its baseline {p.name!r} ran another command, so it is not this "
                             f"scenario's: argument {i + 1}{flag} is {b[i] if i < len(b) else '(none)'!r} there, "
                             f"{a[i] if i < len(a) else '(none)'!r} here")
    return {p.name: by_name[p.name].dir for p in mine}


def copy(ctx: ScriptContext, found: Dict[str, str], other_dir: str) -> List[str]:
    """Copy the baseline phases `check` found (its result) into the experiment just made (ctx);
    the names copied."""
    dirs = {p.name: p.dir for p in ctx.phases}
    for name, src in found.items():
        shutil.copytree(src, dirs[name], dirs_exist_ok=True)
        with open(layout.Phase(dirs[name]).reused, "w") as f:
            f.write(os.path.abspath(other_dir) + "\n")
    return list(found)
