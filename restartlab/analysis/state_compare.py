"""What did the resume forget? A resumed attempt's training state at its first step set beside the
baseline's at the same step, piece by piece (contracts/state_record.py: the parameters, the
optimizer's moments and step count, the learning rate, the RNG streams, the batch, the scaler).

At the resume's first step s (the checkpoint's step + 1) every piece of an exact resume equals the
baseline's: the state step s starts from is the one the checkpoint of step s-1 carried, and the
batch and learning rate are those step s uses. A piece that differs there is what the checkpoint
(or the program's load) forgot. A piece that also differs between the phase's first attempt (no
restart yet) and the baseline is not the resume's doing: the run does not repeat itself in it
(unseeded, nondeterministic kernels) and it is named so, not judged. A piece equal at the resume
that differs at a later step, while every piece was equal at the resume, is nondeterminism after
an exact resume, not a resume bug.

Steps are numbered from the records: an attempt's k-th optimizer step is step resumed_from + k
(one optimizer step per training step; a gradient scaler that skips a step shifts the rest).
Pure: the collector has read the records (collect.AttemptData.state)."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..contracts import state_record as SR

Records = Dict[int, List[SR.StateRecord]]  # {rank: its records}


WINDOW = 1  # a piece the load left out shows at the resume's step or the next (a scheduler's position
#            is used by its first step() after the resume, at the end of the resume's first step)


@dataclass
class ResumeState:
    attempt: int
    step: int                                         # the resume's first step
    equal: List[str] = field(default_factory=list)    # at the resume's first step
    differ: Dict[str, Tuple[object, object]] = field(default_factory=dict)  # piece -> (this attempt's, baseline's)
    differ_step: Optional[int] = None                 # where they first differ (step or step + WINDOW)
    differ_on: Dict[str, List[int]] = field(default_factory=dict)  # piece -> the ranks on which it differs
    not_observed: List[str] = field(default_factory=list)
    unrepeatable: List[str] = field(default_factory=list)
    later: Optional[Tuple[int, List[str]]] = None     # equal through the window; (step, pieces) first differing after
    first_matched: int = 0                            # steps at which the phase's first attempt equalled the baseline
    ranks: int = 0                                    # ranks compared
    note: Optional[str] = None                        # why nothing could be compared
    against: str = "the baseline's"                   # the reference: the baseline, or the attempt that saved

    @property
    def forgot(self) -> List[str]:
        return [k for k in SR.KEYS if k in self.differ]

    def as_dict(self) -> dict:
        return {"attempt": self.attempt, "step": self.step, "equal": self.equal, "forgot": self.forgot,
                "differ_step": self.differ_step,
                "differ": {k: {"attempt": a, "baseline": b, "ranks": self.differ_on.get(k, [])}
                           for k, (a, b) in self.differ.items()},
                "not_observed": self.not_observed, "unrepeatable": self.unrepeatable,
                "later": None if self.later is None else {"step": self.later[0], "pieces": self.later[1]},
                "first_matched": self.first_matched, "ranks": self.ranks, "note": self.note, "against": self.against,
                "text": self.text()}

    def _meaning(self, k: str) -> str:
        if k == "lr" and "opt_state" in self.differ:  # the optimizer's param groups carry the rate
            return "the optimizer's state, whose param groups carry it, was not loaded"
        return SR.MEANING[k]

    def where(self, k: str) -> str:
        """' on rank 1 of 2' where a piece differs on some of the ranks compared, not all (one rank's
        file the checkpoint lacked); '' where on all of them."""
        on = self.differ_on.get(k) or []
        if not on or len(on) >= self.ranks:
            return ""
        return f" on rank{'s' if len(on) > 1 else ''} {', '.join(map(str, on))} of {self.ranks}"

    def text(self) -> str:
        if self.note:
            return self.note
        parts = []
        for k in self.forgot:
            mine, theirs = self.differ[k]
            shown = f" ({SR.describe(k, mine)} against {SR.describe(k, theirs)})" if k in ("lr", "opt_step", "scale") else ""
            verb = "differ" if SR.PLURAL[k] else "differs"
            when = "" if self.differ_step == self.step else f" from step {self.differ_step}"
            parts.append(f"{SR.WORDS[k]} {verb}{self.where(k)}{when}{shown}: {self._meaning(k)}")
        if self.equal:
            parts.append(", ".join(SR.WORDS[k] for k in self.equal if k not in self.differ) + " equal")
        if self.unrepeatable:
            parts.append(", ".join(SR.WORDS[k] for k in self.unrepeatable) + " not judged (they differ from the "
                         "baseline's before any restart: the run does not repeat itself in them)")
        if self.not_observed:
            parts.append("not observed: " + ", ".join(SR.WORDS[k] for k in self.not_observed))
        text = f"state at the resume (step {self.step}) against {self.against}: " + "; ".join(p for p in parts if p)
        if self.later:
            s, pieces = self.later
            seen = (f"; the phase's first attempt equalled the baseline at all {self.first_matched} steps it recorded"
                    if self.first_matched else "")
            text += (f"; then {', '.join(SR.WORDS[k] for k in pieces)} first differ at step {s}, "
                     f"{s - self.step} steps after the resume: nondeterminism after an exact resume, or state "
                     f"the resume left out that is used only later (an epoch counter){seen}")
        return text


def _at(records: Records, offset: int) -> Dict[int, Dict[int, SR.StateRecord]]:
    """{rank: {global step: record}} of optimizer 0."""
    return {rank: SR.by_step(recs, offset) for rank, recs in records.items()}


def _differing(mine: Dict[int, Dict[int, SR.StateRecord]], base: Dict[int, Dict[int, SR.StateRecord]],
               step: int, keys, on: Optional[Dict[str, List[int]]] = None) -> Tuple[Dict[str, Tuple[object, object]],
                                                                                  List[str], List[str]]:
    """(differ {piece: (mine, baseline's) on the first rank that differs}, equal, not observed) at
    `step`; `on`, when given, gets {piece: the ranks on which it differs}."""
    differ, equal, unseen = {}, [], []
    for k in keys:
        seen_any, off = False, None
        for rank in sorted(set(mine) & set(base)):
            a, b = mine[rank].get(step), base[rank].get(step)
            if a is None or b is None:
                continue
            va, vb = a.pieces.get(k), b.pieces.get(k)
            if va is None or vb is None:
                continue
            seen_any = True
            if va != vb:
                off = off or (va, vb)
                if on is not None:
                    on.setdefault(k, []).append(rank)
        if off is not None:
            differ[k] = off
        elif seen_any:
            equal.append(k)
        else:
            unseen.append(k)
    return differ, equal, unseen


def _common_steps(mine, theirs, after: int = 0) -> List[int]:
    return sorted({s for r in set(mine) & set(theirs) for s in set(mine[r]) & set(theirs[r]) if s >= after})


def repeatability(first: Records, base: Records) -> Tuple[List[str], int]:
    """The phase's first attempt (from step 0, no restart yet) against the baseline: (the pieces
    that differ at the first step where any does: the run does not repeat itself in them; the
    steps compared where all equalled)."""
    mine, theirs = _at(first, 0), _at(base, 0)
    matched = 0
    for s in _common_steps(mine, theirs):
        differ, _, _ = _differing(mine, theirs, s, SR.KEYS)
        if differ:
            return list(differ), matched
        matched += 1
    return [], matched


def compare(attempt: int, records: Records, resumed_from: int, base: Records,
            not_judged: List[str] = (), first_matched: int = 0, base_offset: int = 0,
            against: str = "the baseline's") -> ResumeState:
    """A resumed attempt's records against the baseline's (`not_judged`: unrepeatable pieces;
    `first_matched`: the steps at which the phase's first attempt equalled the baseline), or against
    another attempt's (`base_offset`: the step it resumed from; `against`: its name in the verdict)."""
    step = resumed_from + 1
    rs = ResumeState(attempt, step, first_matched=first_matched, against=against)
    if not records:
        rs.note = ("state not observed: this attempt wrote no state records (no torch optimizer stepped in it, "
                   "or collection.state_every: 0)")
        return rs
    if not base:
        rs.note = f"state not compared: {against.replace(chr(39) + 's', '')} wrote no state records"
        return rs
    mine, theirs = _at(records, resumed_from), _at(base, base_offset)
    ranks = sorted(set(mine) & set(theirs))
    rs.ranks = len(ranks)
    if not ranks:
        rs.note = (f"state not compared: no rank in both (this attempt's {sorted(mine)}, the baseline's "
                   f"{sorted(theirs)})")
        return rs
    if not any(step in mine[r] and step in theirs[r] for r in ranks):
        rs.note = f"state not compared: step {step} is not in both records"
        return rs
    judged = [k for k in SR.KEYS if k not in not_judged]
    _, equal, unseen = _differing(mine, theirs, step, SR.KEYS)
    rs.unrepeatable = [k for k in SR.KEYS if k in not_judged and k not in unseen]
    rs.equal = [k for k in equal if k in judged]
    rs.not_observed = unseen
    for s in _common_steps(mine, theirs, step):
        on = {}
        differ, _, _ = _differing(mine, theirs, s, judged, on)
        if differ:
            if s <= step + WINDOW:
                rs.differ, rs.differ_step, rs.differ_on = differ, s, on
                rs.equal = [k for k in rs.equal if k not in differ]
            else:
                rs.later = (s, list(differ))
            break
    return rs
