"""Did it survive? For each phase of an experiment, this says what every restart did and whether the
job came through. It works for any training program.

Per restart, what it did:
  - resumed from the newest complete checkpoint
  - resumed from an older one (steps lost beyond necessity)
  - resumed from one that was not complete
  - started over from step 0
  - crashed while loading (which checkpoint, and whether it was complete)
  - killed in start-up (a new kill, not a verdict)
  - hung

Per restart, how it ended when nobody killed it:
  - crashed at step N: its exit or signal, and the line of its output that names the cause
  - hung
Either way, it names any save the restart began and left not complete.

Per phase:
  - finished, or did not finish
  - a crash loop: CRASH_LOOP attempts in a row that died before a step, none of them struck
  - against the baseline, one of:
      - the loss at every step both logged identical (or within trainer.program.tolerance)
      - diverged at step N
      - differed before any restart: a program that does not repeat itself
  - the bundled trainer's final parameters' checksum, equal or not

"The newest complete checkpoint" is judged by the adapter's completion rule. The rule runs over what
the checkpoint dir held at the launch: the supervisor's snapshot, layout.Attempt.at_launch. It is not
judged by the program's own selection rule. A program whose rule picks something else is reported,
not excused.

This module opens no file. It judges the records collect.load_phase read. phase_verdict loads them
for a caller that has only the directories."""
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, cast

from ..contracts import live
from ..contracts.launch_snapshot import LaunchSnapshot
from ..contracts import rank_exit
from ..contracts.attempts import AttemptRecord, completed_row
from . import collect, state_compare
from .runs import rerun
from ..contracts import metric_keys as K
from ..contracts.phase_summary import RestartVerdict, SurvivalVerdict
from ..contracts.restart_state import RestartState
from ..contracts.typed_json import to_dict

CRASH_LOOP = 3
FINDINGS = ("older", "incomplete", "fresh", "load_crash", "startup_crash", "hung", "crash", "crash_loop",
            "unfinished", "diverged", "unrepeatable", "params_differ", "lost", "unstopped", "saves_failed",
            "exit_crash", "past_last")


@dataclass
class Restart:
    attempt: Optional[int]     # the attempt's number (None: a phase read from metrics files, not attempt directories)
    outcome: str               # newest | older | incomplete | fresh | first | load_crash | startup_crash
    #                            | startup_kill | hung | crash | lost | unjudged | exit_crash | past_last
    text: str
    resumed_from: Optional[int] = None
    expected: Optional[int] = None
    state: Optional[RestartState] = None  # what the resume restored, piece by piece (state_compare.ResumeState)

    @property
    def finding(self) -> bool:
        return self.outcome in FINDINGS


@dataclass
class Verdict:
    phase: str
    restarts: List[Restart] = field(default_factory=list)
    finished: bool = False
    findings: List[str] = field(default_factory=list)
    baseline: Optional[str] = None  # the comparison with the baseline, one sentence

    def summary(self) -> SurvivalVerdict:
        """The verdict as the report's summary carries it."""
        return SurvivalVerdict(phase=self.phase, finished=self.finished, survived=not self.findings,
                               findings=list(self.findings), baseline=self.baseline,
                               restarts=[RestartVerdict(**vars(r), finding=r.finding) for r in self.restarts])

    def as_dict(self) -> dict:
        return to_dict(self.summary())


def _how(rec: Optional[AttemptRecord]) -> str:
    """How a crashed attempt ended.

    It names the first rank that ended badly, from the ranks' own records (contracts.rank_exit). The
    launcher's one status names whichever rank it saw end first, or its own teardown. Without the
    ranks' records, it uses the launcher's status."""
    rec = rec or AttemptRecord()
    said = rank_exit.how(rec.signal, rec.exit_code)
    first = rec.rank_exit
    if first is None:
        return said
    mine = f"{first.how()} in rank {first.rank} on {first.node}, the first rank to end"
    return mine if first.how() == said else f"{mine} (the launcher reported {said})"


def _unfinished_saves(resumed: int, last: Optional[int], after: Optional[LaunchSnapshot]) -> List[int]:
    """The checkpoints this attempt began and left not complete, as the next launch found them.

    These are the steps above the one it resumed from, up to the last it logged."""
    if last is None or after is None:
        return []
    return [s for s, c in after.checkpoints if not c and resumed < s <= last]


