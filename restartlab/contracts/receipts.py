"""A node's receipt: the one JSON line a command fanned out to the job's nodes prints there.

The fan-out is runtime/fanout.fan_out. Three commands answer so:
- The killer (`restartlab kill-ranks`, runtime/killer.py) says what it signalled on that node.
- A network fault's start (`restartlab net-fault`, runtime/netfault.py) gives the link, and when
  the fault begins and ends.
- A node check (`restartlab node-check --local`, runtime/nodes.py) says whether the node is healthy.

The fan-out writes one itself for a node that did not answer in time (`unreachable`) or where the
command did not run (`error`). The injector keeps the killer's and the fault's in its records
(Injection.receipts). A node check's result goes to the phase's node checks (`NodeCheck`).

Each command is the one writer of its fields (`to_json`). `from_json` is the one reader. It is
tolerant. A field of the wrong type reads as absent. A field it does not know (the smoke job's own)
is kept in `extra` and written back."""
import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .jsonvalue import integer, items, number, text


def _pids(v: object) -> Tuple[int, ...]:
    return tuple(p for p in (integer(x) for x in items(v)) if p is not None)


def _words(v: object) -> Dict[str, str]:
    """A {pid: text} mapping (JSON keys are strings); entries of another type are left out."""
    return {k: x for k, x in v.items() if isinstance(k, str) and isinstance(x, str)} if isinstance(v, dict) else {}


def _default(f: "dataclasses.Field[Any]") -> Any:
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


# what the killer writes on every receipt, empty or not (readers before this type indexed them)
KILLER_FIELDS = frozenset({"tag", "job", "signal", "dry_run", "pids", "roots", "cmdlines", "ranks", "unreadable",
                           "skipped_other_user", "errors"})
FAULT_FIELDS = frozenset({"kind", "dev", "at", "until", "restorer", "duration", "flaps", "rate"})


