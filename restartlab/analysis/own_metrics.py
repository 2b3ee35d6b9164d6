"""What a program says about its own restarts and saves, beside what restartlab measured: the
adapter names the metrics file each launch writes (relative to the attempt's directory, a glob)
and its keys (ezpz: train/restart_seconds, train/ckpt_save_seconds, train/ckpt_stage_seconds,
train/ckpt_drain_seconds). Per restart, the program's restart time against restartlab's launch ->
first step, and the difference: what the program's timer leaves out (the launcher, the interpreter,
the imports before its clock starts). Reads only."""
import glob
import json
import os
from typing import Any, Dict, List, Optional

from ..contracts import layout
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


def phase(spec: Optional[programs.Spec], phase_dir: str, failures: List[dict]) -> Optional[dict]:
    """{file, restarts: [{attempt, program_restart_s, restart_s, uncounted_s}], save|stage|drain:
    quantiles} for an adapter with own metrics; None otherwise or when no attempt wrote them."""
    own = programs.ADAPTERS.get(spec.adapter).own_metrics if spec else None
    if spec is None or not own:
        return None
    measured = {f["attempt"] + 1: f.get("restart_s") for f in failures}
    out: Dict[str, Any] = {"adapter": spec.adapter, "file": own["file"], "restarts": [], **{k: [] for k in KINDS}}
    found = False
    for att in layout.Phase(phase_dir).attempts():
        files = sorted(glob.glob(os.path.join(att.path, own["file"])))
        restart = None
        for m in (m for p in files for m in _rows(p)):
            found = True
            if restart is None and own.get("restart") in m:
                restart = number(m[own["restart"]])
            for k in KINDS:
                v = number(m.get(own.get(k) or ""))
                if v is not None:
                    out[k].append(v)
        ours = measured.get(att.index)
        if restart is not None and ours is not None:
            out["restarts"].append({"attempt": att.index, "program_restart_s": restart, "restart_s": ours,
                                    "uncounted_s": ours - restart})
    if not found:
        return None
    for k in KINDS:
        out[k] = quantiles(out[k])
    return out


def markdown(summaries: List[dict]) -> List[str]:
    said = [s for s in summaries if s.get("own_metrics") and (s["own_metrics"]["restarts"] or any(
        s["own_metrics"][k]["count"] for k in KINDS))]
    rows = [(s["phase"], s["own_metrics"]) for s in said]
    if not rows:
        return []
    L = ["## The program's own timers", "",
         f"What {rows[0][1]['adapter']} wrote about itself ({rows[0][1]['file']} in each attempt's directory) beside what "
         "restartlab measured. Its restart time starts inside the program, so it leaves out the launcher, "
         "the interpreter and the imports before its clock starts (the difference column); a save is written in "
         "the row after it, so the last save's time is never written.", "",
         "| phase | attempt | its restart s | restartlab's restart s (launch -> first step) | difference s |",
         "|---|---|---|---|---|"]
    for name, own in rows:
        for r in own["restarts"]:
            L.append(f"| {name} | {r['attempt']} | {r['program_restart_s']:.2f} | {r['restart_s']:.2f} | "
                     f"{r['uncounted_s']:.2f} |")
    L += ["", "| phase | its save s (count, median) | its stage s | its drain s | restartlab booked (count, median) |",
          "|---|---|---|---|---|"]
    for (name, own), s in zip(rows, said):
        def q(x):
            return f"{x['count']}, {x['median']:.4f}" if x["count"] else "-"
        booked = s["save"]["ckpt_save_seconds"] if s["save"]["ckpt_save_seconds"]["count"] else \
            s["save"]["ckpt_stage_seconds"]
        L.append(f"| {name} | {q(own['save'])} | {q(own['stage'])} | {q(own['drain'])} | {q(booked)} |")
    return L + [""]
