"""A phase's entry in the report's summary (contracts/summary.Summary.phases), and its parts.

The collector makes most of it (analysis/collect.summarize_phase); the report adds the rest
(analysis/report.build). `to_dict` gives its JSON, the keys in the order of the fields below: the
summary reads as it did when these were dicts. One tolerant reader, `PhaseSummary.from_dict`
(typed_json's rules), for a summary read back from its file (`simulate --from`, `restartlab run`'s
last lines).

Standard library only: the collector runs on a login node."""
import dataclasses
from typing import Any, Dict, List, Optional, cast

from . import metric_keys as K
from .jobruns import NodeChange
from .restart_state import RestartState
from .typed_json import read, to_dict


@dataclasses.dataclass
class Quantiles:
    """The seconds of one kind of save (or of the finalize), over the phase."""
    count: int = 0
    median: Optional[float] = None
    p90: Optional[float] = None
    total: float = 0.0


@dataclasses.dataclass
class RequeueParts:
    """The time between two runs of one job, in its parts (collect.requeue_parts)."""
    job: Optional[str] = None
    next_attempt: Optional[int] = None
    stopped_at: Optional[float] = None      # when the watchdog decided to stop the attempt
    stopped_by: Optional[str] = None
    end_ts: Optional[float] = None          # the attempt's last sign of life
    end_evidence: Optional[str] = None      # what that sign was
    run_start: Optional[float] = None       # the next run's job script start
    run: Optional[int] = None               # the scheduler's count of the job's runs
    scheduler_start: Optional[float] = None
    scheduler: Optional[str] = None
    requeued_at: Optional[float] = None
    eligible_at: Optional[float] = None
    scheduler_error: Optional[str] = None   # the scheduler could not be asked: why
    nodes: List[NodeChange] = dataclasses.field(default_factory=list)  # the nodes whose state changed
    launch_ts: Optional[float] = None       # the next attempt's launch
    first_ts: Optional[float] = None        # and its first step
    between_runs_s: Optional[float] = None


@dataclasses.dataclass
class FailureEvent:
    """One failure: an attempt that ended without finishing and was followed by another
    (collect.failure_events). Times are seconds since the epoch; durations end in _s. Read back,
    a field that does not read takes its default and no failure is left out: `simulate --from` takes
    its timings from a summary that may hold only those."""

    attempt: int = 0                        # the attempt that failed (its index)
    kill_ts: Optional[float] = None         # the strike, or the attempt's end where none is known
    injected: bool = False
    kind: Optional[str] = None              # the strike's kind (None: not injected)
    detected_by: str = ""                   # a key of collect.DETECTIONS
    detection_s: Optional[float] = None     # the strike to the attempt's end
    step_at_kill: int = 0
    resumed_from: int = 0
    lost_steps: int = 0
    downtime_s: Optional[float] = None      # the strike to the next attempt's first step
    recompute_s: float = 0.0
    restart_s: Optional[float] = None       # the next attempt's launch to its first step
    startup: Dict[str, Any] = dataclasses.field(default_factory=dict)  # its start-up's parts (metric_keys.STARTUP)
    warm_ranks: Optional[int] = None
    launch_gap_s: Optional[float] = None    # the attempt's end to the next launch
    queue_wait_s: float = 0.0
    newest_complete_at_kill: Optional[int] = None
    steps_after_save: Optional[int] = None  # the steps taken since that save
    gate: Optional[str] = None              # what the strike waited for
    bad_nodes: List[str] = dataclasses.field(default_factory=list)
    ranks_before: Optional[int] = None
    ranks_after: Optional[int] = None
    hosts_before: Optional[List[str]] = None
    hosts_after: Optional[List[str]] = None
    recovery: str = "same nodes"
    rerun: Optional[RequeueParts] = None    # the next attempt ran in another run of the same job


@dataclasses.dataclass
class KindStats:
    """Per failure kind: how many, what detected them, and the median of each figure."""
    failures: int = 0
    detected_by: List[str] = dataclasses.field(default_factory=list)
    detection_s: Optional[float] = None
    launch_gap_s: Optional[float] = None
    restart_s: Optional[float] = None
    lost_steps: Optional[float] = None
    recompute_s: Optional[float] = None
    downtime_s: Optional[float] = None


@dataclasses.dataclass
class Handover:
    """Where one job of a chain ended and the next took over (not a failure)."""
    attempt: int = 0
    from_job: Optional[str] = None
    to_job: Optional[str] = None
    queue_wait_s: Optional[float] = None
    walltime_stop: bool = False
    lost_steps: int = 0


@dataclasses.dataclass
class Interference:
    """How much slower a step is beside a background save."""
    busy_steps: int = 0
    idle_steps: int = 0
    busy_dt_s: float = 0.0
    idle_dt_s: float = 0.0
    slowdown: float = 0.0