@dataclasses.dataclass(frozen=True)
class Receipt:
    host: Optional[str] = None             # the host it ran on (socket.gethostname()), or the one it was sent to
    node: Optional[str] = None             # the scheduler's name for the node (runtime.nodes.node_name())
    time: Optional[float] = None           # when it ran (epoch s)
    error: Optional[str] = None            # why it did nothing (or not all it should)
    unreachable: bool = False              # the node did not answer in the fan-out's time
    cmd: Tuple[str, ...] = ()              # the fan-out's command, on a receipt the fan-out wrote itself
    # the killer's
    tag: Optional[str] = None              # the run whose ranks it looked for (RESTARTLAB_JOB_TAG)
    job: Optional[str] = None              # else the batch job's
    signal: Optional[str] = None           # the signal's name (KILL)
    dry_run: bool = False                  # listed, not signalled
    pids: Tuple[int, ...] = ()             # every process it signalled
    roots: Optional[Tuple[int, ...]] = None  # the roots of the ranks' process trees (None before they were kept)
    cmdlines: Dict[str, str] = dataclasses.field(default_factory=dict)  # pid -> command line
    ranks: Dict[str, str] = dataclasses.field(default_factory=dict)     # pid -> the launcher's rank variable
    unreadable: int = 0                    # processes whose environment it could not read
    skipped_other_user: Dict[str, str] = dataclasses.field(default_factory=dict)  # pid -> user: not ours
    errors: Dict[str, str] = dataclasses.field(default_factory=dict)    # pid -> why its signal failed
    # a network fault's
    kind: Optional[str] = None             # the fault's kind (partition, flap, slow_link)
    dev: Optional[str] = None              # the link it changes
    at: Optional[float] = None             # when the fault begins (its restorer changes the link then)
    until: Optional[float] = None          # when it is undone (None: never, within the job)
    restorer: Optional[int] = None         # the PID of the process that makes and undoes it
    duration: Optional[float] = None       # its planned seconds (0: it is not undone)
    flaps: Optional[int] = None            # a flap's number of downs
    rate: Optional[str] = None             # a slow link's rate (tc's words: 1mbit)
    # a node check's
    ok: Optional[bool] = None              # healthy
    reason: Optional[str] = None           # what is wrong with it ("" when ok)
    seconds: Optional[float] = None        # how long the check took
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fields of other answers (the smoke job's)

    @property
    def where(self) -> Optional[str]:
        """The node's name as a line about it says it: the scheduler's, else the host's."""
        return self.node or self.host

    @property
    def trees(self) -> Tuple[int, ...]:
        """The process trees it reached: their roots, or every process in a receipt from before
        roots were kept."""
        return self.pids if self.roots is None else self.roots

    def replace(self, **changes: Any) -> "Receipt":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        """Its JSON mapping, then `extra`.

        The mapping holds the fields it has: a field at its default is left out. A killer's receipt
        (it names a signal) has all of the killer's fields, empty or not. A network fault that began
        (its `at`) has all of the fault's fields. There `until` None means never undone."""
        d: Dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "extra":
                continue
            if not (f.name in KILLER_FIELDS and self.signal is not None or f.name in FAULT_FIELDS and self.at is not None) \
                    and v == _default(f):
                continue
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return {**d, **self.extra}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Receipt":
        known = {f.name for f in dataclasses.fields(cls)}
        roots = d.get("roots")
        return cls(host=text(d.get("host")), node=text(d.get("node")), time=number(d.get("time")),
                   error=text(d.get("error")), unreachable=d.get("unreachable") is True,
                   cmd=tuple(str(x) for x in items(d.get("cmd"))), tag=text(d.get("tag")), job=text(d.get("job")),
                   signal=text(d.get("signal")), dry_run=d.get("dry_run") is True, pids=_pids(d.get("pids")),
                   roots=_pids(roots) if isinstance(roots, list) else None, cmdlines=_words(d.get("cmdlines")),
                   ranks=_words(d.get("ranks")), unreadable=integer(d.get("unreadable")) or 0,
                   skipped_other_user=_words(d.get("skipped_other_user")), errors=_words(d.get("errors")),
                   kind=text(d.get("kind")), dev=text(d.get("dev")), at=number(d.get("at")),
                   until=number(d.get("until")), restorer=integer(d.get("restorer")),
                   duration=number(d.get("duration")), flaps=integer(d.get("flaps")), rate=text(d.get("rate")),
                   ok=d["ok"] if isinstance(d.get("ok"), bool) else None, reason=text(d.get("reason")),
                   seconds=number(d.get("seconds")), extra={k: v for k, v in d.items() if k not in known})


def parse(out: Optional[str]) -> List[Receipt]:
    """The receipts in a fan-out's output: each line that is a JSON object (a launcher's or the
    shell's own lines between them are passed over)."""
    got = []
    for line in (out or "").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            got.append(Receipt.from_json(r))
    return got


@dataclasses.dataclass(frozen=True)
class NodeCheck:
    """One line of a phase's node checks (layout.Phase.node_checks): a node's health before an
    attempt. The supervisor's node check writes it (runtime/nodes.check_all), the analysis reads it
    (contracts/live.read_node_checks): a node found bad between two attempts is a node lost."""
    node: str                              # the node file's name for it (what the launcher is given)
    ok: bool
    reason: str = ""
    seconds: Optional[float] = None        # how long its check took
    time: Optional[float] = None           # when the check's result was written (epoch s)
    attempt: Optional[int] = None          # the attempt it was checked before
    policy: Optional[str] = None           # relaunch.node_policy then
    host: Optional[str] = None             # the host that answered

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, d: object) -> Optional["NodeCheck"]:
        """The record, or None for a line that names no node or says nothing of its health."""
        if not isinstance(d, dict) or not isinstance(d.get("node"), str) or not isinstance(d.get("ok"), bool):
            return None
        return cls(node=d["node"], ok=d["ok"], reason=text(d.get("reason")) or "", seconds=number(d.get("seconds")),
                   time=number(d.get("time")), attempt=integer(d.get("attempt")), policy=text(d.get("policy")),
                   host=text(d.get("host")))
