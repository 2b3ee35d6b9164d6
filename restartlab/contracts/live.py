"""Reading a running experiment cheaply: the last metrics row of a live file (its tail only), the
newest step a phase's current attempt has logged, the injection records. Used while a job runs
by the injector, the relaunch loop and the progress view; the accounting is in collect.py."""
import json
import os
from typing import Any, Callable, Dict, List, Optional, TypeVar

from . import layout
from .injections import Injection
from .receipts import NodeCheck
from . import metric_keys as K

TAIL_BYTES = 8192

T = TypeVar("T")


class Malformed(str):
    """A warning about input that was malformed and skipped (a typed problem: `restartlab report`
    exits 2 when it met one; other warnings are information)."""


def last_row(path: str, key: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Metrics of the last parsable line of a metrics file (that has `key`, if given), reading
    only the file's tail."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            m = json.loads(line)["metrics"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(m, dict) and (key is None or key in m):
            return m
    return None


def newest_step_seen(phase_dir: str) -> int:
    """Highest train/iter rank 0 logged in the newest attempt (the progress of the live run); a
    phase of torchft replica groups: the furthest group's."""
    groups = layout.Phase(phase_dir).groups()
    if groups:
        return max(newest_step_seen(g.path) for g in groups)
    attempts = layout.Phase(phase_dir).attempts()
    if not attempts:
        return 0
    m = last_row(attempts[-1].metrics(0), key=K.ITER)
    try:
        return int(m[K.ITER]) if m else 0
    except (TypeError, ValueError):
        return 0


def read_injections(phase_dir: str, warnings: Optional[List[str]] = None) -> List[Injection]:
    """The phase's injection records (one per strike, and a kind's follow-ups); malformed lines
    are skipped, and named in `warnings` when a list is given."""
    return [Injection.from_json(r) for r in read_records(layout.Phase(phase_dir).injections, warnings)]


def read_node_checks(phase_dir: str, warnings: Optional[List[str]] = None) -> List[NodeCheck]:
    """The phase's node-check records: one per node per health check (restartlab node-check)."""
    return read_typed(layout.Phase(phase_dir).node_checks, NodeCheck.from_json, "a node check", warnings)


def bad_nodes_between(checks: List[NodeCheck], after: int, upto: int) -> List[str]:
    """The nodes the health checks found bad after attempt `after` ended, up to the launch of
    attempt `upto` (attempts cut short in between included)."""
    return [c.node for c in checks if c.attempt is not None and after < c.attempt <= upto and not c.ok]


def read_records(path: str, warnings: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """JSON lines with a numeric `time` where present; malformed lines are skipped and named."""
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError("not a mapping")
                    if "time" in rec and not isinstance(rec["time"], (int, float)):
                        raise ValueError(f"time {rec['time']!r} is not a number")
                    out.append(rec)
                except ValueError as e:
                    if warnings is not None:
                        warnings.append(Malformed(f"{path}:{n}: skipped a malformed line ({str(e)[:80]})"))
    except OSError:
        pass
    return out


def read_typed(path: str, from_json: Callable[[Dict[str, Any]], Optional[T]], what: str,
               warnings: Optional[List[str]] = None) -> List[T]:
    """read_records' lines as one record type (`from_json`: a record, or None for a line it cannot
    take, which is left out and named)."""
    out = []
    for rec in read_records(path, warnings):
        x = from_json(rec)
        if x is not None:
            out.append(x)
        elif warnings is not None:
            warnings.append(Malformed(f"{path}: a line that is not {what}: ignored"))
    return out
