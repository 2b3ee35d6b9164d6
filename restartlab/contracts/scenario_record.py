"""A scenario as a record: one class per section of the YAML, one field per key.

The scenario package validates the YAML against its schema (scenario/schema.py), then builds this
record from the checked mapping (`from_checked`). Every reader on the login node and in the job
reads fields, so a type checker sees a misspelt key. The fields keep the schema's order, and
`to_mapping` gives the mapping back in that order: the experiment's own copy (layout.Expt.scenario) is
written from it. tests/test_scenario_record.py holds the classes equal to the schema: the same
keys, in the same order, with the same defaults.

The analysis reads an experiment's own copy with `read`, the tolerant reader of
contracts/typed_json: a value of the wrong type reads as its default, not as a traceback.

Durations are seconds. A value the schema leaves unset is None. Standard library only."""
import dataclasses
from typing import Any, Dict, List, Literal, Optional, Union

from . import typed_json


@dataclasses.dataclass
class Program:
    """trainer.program: a training program of yours, and how to read its progress and checkpoints."""
    REQUIRED = ("steps",)
    command: List[str] = dataclasses.field(default_factory=list)
    adapter: str = "generic"
    progress: Optional[str] = None
    loss_line: Optional[str] = None
    progress_file: Optional[str] = None
    progress_fields: Dict[str, str] = dataclasses.field(default_factory=dict)
    checkpoints: Optional[str] = None
    complete: Optional[str] = None
    selects: Optional[str] = None
    resumed: Optional[str] = None
    saved: Optional[str] = None
    saving: Optional[str] = None
    counts: Optional[str] = None
    save_every: Optional[int] = None
    checkpoint_bytes: Optional[int] = None
    steps: int = 0  # required: the validator refuses a program without it
    tolerance: float = 0.0


@dataclasses.dataclass
class Site:
    name: Optional[str] = None
    account_required: bool = False
    project_root: Optional[str] = None
    docs: Optional[str] = None
    root: Optional[bool] = None


@dataclasses.dataclass
class Job:
    nodes: int = 1
    spare_nodes: int = 0
    walltime: float = 3600
    queue: Optional[str] = None
    queue_avoid: List[str] = dataclasses.field(default_factory=list)
    account: Optional[str] = None
    filesystems: Optional[str] = None
    place: Optional[str] = "scatter"
    ncpus: Optional[int] = None
    select: Optional[str] = None
    directives: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Launch:
    ranks_per_node: int = 4
    launcher: str = "hydra"
    mpiexec: str = "mpiexec"
    launcher_args: List[str] = dataclasses.field(default_factory=list)
    cpu_bind: Optional[str] = None
    depth: Optional[int] = None
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    python: Optional[str] = None
    setup: List[str] = dataclasses.field(default_factory=list)
    master_addr_suffix: str = ""


@dataclasses.dataclass
class Wandb:
    project: Optional[str] = None
    entity: Optional[str] = None
    mode: Optional[str] = None


@dataclasses.dataclass
class Trainer:
    """The bundled trainer's options (contracts/trainer_options), or a program of yours."""
    model: str = "tiny"
    vocab: int = 0
    train_iters: int = 100  # with a program: its steps
    save_interval: int = 10
    keep: int = 3
    tp: int = 1
    dp_replicate: int = 1
    seq_len: int = 32
    batch_size: int = 4
    data: Optional[str] = None
    data_dtype: str = "auto"
    lr: float = 0.001
    seed: int = 1234
    meta_init: str = "auto"
    device: str = "auto"
    device_order: str = "local"
    deterministic: bool = False
    log_interval: int = 10
    ckpt_format: str = "dcp"
    on_save_error: str = "continue"
    preempt_signal: str = "TERM"
    pg_timeout: int = 600
    allow_fresh_start: bool = False
    wandb: Wandb = dataclasses.field(default_factory=Wandb)
    extra_args: List[str] = dataclasses.field(default_factory=list)
    program: Optional[Program] = None


@dataclasses.dataclass
class Relaunch:
    """The relaunch loop's options (tools/options SUPERVISE and NODE_CHECK) and the job's own."""
    max_attempts: int = 10
    backoff: float = 0.0
    hang_timeout: float = 600.0
    teardown_timeout: float = 15.0
    node_wait: float = 600.0
    startup_timeout: float = 1200.0
    rank_exit_grace: float = 60.0
    walltime_margin: float = 120.0
    on_node_loss: str = "same"
    warm: bool = False
    warm_preload: Optional[str] = None
    node_check_gpus: int = 0
    node_check_cmd: Optional[str] = None
    node_check_timeout: float = 60.0
    min_nodes: int = 1
    node_check: Optional[bool] = None
    node_check_min_free_mb: int = 0
    chain: int = 0


@dataclasses.dataclass
class SlowWrites:
    rank: int = 0
    seconds: float = 0.0
    hold: str = "inside"


@dataclasses.dataclass
class AtStep:
    """An item of failures.schedule.at_steps that names its own failure kind: {step: N, kind: K}."""
    step: int
    kind: str


