"""What did the resume forget? (#52) Training-state fingerprints from a PyTorch program restartlab
never changed (trainer/state_probe.py, reached through runtime/linebuf/sitecustomize.py), and the
verdict that sets a resumed attempt's state beside the baseline's piece by piece
(analysis/state_compare.py).

The end-to-end test runs examples/forgetful/train.py through `restartlab run`: one phase per piece
the program leaves out of its load on purpose, and one that leaves out nothing; each verdict must
name exactly its piece."""
import json
import os
import subprocess
import sys

import pytest

from restartlab.analysis import state_compare
from restartlab.contracts import layout
from restartlab.contracts import restart_state as RS
from restartlab.contracts import state_record as SR
from restartlab.runtime import pystdio
from tests.helpers import cleanup_tag, job_tag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
FORGETFUL = os.path.join(ROOT, "scenarios", "examples", "forgetful.yaml")

# each phase of the scenario: the pieces its verdict must name (and nothing else)
EXPECTED = {
    "exact": set(),
    "scheduler": {"lr"},                              # at the step after the resume: the optimizer carried
    "rng": {"rng_python", "rng_numpy", "rng_torch"},  # the first step's rate, the scheduler the next one's
    "sampler": {"batch"},
    "optimizer": {"opt_state", "opt_step", "lr"},     # its param groups carry the learning rate
    "step": {"opt_step"},
    "sched_ahead": {"lr"},
    "epoch": {"batch"},
    "rng_draw": {"rng_torch"},
    "epoch_skip": {"batch"},
    "rng_saved_late": {"rng_torch"},
}
# the phases whose piece the load restored and something then changed before the first step (#63.1)
DISTURBED = {"step", "sched_ahead", "rng_draw"}
# the phases whose wrong value is the baseline's at another step: the words that say so (#63.2)
CAUSES = {
    "sched_ahead": "(0.0122851 against 0.012665; the baseline's at step 17): LRScheduler.load_state_dict restored it "
                   "(right after the call it equalled the baseline's at step 16, as the checkpoint of step 15 left "
                   "it), then it changed before step 16: the scheduler is 1 step ahead of where the checkpoint left it",
    "epoch": "the batch differs (the baseline's at step 4): the same place in its epoch (batch 4 of 12), 1 epoch "
             "earlier: the epoch was set back, the position within it kept",
    "epoch_skip": "the batch differs (the baseline's at step 25): the same place in its epoch (batch 1 of 12), 1 epoch "
                  "later: a whole epoch was skipped",
    "step": "(0 against 15; the baseline's at step 1): Optimizer.load_state_dict restored it (right after the call it "
            "equalled the baseline's at step 16, as the checkpoint of step 15 left it), then it changed before step "
            "16: it is back at its value at the run's start",
    "rng": "torch's CPU RNG differs (the baseline's at step 1): torch's random state was not restored",
    "rng_draw": "torch's CPU RNG differs: torch.set_rng_state restored it (right after the call it equalled the "
                "baseline's at step 15, as the checkpoint of step 15 left it), then it changed before step 16: "
                "something drew from it between the load and the first step, beyond what the run compared drew there",
    "rng_saved_late": "torch's CPU RNG differs: torch.set_rng_state set it, but not to its value in the baseline's "
                      "record of step 15, nor to its value at any step recorded: the save took it at another moment "
                      "than the step's record",
    "sampler": "the batch differs (the baseline's at step 13): the data position is 3 steps behind: batches are seen again",
}


def _rec(step, opt=0, **pieces):
    base = {k: "0" for k in SR.KEYS}
    base.update({"lr": [0.1], "scale": None, "rng_device": None})
    base.update(pieces)
    return SR.StateRecord(step, opt, 0.0, base)


def _run(n, offset=0, change=None):
    """Records of steps offset+1..offset+n ({rank 0: [...]}) with `change(step) -> {piece: value}`."""
    return {0: [_rec(k, **{"opt_step": float(offset + k - 1), **(change(offset + k) if change else {})})
                for k in range(1, n + 1)]}


# ------------------------------------------------------------------ the comparison (pure)
def test_an_exact_resume_is_clean_and_a_forgotten_piece_is_named_with_its_values():
    base = _run(30, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1)})
    exact = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1)})
    rs = state_compare.compare(2, exact, 10, base)
    assert rs.forgot == [] and rs.later is None and rs.step == 11
    assert "rng_device" in rs.not_observed and "scale" in rs.not_observed and "params" in rs.equal
    stale = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "opt_step": float(s - 11)})
    rs = state_compare.compare(2, stale, 10, base)
    assert rs.forgot == ["opt_step"] and rs.differ_step == 11
    # the count it has is the baseline's at step 1: the start, so "not restored"
    assert "optimizer step count differs (0 against 10; the baseline's at step 1): the optimizer's step count " \
        "was not restored (Adam's bias correction restarts)" in rs.text(), rs.text()


