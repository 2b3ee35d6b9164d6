"""A phase's network faults, each told as what it was.

The kinds are failures.NetworkKind: partition, flap and slow_link. Each account tells:

- When its node's link went down (or was capped) and came back. The times come from the node's
  restorer's record (layout.Phase.faults), or from the injector's plan where there is none.
- How long the training stood still.
- Who noticed, and when. These are the watchdog's decision, whether its stop reached every node and
  took effect, the process-group timeout, the attempt's end and the node check.
- How the job came through: resumed by itself, relaunched (on the same nodes, a spare, or fewer), or
  not at all.

Opens no file: collect.load_phase read everything. The scheduler's own view (PBS or Slurm marking the
node down) is not seen from inside the job. It is not measured here."""
from typing import List, Optional, cast

from .. import failures
from ..contracts.faultlog import FaultLog
from ..contracts.phase_summary import NetworkFault
from .runs import rerun, run_record

MATCH_S = 1e-3   # a restorer's planned_at is the receipt's `at`, the record's time, to the float


def _restorer(ph, inj) -> Optional[FaultLog]:
    """The node's restorer's line for this fault.

    Its planned_at matches the receipt's `at`, the record's time, to the float. It is matched by time
    because a host's name may differ between the node file and the node."""
    return next((f for f in ph.faults if f.planned_at is not None and abs(f.planned_at - inj.time) < MATCH_S), None)


def _attempt_at(ph, t: float):
    """The attempt that was running at time t (index into ph.attempts), else None. One without an
    end record (cut short with its job's run) may have lived on after its last sign of life: its span
    runs to the next attempt's launch."""
    for i, a in enumerate(ph.attempts):
        end = a.end_ts
        if not a.recorded and i + 1 < len(ph.attempts) and ph.attempts[i + 1].launch_ts is not None:
            end = ph.attempts[i + 1].launch_ts
        if a.launch_ts is not None and a.launch_ts <= t and (end is None or t <= end):
            return i
    return None


def _rel(t: Optional[float], start: float) -> Optional[float]:
    return None if t is None else round(t - start, 3)


def account(ph, inj, step_dt: Optional[float]) -> NetworkFault:
    """One network fault's account (collect.summarize_phase's `network_faults`)."""
    r = _restorer(ph, inj)
    windows = list(r.windows) if r else []
    closed = [(a, b) for a, b in windows if b is not None]
    fault = inj.net_fault
    start = windows[0][0] if windows else inj.time
    end = windows[-1][1] if windows else fault.until
    out = NetworkFault(kind=inj.kind, nodes=list(inj.hosts), start=start, end=end, windows=len(windows),
                       planned_s=fault.duration or None,
                       down_s=round(sum(b - a for a, b in closed), 3) if windows and len(closed) == len(windows) else None,
                       restored=r.restored if r else None, ended_by=r.ended_by if r else None,
                       errors=list(r.errors) if r else [], recorded=r is not None)
    if r is not None and not windows:
        out.outcome = "never began: " + ("; ".join(r.errors) or f"ended first ({r.ended_by})")
        out.text = describe(out)
        return out
    i = _attempt_at(ph, start)
    if i is None:
        out.outcome = "struck no attempt"
        out.text = describe(out)
        return out
    a = ph.attempts[i]
    b = ph.attempts[i + 1] if i + 1 < len(ph.attempts) else None
    out.attempt = a.number or a.index
    dt = step_dt or 0.0
    layers = out.layers
    if a.hang and a.hang_ts is not None and a.hang_ts >= start:
        layers.watchdog_s = _rel(a.hang_ts, start)
        stop = "its stop did not take effect: the attempt finished by itself" if a.completed else "stopped"
        if a.unreached:
            stop += f"; the stop could not reach {', '.join(a.unreached)}"
        layers.stop = stop
    again = b is not None and rerun(a, b)
    if not a.completed and a.end_ts is not None and a.recorded:
        layers.attempt_end_s = _rel(a.end_ts, start)
        if a.timed_out:
            layers.pg_timeout_s = _rel(a.end_ts, start)
    if again:  # the scheduler ended the run and requeued the job: what its next run's record says
        assert b is not None  # again only with a next attempt
        run = run_record(ph.job_runs, b)
        hosts = {h.split(".", 1)[0] for h in inj.hosts}
        downs = [n.since for n in (run.nodes if run else ()) if n.node.split(".", 1)[0] in hosts
                 and "down" in str(n.state) and n.since >= start]
        if downs:
            layers.scheduler_down_s = _rel(min(downs), start)
        layers.next_run_s = _rel(b.job_start, start)
    if b is not None:
        bad = [c for c in ph.node_checks if c.attempt is not None and not c.ok
               and (a.number or 0) < c.attempt <= (b.number or 0) and c.node in inj.hosts and c.time is not None]
        if bad:
            layers.node_check_s = _rel(min(cast(float, c.time) for c in bad), start)
    span_end = end if end is not None else a.end_ts
    if inj.kind == "slow_link":
        steps = [(t, it) for t, it in a.trace if start <= t <= (span_end or t)]
        if len(steps) > 1 and steps[-1][1] > steps[0][1]:
            out.step_s_during = round((steps[-1][0] - steps[0][0]) / (steps[-1][1] - steps[0][1]), 4)
    went_on = a.completed or (a.last_ts is not None and span_end is not None and a.last_ts > span_end)
    if b is not None and not a.completed and b.first_ts is not None and a.last_ts is not None:
        # the attempt ended and another carried on: relaunched, whatever it logged inside the fault
        out.stood_still_s = round(max(0.0, b.first_ts - a.last_ts - dt), 3)
        ha, hb = a.hosts, b.hosts
        if again:  # no node check: each run's own nodes, from its record
            ra, rb = run_record(ph.job_runs, a), run_record(ph.job_runs, b)
            ha = ha or (list(ra.hosts) if ra and ra.hosts else None)
            hb = hb or (list(rb.hosts) if rb and rb.hosts else None)
        gone = [h for h in (ha or []) if h not in (hb or ha or [])]
        new = [h for h in (hb or []) if h not in (ha or [])]
        how = (f"on {'other nodes' if again else 'a spare'} ({', '.join(new)} for {', '.join(gone)})"
               if gone and len(new) == len(gone) else
               f"on fewer nodes (without {', '.join(gone)})" if gone else "on the same nodes")
        out.outcome = f"relaunched {how}" + (" in the job's next run (the scheduler requeued it)" if again else "")
        out.lost_steps = max(0, a.last_iter - b.resumed_from)
    elif went_on:
        # Count every gap between two steps that overlaps the fault's span, beyond a step's time.
        # A flap has one such gap per time down. A slowed link's steps are slow; they do not stand still.
        lo, hi = start, span_end if span_end is not None else start
        still = [g for g in a.gaps if g[2] >= lo and g[1] <= hi and g[0] > 2 * dt]
        if inj.kind != "slow_link":
            out.stood_still_s = round(sum(g[0] - dt for g in still), 3)
        out.outcome = "slowed" if inj.kind == "slow_link" else "resumed by itself"
    elif not a.completed:
        out.outcome = "did not come through (no attempt after it)"
    out.text = describe(out)
    return out