@dataclasses.dataclass
class WalltimeStop:
    """The phase's last attempt, ended by the walltime warning."""
    attempt: int = 0
    last_step: int = 0
    emergency_checkpoint: Optional[int] = None
    lost_steps: Optional[int] = None


@dataclasses.dataclass
class ExpectedLoss:
    """What a failure at a random time loses on average (collect.expected_loss)."""
    per_failure: float = 0.0
    save_interval_steps: float = 0.0
    complete_lag_steps: float = 0.0


@dataclasses.dataclass
class Overhead:
    """What a phase costs beyond the baseline, in its parts (collect.overhead)."""
    downtime_s: float = 0.0
    recompute_s: float = 0.0
    save_stall_s: float = 0.0
    interference_s: float = 0.0
    drift_s: float = 0.0
    measured_s: float = 0.0
    residual_s: float = 0.0
    first_start_s: float = 0.0
    baseline_first_start_s: float = 0.0


@dataclasses.dataclass
class YoungDaly:
    """The checkpoint interval of Young and Daly, and what it was computed from (collect.young_daly)."""
    young_s: Optional[float] = None
    daly_s: Optional[float] = None
    mtbf_s: Optional[float] = None
    save_cost_s: Optional[float] = None
    restart_cost_s: Optional[float] = None


@dataclasses.dataclass
class Layers:
    """Who noticed a network fault, and when: seconds from its start. A layer that did not is left
    out of the JSON (OMIT_NONE), not written as null."""
    OMIT_NONE = ("watchdog_s", "stop", "attempt_end_s", "pg_timeout_s", "scheduler_down_s", "next_run_s",
                 "node_check_s")

    watchdog_s: Optional[float] = None       # the watchdog decided to stop the attempt
    stop: Optional[str] = None               # what became of that stop
    attempt_end_s: Optional[float] = None
    pg_timeout_s: Optional[float] = None     # the process-group timeout ended the attempt
    scheduler_down_s: Optional[float] = None  # the scheduler marked the node down (its next run's record)
    next_run_s: Optional[float] = None       # the job, requeued, ran again
    node_check_s: Optional[float] = None     # the node check found the node bad


@dataclasses.dataclass
class NetworkFault:
    """One partition, flap or slow_link (analysis/netfaults.account).

    It says when its node's link was down, and how long the training stood still. It says who
    noticed when, and how the job came through."""
    OMIT_NONE = ("step_s_during",)

    kind: Optional[str] = None
    nodes: List[str] = dataclasses.field(default_factory=list)
    start: Optional[float] = None
    end: Optional[float] = None
    windows: int = 0                        # the times the link went down
    planned_s: Optional[float] = None
    down_s: Optional[float] = None
    restored: Optional[bool] = None         # the node's restorer put the link back
    ended_by: Optional[str] = None          # what ended the restorer's wait
    errors: List[str] = dataclasses.field(default_factory=list)
    recorded: bool = False                  # the node's restorer left its record
    stood_still_s: Optional[float] = None
    outcome: Optional[str] = None
    lost_steps: int = 0
    layers: Layers = dataclasses.field(default_factory=Layers)
    attempt: Optional[int] = None
    step_s_during: Optional[float] = None   # a slowed link's step time under it
    text: str = ""


@dataclasses.dataclass
class StorageFault:
    """One storage strike on one rank (analysis/storagefaults.account): what the write met and what
    followed."""
    kind: Optional[str] = None
    id: Optional[int] = None
    rank: Optional[int] = None              # None: no rank took it
    armed_at: Optional[float] = None
    armed_step: Optional[int] = None
    took_at: Optional[float] = None
    file: Optional[str] = None
    checkpoint: Optional[str] = None
    attempt: Optional[int] = None
    blocked_s: Optional[float] = None
    errno: Optional[str] = None
    bytes: Optional[int] = None
    effect: Optional[str] = None
    followed: Optional[str] = None
    text: str = ""


@dataclasses.dataclass
class RestartVerdict:
    """What one restart did (analysis/survival.Restart, as the summary carries it)."""
    attempt: Optional[int] = None           # None: a phase read from metrics files
    outcome: str = ""                       # survival's outcomes: newest, older, fresh, crash, ...
    text: str = ""
    resumed_from: Optional[int] = None
    expected: Optional[int] = None
    state: Optional[RestartState] = None  # what the resume restored, piece by piece (state_compare)
    finding: bool = False


