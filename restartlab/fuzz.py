"""restartlab fuzz SCENARIO: kill anywhere, for any training program.

One phase of the scenario runs on this machine: the first that checkpoints, or --phase. It gets
--kills SIGKILLs, one per attempt, at random points reproducible from --seed. About half land
inside a save: a checkpoint being written, as the program's adapter sees it in the checkpoint dir.
The rest land anywhere from the launch on, start-up included.

Each kill is followed by a relaunch. The next attempt's outcome is judged as the report's "Did it
survive?" section judges it (survival.py). The reference is the scenario's baseline phase, which
runs first. --no-baseline skips it. --baseline-from EXPT_DIR copies it from an earlier experiment
that ran the same command, as `restartlab run --baseline-from` does.

Exit codes:
- 0: every kill was survived as expected.
- 1: any finding: resumed from an incomplete or an older checkpoint, started over, crashed while
  loading, a crash loop, hung, did not finish, diverged from the baseline.
- 2: bad input.

The table is printed and written to the experiment dir."""
import argparse
import copy
import dataclasses
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .contracts import iofaults, layout, live, typed_json
from .job import preflight, run
from . import failures, scenario
from .analysis import survival
from .analysis.collect import is_baseline
from .contracts.scenario_record import Scenario, Schedule
from .contracts.units import parse_duration


def add_args(p):
    p.add_argument("scenario", help="the scenario (trainer.program for your own program)")
    p.add_argument("--phase", help="the phase to fuzz (default: the first that checkpoints)")
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs, one per attempt (default 5)")
    p.add_argument("--seed", type=int, default=0, help="the kills' random choices (default 0)")
    p.add_argument("--window", type=parse_duration, default=None, help="a kill not aimed at a save strikes "
                   "within this long of its attempt's launch; one aimed at a save that sees none within twice "
                   "this long strikes then (default: the scenario's failures.fuzz_window)")
    p.add_argument("--save-share", type=float, default=0.5, help="the share of kills aimed inside a save")
    p.add_argument("--save-jitter", type=parse_duration, default=None, help="a kill aimed inside a save strikes "
                   "up to this long after the save shows (default: the scenario's failures.fuzz_save_jitter, 20 ms); "
                   "wider reaches what a save writes last")
    p.add_argument("--after-complete", action="store_true", help="a kill aimed at a save waits for a save made "
                   "while a complete checkpoint exists (what such a kill may lose)")
    p.add_argument("--kinds", default="kill", help="each strike's kind, drawn from the seed among these (comma-"
                   f"separated: {', '.join(failures.FUZZ_KINDS)}; torn: a file of the next checkpoint write cut at a "
                   "byte drawn from the seed, the rank killed there; default: kill)")
    p.add_argument("--no-baseline", action="store_true", help="do not run the baseline phase (the loss is "
                   "then not compared)")
    p.add_argument("--baseline-from", metavar="EXPT_DIR", help="copy the baseline phase of this earlier "
                   "experiment instead of running it again; refused unless it ran the same command and finished")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--expt-dir", help="default: <expt_root>/<name>-fuzz-<time>")
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")


class FuzzInputError(scenario.ScenarioError):
    pass


def plan(sc: Scenario, a: argparse.Namespace) -> Tuple[Scenario, str]:
    """(the scenario to run, the fuzzed phase's name): the baseline (unless --no-baseline) and the
    fuzzed phase, whose failures are the kill-anywhere schedule."""
    if a.kills < 1:
        raise FuzzInputError("--kills: must be >= 1")
    if not 0 <= a.save_share <= 1:
        raise FuzzInputError("--save-share: must be between 0 and 1")
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in failures.FUZZ_KINDS]
    if bad or not kinds:
        raise FuzzInputError(f"--kinds {a.kinds}: each of {', '.join(failures.FUZZ_KINDS)} (got {', '.join(bad) or 'none'})")
    if a.no_baseline and a.baseline_from:
        raise FuzzInputError("--no-baseline and --baseline-from: choose one")
    phases = sc.phases
    if a.phase:
        target = sc.phase(a.phase)
        if target is None:
            raise FuzzInputError(f"{sc.source}: phases: no phase named {a.phase!r} "
                                 f"(phases: {', '.join(p.name for p in phases)})")
    else:
        target = next((p for p in phases if p.checkpoint != "none"), None)
        if target is None:
            raise FuzzInputError(f"{sc.source}: phases: no phase saves checkpoints: nothing to fuzz")
    if target.checkpoint == "none":
        raise FuzzInputError(f"{sc.source}: phases: {target.name!r} saves no checkpoints (checkpoint: none)")
    base = next((p for p in phases if is_baseline(p.checkpoint)), None) if not a.no_baseline else None
    f = dataclasses.replace(
        copy.deepcopy(sc.failures), kind=kinds[0], fuzz_kinds=",".join(kinds) if len(kinds) > 1 else None,
        signal=None, gate=None, wait_first_complete=False, max_kills=None,
        fuzz_window=a.window or sc.failures.fuzz_window or 10.0, fuzz_save_share=a.save_share,
        fuzz_save_jitter=a.save_jitter if a.save_jitter is not None else sc.failures.fuzz_save_jitter,
        fuzz_after_complete=a.after_complete, schedule=Schedule(fuzz=a.kills, seed=a.seed))
    fuzzed = dataclasses.replace(copy.deepcopy(target), failures=f)
    out = dataclasses.replace(
        copy.deepcopy(sc), phases=([dataclasses.replace(copy.deepcopy(base), failures=False)] if base else []) + [fuzzed],
        # every kill costs an attempt; a program that crash-loops stops after survival.CRASH_LOOP more
        relaunch=dataclasses.replace(sc.relaunch, max_attempts=a.kills + survival.CRASH_LOOP + 1),
        collection=dataclasses.replace(sc.collection, plots=False))
    return out, target.name