def _ended_badly(a: collect.AttemptData, last: Optional[int], resumed: int, after: Optional[LaunchSnapshot],
                 struck: bool, lost_nodes: Sequence[Optional[str]] = ()) -> Optional[str]:
    """How an attempt that took steps ended, when that is a finding.

    It crashed (a non-zero exit nobody caused) or hung. The text adds the save it left unfinished and
    the line its output names. An attempt whose nodes the next health check found bad died with its
    node. That is a failure to recover from, like a kill, not a crash of the program."""
    rec = a.record
    if struck or lost_nodes or rec is None or rec.completed or rec.preempted or rec.walltime:
        return None
    if rec.hang:
        what = "hung (the watchdog stopped it)"
    elif rec.exit_code not in (0, None):
        what = f"crashed at step {last}, {_how(rec)}, not killed by restartlab"
    else:
        return None
    saves = _unfinished_saves(resumed, last, after)
    if saves:
        what += f", the save of step {', '.join(map(str, saves))} left unfinished (not complete at the next launch)"
    err = None if rec.hang else a.error
    return what + (f": {err}" if err else "")


def _resume(k: Optional[int], first: dict, snap: Optional[LaunchSnapshot]) -> Restart:
    """What an attempt that took a step resumed from, against what it should have (`snap`: what its
    launch found; None where no snapshot was written)."""
    r = int(first.get(K.RESUMED_FROM) or 0)
    expected = snap.newest_complete if snap else None
    states = snap.states if snap else {}
    how = " (inferred: the program printed no resume line)" if first.get(K.RESUME_EVIDENCE) == "inferred" else ""
    if r and snap and not states:
        return Restart(k, "unjudged", f"resumed from step {r}; no checkpoint was seen at the launch (check "
                       "trainer.program.checkpoints): not judged", r, expected)
    if r and (states.get(r) is False or (expected is not None and r > expected) or (expected is None and snap)):
        pick = snap.will_load if snap else None
        why = f" ({pick.why})" if pick is not None and pick.why and pick.step == r else ""
        return Restart(k, "incomplete", f"resumed from step {r}, whose checkpoint was not complete at the launch"
                       + why + how, r, expected)
    if expected is None:
        return Restart(k, "first", "started from step 0 (no complete checkpoint yet)", r, expected)
    if r == expected:
        return Restart(k, "newest", f"resumed from the newest complete checkpoint (step {r}){how}", r, expected)
    if r == 0:
        why = f" (its own rule, selects: {snap.selects}, found nothing to load)" \
            if snap and snap.selects and not snap.will_load else ""
        return Restart(k, "fresh", f"started over from step 0 although step {expected} was complete{why}", r, expected)
    return Restart(k, "older", f"resumed from step {r}, older than the newest complete (step {expected}): "
                   f"{expected - r} step(s) lost beyond necessity{how}", r, expected)


def _no_step(k: Optional[int], rec: Optional[AttemptRecord], snap: Optional[LaunchSnapshot], struck: bool,
             err: Optional[str] = None) -> Restart:
    """An attempt that died before its first step (`err`: the line of its output naming a crash)."""
    if struck:
        return Restart(k, "startup_kill", "killed in start-up (before its first step): a new kill, no verdict")
    said = f"; its output: {err}" if err else ""
    if rec is not None and rec.hang:
        return Restart(k, "hung", "no progress seen before the start-up watchdog stopped it (hung, or for your "
                       f"own program check trainer.program.progress){said}")
    if rec is not None and rec.exit_code == 0:
        return Restart(k, "startup_crash", "exited 0 without a progress line seen (check trainer.program.progress)")
    pick = snap.will_load if snap else None
    if snap and pick:
        if pick.complete:
            state, safe = "complete", ""
        else:
            rule = f" by its rule {snap.complete_rule}" if snap.complete_rule else ""
            why = f" ({pick.why})" if pick.why else ""
            holds = f"; it holds {', '.join(pick.holds)}" if pick.holds else ""
            state = f"NOT complete{rule}{why}: a save that did not finish{holds}"
            good = snap.newest_complete
            safe = (f"; loading the newest complete checkpoint, step {good} ({snap.newest_complete_path}), "
                    "would have been safe" if good is not None else
                    "; no checkpoint was complete: starting from step 0 would have been safe")
        return Restart(k, "load_crash", f"crashed before its first step, {_how(rec)}: the program "
                       f"would load {pick.path} (step {pick.step}, {state}){said}{safe}")
    return Restart(k, "startup_crash", f"crashed before its first step, {_how(rec)} (no progress "
                   f"seen: a crash, or check trainer.program.progress){said}")