def describe(f: NetworkFault) -> str:
    """The fault in one sentence.

    For example: "a partition of rlpbs-n2 (40 s): training stood still 54 s and resumed by itself;
    the watchdog decided to stop the attempt 30 s in, ...; 0 steps lost"."""
    why = f.ended_by
    until = ((f" of {f.planned_s:.0f} s: undone when {_ended(why)}" if f.planned_s else
              f", never healed: undone when {_ended(why)}") if isinstance(why, str) and why != "duration" else "")
    span = (f"{f.down_s:.0f} s{until}" if f.down_s is not None and f.restored else
            "not put back" if f.restored is False else
            "no record from its node" if not f.recorded else "never healed in the phase")
    what = f"a {f.kind} of {', '.join(f.nodes)} ({span}" + (f", {f.windows} times" if f.windows > 1 else "") + ")"
    parts = []
    if f.stood_still_s is not None:
        parts.append(f"training stood still {f.stood_still_s:.0f} s")
    if f.errors and not (f.outcome or "").startswith("never began"):
        parts.append(f"its node said: {'; '.join(f.errors)}")
    if f.step_s_during is not None:
        parts.append(f"a step took {f.step_s_during:.3f} s under it")
    L = f.layers
    if L.watchdog_s is not None:
        parts.append(f"the watchdog decided, {L.watchdog_s:.0f} s in, to stop attempt {f.attempt} ({L.stop})")
    if L.pg_timeout_s is not None:
        parts.append(f"the process-group timeout ended it {L.pg_timeout_s:.0f} s in")
    elif L.attempt_end_s is not None and L.watchdog_s is None:
        parts.append(f"attempt {f.attempt} ended {L.attempt_end_s:.0f} s in")
    if L.node_check_s is not None:
        parts.append(f"the node check found {', '.join(f.nodes)} bad {L.node_check_s:.0f} s in")
    if L.scheduler_down_s is not None:
        parts.append(f"the scheduler marked {', '.join(f.nodes)} down {L.scheduler_down_s:.0f} s in")
    if L.next_run_s is not None:
        parts.append(f"the job, requeued, ran again {L.next_run_s:.0f} s in")
    parts.append(f"{f.outcome}; {f.lost_steps} step(s) lost")
    if not f.recorded:
        parts.append("(no record from the node's restorer: the times are the injector's plan)")
    return f"{what}: " + "; ".join(parts)


def _ended(why: str) -> str:
    """The restorer's ended_by, in words: `<phase>/done exists`, SIGTERM, ..."""
    return "the phase was done" if why.endswith("done exists") else f"{why} (the restorer's words)"


def accounts(ph, step_dt: Optional[float]) -> List[NetworkFault]:
    """Every network fault the phase's injector began, in order."""
    return [account(ph, r, step_dt) for r in ph.injections
            if r.struck and r.kind in failures.KINDS and failures.get(r.kind).host_fault and r.time is not None]