def test_a_wrong_value_is_set_beside_the_baseline_s_other_steps():
    """#63.2: the wrong value can be the baseline's own at another step.

    Then the verdict says which step, and what that means, from that comparison alone:
    - a learning rate one step ahead: the scheduler was restored, then stepped once more;
    - a batch of 8 steps before: the sampler's epoch was reset mid-epoch;
    - a step count behind.

    For a value the baseline has at no step, it says nothing more than "not restored". For a value
    it has at several steps (a plateau of the schedule), it also names those steps and says which
    cannot be told."""
    def run(n, offset=0, lr=lambda s: s, batch=lambda s: s, opt=lambda s: s - 1):
        return _run(n, offset, change=lambda s: {"lr": [0.1 * 0.9 ** lr(s)], "batch": f"b{batch(s)}",
                                                 "opt_step": float(opt(s))})
    base = run(30)
    rs = state_compare.compare(2, run(20, 10, lr=lambda s: s + 1), 10, base)
    assert rs.forgot == ["lr"] and rs.matches == {"lr": 12}, rs
    assert "learning rate differs (0.028243 against 0.0313811; the baseline's at step 12): the scheduler is 1 step " \
        "ahead of where the checkpoint left it" in rs.text(), rs.text()
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: s - 8), 10, base)
    assert rs.matches == {"batch": 3} and "the batch differs (the baseline's at step 3): the data position is 8 " \
        "steps behind: batches are seen again" in rs.text(), rs.text()
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: s + 2), 10, base)
    assert "the data position is 2 steps ahead: batches were skipped" in rs.text(), rs.text()
    rs = state_compare.compare(2, run(20, 10, opt=lambda s: s - 4), 10, base)
    assert "(7 against 10; the baseline's at step 8): the optimizer's step count is 3 steps behind" in rs.text()
    # A batch the baseline saw at two steps, and one it never saw: no match, "not restored". The first
    # also gets the steps that all had it (which of them cannot be told).
    twice = run(30, batch=lambda s: s if s != 20 else 3)
    for mine in (run(20, 10, batch=lambda s: 3 if s == 11 else s), run(20, 10, batch=lambda s: s + 100)):
        rs = state_compare.compare(2, mine, 10, twice)
        assert rs.forgot == ["batch"] and rs.matches == {} and "the data position was not restored" in rs.text()
    assert rs.several == {} and "cannot be told" not in rs.text()
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: 3 if s == 11 else s), 10, twice)
    assert rs.several == {"batch": [3, 20]} and "the data position was not restored, or restored to another step's " \
        "value (the baseline had this one at steps 3, 20: which of them cannot be told)" in rs.text(), rs.text()
    # a plateau of the schedule (a warm-up's hold at steps 4-8): the rate of those steps, which cannot be told
    hold = run(30, lr=lambda s: 4 if 4 <= s <= 8 else s)
    rs = state_compare.compare(2, run(20, 10, lr=lambda s: 4 if s == 11 else s), 10, hold)
    assert rs.several == {"lr": [4, 5, 6, 7, 8]} and "(the baseline had this one at steps 4-8: which of them " \
        "cannot be told)" in rs.text(), rs.text()
    assert state_compare.spans([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"


def test_a_batch_a_whole_number_of_epochs_off_is_said_in_epochs():
    """#63.2: a batch a whole number of epochs off is said in epochs.

    This applies where the batch is the baseline's of another step, at the same place in an epoch of
    the same length, and the steps between are whole epochs. The place is batch_pos: the DataLoader
    iterator's count and length. The verdict then says the epochs were set back (the epoch reset,
    the position kept) or skipped. Without the positions, or at another place in its epoch, it says
    steps as before."""
    def run(n, offset=0, batch=lambda s: s, per=6):
        return _run(n, offset, change=lambda s: {"batch": f"b{batch(s)}", "batch_pos": [(batch(s) - 1) % per + 1, per]})
    base = run(30)
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: s - 6), 10, base)
    assert rs.epochs == {"batch": (-1, 5, 6)} and "the batch differs (the baseline's at step 5): the same place in its " \
        "epoch (batch 5 of 6), 1 epoch earlier: the epoch was set back, the position within it kept" in rs.text(), rs.text()
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: s + 12), 10, base)
    assert "the same place in its epoch (batch 5 of 6), 2 epochs later: 2 whole epochs were skipped" in rs.text()
    rs = state_compare.compare(2, run(20, 10, batch=lambda s: s - 4), 10, base)  # not a whole epoch
    assert rs.epochs == {} and "the data position is 4 steps behind" in rs.text(), rs.text()
    rs = state_compare.compare(2, _run(20, 10, change=lambda s: {"batch": f"b{s - 6}"}), 10, run(30))  # no positions
    assert rs.epochs == {} and "the data position is 6 steps behind" in rs.text(), rs.text()

    def accum(n, offset=0, batch=lambda s: s):  # 2 micro-batches a step, 12 batches (6 steps) an epoch
        return _run(n, offset, change=lambda s: {"batch": f"b{batch(s)}", "batch_pos": [2 * ((batch(s) - 1) % 6) + 2, 12]})
    rs = state_compare.compare(2, accum(20, 10, batch=lambda s: s - 6), 10, accum(30))
    assert rs.epochs == {"batch": (-1, 10, 12)} and "(batch 10 of 12), 1 epoch earlier" in rs.text(), rs.text()
    # a resume at an epoch's start (the step before is the last of the epoch before): counted from the step after
    rs = state_compare.compare(2, accum(20, 12, batch=lambda s: s + 6), 12, accum(40))
    assert rs.epochs == {"batch": (1, 2, 12)} and "(batch 2 of 12), 1 epoch later: a whole epoch was skipped" \
        in rs.text(), rs.text()


def _load(what, step=0, opt=0, **pieces):
    return SR.StateRecord(step, opt, 0.0, {k: pieces.get(k) for k in SR.KEYS}, what)