def _max(*xs):
    xs = [x for x in xs if isinstance(x, int) and not isinstance(x, bool)]
    return max(xs) if xs else None


def _lost(k: Optional[int], snap: Optional[LaunchSnapshot], best: Optional[int]) -> Optional[str]:
    """Saved work lost.

    A complete checkpoint known to have existed is gone at this launch, with nothing as new in its
    place. It is known from an earlier launch, or the injector saw it."""
    if best is None or snap is None:
        return None
    now = snap.newest_complete
    if now is not None and now >= best:
        return None
    return (f"saved work lost: the complete checkpoint of step {best} is gone at this launch (the program deleted "
            f"it before its next save was complete); newest complete now: {now if now is not None else 'none'}")


def _first_run(ph: collect.PhaseData) -> set:
    """What ran before any restart.

    These are the steps the phase's first attempt logged from a start at step 0. They go up to where
    a later attempt took over, because a resume recomputes from there."""
    atts = ph.attempts
    first, last = (atts[0].first_row, atts[0].last_step) if atts else (None, None)
    if first is None or last is None:
        return set()
    nxt = atts[1].first_row if len(atts) > 1 else None
    end = min(last, nxt[K.ITER] - 1) if nxt is not None else last
    return set(range(first[K.ITER], end + 1))


def final_crc(ph: collect.PhaseData):
    """The bundled trainer's checksum of the final parameters (its last attempt's final row), or None."""
    m = ph.attempts[-1].last_row if ph.attempts else None
    return cast(dict, m).get(K.PARAMS_CRC) if completed_row(m) else None  # completed_row: a dict


def compare(ph: collect.PhaseData, base: collect.PhaseData, tolerance: float = 0.0) -> tuple:
    """(finding or None, one sentence) for a phase against the baseline (both loaded with losses)."""
    if ph.losses is None or base.losses is None:
        raise ValueError("compare: load both phases with collect.load_phase(..., losses=True)")
    mine, theirs = ph.losses, base.losses
    both = sorted(set(mine) & set(theirs))
    crc, base_crc = final_crc(ph), final_crc(base)
    crc_note = ""
    if crc is not None and base_crc is not None:
        if crc != base_crc:
            return "params_differ", f"final parameters differ from the baseline's (crc {crc} vs {base_crc})"
        crc_note = "; final parameters identical (crc)"
    if not both:
        return None, ("no loss logged at a step of both this phase and the baseline: loss not compared (the steps "
                      "carry no loss: give trainer.program.progress a loss group, or, where the steps come from "
                      "the state probe, a loss_line)" if any(a.first_row for a in ph.attempts) else
                      "no step logged in both this phase and the baseline: loss not compared") + crc_note
    first = _first_run(ph)
    for s in both:
        a, b = mine[s], theirs[s]
        off = (a != b) if tolerance == 0 else not (math.isclose(a, b, rel_tol=tolerance) or a == b)
        if off or math.isnan(a) != math.isnan(b):
            if s in first:
                return "unrepeatable", (f"differs from the baseline at step {s} (loss {a!r} vs {b!r}) before any "
                                        "restart: the program does not repeat itself run to run (no fixed seed? "
                                        "nondeterministic kernels?), so the loss cannot judge its restarts")
            return "diverged", f"diverged from the baseline at step {s} (loss {a!r} vs {b!r})"
    what = "identical" if tolerance == 0 else f"within {tolerance:g} (relative)"
    rounded = " (the losses of the program's own log lines, as rounded as it prints them)" \
        if ph.losses_logged or base.losses_logged else ""
    return None, f"loss {what} to the baseline's at all {len(both)} steps both logged{rounded}" + crc_note