@dataclasses.dataclass
class SurvivalVerdict:
    """Did the phase survive (analysis/survival.Verdict, as the summary carries it)."""
    phase: str = ""
    finished: bool = False
    survived: bool = False
    findings: List[str] = dataclasses.field(default_factory=list)
    baseline: Optional[str] = None          # the comparison with the baseline, one sentence
    restarts: List[RestartVerdict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Ended:
    """How the phase's latest supervisor ended (attempts.PhaseOutcome, as the summary carries it)."""
    how: str = ""                   # an attempts.PhaseEnd
    attempt: int = 0
    job: Optional[str] = None
    signal: Optional[str] = None
    text: str = ""


@dataclasses.dataclass
class OwnRestart:
    """A restart as the program timed it, beside restartlab's launch -> first step."""
    attempt: int = 0
    program_restart_s: float = 0.0
    restart_s: float = 0.0
    uncounted_s: float = 0.0        # what the program's timer leaves out


@dataclasses.dataclass
class OwnMetrics:
    """What a program says of its own restarts and saves (analysis/own_metrics.phase)."""
    adapter: str = ""
    file: str = ""                  # its metrics file in each attempt's directory (a glob)
    restarts: List[OwnRestart] = dataclasses.field(default_factory=list)
    save: Quantiles = dataclasses.field(default_factory=Quantiles)
    stage: Quantiles = dataclasses.field(default_factory=Quantiles)
    drain: Quantiles = dataclasses.field(default_factory=Quantiles)

    def timed(self, kind: str) -> Quantiles:
        """The quantiles of one kind of save (programs.base.SAVE_KINDS)."""
        return {"save": self.save, "stage": self.stage, "drain": self.drain}[kind]


@dataclasses.dataclass
class PhaseSummary:
    REQUIRED = ("phase",)

    # made by the collector (analysis/collect.summarize_phase)
    phase: str = ""
    wall_s: Optional[float] = None
    attempts: int = 0
    kills: int = 0
    steps: int = 0
    completed: bool = False
    failures: List[FailureEvent] = dataclasses.field(default_factory=list)
    by_kind: Dict[str, KindStats] = dataclasses.field(default_factory=dict)
    lost_steps: int = 0
    downtime_s: float = 0.0
    recompute_s: float = 0.0
    save_stall_s: float = 0.0
    saves_estimated: int = 0        # of the saves, how many were estimated from step times (tap.py)
    save: Dict[str, Quantiles] = dataclasses.field(default_factory=dict)  # per save figure
    finalize: Quantiles = dataclasses.field(default_factory=Quantiles)
    productive_s: float = 0.0
    ettr: Optional[float] = None
    walltime_stop: Optional[WalltimeStop] = None
    interference: Optional[Interference] = None
    interference_s: float = 0.0
    step_dt_s: Optional[float] = None
    # each partition, flap, slow_link: down, stand-still, who noticed when (netfaults.py)
    network_faults: List[NetworkFault] = dataclasses.field(default_factory=list)
    # each stall_writes, slow_storage, write_errors, torn on a rank (storagefaults.py)
    storage_faults: List[StorageFault] = dataclasses.field(default_factory=list)
    first_start_s: Optional[float] = None
    jobs: List[str] = dataclasses.field(default_factory=list)
    handovers: List[Handover] = dataclasses.field(default_factory=list)
    queue_wait_s: float = 0.0
    expected_loss: Optional[ExpectedLoss] = None
    # added by the report (analysis/report.build)
    checkpoint: Optional[str] = None
    warnings: List[str] = dataclasses.field(default_factory=list)
    overhead: Optional[Overhead] = None
    young_daly: Optional[YoungDaly] = None
    policy: Optional[str] = None
    survival: Optional[SurvivalVerdict] = None
    ended: Optional[Ended] = None
    own_metrics: Optional[OwnMetrics] = None
    reused_from: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return cast(Dict[str, Any], to_dict(self))

    @classmethod
    def from_dict(cls, d: object) -> Optional["PhaseSummary"]:
        """None where d is not a phase's entry (no name)."""
        return read(cls, d)

    def saves(self, key: str) -> Quantiles:
        """The quantiles of a save figure, by its metrics key (metric_keys.SAVE_S, STAGE_S, DRAIN_S)."""
        return self.save.get(save_figure(key)) or Quantiles()

    def save_cost(self) -> Optional[float]:
        """What a save stalls the loop: the median sync save, else the median async stage."""
        return self.saves(K.SAVE_S).median or self.saves(K.STAGE_S).median


def save_figure(key: str) -> str:
    """A save figure's name in PhaseSummary.save: its metrics key's last part."""
    return key.split("/")[-1]


@dataclasses.dataclass
class StrategyRow:
    """One phase in the strategies' table (analysis/strategies.rows): whatever its strategy (restart
    cold, restart warm, torchft), in the same terms."""
    phase: str = ""
    strategy: str = ""
    wall_s: Optional[float] = None
    steps: int = 0
    failures: int = 0
    ettr: Optional[float] = None
    vs_baseline_s: Optional[float] = None
    recovery_s: Optional[float] = None      # per failure, the median: a restart's downtime, torchft's stall
    work_lost_steps: int = 0
    batches_skipped: int = 0
    restarted_processes: str = ""
    verdict: str = ""
    failure_cost_s: Optional[float] = None  # against the same strategy without failures


PHASE_FIELDS = tuple(f.name for f in dataclasses.fields(PhaseSummary))
