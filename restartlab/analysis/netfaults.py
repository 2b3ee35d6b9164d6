"""A phase's network faults (failures.NetworkKind: partition, flap, slow_link), each told as what it
was: when its node's link went down (or was capped) and came back (the node's restorer's record,
layout.Phase.faults; the injector's plan where there is none), how long the training stood still,
who noticed and when (the watchdog's decision, whether its stop reached every node and took effect,
the process-group timeout, the attempt's end, the node check), and how the job came through:
resumed by itself, relaunched (on the same nodes, a spare, fewer), or not at all. Opens no file:
collect.load_phase read everything. The scheduler's own view (PBS or Slurm marking the node down)
is not seen from inside the job: not measured here."""
from typing import List, Optional

from .. import failures

MATCH_S = 1e-3   # a restorer's planned_at is the receipt's `at`, the record's time, to the float


def _restorer(ph, inj) -> Optional[dict]:
    return next((f for f in ph.faults if f.get("host") in inj.hosts and isinstance(f.get("planned_at"), (int, float))
                 and abs(f["planned_at"] - inj.time) < MATCH_S), None)


def _attempt_at(ph, t: float):
    """The attempt that was running at time t (index into ph.attempts), else None."""
    for i, a in enumerate(ph.attempts):
        if a.launch_ts is not None and a.launch_ts <= t and (a.end_ts is None or t <= a.end_ts):
            return i
    return None


def _rel(t: Optional[float], start: float) -> Optional[float]:
    return None if t is None else round(t - start, 3)


def account(ph, inj, step_dt: Optional[float]) -> dict:
    """One network fault's account (collect.summarize_phase's `network_faults`)."""
    r = _restorer(ph, inj)
    windows = [w for w in (r or {}).get("windows") or [] if isinstance(w, list) and len(w) == 2]
    start = windows[0][0] if windows else inj.time
    end = windows[-1][1] if windows else (inj.extra.get("fault") or {}).get("until")
    out = {"kind": inj.kind, "nodes": list(inj.hosts), "start": start, "end": end, "windows": len(windows),
           "down_s": round(sum(b - a for a, b in windows), 3) if windows and windows[-1][1] is not None else None,
           "restored": (r or {}).get("restored"), "ended_by": (r or {}).get("ended_by"),
           "recorded": r is not None, "stood_still_s": None,
           "outcome": None, "lost_steps": 0, "layers": {}, "attempt": None}
    i = _attempt_at(ph, start)
    if i is None:
        out["outcome"] = "struck no attempt"
        return out
    a = ph.attempts[i]
    b = ph.attempts[i + 1] if i + 1 < len(ph.attempts) else None
    out["attempt"] = a.number or a.index
    dt = step_dt or 0.0
    gap = next((g for g in a.gaps if g[1] <= start <= g[2]), None)
    layers = out["layers"]
    if a.hang and a.hang_ts is not None and a.hang_ts >= start:
        layers["watchdog_s"] = _rel(a.hang_ts, start)
        stop = "its stop did not take effect: the attempt finished by itself" if a.completed else "stopped"
        if a.unreached:
            stop += f"; the stop could not reach {', '.join(a.unreached)}"
        layers["stop"] = stop
    if not a.completed and a.end_ts is not None:
        layers["attempt_end_s"] = _rel(a.end_ts, start)
        if a.timed_out:
            layers["pg_timeout_s"] = _rel(a.end_ts, start)
    if b is not None:
        bad = [c for c in ph.node_checks if isinstance(c.get("attempt"), int) and c.get("ok") is False
               and (a.number or 0) < c["attempt"] <= (b.number or 0) and c.get("node") in inj.hosts
               and isinstance(c.get("time"), (int, float))]
        if bad:
            layers["node_check_s"] = _rel(min(c["time"] for c in bad), start)
    if inj.kind == "slow_link":
        out["outcome"] = "slowed" if a.completed or b is None else "relaunched"
        steps = [(t, it) for t, it in a.trace if start <= t <= (end or a.end_ts or t)]
        if len(steps) > 1 and steps[-1][1] > steps[0][1]:
            out["step_s_during"] = round((steps[-1][0] - steps[0][0]) / (steps[-1][1] - steps[0][1]), 4)
    if gap is not None and (a.last_ts or 0) > gap[1] and gap[2] <= (a.end_ts or gap[2]):
        out["stood_still_s"] = round(max(0.0, gap[0] - dt), 3)
        out["outcome"] = out["outcome"] or "resumed by itself"
    elif a.last_ts is not None and a.last_ts > start and (a.completed or b is None or a.last_ts > (end or start)):
        out["outcome"] = out["outcome"] or "resumed by itself (its stand-still is not among the attempt's longest gaps)"
    elif b is not None and b.first_ts is not None and a.last_ts is not None:
        out["stood_still_s"] = round(max(0.0, b.first_ts - a.last_ts - dt), 3)
        gone = [h for h in (a.hosts or []) if h not in (b.hosts or a.hosts or [])]
        new = [h for h in (b.hosts or []) if h not in (a.hosts or [])]
        how = (f"on a spare ({', '.join(new)} for {', '.join(gone)})" if gone and len(new) == len(gone) else
               f"on fewer nodes (without {', '.join(gone)})" if gone else "on the same nodes")
        out["outcome"] = f"relaunched {how}"
        out["lost_steps"] = max(0, a.last_iter - b.resumed_from)
    elif not a.completed:
        out["outcome"] = "did not come through (no attempt after it)"
    else:
        out["outcome"] = out["outcome"] or "no stand-still seen"
    out["text"] = describe(out)
    return out