@dataclasses.dataclass
class Schedule:
    """When the injector strikes: exactly one of the first five is set (the validator checks)."""
    at_steps: Optional[List[Union[int, AtStep]]] = None
    every: Optional[float] = None
    every_steps: Optional[int] = None
    mtbf: Optional[float] = None
    fuzz: Optional[int] = None
    seed: int = 0


@dataclasses.dataclass
class Failures:
    """The injector's options (tools/options INJECT): what strikes, where and when."""
    slow_writes: SlowWrites = dataclasses.field(default_factory=SlowWrites)
    kind: str = "kill"
    signal: Optional[str] = None
    grace: float = 60.0
    node: Optional[int] = None
    duration: float = 30.0
    flaps: int = 3
    flap_up: float = 5.0
    rate: str = "1mbit"
    rank: int = 0
    all_ranks: bool = False
    errno: str = "EIO"
    after_bytes: int = 0
    root_cmd: Optional[str] = None
    schedule: Schedule = dataclasses.field(default_factory=Schedule)
    gate: Optional[str] = None
    wait_first_complete: bool = False
    max_kills: Optional[int] = None
    fuzz_window: float = 10.0
    fuzz_save_share: float = 0.5
    fuzz_save_jitter: float = 0.02
    fuzz_after_complete: bool = False
    fuzz_kinds: Optional[str] = None


@dataclasses.dataclass
class Recovery:
    strategy: str = "restart"
    groups: int = 2
    min_replicas: int = 1
    heartbeat_timeout: float = 5.0
    join_timeout: float = 60.0


@dataclasses.dataclass
class Phase:
    """One phase. failures: None takes the top-level failures (none for a baseline); False, none."""
    name: str
    checkpoint: str = "sync"
    stage_dir: Optional[str] = None
    failures: Union[Failures, Literal[False], None] = None
    args: List[str] = dataclasses.field(default_factory=list)
    warm: Optional[bool] = None
    recovery: Recovery = dataclasses.field(default_factory=Recovery)

    @property
    def torchft(self) -> bool:
        """Its ranks are torchft replica groups (recovery.strategy: torchft), not one relaunch loop."""
        return self.recovery.strategy == "torchft"


@dataclasses.dataclass
class Collection:
    report: bool = True
    plots: bool = True
    state_every: int = 10
    mtbf: float = 3600.0


@dataclasses.dataclass
class Scenario:
    """A whole scenario. The last two fields are not keys a user writes: `expt_dir` is the
    experiment's directory once rendered, `source` the file it was loaded from."""
    OMIT_NONE = ("expt_dir",)
    name: str = "restartlab"
    scheduler: str = "local"
    expt_root: str = "expt"
    site: Site = dataclasses.field(default_factory=Site)
    job: Job = dataclasses.field(default_factory=Job)
    launch: Launch = dataclasses.field(default_factory=Launch)
    trainer: Trainer = dataclasses.field(default_factory=Trainer)
    relaunch: Relaunch = dataclasses.field(default_factory=Relaunch)
    failures: Failures = dataclasses.field(default_factory=Failures)
    phases: List[Phase] = dataclasses.field(default_factory=list)
    collection: Collection = dataclasses.field(default_factory=Collection)
    expt_dir: Optional[str] = None
    source: str = ""

    @property
    def ranks(self) -> int:
        """The training ranks: job.nodes x launch.ranks_per_node."""
        return self.job.nodes * self.launch.ranks_per_node

    def phase(self, name: str) -> Optional[Phase]:
        return next((p for p in self.phases if p.name == name), None)


# the fields that are not schema keys
NOT_KEYS = ("expt_dir", "source")


def from_checked(data: Dict[str, Any]) -> Scenario:
    """The record of a mapping the validator has checked.

    Each value stays as it is, with no coercion, so the record writes back the same YAML. Each
    section and list item becomes its class."""
    sc: Scenario = _build(Scenario, data)
    return sc


def _build(cls: Any, data: Dict[str, Any]) -> Any:
    hints = typed_json.hints(cls)
    return cls(**{f.name: _checked(hints[f.name], data[f.name])
                  for f in dataclasses.fields(cls) if f.name in data})


def _checked(tp: Any, v: Any) -> Any:
    if isinstance(v, dict):
        cls = typed_json.record_class(tp)
        return _build(cls, v) if cls is not None else dict(v)
    if isinstance(v, list):
        item = typed_json.item_type(tp)
        return [_checked(item, x) for x in v]
    return v


def to_mapping(sc: Scenario) -> Dict[str, Any]:
    """The scenario as the mapping it was built from (the schema's order; expt_dir only when set)."""
    out: Dict[str, Any] = typed_json.to_dict(sc)
    return out


def read(data: object) -> Optional[Scenario]:
    """An experiment's own copy, as written by to_mapping, read tolerantly.

    None where it is not a mapping with a list of phases, each a mapping with its name."""
    phases = data.get("phases") if isinstance(data, dict) else None
    if not isinstance(phases, list) or not all(isinstance(p, dict) and "name" in p for p in phases):
        return None
    sc = typed_json.read(Scenario, data)
    return sc if sc is not None and len(sc.phases) == len(phases) else None


def step_of(x: Union[int, AtStep]) -> int:
    return x.step if isinstance(x, AtStep) else x