def phase_verdict(phase_dir: str, base_dir: Optional[str] = None, tolerance: float = 0.0,
                  last_step: Optional[int] = None) -> Verdict:
    """judge() for a caller that has the directories: loads the phase (and the baseline) first."""
    ph = collect.load_phase(os.path.basename(os.path.normpath(phase_dir)), phase_dir=phase_dir,
                            losses=bool(base_dir))
    base = collect.load_phase("baseline", phase_dir=base_dir, losses=True) if base_dir else None
    return judge(ph, base, tolerance, last_step)


def judge(ph: collect.PhaseData, base: Optional[collect.PhaseData] = None, tolerance: float = 0.0,
          last_step: Optional[int] = None) -> Verdict:
    """The verdict on a phase read by collect.load_phase, against the baseline's if given.

    `last_step` is the run's last step (trainer.train_iters). A step past it is a finding."""
    v = Verdict(ph.name)
    dead, best = 0, None  # best: the newest complete checkpoint known to have existed before
    attempts = ph.attempts
    for i, a in enumerate(attempts):
        k, rec, snap = a.number, a.record, a.at_launch
        after = attempts[i + 1].at_launch if i + 1 < len(attempts) else None
        gone = _lost(k, snap, best)
        # a loss is told once: from here on, what is there now is what can be lost next
        best = _max(None if gone else best, snap.newest_complete if snap else None,
                    *(r.newest_complete_seen for r in ph.kills(None, None, k)))
        v.finished = v.finished or bool(rec and rec.completed)
        first, last = a.first_row, a.last_step
        struck = bool(ph.kills(rec and rec.launch_ts, rec and rec.end_ts, k))
        if first is not None:
            r = _resume(k, first, snap)
            dead = 0
        elif rec is None and i + 1 < len(attempts):
            # No record, and another attempt after it: its supervisor died with the job (killed,
            # requeued by the scheduler, or its node lost). A later job carried on.
            r = Restart(k, "cut_short", "cut short before its first step: its job's run ended under it and the "
                        "scheduler requeued the job; the next run carried on" if rerun(a, attempts[i + 1]) else
                        "cut short before its first step with its job (no record of its end: the job was killed or "
                        "requeued, or its node lost); a later job carried on")
        else:
            r = _no_step(k, rec, snap, struck, a.error)
            # a kill in start-up is neither a crash nor a recovery: the count goes on past it
            dead = dead + 1 if r.outcome in ("load_crash", "startup_crash") else dead if r.outcome == "startup_kill" else 0
            if dead == CRASH_LOOP:
                v.findings.append(f"crash loop: {CRASH_LOOP} attempts in a row died before a step, none "
                                  f"of them killed (the last: attempt {k})")
        nxt = attempts[i + 1].number if i + 1 < len(attempts) else None
        # numbered like the next one (a phase's attempts are all read from attempt directories, or none)
        lost_nodes = live.bad_nodes_between(ph.node_checks, cast(int, k), nxt) if nxt is not None else []
        bad = _ended_badly(a, last, r.resumed_from or 0, after, struck, lost_nodes) \
            if first is not None else None
        if bad:
            assert rec is not None  # _ended_badly finds nothing without a record
            r = Restart(k, "hung" if rec.hang else "crash", f"{r.text}; then {bad}", r.resumed_from,
                        r.expected)
        if k == 1 and r.outcome == "first":
            r.text = "started from step 0"
        if rec is not None and rec.completed and rec.exit_code not in (0, None) and first is not None \
                and not (rec.preempted or rec.walltime):
            # It reached the last step, then ended badly. It counts as finished: nothing is relaunched to
            # train nothing. A crash or a hang at exit is the program's to fix. A strike of ours after its
            # last step is not.
            if ph.kills(a.last_ts if a.last_ts is not None else rec.launch_ts, rec.end_ts):
                r = Restart(k, r.outcome, f"{r.text}; then finished (step {last}) and was struck before its exit",
                            r.resumed_from, r.expected)
            elif rec.hang:
                r = Restart(k, "exit_crash", f"{r.text}; then finished (step {last}) and hung at exit: the watchdog "
                            "stopped it", r.resumed_from, r.expected)
            else:
                r = Restart(k, "exit_crash", f"{r.text}; then finished (step {last}) and crashed at exit, {_how(rec)}"
                            + (f": {a.error}" if a.error else ""), r.resumed_from, r.expected)
        if rec is not None and rec.hang and first is not None and not bad and r.outcome != "exit_crash":
            if rec.completed:  # the watchdog decided, its stop never happened (a node it could not reach)
                r = Restart(k, "unstopped", f"{r.text}; then the watchdog decided to stop it (no progress for "
                            f"relaunch.hang_timeout) and the stop did not take effect: it finished by itself"
                            + (f" (the stop could not reach {', '.join(a.unreached)})" if a.unreached else ""),
                            r.resumed_from, r.expected)
            else:
                r.text += "; then the watchdog stopped it (no progress for relaunch.hang_timeout)" + (
                    f"; its stop could not reach {', '.join(a.unreached)}" if a.unreached else "")
        if rec is not None and not rec.completed and i + 1 < len(attempts) and rerun(a, attempts[i + 1]):
            # it ended (its record), and before the next launch the job's run ended and the scheduler requeued it
            b = attempts[i + 1]
            gap = (b.job_start - a.end_ts) if (b.job_start and a.end_ts) else None
            r.text += ("; before the next launch its job's run ended and the scheduler requeued the job"
                       + (f": the next run began {gap:.0f} s after it ended" if gap is not None else ""))
        if rec is None and first is not None and i + 1 < len(attempts):
            b = attempts[i + 1]
            if a.hang_ts:
                r.text += ("; then the watchdog decided to stop it (no progress for relaunch.hang_timeout), and "
                           "its job's run ended before the stop was done")
            if rerun(a, b):
                gap = (b.job_start - a.end_ts) if (b.job_start and a.end_ts) else None
                r.text += ("; then its job's run ended under it and the scheduler requeued the job"
                           + (f": the next run began {gap:.0f} s after its last sign of life" if gap is not None else ""))
            else:
                r.text += "; then cut short with its job (no record of its end: killed or requeued, or its node lost)"
        if lost_nodes and first is not None and not struck and not (rec and rec.completed):
            r.text += f"; then ended with its node ({', '.join(map(str, lost_nodes))} found bad at the next launch)"
        if gone:
            r = Restart(k, "lost", f"{gone}; then: {r.text}", r.resumed_from, r.expected)
        if last_step and first is not None and last is not None and last > last_step:
            # The program's own stop rule went past the run's last step (a resume at the final checkpoint
            # that trains on). That is a finding of its own, whatever else the attempt did.
            past = (f"{r.text}; then trained past the last step (step {last} of {last_step}"
                    f"{': it resumed at the final checkpoint' if (r.resumed_from or 0) >= last_step else ''})")
            r = Restart(k, r.outcome if r.finding else "past_last", past, r.resumed_from, r.expected)
        v.restarts.append(r)
        if r.finding:
            v.findings.append(f"attempt {k}: {r.text}")
    failed = [(a.number, s, e) for a in attempts for s, e in a.failed_saves]
    if failed:
        v.findings.append(failed_saves_text(failed))
    if not v.finished:
        v.findings.append("did not finish (no attempt reached the last step): "
                          + (ph.ended.text if ph.ended else "not started"))
    if base is not None:
        finding, v.baseline = compare(ph, base, tolerance)
        if finding:
            v.findings.append(v.baseline)
        v.findings.extend(resumed_state(ph, base, v.restarts))
    return v


