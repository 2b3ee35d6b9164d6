"""What a failure costs in steps, told so that nobody takes a gated kill's loss for the typical one.
This is #52, item 6. The report says where each kill landed relative to the newest complete save.
Beside the measured loss, it says what a failure at a random time loses on average in the phase.
That average comes from the phase's own save interval and the steps a background save is still
incomplete."""
import random
import statistics
from dataclasses import replace

import pytest

from restartlab.analysis import collect, report
from restartlab.contracts import launch_snapshot
from restartlab.contracts.phase_summary import FailureEvent, PhaseSummary


def _lost(k: int, interval: int, lag: int) -> int:
    """The steps since the newest complete save, for a run killed just after step k.
    The run saves at every multiple of `interval`. Each save is complete `lag` steps after its step."""
    newest = max(s for s in range(0, k + 1, interval) if s + lag <= k or s == 0)
    return k - newest


@pytest.mark.parametrize("interval, lag", [(10, 0), (10, 3), (7, 2), (25, 0), (5, 5)])
def test_the_expected_loss_is_what_kills_at_random_steps_lose(interval, lag):
    """The formula against the process it describes: kills at random steps of a long run."""
    rnd = random.Random(interval * 100 + lag)
    lost = [_lost(k, interval, lag) for k in (rnd.randrange(10 * interval, 10_000) for _ in range(40_000))]
    want = collect.expected_loss(float(interval), float(lag)).per_failure
    assert statistics.mean(lost) == pytest.approx(want, abs=0.05 * interval), (statistics.mean(lost), want)


def test_the_save_interval_is_read_from_what_the_launches_found():
    ph = collect.PhaseData("p")
    for snap in ({"checkpoints": [[20, True], [30, True], [40, True]]},
                 {"checkpoints": [[50, True], [60, True], [70, False]]}, {}, {"checkpoints": "bad"}):
        a = collect.AttemptData(path="x", index=len(ph.attempts) + 1)
        a.at_launch = launch_snapshot.from_dict(snap)
        ph.attempts.append(a)
    assert collect.save_interval_steps(ph) == 10.0  # the torn 70 and the malformed snapshot left out
    assert collect.save_interval_steps(collect.PhaseData("q")) is None
    assert collect.expected_loss(None) is None


def _summary(gate, after=(2, 3, 1)):
    ev = [FailureEvent(lost_steps=a, steps_after_save=a, gate=gate) for a in after]
    return PhaseSummary(phase="sync", failures=ev, expected_loss=collect.expected_loss(10.0, 0.0))


def test_the_report_sets_the_measured_loss_beside_the_expected_one():
    line, = [x for x in report.lost_steps_lines([_summary("complete")]) if x]
    assert line.startswith("- **sync**: 2 step(s) lost per failure (median of 3), struck 2 step(s) after the newest "
                           "complete save (median); a failure at a random time strikes 4.5 steps after one and loses "
                           "4.5 on average here (a save every 10 steps)")
    assert "waited for a step's `.complete`" in line
    # timed kills (no gate), or records from before gates: the facts, no claim about why
    line, = [x for x in report.lost_steps_lines([_summary(None)]) if x]
    assert "`.complete`" not in line and "4.5 on average" in line
    async_ = replace(_summary("step"), expected_loss=collect.expected_loss(10.0, 1.8))
    line, = [x for x in report.lost_steps_lines([async_]) if x]
    assert "loses 6.3 on average here (a save every 10 steps, and 1.8 steps a save is still being written" in line
    assert report.lost_steps_lines([replace(_summary("complete"), expected_loss=None)]) == []
    assert report.lost_steps_lines([replace(_summary("complete"), failures=[])]) == []
