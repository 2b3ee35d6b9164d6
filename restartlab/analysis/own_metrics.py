"""What a program says about its own restarts and saves, beside what restartlab measured: the
adapter names the metrics file each launch writes (relative to the attempt's directory, a glob)
and its keys (ezpz: train/restart_seconds, train/ckpt_save_seconds, train/ckpt_stage_seconds,
train/ckpt_drain_seconds). Per restart, the program's restart time against restartlab's launch ->
first step, and the difference: what the program's timer leaves out (the launcher, the interpreter,
the imports before its clock starts). Reads only."""
import glob
import json
import os
from typing import Dict, List, Optional

from ..contracts import layout
from ..contracts import metric_keys as K
from ..contracts.phase_summary import FailureEvent, OwnMetrics, OwnRestart, PhaseSummary, Quantiles
from ..contracts.jsonvalue import number
from .. import programs
from .collect import quantiles
from ..programs.base import SAVE_KINDS as KINDS


def _rows(path: str):
    try:
        with open(path, errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn last line (killed mid-write)
                m = rec.get("metrics") if isinstance(rec, dict) else None
                if isinstance(m, dict):
                    yield m
    except OSError:
        return


def phase(spec: Optional[programs.Spec], phase_dir: str, failures: List[FailureEvent]) -> Optional[OwnMetrics]:
    """Its restarts beside ours and its saves' quantiles, for an adapter with own metrics; None
    otherwise or when no attempt wrote them."""
    own = programs.ADAPTERS.get(spec.adapter).own_metrics if spec else None
    if spec is None or not own:
        return None
    measured = {f.attempt + 1: f.restart_s for f in failures}
    timed: Dict[str, List[float]] = {k: [] for k in KINDS}
    restarts: List[OwnRestart] = []
    found = False
    for att in layout.Phase(phase_dir).attempts():
        files = sorted(glob.glob(os.path.join(att.path, own.file)))
        restart = None
        for m in (m for p in files for m in _rows(p)):
            found = True
            if restart is None and own.restart in m:
                restart = number(m[own.restart])
            for k in KINDS:
                v = number(m.get(own.key(k) or ""))
                if v is not None:
                    timed[k].append(v)
        ours = measured.get(att.index)
        if restart is not None and ours is not None:
            restarts.append(OwnRestart(attempt=att.index, program_restart_s=restart, restart_s=ours,
                                       uncounted_s=ours - restart))
    if not found:
        return None
    return OwnMetrics(adapter=spec.adapter, file=own.file, restarts=restarts,
                      **{k: quantiles(xs) for k, xs in timed.items()})


def markdown(summaries: List[PhaseSummary]) -> List[str]:
    rows = [(s, s.own_metrics) for s in summaries
            if s.own_metrics and (s.own_metrics.restarts or any(s.own_metrics.timed(k).count for k in KINDS))]
    if not rows:
        return []
    L = ["## The program's own timers", "",
         f"What {rows[0][1].adapter} wrote about itself ({rows[0][1].file} in each attempt's directory) beside what "
         "restartlab measured. Its restart time starts inside the program, so it leaves out the launcher, "
         "the interpreter and the imports before its clock starts (the difference column); a save is written in "
         "the row after it, so the last save's time is never written.", "",
         "| phase | attempt | its restart s | restartlab's restart s (launch -> first step) | difference s |",
         "|---|---|---|---|---|"]
    for s, own in rows:
        for r in own.restarts:
            L.append(f"| {s.phase} | {r.attempt} | {r.program_restart_s:.2f} | {r.restart_s:.2f} | "
                     f"{r.uncounted_s:.2f} |")
    L += ["", "| phase | its save s (count, median) | its stage s | its drain s | restartlab booked (count, median) |",
          "|---|---|---|---|---|"]
    def q(x: Quantiles) -> str:
        return f"{x.count}, {x.median:.4f}" if x.count else "-"
    for s, own in rows:
        booked = s.saves(K.SAVE_S) if s.saves(K.SAVE_S).count else s.saves(K.STAGE_S)
        L.append(f"| {s.phase} | {q(own.save)} | {q(own.stage)} | {q(own.drain)} | {q(booked)} |")
    return L + [""]