def _left_baseline(ph: collect.PhaseData, base: collect.PhaseData) -> Optional[int]:
    """The first step at which the phase's loss differs from the baseline's (None: never)."""
    if ph.losses is None or base.losses is None:
        return None
    return next((s for s in sorted(set(ph.losses) & set(base.losses))
                 if ph.losses[s] != base.losses[s] and not (math.isnan(ph.losses[s]) and math.isnan(base.losses[s]))),
                None)


def resumed_state(ph: collect.PhaseData, base: collect.PhaseData, restarts: List[Restart]) -> List[str]:
    """Each resumed attempt's training state at its first step, against the baseline's (state_compare).

    The comparison goes on its Restart. The findings are each piece a resume did not restore.

    Once the phase has left the baseline, the baseline is no reference for a later resume. The phase
    leaves it when its loss differs at or before the checkpoint's step, or when an earlier resume's
    state did. That resume forgot something, or its state differed some steps after an exact resume,
    which the loss may not show. A warm rank with other threads than the baseline's did so. The
    reference is then the attempt that saved the checkpoint and ran past it. Its state as the next
    step began is what it saved.

    Returns nothing where neither the phase nor the baseline recorded any state: a program that never
    imports torch, or collection.state_every: 0."""
    by_number = {a.number: a for a in ph.attempts}
    base_state = base.attempts[0].state if base.attempts else {}
    if not base_state and not any(a.state for a in ph.attempts):
        return []
    # the phase's first run from step 0 that recorded its state (an attempt killed in start-up recorded none)
    first = next((a.state for a in ph.attempts if a.state and a.first_row is not None and not a.resumed_from), {})
    not_judged, matched = state_compare.repeatability(first, base_state) if first and base_state else ([], 0)
    left = _left_baseline(ph, base)
    offsets: Dict[Optional[int], int] = {}  # attempt number -> the step it resumed from (0: from the start)
    findings = []
    for r in restarts:
        offsets[r.attempt] = r.resumed_from or 0
        a = by_number.get(r.attempt)
        if a is None or not r.resumed_from or r.outcome in ("first", "fresh") or a.first_row is None:
            continue  # a start from step 0 restored nothing to compare
        if left is not None and left <= r.resumed_from:
            # An unnumbered attempt comes from a phase read from metrics files (report --sync FILES). It
            # has no saver to find. Its None once met None < None here, beside a baseline with state records.
            saver = None if r.attempt is None else next(
                (k for k in sorted((k for k in offsets if k is not None), reverse=True)
                 if k < r.attempt and by_number.get(k)
                 and by_number[k].last_iter > r.resumed_from and offsets[k] < r.resumed_from), None)
            if saver is None:
                why = (f"state not compared: the phase left the baseline at step {left}, before this resume's "
                       f"checkpoint, and no earlier attempt recorded step {r.resumed_from + 1}")
                r.state = RestartState(attempt=r.attempt, step=r.resumed_from + 1, note=why, text=why)  # as compare()'s
                continue
            rs = state_compare.compare(r.attempt, a.state, r.resumed_from, by_number[saver].state, not_judged,
                                       base_offset=offsets[saver],
                                       against=f"attempt {saver}'s, which saved it (the phase left the baseline "
                                               f"at step {left})")
        else:
            rs = state_compare.compare(r.attempt, a.state, r.resumed_from, base_state, not_judged, matched)
        r.state = rs.record()
        state_left = rs.differ_step if rs.forgot else (rs.later[0] if rs.later else None)
        if state_left is not None and (left is None or state_left < left):
            left = state_left
        if rs.forgot:
            findings.append(f"attempt {r.attempt}: {rs.finding()}")
    return findings