@dataclasses.dataclass
class KillRow:
    """One kill of a fuzz: where it struck, and what the attempt after it did (the `kills` of
    layout.Expt.fuzz_summary)."""
    kill: int                               # its number, from 1
    kind: Optional[str]
    attempt: Optional[int]                  # the attempt it ended
    where: str                              # start-up, save (...), between saves, torn (...)
    saving: List[str]                       # what was being written when it struck
    newest_complete: Optional[int]          # the newest complete checkpoint then
    newest_complete_seen: Optional[int]     # the newest one seen before (if it is gone)
    next: Optional[str]                     # the next attempt's outcome
    text: str
    finding: bool


def outcomes(phase_dir: str, verdict: survival.Verdict) -> List[KillRow]:
    """One row per kill: where it struck, and what the attempt after it did."""
    after = {r.attempt: r for r in verdict.restarts}
    cuts: Dict[Any, Any] = {e.id: e for e in iofaults.read(layout.Phase(phase_dir).iofaults, []) if e.event == "cut"}
    rows: List[KillRow] = []
    for rec in (r for r in live.read_injections(phase_dir) if r.struck):
        k = rec.attempt
        where = rec.where or "?"
        if rec.kind == "torn":  # armed where the training was; struck at the next checkpoint write
            cut = cuts.get(rec.storage_fault.id)
            where = (f"save (torn: {os.path.relpath(cut.file, cut.dir) if cut.file and cut.dir else cut.file} "
                     f"cut at byte {cut.bytes}, rank {cut.rank} killed)") if cut else "torn (no write followed)"
            nxt_k = _attempt_of(phase_dir, cut.at) if cut else None
            k = nxt_k if nxt_k is not None else k
        nxt = after.get(k + 1) if k is not None else None
        rows.append(KillRow(kill=len(rows) + 1, kind=rec.kind, attempt=k, where=where, saving=list(rec.saving),
                            newest_complete=rec.newest_complete, newest_complete_seen=rec.newest_complete_seen,
                            next=nxt.outcome if nxt else None,
                            text=nxt.text if nxt else "no attempt after it (the phase ended)",
                            finding=bool(nxt and nxt.finding)))
    return rows


def _attempt_of(phase_dir: str, t: float):
    """The attempt whose launch came last before time t (None: none)."""
    best = None
    for att in layout.Phase(phase_dir).attempts():
        try:
            if os.stat(att.at_launch).st_mtime <= t:
                best = att.index
        except OSError:
            continue
    return best


def _newest(r: KillRow) -> str:
    """The newest complete checkpoint at the kill, and the newest one seen before if it is gone."""
    now, seen = r.newest_complete, r.newest_complete_seen
    text = "-" if now is None else str(now)
    return text + (f" ({seen} before)" if seen is not None and seen != now else "")


def table(rows: List[KillRow]) -> str:
    L = ["| kill | attempt | struck | being written | newest complete | next attempt |", "|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r.kill} | {r.attempt} | {r.where} | {', '.join(map(str, r.saving)) or '-'} | "
                 f"{_newest(r)} | "
                 f"{r.text}{' **(finding)**' if r.finding else ''} |")
    return "\n".join(L)


def main(a) -> int:
    try:
        loaded, where = scenario.load_located(a.scenario, a.set)
        sc, name = plan(loaded, a)
    except scenario.ScenarioError as e:
        print(f"restartlab fuzz: error: {e}" if isinstance(e, FuzzInputError) else str(e), file=sys.stderr)
        return 2
    refused = preflight.framework_missing(sc, where)
    if refused:
        preflight.report(refused)
        return 2
    expt_dir = os.path.abspath(a.expt_dir) if a.expt_dir else os.path.join(
        os.path.abspath(sc.expt_root), f"{sc.name}-fuzz-{time.strftime('%Y%m%d-%H%M%S')}")
    rc = run.run_scenario(sc, a.scenario, expt_dir, a.plain, verb="fuzz", baseline_from=a.baseline_from)
    if rc in (2, 130):
        return rc
    expt = layout.Expt(expt_dir)
    base = next((p.name for p in sc.phases if is_baseline(p.checkpoint)), None)
    tol = sc.trainer.program.tolerance if sc.trainer.program else 0.0
    v = survival.phase_verdict(expt.phase(name).path, expt.phase(base).path if base else None, tol)
    rows = outcomes(expt.phase(name).path, v)
    text = table(rows)
    inside, between, startup = (sum(1 for r in rows if r.where.startswith(w)) for w in ("save", "between saves",
                                                                                         "start-up"))
    summary = (f"{len(rows)} of {a.kills} kill(s) landed ({inside} inside a save, {between} "
               f"between saves, {startup} in start-up); "
               + ("survived every one" if not v.findings else f"{len(v.findings)} finding(s)"))
    notes = [f"- {f}" for f in v.findings]
    if v.baseline:
        notes.append(f"- against the baseline: {v.baseline}")
    if len(rows) < a.kills:
        notes.append(f"- only {len(rows)} of {a.kills} kills landed: the phase ended first (finished: give it more "
                     "steps or a shorter --window; or out of attempts)")
    out = "\n".join([f"# restartlab fuzz: {name} (seed {a.seed})", "", text, "", summary, ""] + notes) + "\n"
    with open(expt.fuzz_report, "w") as f:
        f.write(out)
    with open(expt.fuzz_summary, "w") as f:
        json.dump({"phase": name, "seed": a.seed, "kills": typed_json.to_dict(rows), "verdict": v.as_dict()}, f,
                  indent=1)
    print("\n" + out + f"\nfuzz report: {expt.fuzz_report}")
    return 1 if v.findings else 0
