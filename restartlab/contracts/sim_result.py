"""What `restartlab simulate` writes (simulate.json, and `--json` on stdout): a sweep of checkpoint
intervals per save mode for one failure model (analysis/simulate.sweep, simulate_cli.run_sweep), and
the replay of a measured phase (analysis/simulate.replay). Written by typed_json.to_dict, the keys in
the order of the fields below (as they were when these were dicts).

Standard library only: `simulate` runs on a login node."""
import dataclasses
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class SweepRow:
    """One interval under one save mode: the Monte Carlo's mean over its replicas."""
    interval_steps: int = 0
    interval_s: float = 0.0
    ettr: float = 0.0
    ci95: float = 0.0               # the 95% confidence half-width of the ETTR
    failures_per_day: float = 0.0
    lost_h_per_day: float = 0.0
    downtime_h_per_day: float = 0.0


@dataclasses.dataclass
class ModeSweep:
    """Every interval of one save mode, its best, and Young's and Daly's intervals."""
    rows: List[SweepRow] = dataclasses.field(default_factory=list)
    best: SweepRow = dataclasses.field(default_factory=SweepRow)
    young_s: Optional[float] = None
    daly_s: Optional[float] = None


@dataclasses.dataclass
class FtSweep:
    """torchft replica groups under the same failures (analysis/simulate_ft.simulate)."""
    groups: int = 0
    goodput: float = 0.0
    ci95: float = 0.0                      # the 95% confidence half-width of the goodput
    failures_per_day: float = 0.0
    all_groups_lost_per_run: float = 0.0   # how often no group was left to heal from
    analytic: float = 0.0                  # the first-order estimate


@dataclasses.dataclass
class SweepResult:
    """One failure model's sweep (per node count, with --nodes)."""
    OMIT_NONE = ("torchft",)

    nodes: Optional[int] = None
    mtbf_s: float = 0.0
    kinds: Dict[str, float] = dataclasses.field(default_factory=dict)
    modes: Dict[str, ModeSweep] = dataclasses.field(default_factory=dict)
    torchft: Optional[FtSweep] = None  # with --torchft: replica groups beside the restarts


@dataclasses.dataclass
class Replay:
    """A measured phase replayed through the model: simulated against measured."""
    phase: str = ""
    mode: str = ""
    interval_steps: Optional[int] = None
    steps: int = 0
    failures: int = 0
    simulated_ettr: float = 0.0     # each failure with its own measured restart, gap, detection
    simulated_wall_s: float = 0.0
    measured_ettr: Optional[float] = None
    measured_wall_s: Optional[float] = None
    relative_error: Optional[float] = None
    median_ettr: float = 0.0        # every failure with the medians: a forecast's
    median_wall_s: float = 0.0
    median_relative_error: Optional[float] = None
    exit_s: Optional[float] = None
    costs: Dict[str, Any] = dataclasses.field(default_factory=dict)