def describe(f: dict) -> str:
    """The fault in one sentence: "a partition of rlpbs-n2 (40 s): training stood still 54 s and
    resumed by itself; the watchdog decided to stop the attempt 30 s in, ...; 0 steps lost"."""
    until = {"duration": "", None: ""}.get(f.get("ended_by"), f", never healed: undone when {_ended(f['ended_by'])}")
    span = (f"{f['down_s']:.0f} s{until}" if f.get("down_s") is not None and f.get("restored") else
            "never healed in the phase")
    what = f"a {f['kind']} of {', '.join(f['nodes'])} ({span}" + (f", {f['windows']} times" if f["windows"] > 1 else "") + ")"
    parts = []
    if f["stood_still_s"] is not None:
        parts.append(f"training stood still {f['stood_still_s']:.0f} s")
    if f.get("step_s_during") is not None:
        parts.append(f"a step took {f['step_s_during']:.3f} s under it")
    L = f["layers"]
    if "watchdog_s" in L:
        parts.append(f"the watchdog decided to stop attempt {f['attempt']} {L['watchdog_s']:.0f} s in ({L['stop']})")
    if "pg_timeout_s" in L:
        parts.append(f"the process-group timeout ended it {L['pg_timeout_s']:.0f} s in")
    elif "attempt_end_s" in L and "watchdog_s" not in L:
        parts.append(f"attempt {f['attempt']} ended {L['attempt_end_s']:.0f} s in")
    if "node_check_s" in L:
        parts.append(f"the node check found {', '.join(f['nodes'])} bad {L['node_check_s']:.0f} s in")
    parts.append(f"{f['outcome']}; {f['lost_steps']} step(s) lost")
    if not f["recorded"]:
        parts.append("(no record from the node's restorer: the times are the injector's plan)")
    return f"{what}: " + "; ".join(parts)


def _ended(why: str) -> str:
    """The restorer's ended_by, in words: `<phase>/done exists`, SIGTERM, ..."""
    return "the phase was done" if why.endswith("done exists") else f"{why} (the restorer's words)"


def accounts(ph, step_dt: Optional[float]) -> List[dict]:
    """Every network fault the phase's injector began, in order."""
    return [account(ph, r, step_dt) for r in ph.injections
            if r.struck and r.kind in failures.KINDS and failures.get(r.kind).host_fault and r.time is not None]
