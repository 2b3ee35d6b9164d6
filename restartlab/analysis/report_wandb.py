"""`restartlab report --wandb`: the report as one W&B run.

The run holds the report's tables, summary figures and plots, in the experiment's group. The trainer's
per-attempt runs are in "<experiment>/<phase>". Only this module imports wandb, and only when asked for.
It never imports torch."""
import glob
import os
from typing import List, Optional, Union, cast

from ..contracts.phase_summary import PhaseSummary
from ..contracts.scenario_record import Scenario, Wandb

PHASE_COLS = ["phase", "wall_s", "steps", "attempts", "kills", "lost_steps", "downtime_s", "recompute_s",
              "save_stall_s", "interference_s", "ettr", "overhead_s", "residual_s"]
FAILURE_COLS = ["phase", "attempt", "kind", "step_at_kill", "resumed_from", "lost_steps", "downtime_s",
                "restart_s", "recompute_s"]


class WandbReportError(RuntimeError):
    """One line for the user (exit 2)."""


def settings(scenario: Optional[Scenario], project: Optional[str] = None, entity: Optional[str] = None,
             mode: Optional[str] = None) -> Wandb:
    """project/entity/mode: the flags first, then the experiment's scenario (trainer.wandb)."""
    own = scenario.trainer.wandb if scenario else Wandb()
    s = Wandb(project=project or own.project, entity=entity or own.entity, mode=mode or own.mode)
    if not s.project:
        raise WandbReportError("--wandb: no project (give --wandb-project, or trainer.wandb.project in the scenario)")
    return s


def phase_rows(summaries: List[PhaseSummary]):
    rows = []
    for s in summaries:
        o = s.overhead
        vals = dict(s.to_dict(), overhead_s=o and o.measured_s, residual_s=o and o.residual_s)
        rows.append([vals.get(c) for c in PHASE_COLS])
    return rows


def failure_rows(summaries: List[PhaseSummary]):
    return [[s.phase] + [getattr(e, c, None) for c in FAILURE_COLS[1:]] for s in summaries for e in s.failures]


def log(summaries: List[PhaseSummary], out_dir: str, name: str, cfg: Wandb) -> str:
    """One W&B run (job type "report") with the Phases and Failures tables, each phase's figures
    in the run summary and every plot in out_dir. Returns the run's directory."""
    try:
        import wandb
    except ImportError:
        raise WandbReportError("--wandb: wandb is not installed (pip install 'restartlab[wandb]')") from None
    try:
        run = wandb.init(project=cfg.project, entity=cfg.entity, mode=cfg.mode, group=name,  # type: ignore[arg-type]
                         job_type="report", name=f"{name}-report", dir=os.path.abspath(out_dir),
                         settings=wandb.Settings(silent=True, console="off"))
        cols = List[Union[str, int]]  # wandb.Table's columns (a list, invariant): names are str
        run.log({"report/phases": wandb.Table(columns=cast(cols, PHASE_COLS), data=phase_rows(summaries)),
                 "report/failures": wandb.Table(columns=cast(cols, FAILURE_COLS), data=failure_rows(summaries))})
        for png in sorted(glob.glob(os.path.join(out_dir, "*.png"))):
            run.log({f"report/{os.path.basename(png)[:-4]}": wandb.Image(png)})
        for s in summaries:
            figures = {"ettr": s.ettr, "wall_s": s.wall_s, "downtime_s": s.downtime_s, "lost_steps": s.lost_steps,
                       "save_stall_s": s.save_stall_s}
            for k, v in figures.items():
                if v is not None:
                    run.summary[f"{s.phase}/{k}"] = v
        where = run.dir
        run.finish()
        wandb.teardown()
        return where
    except Exception as e:  # noqa: BLE001  W&B's own errors: one line, the report itself is written
        raise WandbReportError(f"--wandb: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}") from None
