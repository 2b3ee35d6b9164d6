"""What the injector's parts share: its settings (`Config`) and the injector as its strikes and
schedules see it (`Striker`: runtime/inject.Injector is the one). The fault strikes
(inject_faults), the fuzz (inject_fuzz) and the schedules (inject_schedule) take a Striker, so
that none of them imports the injector itself."""
import argparse
import dataclasses
import random
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from .clock import Clock
from ..contracts import layout
from ..contracts.injections import Injection
from ..contracts.program_spec import Spec
from ..tools import options as tool_options


@dataclasses.dataclass
class Config:
    """The injector's settings: one field per option of tools/options.INJECT, in its order, then the
    Python its killers run with. The table holds each option's flag, help and default;
    tests/test_tool_options.py keeps this class equal to it (contracts/options.config_problems).
    `at_steps` holds the parsed schedule [(step, kind or None)] (tools/options.parse_at_steps)."""
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
    every: Optional[float] = None
    at_steps: Optional[List[Tuple[int, Optional[str]]]] = None
    every_steps: Optional[int] = None
    mtbf: Optional[float] = None
    fuzz: Optional[int] = None
    seed: int = 0
    gate: Optional[str] = None
    wait_first_complete: bool = False
    max_kills: Optional[int] = None
    fuzz_window: float = 10.0
    fuzz_save_share: float = 0.5
    fuzz_save_jitter: float = 0.02
    fuzz_after_complete: bool = False
    fuzz_kinds: Optional[str] = None
    until: Optional[str] = None
    job_end: float = 0.0
    ckpt_dir: Optional[str] = None
    program: Optional[str] = None
    phase_dir: Optional[str] = None
    train_iters: Optional[int] = None
    tag: Optional[str] = None
    fanout: Optional[str] = None
    nodefile: Optional[str] = None
    launcher: str = "hydra"
    python: Optional[str] = None

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Config":
        return cls(python=a.python, **{o.key: getattr(a, o.key) for o in tool_options.INJECT})


class Striker(Protocol):
    a: Config
    clock: Clock                   # the schedule's time (the tests' is fake)
    rng: random.Random             # every draw (the fuzz's points, a torn strike's byte) from --seed
    hosts: List[str]               # the job's nodes (the node file's names)
    slots: Optional[List[int]]
    kills: int                     # strikes made
    striking: bool                 # between a strike's first signal and its record
    terminated: Optional[str]      # the signal that asked the injector to stop
    spec: Spec                     # the program's adapter spec (programs.resolve)
    seen_complete: Optional[int]   # the newest complete checkpoint ever seen

    def say(self, msg: str) -> None: ...

    def record(self, rec: Injection) -> None: ...

    def newest_complete(self) -> Optional[int]: ...

    def target(self) -> Optional[layout.Attempt]: ...

    def unmatched(self) -> bool: ...

    def seen(self, newest: Optional[int], struck: Optional[layout.Attempt]) -> Dict[str, Any]: ...

    def stop_reason(self) -> Optional[str]: ...

    def sleep_until(self, pred: Callable[[], bool], deadline: Optional[float] = None) -> bool: ...

    def kill(self, reason: str, target_step: Optional[int] = None, kind_name: Optional[str] = None,
             gate: Optional[str] = None) -> Injection: ...

    def done(self) -> int: ...
