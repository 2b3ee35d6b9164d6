"""What a job script is rendered from: render.context() makes it, the templates read its fields,
and `restartlab run`, `submit`, `--baseline-from` (reuse.py) and the tests read the same fields
back. Each phase's launch is held whole (`spec`) and in the two forms the job script writes."""
import dataclasses
from typing import Any, Dict, List, Optional

from ..contracts.scenario_record import Scenario
from ..tools.launch import LaunchSpec


@dataclasses.dataclass
class PhasePlan:
    """One phase as the job script runs it."""
    name: str
    dir: str                      # the phase's directory (layout.Phase)
    checkpoint: str               # none, sync or async
    ckpts: str                    # its checkpoint directory
    spec: LaunchSpec              # the launch, whole: what a reader compares
    launch: str                   # the launch as --launch (the supervisor's)
    program: List[str]            # the program's words, after the supervisor's --
    argv: List[str]               # the launcher's whole command line
    warm: bool                    # relaunched from a standby pool
    ft: Optional[List[str]]       # a torchft phase's --ft-* flags (None: a restart phase)
    strategy: str                 # restart or torchft
    inject: Optional[List[str]]   # the supervisor's --inject flags (None: no injector)
    inject_plan: str              # the injector's command line, for the script's comment ('' without one)


@dataclasses.dataclass
class ScriptContext:
    """The whole job script's values (render.context); the smoke job's adds its two argvs."""
    sc: Scenario                  # the scenario as rendered: its scheduler and expt_dir set
    scheduler: str
    prefix: Optional[str]         # the scheduler's directive prefix (#PBS, #SBATCH; None: no header)
    scheduler_title: str
    header_template: str
    launcher: str
    directives: List[str]
    nodefile_sh: str
    jobid_sh: str
    files: Dict[str, str]         # the experiment's jobs log and bad-nodes file, by name
    expt_dir: str
    python: str
    tag: str                      # the job's tag: every rank's environment carries it
    phases: List[PhasePlan]
    secrets: List[str]            # launch.env's secrets, passed by name
    launch: LaunchSpec            # the job's launch without a program
    train_iters: int
    setup: List[str]
    supervise_args: List[str]
    stop_after: int               # the walltime margin's stop, in seconds from the script's start (0: off)
    chain: int
    exit_walltime: int
    exit_budget: int
    report: bool
    source: str
    unfilled: str
    report_args: List[str]
    chain_args: List[str]
    smoke_argv: List[str] = dataclasses.field(default_factory=list)
    smoke_args: List[str] = dataclasses.field(default_factory=list)

    def template_values(self) -> Dict[str, Any]:
        """Each field by name, as the templates take them (the records inside kept whole)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def phase(self, name: str) -> Optional[PhasePlan]:
        return next((p for p in self.phases if p.name == name), None)
