"""The smoke job's records (restartlab submit --smoke).

- `SmokeNode`: one host's answer (runtime/smoke.node_main). Its receipt carries it in `extra`.
- `SmokeRank`: one rank's record (layout.smoke_record_name). The rank (trainer/smoke.py) writes it
  whole. The smoke job (runtime/smoke.py) reads it.
- `SmokeReport`: the job's readiness report (layout.Expt.smoke_report), with a `Check` per thing
  checked. The smoke job writes it. `restartlab status` and `submit --after` read it.

Each has one writer (`to_json`) and one tolerant reader. A field of the wrong type reads as absent.
A record without its key field (a rank's number, a report's verdict) is no record (None).

Standard library only: the login node reads the report."""
import dataclasses
import json
from typing import Dict, List, Mapping, Optional, Tuple

from . import typed_json
from .jsonvalue import integer, items, load_file, number, text


@dataclasses.dataclass(frozen=True)
class SmokeNode:
    """One host's answer to the smoke job (`restartlab smoke node`).

    It sits beside its receipt's host, hostname and python. It says whether the host sees the token
    the job wrote in the experiment directory (a shared file system). It also says how making a
    private stage directory there went ("ok", else why)."""
    token_seen: bool = False
    token_error: Optional[str] = None
    stage: Optional[str] = None

    @classmethod
    def of(cls, extra: Mapping[str, object]) -> "SmokeNode":
        """From the fields a receipt kept in `extra` (typed_json's rules)."""
        return typed_json.read(cls, dict(extra)) or cls()


@dataclasses.dataclass(frozen=True)
class SmokeRank:
    rank: int
    world_size: Optional[int] = None
    local_rank: Optional[int] = None
    launcher: Optional[str] = None        # the launcher whose variables gave the rank (launchers.py)
    host: Optional[str] = None            # the scheduler's name for its node (envvars.node_name)
    hostname: Optional[str] = None
    pid: Optional[int] = None
    rank_vars: Dict[str, str] = dataclasses.field(default_factory=dict)  # the launcher's variables it saw
    tag: Optional[str] = None             # RESTARTLAB_JOB_TAG: how the job's killers find it
    torch: Optional[str] = None           # torch's version; None: torch did not import
    device: Optional[str] = None          # cpu, cuda, xpu
    backend: Optional[str] = None         # the process group's (gloo, nccl, xccl)
    device_order: Optional[str] = None
    devices: Optional[int] = None         # the devices it saw
    allreduce: Optional[float] = None     # what one all-reduce across every rank gave
    allreduce_expected: Optional[float] = None
    allreduce_ok: bool = False
    group_s: Optional[float] = None       # how long the group took to form and all-reduce
    error: Optional[str] = None           # what failed on this rank (its exception, in one line)
    where: Tuple[str, ...] = ()           # the traceback's last lines

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: object) -> Optional["SmokeRank"]:
        if not isinstance(d, dict) or integer(d.get("rank")) is None:
            return None
        rv = d.get("rank_vars")
        return cls(rank=integer(d["rank"]) or 0, world_size=integer(d.get("world_size")),
                   local_rank=integer(d.get("local_rank")), launcher=text(d.get("launcher")), host=text(d.get("host")),
                   hostname=text(d.get("hostname")), pid=integer(d.get("pid")),
                   rank_vars={k: v for k, v in rv.items() if isinstance(v, str)} if isinstance(rv, dict) else {},
                   tag=text(d.get("tag")), torch=text(d.get("torch")), device=text(d.get("device")),
                   backend=text(d.get("backend")), device_order=text(d.get("device_order")),
                   devices=integer(d.get("devices")), allreduce=number(d.get("allreduce")),
                   allreduce_expected=number(d.get("allreduce_expected")), allreduce_ok=d.get("allreduce_ok") is True,
                   group_s=number(d.get("group_s")), error=text(d.get("error")),
                   where=tuple(str(x) for x in items(d.get("where"))))


@dataclasses.dataclass(frozen=True)
class Check:
    """One thing the smoke job checked, and on which hosts it failed."""
    name: str
    ok: bool
    detail: str
    failed_hosts: List[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        where = f" [on {', '.join(self.failed_hosts)}]" if self.failed_hosts else ""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name:<9} {self.detail}{where}"

    @classmethod
    def from_json(cls, d: object) -> Optional["Check"]:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("ok"), bool):
            return None
        return cls(d["name"], d["ok"], text(d.get("detail")) or "",
                   [h for h in items(d.get("failed_hosts")) if isinstance(h, str)])


@dataclasses.dataclass(frozen=True)
class SmokeReport:
    ok: bool
    hosts: List[str]
    ranks: Optional[int] = None
    tag: Optional[str] = None
    seconds: Optional[float] = None
    checks: List[Check] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, d: object) -> Optional["SmokeReport"]:
        if not isinstance(d, dict) or not isinstance(d.get("ok"), bool):
            return None
        checks = [Check.from_json(c) for c in items(d.get("checks"))]
        return cls(d["ok"], [h for h in items(d.get("hosts")) if isinstance(h, str)], integer(d.get("ranks")),
                   text(d.get("tag")), number(d.get("seconds")), [c for c in checks if c is not None])

    def lines(self) -> List[str]:
        """The report as `restartlab status` shows it."""
        return [f"smoke: {'READY' if self.ok else 'NOT READY'} ({len(self.hosts)} host(s))"] + \
            [f"  {c.line()}" for c in self.checks]


def read_rank(path: str) -> Optional[SmokeRank]:
    """A rank's record, or None where the file cannot be read or holds none."""
    return SmokeRank.from_json(load_file(path))


def read_report(path: str) -> Optional[SmokeReport]:
    """The readiness report, or None where the file cannot be read or holds none."""
    return SmokeReport.from_json(load_file(path))
