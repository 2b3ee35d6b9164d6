"""What did the resume forget?

A resumed attempt's training state at its first step is set beside the baseline's at the same step,
piece by piece. The pieces (contracts/state_record.py) are the parameters, the optimizer's moments
and step count, the learning rate, the RNG streams, the batch and the scaler.

At the resume's first step s (the checkpoint's step + 1), every piece of an exact resume equals the
baseline's. The state step s starts from is the one the checkpoint of step s-1 carried. The batch
and learning rate are those step s uses. A piece that differs there is what the checkpoint (or the
program's load) forgot.

A piece may also differ between the phase's first attempt (no restart yet) and the baseline. Then it
is not the resume's doing: the run does not repeat itself in it (unseeded, nondeterministic kernels).
It is named so, not judged. A piece may be equal at the resume and differ at a later step, while
every piece was equal at the resume. That is nondeterminism after an exact resume, not a resume bug.

Steps are numbered from the records: an attempt's k-th optimizer step is step resumed_from + k. This
assumes one optimizer step per training step. A gradient scaler that skips a step shifts the rest.
Pure: the collector has read the records (collect.AttemptData.state)."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, cast

from ..contracts import restart_state as RS
from ..contracts import state_record as SR

Records = Dict[int, List[SR.StateRecord]]  # {rank: its records}


WINDOW = 1  # A piece the load left out shows at the resume's step or the next. A scheduler's position
#            is used by its first step() after the resume, at the end of the resume's first step.


@dataclass
class ResumeState:
    attempt: Optional[int]                            # None: an unnumbered attempt (survival.Restart.attempt)
    step: int                                         # the resume's first step
    equal: List[str] = field(default_factory=list)    # at the resume's first step
    differ: Dict[str, Tuple[object, object]] = field(default_factory=dict)  # piece -> (this attempt's, baseline's)
    differ_step: Optional[int] = None                 # where they first differ (step or step + WINDOW)
    differ_on: Dict[str, List[int]] = field(default_factory=dict)  # piece -> the ranks on which it differs
    not_observed: List[str] = field(default_factory=list)
    unrepeatable: List[str] = field(default_factory=list)
    later: Optional[Tuple[int, List[str]]] = None     # equal through the window; (step, pieces) first differing after
    matches: Dict[str, int] = field(default_factory=dict)  # piece -> the one reference step whose value it has
    epochs: Dict[str, Tuple[int, int, int]] = field(default_factory=dict)  # piece -> (epochs off: + ahead, - behind;
    #                                                 the batch's number in its epoch; batches an epoch) where a match is one
    restored: Dict[str, Tuple[int, str]] = field(default_factory=dict)  # piece -> (the reference step whose value
    #                                                 the load gave it, the load): restored, then changed
    several: Dict[str, List[int]] = field(default_factory=dict)  # piece -> the reference steps that all have
    #                                                 its wrong value (a plateau): where it came from cannot be told
    loaded_other: Dict[str, Tuple[str, Optional[int]]] = field(default_factory=dict)  # piece -> (the load, the
    #                                                 one reference step whose value it set, if any). The program
    #                                                 loaded it, but not the value the run had at the save.
    first_matched: int = 0                            # steps at which the phase's first attempt equalled the baseline
    ranks: int = 0                                    # ranks compared
    note: Optional[str] = None                        # why nothing could be compared
    against: str = "the baseline's"                   # the reference: the baseline, or the attempt that saved
    across: Optional[Tuple[int, int]] = None          # (the reference's ranks, this attempt's) where they differ
    incomparable: Dict[str, str] = field(default_factory=dict)  # piece -> why it cannot be compared across
    threads: Optional[Tuple[List[int], List[int]]] = None  # torch's intra-op threads per rank (this attempt's
    #                                                 counts, the reference's) where they differ at the resume

    @property
    def forgot(self) -> List[str]:
        return [k for k in SR.KEYS if k in self.differ]

    @property
    def disturbed(self) -> List[str]:
        """The differing pieces the load did restore (their value right after it was the reference's):
        something changed them between the load and the first step."""
        return [k for k in self.forgot if k in self.restored]

    def finding(self) -> str:
        """The resume's finding in one clause: what it did not restore, and what it restored that then changed."""
        def names(keys):
            return ", ".join(SR.WORDS[k] + self.where(k) for k in keys)
        parts = []
        lost = [k for k in self.forgot if k not in self.restored and k not in self.loaded_other]
        if lost:
            parts.append("did not restore " + names(lost))
        other = [k for k in self.forgot if k in self.loaded_other]
        if other:
            parts.append(f"loaded {names(other)}, but not to the value of the checkpoint's step")
        if self.disturbed:
            parts.append(f"restored {names(self.disturbed)}, then something changed "
                         f"{'them' if len(self.disturbed) > 1 or SR.PLURAL[self.disturbed[0]] else 'it'} before that step")
        return (f"the resume at step {self.step} " + "; ".join(parts)
                + ("" if self.differ_step == self.step else f" (they differ from step {self.differ_step})"))

    def record(self) -> RS.RestartState:
        """As the summary carries it (contracts/restart_state)."""
        return RS.RestartState(
            attempt=self.attempt, step=self.step, equal=self.equal, forgot=self.forgot, differ_step=self.differ_step,
            differ={k: RS.PieceDiffer(a, b, self.differ_on.get(k, [])) for k, (a, b) in self.differ.items()},
            not_observed=self.not_observed, unrepeatable=self.unrepeatable,
            later=None if self.later is None else RS.LaterDiffer(self.later[0], self.later[1]),
            first_matched=self.first_matched, ranks=self.ranks, note=self.note, against=self.against,
            matches=self.matches, restored={k: RS.Restored(m, what) for k, (m, what) in self.restored.items()},
            disturbed=self.disturbed, several=self.several,
            loaded_other={k: RS.LoadedOther(what, m) for k, (what, m) in self.loaded_other.items()},
            epochs={k: RS.EpochsOff(n, b, per) for k, (n, b, per) in self.epochs.items()},
            across=None if self.across is None else list(self.across), incomparable=self.incomparable,
            threads=None if self.threads is None else RS.Threads(*self.threads), text=self.text())

    def _meaning(self, k: str) -> str:
        if k in self.restored:
            return self._changed(k)
        if k == "lr" and "opt_state" in self.differ and "opt_state" not in self.loaded_other:
            return "the optimizer's state, whose param groups carry it, was not loaded"
        if k in self.loaded_other:
            return self._loaded_other(k)
        if self.across and k in ACROSS:
            mine, theirs = cast(Tuple[list, list], self.differ[k])  # a whole batch: [sum, samples]
            return ACROSS[k].format(before=self.across[0], after=self.across[1], against=self.against,
                                    n=mine[1], m=theirs[1])
        if k == "lr" and "opt_state" in self.differ:  # the optimizer's param groups carry the rate
            return "the optimizer's state, whose param groups carry it, was not loaded"
        if self._position(k) is None and k in self.several:  # the same value at several steps: no more said
            return (f"{SR.MEANING[k]}, or restored to another step's value ({self.against.replace(chr(39) + 's', '')} "
                    f"had this one at steps "
                    f"{spans(self.several[k])}: which of them cannot be told)")
        return self._position(k) or SR.MEANING[k]  # no match, or the value of the run's start: not restored

    def threads_text(self) -> str:
        """The thread counts, where this attempt's differ from the reference's: why its numbers cannot
        follow the reference's bit for bit, whatever the checkpoint restored."""
        assert self.threads is not None  # asked only where they differ
        mine, theirs = (" or ".join(map(str, v)) for v in self.threads)
        return (f"torch ran {mine} intra-op thread(s) a rank where {self.against.replace(chr(39) + 's', '')} ran "
                f"{theirs} (torch.get_num_threads(): OMP_NUM_THREADS, or torch.set_num_threads): the same sums "
                f"are added in another order, so from this step on its numbers can leave {self.against} in the "
                f"last bits")

    def _position(self, k: str) -> Optional[str]:
        """Where the reference had the piece's wrong value, in words.

        It says whole epochs off, ahead or behind. None where at no step, several, or the run's start."""
        if k in self.epochs:
            n, pos, per = self.epochs[k]
            way = "earlier" if n < 0 else "later"
            what = ("the epoch was set back, the position within it kept" if n < 0 else
                    "a whole epoch was skipped" if n == 1 else f"{n} whole epochs were skipped")
            return f"the same place in its epoch (batch {pos} of {per}), {abs(n)} epoch{'s' if abs(n) > 1 else ''} {way}: {what}"
        m = self.matches.get(k)
        at = cast(int, self.differ_step)  # set wherever a match is (compare records both at once)
        if m is not None and m > at:
            return self._off(k, AHEAD, m - at, "ahead")
        if m is not None and m > 1 + (at - self.step):  # an older position than the run's start
            return self._off(k, BEHIND, at - m, "behind")
        return None

    def _changed(self, k: str) -> str:
        """A piece the load restored that differs at the first step.

        It says what the load gave it, then what it became, as far as the records say."""
        m, what = self.restored[k]
        head = (f"{what} restored it (right after the call it equalled {self.against} at step {m}, as the "
                f"checkpoint of step {self.step - 1} left it), then it changed before step {self.step}")
        tail = self._position(k)
        if tail is None and self.matches.get(k) is not None:
            tail = "it is back at its value at the run's start"
        return f"{head}: {tail or DISTURBED.get(k, DISTURBED[None])}"

    def _loaded_other(self, k: str) -> str:
        """A piece the program did load, to a value that is not the reference's record of the checkpoint's step.

        The checkpoint holds it as of another moment, or the load read another value. Where the value is
        the reference's at one other step, it says which."""
        what, m = self.loaded_other[k]
        head = f"{what} set it, but not to its value in {self.against} record of step {self.step - 1}"
        if m is not None:
            return (f"{head}: to its value at step {m} (the checkpoint holds this piece as of step {m}, or the load "
                    f"read it from another checkpoint)")
        return (f"{head}, nor to its value at any step recorded: the save took it at another moment than the "
                f"step's record (before or after draws made between them), or the load read another value")

    @staticmethod
    def _off(k: str, words: Dict[str, str], n: int, way: str) -> str:
        """A piece n steps ahead of or behind the reference, in its own words (AHEAD, BEHIND) or the plain ones."""
        return words.get(k, "{words} {verb} {n} " + way).format(
            n=f"{n} step{'s' if n > 1 else ''}", words=SR.WORDS[k], verb="are" if SR.PLURAL[k] else "is")

    def where(self, k: str) -> str:
        """' on rank 1 of 2' where a piece differs on some of the ranks compared, not all.

        That happens where the checkpoint lacked one rank's file. Returns '' where it differs on all of them."""
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
            m = self.matches.get(k)
            same = f"{self.against} at step {m}" if m is not None else ""
            shown = f" ({SR.describe(k, mine)} against {SR.describe(k, theirs)}{'; ' + same if same else ''})" \
                if k in ("lr", "opt_step", "scale") else (f" ({same})" if same else "")
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
        for why in dict.fromkeys(self.incomparable.values()):
            parts.append("not comparable across the change: " + ", ".join(
                SR.WORDS[k] for k in self.incomparable if self.incomparable[k] == why) + f" ({why})")
        head = f"state at the resume (step {self.step}) against {self.against}"
        if self.across:
            head += (f", across a change from {self.across[0]} ranks to {self.across[1]} (compared whole: the "
                     f"parameters and optimizer moments by each element's place in the whole tensor, the batch as "
                     f"the samples of all ranks, a batch several ranks took counted once)")
        if self.threads:
            parts.append(self.threads_text())
        text = f"{head}: " + "; ".join(p for p in parts if p)
        if self.later:
            s, pieces = self.later
            seen = (f"; the phase's first attempt equalled the baseline at all {self.first_matched} steps it recorded"
                    if self.first_matched else "")
            why = ("possibly the thread counts above (a CPU's sums in another order)"
                   if self.threads and set(pieces) <= {"params", "opt_state"} else
                   "nondeterminism after an exact resume, or state the resume left out that is used only later "
                   "(an epoch counter)")
            text += (f"; then {', '.join(SR.WORDS[k] for k in pieces)} first differ at step {s}, "
                     f"{s - self.step} steps after the resume: {why}{seen}")
        return text


# What a piece means when it has the reference's value of a later step (AHEAD), or of an earlier step
# that is not the run's start (BEHIND). In the words: "the scheduler is one step ahead".
AHEAD = {"lr": "the scheduler is {n} ahead of where the checkpoint left it",
         "opt_step": "the optimizer's step count is {n} ahead",
         "batch": "the data position is {n} ahead: batches were skipped"}
BEHIND = {"lr": "the scheduler is {n} behind the checkpoint's",
          "opt_step": "the optimizer's step count is {n} behind",
          "batch": "the data position is {n} behind: batches are seen again"}


# a whole piece that differs across a change in the number of ranks
ACROSS = {"batch": "the samples of all ranks at this step ({n}) are not {against} ({m}): the data position did not "
                   "follow the change from {before} ranks to {after}"}
PER_RANK_WHY = "one stream per rank: each rank's is its own"
PLAIN_WHY = "plain tensors that differ between ranks: each rank holds its own, not a copy of one"
PADDED_WHY = ("samples of more than one width (padded to the longest in each batch?): split otherwise among the "
              "ranks, the same samples are padded otherwise")


def _whole(recs: Dict[int, Dict[int, SR.StateRecord]], s: int, k: str):
    """Piece k at step s over all the ranks, as one value.

    Returns None where not observed: a rank without the step's record, or without the piece. Returns
    "per rank" where it cannot be one value."""
    got = [recs[r].get(s) for r in sorted(recs)]
    if not got or any(r is None for r in got):
        return None
    at = cast(List[SR.StateRecord], got)  # none of them None
    if k in ("params", "opt_state"):
        return SR.whole_tensors([r.params_g if k == "params" else r.opt_g for r in at])
    if k == "batch":
        taken: Dict[tuple, int] = {}  # each batch of the step -> the most times one rank took it
        for rank in sorted(recs):
            held = recs[rank][s].batch_g
            if held is None:
                return None
            nxt = recs[rank].get(s + 1)
            nxt_held = nxt.batch_g if nxt is not None else None
            # a step's own batches: as many as the next step took (a resume's skip left out)
            keep = len(nxt_held) if nxt_held is not None else len(held)
            mine: Dict[tuple, int] = {}
            for part in held[max(0, len(held) - keep):] if keep else []:
                key = (part[0], part[1], part[2] if len(part) > 2 else None)
                mine[key] = mine.get(key, 0) + 1
            for key, times in mine.items():  # a batch several ranks took whole (the ranks of a
                taken[key] = max(taken.get(key, 0), times)  # tensor-parallel group) counts once
        if not taken:
            return None
        parts = [key for key, times in taken.items() for _ in range(times)]
        return [SR.add32(p[0] for p in parts), sum(p[1] for p in parts), sorted({p[2] for p in parts}, key=str)]
    if any(r.pieces.get(k) is None for r in at):
        return None
    return at[0].pieces.get(k) if len({repr(r.pieces.get(k)) for r in at}) == 1 else "per rank"


def _across(rs: ResumeState, mine, theirs, step: int, judged: List[str]) -> ResumeState:
    """A resume onto another number of ranks.

    Each piece is compared whole (_whole) at the resume's first step. That is what the checkpoint
    restored, before any update under the new layout. The learning rate, step count and scale are
    compared at the next step too. The per-rank RNG streams are said to be not comparable."""
    rs.across, rs.ranks = (len(theirs), len(mine)), len(mine)
    keys = ("params", "opt_state", "batch") + SR.SAME_ON_ALL
    for k in SR.PER_RANK:
        if any(r.pieces.get(k) is not None for recs in (mine, theirs) for r in recs[min(recs)].values()):
            rs.incomparable[k] = PER_RANK_WHY
        else:
            rs.not_observed.append(k)
    for s in (step, step + WINDOW):
        differ = {}
        for k in keys:
            if k in rs.incomparable or k in rs.not_observed or k in rs.unrepeatable:
                continue
            if s != step and k not in SR.SAME_ON_ALL:  # after an update under another layout the sums are
                continue                               # reduced in another order: not bit-equal, and no bug
            a, b = _whole(mine, s, k), _whole(theirs, s, k)
            if a is None or b is None or (k in ("params", "opt_state") and (a[0] is None) != (b[0] is None)):
                if s == step:
                    rs.not_observed.append(k)
                continue
            if "per rank" in (a, b) or (isinstance(a, list) and "per rank" in a + b):
                rs.incomparable[k] = PLAIN_WHY if k in ("params", "opt_state") else "it differs between ranks"
                continue
            if k == "batch":  # [sum, samples, widths]: one width on both sides, else padding decided the rows
                if len(a[2]) != 1 or a[2] != b[2]:
                    rs.incomparable[k] = PADDED_WHY
                    continue
                a, b = a[:2], b[:2]
            if k not in judged:  # it differs before any restart: the run does not repeat itself in it
                rs.unrepeatable.append(k)
            elif a != b:
                differ[k] = (a, b)
            elif s == step:
                rs.equal.append(k)
        if differ:
            rs.differ, rs.differ_step = differ, s
            rs.equal = [k for k in rs.equal if k not in differ]
            break
    return rs


# what changed a restored piece before the first step, where its value matches no reference step
_DREW = ("something drew from it between the load and the first step, beyond what the run compared drew there "
         "(an object made after the restore draws from it: a DataLoader's iterator, a model's initialisation)")
DISTURBED = {"rng_torch": _DREW, "rng_python": _DREW, "rng_numpy": _DREW, "rng_device": _DREW,
             None: "something changed it between the load and the first step"}


# The loads that write a piece, where not every load that records it does. A scheduler's
# load_state_dict records the param groups' rate as it finds them, but does not set it.
SETS = {"lr": ("Optimizer.load_state_dict",)}


def _restored(k: str, value, ref: Dict[int, SR.StateRecord], resumed_from: int) -> Optional[int]:
    """The reference step whose piece k the load's value equals, or None where neither step does.

    A checkpoint taken after step r holds pieces of two steps. The RNG streams are those of step r: a
    record is taken after its step's forward and backward drew. The optimizer's state and learning rate
    are those of step r + 1, as step r left them."""
    for s in (resumed_from + 1, resumed_from):
        r = ref.get(s)
        if r is not None and value is not None and r.pieces.get(k) == value:
            return s
    return None


def _epochs_off(mine: Dict[int, SR.StateRecord], ref: Dict[int, SR.StateRecord], s: int, m: int):
    """(whole epochs from step s to step m, the batch's number in its epoch, batches an epoch), or None.

    Three batches must be at one place in epochs of one length: this attempt's at s, the reference's
    at s and the reference's at m (whose batch it is). And m - s must be a whole number of those
    epochs. Elsewhere it returns None."""
    at = [(mine.get(s), s), (ref.get(s), s), (ref.get(m), m)]
    pos = [r.batch_pos if r is not None else None for r, _ in at]
    if any(p is None for p in pos) or pos[0] != pos[1] or pos[1] != pos[2]:
        return None
    per = cast(list, pos[0])[1]
    # Batches a step (gradient accumulation). This is the reference's count between step s and a
    # neighbour in the same epoch: the step before, or at an epoch's start the step after.
    each = 0
    for a, b in ((s - 1, s), (s, s + 1)):
        pa, pb = (ref[x].batch_pos if ref.get(x) is not None else None for x in (a, b))
        if pa is not None and pb is not None and pa[1] == pb[1] == per \
                and pb[0] > pa[0]:
            each = pb[0] - pa[0]
            break
    if not per or each <= 0 or per % each or (m - s) % (per // each):
        return None
    return (m - s) // (per // each), cast(list, pos[0])[0], per


def _hits(k: str, value, ref: Dict[int, SR.StateRecord], step: Optional[int]) -> List[int]:
    """The steps of the reference's records (one rank's), but `step`, whose piece k has `value`."""
    return sorted(s for s, r in ref.items() if s != step and r.pieces.get(k) == value)


def _match(k: str, value, ref: Dict[int, SR.StateRecord], step: Optional[int]) -> Optional[int]:
    """The one step of the reference's records (one rank's) whose piece k has `value`.

    None where no step has it, or more than one. Then the value says nothing of where it came from."""
    hits = _hits(k, value, ref, step)
    return hits[0] if len(hits) == 1 else None


def spans(steps: List[int]) -> str:
    """Sorted steps as runs: [3, 4, 5, 9] -> '3-5, 9'."""
    out: List[str] = []
    for s in steps:
        if out and int(out[-1].split("-")[-1]) == s - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def _at(records: Records, offset: int) -> Dict[int, Dict[int, SR.StateRecord]]:
    """{rank: {global step: record}} of optimizer 0."""
    return {rank: SR.by_step(recs, offset) for rank, recs in records.items()}


def _differing(mine: Dict[int, Dict[int, SR.StateRecord]], base: Dict[int, Dict[int, SR.StateRecord]],
               step: int, keys, on: Optional[Dict[str, List[int]]] = None) -> Tuple[Dict[str, Tuple[object, object]],
                                                                                  List[str], List[str]]:
    """(differ, equal, not observed) at `step`.

    `differ` is {piece: (mine, baseline's)} on the first rank that differs. `on`, when given, gets
    {piece: the ranks on which it differs}."""
    differ, equal, unseen = {}, [], []
    for k in keys:
        seen_any, off = False, None
        for rank in sorted(set(mine) & set(base)):
            a, b = mine[rank].get(step), base[rank].get(step)
            if a is None or b is None:
                continue
            va, vb = a.pieces.get(k), b.pieces.get(k)
            if va is None or vb is None or _weighted(va) != _weighted(vb):  # another probe's fingerprint: not compared
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


def _weighted(v) -> bool:
    """A sharded tensor's fingerprint as this probe takes it: the weighted sum, "w...".

    An older probe's crc of the same shard is not one. That happens with a baseline reused from a run
    recorded before. The two do not compare."""
    return isinstance(v, str) and v.startswith("w")


def _threads(mine, theirs, step: int) -> Optional[Tuple[List[int], List[int]]]:
    """(this attempt's thread counts, the reference's) at the resume's first step, where they differ.

    They differ where any rank's count differs from the reference's same rank. Across a change in rank
    count, they differ where the sets differ. None where equal or not recorded (a probe older than the
    count)."""
    def counts(recs):
        return {r: recs[r][step].threads for r in recs if step in recs[r]}
    a, b = counts(mine), counts(theirs)
    if None in a.values() or None in b.values() or not a or not b:
        return None
    same_ranks = set(a) == set(b)
    if (same_ranks and all(a[r] == b[r] for r in a)) or (not same_ranks and set(a.values()) == set(b.values())):
        return None
    return sorted(set(a.values())), sorted(set(b.values()))


def _common_steps(mine, theirs, after: int = 0) -> List[int]:
    return sorted({s for r in set(mine) & set(theirs) for s in set(mine[r]) & set(theirs[r]) if s >= after})


def repeatability(first: Records, base: Records) -> Tuple[List[str], int]:
    """The phase's first attempt (from step 0, no restart yet) against the baseline.

    Returns (the pieces that differ at the first step where any does, the steps compared where all
    equalled). The run does not repeat itself in those pieces."""
    mine, theirs = _at(first, 0), _at(base, 0)
    matched = 0
    for s in _common_steps(mine, theirs):
        differ, _, _ = _differing(mine, theirs, s, SR.KEYS)
        if differ:
            return list(differ), matched
        matched += 1
    return [], matched


def compare(attempt: Optional[int], records: Records, resumed_from: int, base: Records,
            not_judged: Sequence[str] = (), first_matched: int = 0, base_offset: int = 0,
            against: str = "the baseline's") -> ResumeState:
    """A resumed attempt's records against the baseline's, or against another attempt's.

    Against the baseline, `not_judged` is the unrepeatable pieces. `first_matched` is the steps at
    which the phase's first attempt equalled the baseline. Against another attempt, `base_offset` is
    the step it resumed from. `against` is its name in the verdict."""
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
    rs.threads = _threads(mine, theirs, step)
    if len(mine) != len(theirs):  # another number of ranks: compared whole
        return _across(rs, mine, theirs, step, judged)
    _, equal, unseen = _differing(mine, theirs, step, SR.KEYS)
    rs.unrepeatable = [k for k in SR.KEYS if k in not_judged and k not in unseen]
    rs.equal = [k for k in equal if k in judged]
    rs.not_observed = unseen
    for s in _common_steps(mine, theirs, step):
        on: Dict[str, List[int]] = {}
        differ, _, _ = _differing(mine, theirs, s, judged, on)
        if differ:
            if s <= step + WINDOW:
                rs.differ, rs.differ_step, rs.differ_on = differ, s, on
                rs.equal = [k for k in rs.equal if k not in differ]
                loads = {}  # rank -> what its loads set (SR.loaded), read once
                for k, (mine_v, _) in differ.items():  # where the wrong value is the reference's own
                    rank = on[k][0]
                    hits = _hits(k, mine_v, theirs[rank], s)
                    m = hits[0] if len(hits) == 1 else None
                    if len(hits) > 1:
                        rs.several[k] = hits
                    if m is not None:
                        rs.matches[k] = m
                        e = _epochs_off(mine[rank], theirs[rank], s, m) if k == "batch" else None
                        if e is not None:
                            rs.epochs[k] = e
                    if s == step and rank not in loads:
                        loads[rank] = SR.loaded(records[rank])
                    load = loads[rank].get(k) if s == step else None
                    at = None if load is None else _restored(k, load[0], theirs[rank], resumed_from)
                    if at is not None:  # restored, then changed before the first step
                        assert load is not None  # at is None without a load
                        rs.restored[k] = (at, load[1])
                    elif load is not None and load[1] in SETS.get(k, (load[1],)):  # loaded, to another value
                        rs.loaded_other[k] = (load[1], _match(k, load[0], theirs[rank], None))
            else:
                rs.later = (s, list(differ))
            break
    return rs