def failed_saves_text(failed) -> str:
    """[(attempt, step, error)] of the saves that failed: what the training went on without."""
    steps = [s for _, s, _ in failed]
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {', '.join(map(str, steps[:6]))}" + (
        ", ..." if len(steps) > 6 else "")
    return (f"{len(failed)} save(s) failed ({span}; the first: {failed[0][2] or 'no reason given'}): the training went "
            f"on without them (the trainer's --on-save-error continue), and a failure meanwhile would have "
            f"resumed from the checkpoint before")


def markdown(verdicts: List[SurvivalVerdict]) -> List[str]:
    """The report's first section, from each phase's verdict."""
    L = ["## Did it survive?", ""]
    for v in verdicts:
        stopped = sum(1 for r in v.restarts if "the watchdog stopped it" in r.text)
        head = (("survived" + (f" ({stopped} attempt(s) stopped by the watchdog)" if stopped else ""))
                if v.survived else f"**{len(v.findings)} finding(s)**")
        L.append(f"- **{v.phase}**: {'finished' if v.finished else 'did not finish'}; {head}"
                 + (f"; {v.baseline}" if v.baseline else ""))
        for r in v.restarts:
            L.append(f"  - attempt {r.attempt}: {r.text}" + (" **(finding)**" if r.finding else ""))
            if r.state:
                L.append(f"    - {r.state.text}" + (" **(finding)**" if r.state.forgot else ""))
        for f in v.findings:
            if not f.startswith("attempt "):
                L.append(f"  - **{f}**")
    return L + [""]