def test_restored_then_changed_is_told_from_not_restored_by_the_value_right_after_the_load():
    """#63.1: the probe's load records are set beside the reference's at the checkpoint's step.

    A load record holds the value each piece had right after the program's load. A piece restored
    there and different at the first step reads "restored, then changed":
    - an RNG: something drew from it;
    - the step count: back at its start;
    - the scheduler stepped after its load: ahead.

    No load at all reads "not restored" as before. A load after the first step is no resume's load.
    A load whose value is not the run's at the save reads "loaded, but not the run's value at the
    save": the checkpoint held it as of another moment."""
    base = _run(30, change=lambda s: {"rng_torch": f"t{s}", "lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1)})

    def resumed(loads, change):
        recs = _run(20, 10, change=lambda s: {"rng_torch": f"t{s}", "lr": [0.1 * 0.9 ** s], "opt_step": float(s - 1),
                                              **change(s)})
        return {0: loads + recs[0]}
    drew = lambda s: {"rng_torch": f"x{s}"}  # noqa: E731
    rs = state_compare.compare(2, resumed([_load("torch.set_rng_state", rng_torch="t10")], drew), 10, base)
    assert rs.forgot == ["rng_torch"] and rs.disturbed == ["rng_torch"] and rs.restored == {"rng_torch": (10, "torch.set_rng_state")}
    assert "torch's CPU RNG differs: torch.set_rng_state restored it (right after the call it equalled the baseline's " \
        "at step 10, as the checkpoint of step 10 left it), then it changed before step 11: something drew from it " \
        "between the load and the first step" in rs.text(), rs.text()
    assert rs.finding() == "the resume at step 11 restored torch's CPU RNG, then something changed it before that step"
    # the same difference with no load seen, or a load after the first step: not restored
    for loads in ([], [_load("torch.set_rng_state", step=1, rng_torch="t10")]):
        rs = state_compare.compare(2, resumed(loads, drew), 10, base)
        assert rs.disturbed == [] and "torch's random state was not restored" in rs.text(), (loads, rs.text())
        assert rs.finding() == "the resume at step 11 did not restore torch's CPU RNG"
    # A load of another value: loaded, but the checkpoint held that piece as of another moment. This
    # is the checkpoint's own value, as the program's load gave it back (#63.1). When it is the value
    # at one other step, that step is named.
    for value, words in (("t3", "to its value at step 3 (the checkpoint holds this piece as of step 3, or the load "
                                "read it from another checkpoint)"),
                         ("q", "nor to its value at any step recorded: the save took it at another moment than the "
                               "step's record (before or after draws made between them), or the load read another value")):
        rs = state_compare.compare(2, resumed([_load("torch.set_rng_state", rng_torch=value)], drew), 10, base)
        assert rs.disturbed == [] and rs.loaded_other == {"rng_torch": ("torch.set_rng_state", 3 if value == "t3" else None)}
        assert ("torch.set_rng_state set it, but not to its value in the baseline's record of step 10"
                + (": " if value == "t3" else ", ") + words) in rs.text(), rs.text()
        assert rs.finding() == "the resume at step 11 loaded torch's CPU RNG, but not to the value of the checkpoint's " \
            "step", rs.finding()
    # the optimizer not loaded: the scheduler's load records the fresh groups' rate, but does not set it
    # (review: it once read "LRScheduler.load_state_dict set it ... to its value at step 1")
    rs = state_compare.compare(2, resumed([_load("LRScheduler.load_state_dict", lr=[0.1 * 0.9 ** 1])],
                                          lambda s: {"lr": [0.1 * 0.9 ** (s - 10)], "opt_state": "fresh"}), 10, base)
    assert rs.loaded_other == {} and "learning rate differs" in rs.text(), rs.text()
    assert "the optimizer's state, whose param groups carry it, was not loaded" in rs.text(), rs.text()
    # the step count reset after the optimizer's load: back at the run's start
    rs = state_compare.compare(2, resumed([_load("Optimizer.load_state_dict", opt_step=10.0, lr=[0.1 * 0.9 ** 11])],
                                          lambda s: {"opt_step": float(s - 11)}), 10, base)
    assert rs.disturbed == ["opt_step"] and "Optimizer.load_state_dict restored it (right after the call it equalled " \
        "the baseline's at step 11, as the checkpoint of step 10 left it), then it changed before step 11: it is back " \
        "at its value at the run's start" in rs.text(), rs.text()
    # the scheduler loaded, then stepped once more: ahead, and restored first
    rs = state_compare.compare(2, resumed([_load("LRScheduler.load_state_dict", lr=[0.1 * 0.9 ** 11])],
                                          lambda s: {"lr": [0.1 * 0.9 ** (s + 1)]}), 10, base)
    assert rs.disturbed == ["lr"] and "then it changed before step 11: the scheduler is 1 step ahead of where the " \
        "checkpoint left it" in rs.text(), rs.text()
    # both kinds in one resume: one finding, each said
    rs = state_compare.compare(2, resumed([_load("torch.set_rng_state", rng_torch="t10")],
                                          lambda s: {"rng_torch": f"x{s}", "opt_step": float(s - 11)}), 10, base)
    assert rs.finding() == ("the resume at step 11 did not restore optimizer step count; restored torch's CPU RNG, "
                            "then something changed it before that step"), rs.finding()


def test_across_a_change_in_the_number_of_ranks_each_piece_is_compared_whole():
    """#63.3 (pure): 2 ranks' records against 1 rank's.

    - The parameters' parts (one per rank), summed modulo 2**32, are the whole.
    - The batch is the samples of all ranks: a rank's micro-batches since the last step. The
      resume's first step keeps as many as its next step took. So batches it skipped through at
      its load are left out.
    - The learning rate and step count are the same on every rank.
    - The RNG streams are per rank: not comparable.

    A scheduler left out still shows at the next step. Plain tensors that differ between ranks
    cannot be summed: this is said, not judged."""
    M = 1 << 32

    def h(x):
        return f"{x % M:08x}"

    def rec(step, offset=0, **p):  # the attempt's step-th record, global step offset + step
        base = {k: None for k in SR.KEYS + SR.WHOLE}
        base.update({"lr": [0.1], "opt_step": float(offset + step - 1), "rng_torch": f"r{step}"})
        base.update(p)
        return SR.StateRecord(step, 0, 0.0, base)
    W = lambda s: 1000 + s  # noqa: E731  the whole parameters' fingerprint at step s
    base = {r: [rec(s, params_g=[h(W(s) - 7 if r == 0 else 7), None], opt_g=[h(5 * s + r), None],
                    batch_g=[[h(100 * s + r), 4]]) for s in range(1, 21)] for r in (0, 1)}

    def one(first_batches, lr_next=0.1, plain=None):  # resumed from step 10: global step s = 10 + k
        return {0: [rec(k, 10, params_g=[None, plain] if plain else [h(W(s) if s == 11 else W(s) + 1), None],
                        opt_g=[h(10 * s + 1), None],
                        batch_g=first_batches if s == 11 else [[h(100 * s), 4], [h(100 * s + 1), 4]],
                        lr=[0.1 if s == 11 else lr_next]) for k in range(1, 11) for s in [10 + k]]}
    rs = state_compare.compare(2, one([[h(999), 4], [h(1100), 4], [h(1101), 4]]), 10, base)
    assert rs.across == (2, 1) and rs.forgot == [] and rs.ranks == 1, rs.text()
    assert set(rs.equal) == {"params", "opt_state", "batch", "opt_step", "lr"}, rs.text()
    assert rs.incomparable == {"rng_torch": state_compare.PER_RANK_WHY}, rs
    # the parameters after the update under the new layout (step 12) are not compared: no finding
    rs = state_compare.compare(2, one([[h(1100), 4]]), 10, base)
    assert rs.forgot == ["batch"] and "the samples of all ranks at this step (4) are not the baseline's (8): the data " \
        "position did not follow the change from 2 ranks to 1" in rs.text(), rs.text()
    rs = state_compare.compare(2, one([[h(1100), 4], [h(1101), 4]], lr_next=0.5), 10, base)
    assert rs.forgot == ["lr"] and rs.differ_step == 12 and "learning rate differs from step 12" in rs.text(), rs.text()
    rs = state_compare.compare(2, one([[h(1100), 4], [h(1101), 4]], plain="p"), 10,
                               {r: [x._replace(pieces={**x.pieces, "params_g": [None, f"p{r}"]}) for x in recs]
                                for r, recs in base.items()})
    assert rs.incomparable["params"] == state_compare.PLAIN_WHY and "params" not in rs.forgot, rs
    # samples padded to the longest in their batch: another split pads them otherwise, so not compared
    rs = state_compare.compare(2, one([[h(1100), 4, 30], [h(1101), 4, 32]]), 10,
                               {r: [x._replace(pieces={**x.pieces, "batch_g": [[h(100 * x.step + r), 4, 32]]})
                                    for x in recs] for r, recs in base.items()})
    assert rs.incomparable["batch"] == state_compare.PADDED_WHY and "batch" not in rs.forgot, rs
    # 4 ranks as 2 tensor-parallel pairs, each pair taking one batch whole, against the 1 rank that
    # takes both. A batch two ranks took counts once.
    # (mutation: counted per rank -> 16 samples against 8)
    tp = {r: [x._replace(pieces={**x.pieces, "batch_g": [[h(100 * x.step + r // 2), 4]]}) for x in base[r // 2]]
          for r in range(4)}
    rs = state_compare.compare(2, one([[h(1100), 4], [h(1101), 4]]), 10, tp)
    assert "batch" in rs.equal and rs.across == (4, 1), rs.text()


def test_a_piece_one_rank_forgot_is_named_with_that_rank():
    """A checkpoint lacked one rank's file: the piece differs on that rank only.

    The file is the Trainer's rng_state_1.pth, not begun when trainer_state.json landed. The verdict
    says which rank."""
    def two(n, offset=0, rank1=None):
        runs = [_run(n, offset), _run(n, offset, rank1)]
        return {0: runs[0][0], 1: runs[1][0]}
    base = two(30)
    rs = state_compare.compare(2, two(20, 10, lambda s: {"rng_torch": "other"}), 10, base)
    assert rs.forgot == ["rng_torch"] and rs.ranks == 2 and rs.record().differ["rng_torch"].ranks == [1]
    assert "torch's CPU RNG differs on rank 1 of 2: " in rs.text()
    both = {r: recs for r, recs in two(20, 10, lambda s: {"rng_torch": "other"}).items()}
    both[0] = _run(20, 10, lambda s: {"rng_torch": "other"})[0]
    rs = state_compare.compare(2, both, 10, base)
    assert "torch's CPU RNG differs: " in rs.text() and rs.record().differ["rng_torch"].ranks == [0, 1]


def test_a_piece_used_one_step_later_is_the_resumes_and_a_later_one_is_not_blamed():
    """A scheduler left out shows at the resume's second step, and is named as a finding.

    The optimizer carried the first step's rate. A piece may first differ further on, with
    everything equal at the resume and the step after. It is named as nondeterminism or late-used
    state, not a finding. The first attempt's matched steps are said beside it."""
    base = _run(30, change=lambda s: {"lr": [0.1 * 0.9 ** s]})
    sched = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** (s if s == 11 else s - 10)]})
    rs = state_compare.compare(2, sched, 10, base)
    assert rs.forgot == ["lr"] and rs.differ_step == 12 and "learning rate differs from step 12" in rs.text()
    late = _run(20, offset=10, change=lambda s: {"lr": [0.1 * 0.9 ** s], "params": "x" if s >= 18 else "0"})
    rs = state_compare.compare(2, late, 10, base, first_matched=10)
    assert rs.forgot == [] and rs.later == (18, ["params"])
    assert "first differ at step 18, 7 steps after the resume" in rs.text() and "all 10 steps" in rs.text()


def test_a_resume_that_runs_another_thread_count_is_told_so_as_the_cause_of_a_later_divergence():
    """#63.7: a resume with another thread count is named as the cause of a later divergence.

    The Trainer's warm relaunch left the baseline at step 27 by 5e-7. It ran torch's pool's 2
    intra-op threads where the cold baseline ran 1. The closing note forced this by undoing both
    parts of the thread fix: runtime/warm/route.py and pool._torch_threads. The probe records each
    rank's count. Where it differs at the resume, the verdict says so, and gives it as the cause of a
    later difference. Equal counts, or a record without one (an older probe), say nothing."""
    base = _run(30, change=lambda s: {"threads": 1})
    warm = _run(20, offset=10, change=lambda s: {"threads": 2, "params": "x" if s >= 18 else "0"})
    rs = state_compare.compare(2, warm, 10, base, first_matched=10)
    assert rs.forgot == [] and rs.later == (18, ["params"]) and rs.threads == ([2], [1])
    text = rs.text()
    assert "torch ran 2 intra-op thread(s) a rank where the baseline ran 1" in text, text
    assert "first differ at step 18, 7 steps after the resume: possibly the thread counts above" in text, text
    # a later difference the threads cannot make (a batch): the general words
    odd = _run(20, offset=10, change=lambda s: {"threads": 2, "batch": "x" if s >= 18 else "0"})
    rs = state_compare.compare(2, odd, 10, base, first_matched=10)
    assert rs.later == (18, ["batch"]) and "thread counts above" not in rs.text() and "nondeterminism" in rs.text()
    assert rs.record().threads == RS.Threads(attempt=[2], reference=[1])
    for same in (lambda s: {"threads": 1, "params": "x" if s >= 18 else "0"},
                 lambda s: {"params": "x" if s >= 18 else "0"}):  # no count recorded: nothing said
        rs = state_compare.compare(2, _run(20, offset=10, change=same), 10, base)
        assert rs.threads is None and "thread" not in rs.text() and "nondeterminism" in rs.text()
    two = {r: _run(30, change=lambda s: {"threads": 1})[0] for r in (0, 1)}  # 2 ranks to 1: compared as sets
    rs = state_compare.compare(2, _run(20, offset=10, change=lambda s: {"threads": 2}), 10, two)
    assert rs.threads == ([2], [1])


def test_a_run_that_does_not_repeat_itself_is_not_judged_in_what_differs_before_any_restart():
    base = _run(30)
    first = _run(12, change=lambda s: {"rng_torch": f"other-{s}"})  # unseeded: differs from step 1
    not_judged, matched = state_compare.repeatability(first, base)
    assert not_judged == ["rng_torch"] and matched == 0
    resumed = _run(20, offset=10, change=lambda s: {"rng_torch": f"again-{s}"})
    rs = state_compare.compare(2, resumed, 10, base, not_judged)
    assert rs.forgot == [] and rs.unrepeatable == ["rng_torch"] and "not judged" in rs.text()


def test_no_records_is_said_never_an_equal():
    rs = state_compare.compare(2, {}, 10, _run(30))
    assert rs.forgot == [] and rs.equal == [] and rs.text().startswith("state not observed")
    rs = state_compare.compare(2, _run(5, offset=10), 10, {})
    assert rs.text().startswith("state not compared: the baseline wrote no state records")
    rs = state_compare.compare(2, {1: _run(5, offset=10)[0]}, 10, _run(30))
    assert "no rank in both" in rs.text()


def test_a_torn_last_line_is_skipped(tmp_path):
    p = tmp_path / "state-0.jsonl"
    p.write_text(_rec(1).to_json() + "\n" + _rec(2).to_json()[:30])
    assert [r.step for r in SR.read(str(p))] == [1]


# ------------------------------------------------------------------ the probe, from outside the program
PROBED = r"""import sys, torch
m = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.5)
for _ in range(3):
    opt.zero_grad(); m(torch.ones(2, 3)).sum().backward(); opt.step()
print("stepped", "restartlab.trainer.state_probe" in sys.modules)
"""


def _probe_env(d, every="1"):
    env = dict(os.environ, RESTARTLAB_STATE_DIR=str(d), RESTARTLAB_STATE_EVERY=every, RANK="3", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    pystdio.line_buffered(env)
    return env


def test_the_probe_reaches_a_program_that_never_heard_of_it(tmp_path):
    """A plain torch loop (SGD, no DataLoader, no scaler) run with the rank's environment: one record
    per step in state-<RANK>.jsonl; what it cannot see is None (not observed), never a value; an
    optimizer with no state says so ("empty"). every=5: the heavy crcs on an attempt's first 2 steps
    and steps 1, 6, 11, ... A program that never imports torch never loads the probe (or torch)."""
    r = subprocess.run([PY, "-c", PROBED], env=_probe_env(tmp_path, "5"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stepped", "True"], r.stderr
    recs = SR.read(str(layout.Attempt(str(tmp_path)).state(3)))
    assert [x.step for x in recs] == [1, 2, 3]
    first = recs[0].pieces
    assert first["batch"] is None and first["scale"] is None and first["rng_device"] is None
    assert first["opt_state"] == "empty" and first["opt_step"] == 0.0 and first["lr"] == [0.5]
    assert first["threads"] == 1  # torch's intra-op threads: OMP_NUM_THREADS=1 in _probe_env
    assert first["params"] != recs[1].pieces["params"]  # the first update changed the weights
    assert recs[2].pieces["params"] is None  # step 3: neither an attempt's first 2 nor 1 + a multiple of 5
    r = subprocess.run([PY, "-c", "import sys; print('torch' in sys.modules)"], env=_probe_env(tmp_path / "none"),
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False" and not (tmp_path / "none").exists()


DCP_INIT = r"""import sys, torch
from torch.distributed.checkpoint.state_dict import get_state_dict
m = torch.nn.Linear(3, 1)
opt = torch.optim.AdamW(m.parameters(), lr=0.5)
get_state_dict(m, opt)  # a relaunch before its load: DCP initialises the optimizer with a zero-lr step
for _ in range(2):
    opt.zero_grad(); m(torch.ones(2, 3)).sum().backward(); opt.step()
"""


def test_dcps_optimizer_initialisation_is_not_a_training_step(tmp_path):
    """torch.distributed.checkpoint's get_state_dict steps a fresh optimizer once, at lr 0.

    The bundled trainer's relaunch does this before its load. That step is not counted. Otherwise
    every step of the attempt would be numbered one too high. (mutation: the probe without its
    _init_optim_state wrapper -> three records, the first at lr 0)"""
    r = subprocess.run([PY, "-c", DCP_INIT], env=_probe_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = SR.read(str(layout.Attempt(str(tmp_path)).state(3)))
    # two records, at the program's rate (Adam's own count includes the initialising step: a load replaces it)
    assert [(x.step, x.pieces["lr"], x.pieces["opt_step"]) for x in recs] == [(1, [0.5], 1.0), (2, [0.5], 2.0)]


@pytest.mark.multirank
def test_the_whole_fingerprint_is_one_however_the_tensor_is_laid_out():
    """#63.3: the parameters' and moments' whole fingerprint is the same however the tensor is laid out.

    The whole fingerprint is the ranks' parts summed. The script is tests/whole_fingerprint.py. It
    lays a tensor out over 4 real ranks as:
    - FSDP;
    - HSDP;
    - tensor parallel (rows or columns);
    - FSDP2 over tensor parallel (_StridedShard: a rank's rows interleaved, which the probe once refused).

    Uneven shapes are included. It also checks a real FSDP2 + TP model's parameters against their
    full_tensor(). One changed element changes the fingerprint.

    Mutation: the strided placement's indices split as a plain Shard's -> the probe's check against
    torch's offset raises ("the split of (_StridedShard(dim=0, sf=2), Shard(dim=0)) is not torch's").
    With that check off too -> its check of the local shape raises.

    The model's LayerNorm is FSDP's alone. There is a copy in each tensor-parallel slice, counted
    once. This holds on a 2-D mesh, the same mesh unflattened from a 1-D world mesh (torchtitan's
    way), and HSDP over TP. Mutations:
    - every copy counted -> "fsdp2+tp 1.weight (Shard(dim=0),)";
    - the copies told by coordinates in the root mesh, the first rule -> "fsdp2+tp unflattened 1.weight"."""
    from restartlab.launchers import local_rendezvous_env
    from tests.helpers import MPIEXEC
    env = dict(os.environ, **local_rendezvous_env(), OMP_NUM_THREADS="1")
    r = subprocess.run([MPIEXEC, "-n", "4", PY, os.path.join(ROOT, "tests", "whole_fingerprint.py")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "whole: all equal" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


def test_the_accelerator_fingerprint_sees_one_changed_element():
    """device_digest: equal state gives an equal digest, and one changed element another digest.

    device_digest is what an accelerator's tensors get. It runs here on host tensors, as this
    machine has no GPU. The changed element may be in any dtype's bits."""
    torch = pytest.importorskip("torch")
    from restartlab.trainer.state_probe import device_digest
    ts = [torch.randn(1000, dtype=torch.bfloat16), torch.randn(77), torch.arange(5) > 2, torch.randn(3).double()]
    same = [t.clone() for t in ts]
    assert device_digest(ts) == device_digest(same)
    for i in range(len(ts)):
        other = [t.clone() for t in ts]
        flat = other[i].view(-1)
        flat[0] = (~flat[0]) if flat.dtype == torch.bool else flat[0] + 1
        assert device_digest(other) != device_digest(ts), i
    swapped = [ts[1], ts[0]] + ts[2:]
    assert device_digest(swapped) != device_digest(ts)  # each tensor weighted by its position


LOADING = r"""import random, sys, numpy as np, torch
m = torch.nn.Linear(3, 1)
opt = torch.optim.AdamW(m.parameters(), lr=0.5)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
sd = {"opt": opt.state_dict(), "sched": sched.state_dict(), "torch": torch.get_rng_state(),
      "np": np.random.get_state(), "py": random.getstate()}
torch.rand(5); np.random.rand(); random.random()
opt.load_state_dict(sd["opt"]); sched.load_state_dict(sd["sched"])
torch.set_rng_state(sd["torch"]); np.random.set_state(sd["np"]); random.setstate(sd["py"])
torch.rand(1)  # drawn after the restore
from torch.utils.checkpoint import checkpoint
for _ in range(2):  # activation checkpointing sets torch's RNG twice in each backward: not a load
    opt.zero_grad(); checkpoint(m, torch.ones(2, 3), use_reentrant=False).sum().backward(); opt.step(); sched.step()
torch.random.set_rng_state(sd["torch"])  # a load after the first step: no resume's load
print("stepped", torch.set_rng_state.__name__)
"""


def test_the_probe_records_each_load_with_the_value_it_set(tmp_path):
    """The load hooks work in a program that never heard of them.

    These each write a record right after the call:
    - the RNG setters: torch's under both its names, NumPy's, Python's;
    - the optimizer's and the scheduler's load_state_dict.

    The record holds the pieces the call set, fingerprinted as a step's record is. An optimizer's
    record is written once its first step has numbered it. Not recorded:
    - torch's own RNG save-and-restore in activation checkpointing's backward (before the first step here);
    - any load after the first step.

    The step records are as before: loads are not steps."""
    r = subprocess.run([PY, "-c", LOADING], env=_probe_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stepped", "set_rng_state"], r.stderr
    recs = SR.read(str(layout.Attempt(str(tmp_path)).state(3)))
    loads = [(x.load, x.step) for x in recs if x.load]
    assert loads == [("torch.set_rng_state", 0), ("numpy.random.set_state", 0), ("random.setstate", 0),
                     ("Optimizer.load_state_dict", 0), ("LRScheduler.load_state_dict", 0)], loads
    steps = SR.by_step(recs)
    assert sorted(steps) == [1, 2]
    got = SR.loaded(recs)
    assert set(got) == {"opt_state", "opt_step", "lr", "rng_torch", "rng_numpy", "rng_python"}, got
    # what each load set is what the first step then saw, but torch's RNG (one draw after its restore)
    assert got["rng_numpy"][0] == steps[1].pieces["rng_numpy"] and got["rng_python"][0] == steps[1].pieces["rng_python"]
    assert got["rng_torch"][0] != steps[1].pieces["rng_torch"]
    assert got["lr"] == ([0.5], "LRScheduler.load_state_dict") and got["opt_state"][0] == steps[1].pieces["opt_state"] == "empty"


PRINTS_LOSS = r"""import sys, torch
m = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.5)
print("{'loss': 'early'}")  # before any step: step 0
for i in range(3):
    opt.zero_grad(); m(torch.ones(2, 3)).sum().backward(); opt.step()
    print({"loss": f"{1.5 + i:.4g}", "epoch": i})
    sys.stderr.write("{'loss': '7.25', 'from': 'stderr'}\n" if i == 2 else "")
print("done", type(sys.stdout).__name__)
"""


def test_rank_0s_probe_books_the_programs_loss_lines_at_the_step_they_follow(tmp_path):
    """#63.6: with RESTARTLAB_LOSS_LINE (restartlab sets it where the steps come from the probe), rank
    0's probe reads what the program writes to sys.stdout and sys.stderr; each loss line becomes a
    record of the step count at that moment, which the state records' reader leaves out. The
    program's output is unchanged. Another rank does not read its output."""
    env = _probe_env(tmp_path)
    env["RANK"], env["RESTARTLAB_LOSS_LINE"] = "0", r"^\{'loss': '?(?P<loss>[-+0-9.eE]+)'?[,}]"
    r = subprocess.run([PY, "-c", PRINTS_LOSS], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "done _LossLines", r.stderr
    assert r.stdout.splitlines()[1] == "{'loss': '1.5', 'epoch': 0}" and "'from': 'stderr'" in r.stderr
    path = str(layout.Attempt(str(tmp_path)).state(0))
    with open(path) as f:
        logged = [(d["step"], d["logged_loss"]) for d in map(json.loads, f) if "logged_loss" in d]
    assert logged == [(1, "1.5"), (2, "2.5"), (3, "3.5"), (3, "7.25")], logged
    assert [x.step for x in SR.read(path)] == [1, 2, 3]
    env["RANK"] = "1"
    r = subprocess.run([PY, "-c", PRINTS_LOSS], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.splitlines()[-1] == "done TextIOWrapper", r.stdout


def test_state_every_0_turns_it_off(tmp_path):
    r = subprocess.run([PY, "-c", PROBED], env=_probe_env(tmp_path, "0"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["stepped", "False"], r.stderr
    assert not layout.Attempt(str(tmp_path)).state_files()


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def forgetful(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("forgetful") / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false"], capture_output=True, text=True, timeout=500, cwd=ROOT)
    cleanup_tag(job_tag(d))
    return d, r


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_each_forgotten_piece_is_named_and_nothing_else(forgetful):
    """Through `restartlab run`, each phase's program leaves one piece out of its load.

    The one that leaves out nothing is the control. The kill is aimed at step 15 and gated on its
    checkpoint's completion. It lands there, because the program waits for it after that save.
    The relaunch resumes from it. Its verdict names exactly the pieces left out, each a finding,
    with the loss's divergence beside it. The control is clean and survives."""
    d, r = forgetful
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        phases = {p["phase"]: p for p in json.load(f)["phases"]}
    with open(layout.Expt(d).report) as f:
        report = f.read()
    for name, pieces in EXPECTED.items():
        v = phases[name]["survival"]
        resumed = [x for x in v["restarts"] if x["attempt"] > 1]
        assert len(resumed) == 1 and resumed[0]["outcome"] == "newest", v
        st = resumed[0]["state"]
        assert st["step"] == (13 if name == "epoch_skip" else 16) and set(st["forgot"]) == pieces, (name, st)
        assert {"params", "batch"} - pieces <= set(st["equal"]), (name, st)  # observed, and equal
        assert st["text"] in report
        if pieces:
            words = "then something changed it before that step" if name in DISTURBED else \
                "but not to the value of the checkpoint's step" if name == "rng_saved_late" else "did not restore"
            assert bool(st["loaded_other"]) == (name == "rng_saved_late"), (name, st)  # never for a piece not loaded
            assert not v["survived"] and any(words in f for f in v["findings"]), v
        else:
            assert v["survived"] and st["later"] is None, v
    assert "learning rate differs from step 17" in phases["scheduler"]["survival"]["restarts"][1]["state"]["text"]
    # initial_lr (pytorch issue 140900). The scheduler made at the step resumed from needs the param
    # groups' initial_lr, which the load did not give back. Every relaunch dies in its start-up, and
    # the verdict says so.
    v = phases["initial_lr"]["survival"]
    crashed = [f for f in v["findings"] if f.startswith("attempt ") and "crashed before its first step" in f]
    assert len(crashed) == 3 and all("KeyError: \"param 'initial_lr' is not specified in param_groups[0] when "
                                     "resuming scheduler with last_epoch >= 0." in f for f in crashed), v
    assert any(f.startswith("crash loop: 3 attempts in a row died before a step") for f in v["findings"]), v
    assert not v["survived"] and not v["finished"], v
    for name, words in CAUSES.items():
        assert words in phases[name]["survival"]["restarts"][1]["state"]["text"], (name, phases[name]["survival"])


def test_after_a_resume_that_forgot_the_next_one_is_judged_against_the_attempt_that_saved_it():
    """Once the phase has left the baseline, the baseline is no reference for the next resume.

    Here attempt 2 forgot the data position. The reference for attempt 3's resume is the attempt
    that saved its checkpoint and ran past it. A faithful resume of a diverged run is then clean.
    Without such a record it is said, not judged."""
    from restartlab.analysis import collect, survival
    base_recs = _run(30)
    forgot = _run(12, offset=10, change=lambda s: {"batch": f"replayed-{s}", "params": "0" if s == 11 else f"p2-{s}"})
    faithful = _run(10, offset=20, change=lambda s: {"batch": f"replayed-{s}", "params": f"p2-{s}"})

    def att(n, recs, resumed, last):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1})
    ph = collect.PhaseData("restart", losses={s: (1.0 if s <= 10 else 2.0) for s in range(1, 31)})
    ph.attempts = [att(1, _run(12), 0, 12), att(2, forgot, 10, 22), att(3, faithful, 20, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, base_recs, 0, 30)]
    restarts = [survival.Restart(1, "first", "", 0), survival.Restart(2, "newest", "", 10),
                survival.Restart(3, "newest", "", 20)]
    findings = survival.resumed_state(ph, base, restarts)
    assert findings == ["attempt 2: the resume at step 11 did not restore the batch"]
    assert restarts[1].state.against == "the baseline's" and restarts[1].state.forgot == ["batch"]
    st = restarts[2].state
    assert st.forgot == [] and st.against.startswith("attempt 2's, which saved it (the phase left the baseline at step 11")
    ph.attempts[1].last_iter = 20  # attempt 2 killed as its step-20 save completed: no record of step 21
    restarts = [survival.Restart(k, o, "", r) for k, o, r in ((1, "first", 0), (2, "newest", 10), (3, "newest", 20))]
    survival.resumed_state(ph, base, restarts)
    assert restarts[2].state.text.startswith("state not compared: the phase left the baseline at step 11")



def test_a_phase_whose_state_left_the_baseline_after_an_exact_resume_judges_the_next_against_its_saver():
    """The phase's state left the baseline after an exact resume, so the next is judged against its saver.

    The phase's loss equals the baseline's throughout. Its state differed from step 15, after
    attempt 2's exact resume. A warm rank ran other threads than the baseline: this was seen with
    the Trainer. Attempt 3 resumed faithfully from attempt 2's step-20 save. Judged against the
    baseline it would read "the weights were not loaded". It is judged against attempt 2's."""
    from restartlab.analysis import collect, survival
    base_recs = _run(30)
    drift = lambda s: {"params": f"p2-{s}" if s >= 15 else "0", "opt_state": f"o2-{s}" if s >= 15 else "0"}  # noqa: E731
    second = _run(12, offset=10, change=drift)
    third = _run(10, offset=20, change=drift)

    def att(n, recs, resumed, last):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1})
    ph = collect.PhaseData("restart", losses={s: 1.0 for s in range(1, 31)})
    ph.attempts = [att(1, _run(12), 0, 12), att(2, second, 10, 22), att(3, third, 20, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, base_recs, 0, 30)]
    restarts = [survival.Restart(1, "first", "", 0), survival.Restart(2, "newest", "", 10),
                survival.Restart(3, "newest", "", 20)]
    assert survival.resumed_state(ph, base, restarts) == []
    assert restarts[1].state.forgot == [] and restarts[1].state.later.step == 15
    st = restarts[2].state
    assert st.forgot == [] and st.against.startswith("attempt 2's, which saved it (the phase left the baseline "
                                                          "at step 15"), st


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_a_kill_after_the_last_save_and_a_relaunch_with_nothing_left_to_train(tmp_path):
    """The kill lands after the last step's save, before the program exits (it waits there for it).
    The attempt logged its last step and its last step's checkpoint is complete: it finished (#63.5),
    the strike after its last step is no finding, and nothing is relaunched. (Before #63.5 the relaunch
    resumed at the last step and trained nothing; before that, restartlab waited for a progress line
    that never came and relaunched it until its budget ran out. A relaunch that resumes at the last
    step is still finished: tests/test_programs.py::test_a_relaunch_that_resumes_at_the_last_step_has_finished.)"""
    d = str(tmp_path / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false", "--set", "failures.schedule.at_steps=[36]",
                        "--set", 'phases=[{name: end, checkpoint: sync, args: [--save-every, "6", --hold-at, "36"]}]'],
                       capture_output=True, text=True, timeout=280, cwd=ROOT)
    cleanup_tag(job_tag(d))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        ph, = json.load(f)["phases"]
    v = ph["survival"]
    assert ph["completed"] and ph["attempts"] == 1 and ph["kills"] == 1, ph
    assert [(x["outcome"], x["resumed_from"]) for x in v["restarts"]] == [("first", 0)], v
    assert "then finished (step 36) and was struck before its exit" in v["restarts"][0]["text"], v
    assert v["survived"], v


@pytest.mark.multirank
@pytest.mark.timeout(300)
def test_a_warm_forked_rank_records_its_state_too(tmp_path):
    """Under warm restart the relaunch's rank is forked from a pool that imported torch before the
    fork, so no import of the program's installs the probe: the pool's forked rank installs it
    (runtime/warm/pool.py), into its own attempt's file. The exact resume is judged, and clean.
    Mutation: no install in the forked rank -> "state not observed" for attempt 2."""
    d = str(tmp_path / "expt")
    r = subprocess.run([PY, "-m", "restartlab.cli", "run", FORGETFUL, "--expt-dir", d, "--plain",
                        "--set", "collection.plots=false", "--set", "relaunch.warm=true",
                        "--set", 'phases=[{name: baseline, checkpoint: none}, '
                                 '{name: exact, checkpoint: sync, args: [--save-every, "5", --hold-at, "15"]}]'],
                       capture_output=True, text=True, timeout=280, cwd=ROOT)
    cleanup_tag(job_tag(d))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(layout.Expt(d).summary) as f:
        ph = {p["phase"]: p for p in json.load(f)["phases"]}["exact"]
    from restartlab.runtime.warm.standby import served_in
    assert served_in(layout.Expt(d).phase("exact").warm_dir, 2) == 1  # the relaunch's rank was forked by the pool
    st = ph["survival"]["restarts"][1]["state"]
    assert st["step"] == 16 and st["forgot"] == [] and {"params", "opt_state", "batch", "lr"} <= set(st["equal"]), st
    assert ph["survival"]["survived"]


def test_the_repeatability_check_uses_the_phases_first_run_from_step_0_that_recorded():
    """An attempt killed in start-up records nothing.

    So the phase's first run from step 0 with records says what does not repeat. The soak found
    this. A fuzz's first attempt was killed in start-up. Then the bundled trainer's unseeded Python
    and NumPy RNG were called forgotten at every resume."""
    from restartlab.analysis import collect, survival
    unseeded = lambda run: (lambda s: {"rng_python": f"{run}-{s}"})  # noqa: E731

    def att(n, recs, resumed, last, stepped=True):
        return collect.AttemptData(n, "", number=n, state=recs, resumed_from=resumed, last_iter=last,
                                   first_row={"train/iter": resumed + 1} if stepped else None)
    ph = collect.PhaseData("sync", losses={s: 1.0 for s in range(1, 31)})
    ph.attempts = [att(1, {}, 0, 0, stepped=False), att(2, _run(12, change=unseeded("a")), 0, 12),
                   att(3, _run(20, offset=10, change=unseeded("b")), 10, 30)]
    base = collect.PhaseData("baseline", losses={s: 1.0 for s in range(1, 31)})
    base.attempts = [att(1, _run(30, change=unseeded("base")), 0, 30)]
    restarts = [survival.Restart(1, "startup_kill", "", None), survival.Restart(2, "first", "", 0),
                survival.Restart(3, "newest", "", 10)]
    assert survival.resumed_state(ph, base, restarts) == []
    assert restarts[2].state.unrepeatable == ["rng_python"] and restarts[2].state.forgot == []


def test_a_phase_read_from_metrics_files_beside_a_baseline_with_records_is_not_compared():
    """`report --sync FILES` beside an experiment whose baseline recorded its state.

    The files' phase has unnumbered attempts (None) and no records. Its loss may leave the baseline
    before a resume. Then the search for the attempt that saved the checkpoint once compared
    None < None and raised TypeError (found by the type checker, #64.3). It says the state was not
    compared."""
    from types import SimpleNamespace as NS
    from restartlab.analysis import survival
    base = NS(attempts=[NS(number=1, state=_run(30), first_row=0, resumed_from=None, last_iter=30)],
              losses={s: 1.0 for s in range(1, 31)})
    files = NS(attempts=[NS(number=None, state={}, first_row=0, resumed_from=10, last_iter=30)],
               losses={s: 1.0 if s < 5 else 2.0 for s in range(1, 31)})
    r = survival.Restart(None, "newest", "resumed", resumed_from=10)
    assert survival.resumed_state(files, base, [r]) == []
    assert r.state.text.startswith("state not compared: the phase left the baseline at step 5"), r.state
