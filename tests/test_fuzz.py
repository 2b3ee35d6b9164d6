"""Kill anywhere: the short version CI runs (tests/fuzz.py; `make fuzz N=100` for the full one).

It sends at least 10 SIGKILLs of all ranks at random times, across sync/async and FSDP/FSDP+TP.
Some are aimed inside saves. It checks:
- every relaunch resumes from the newest complete checkpoint;
- --keep holds;
- no crash that was not injected;
- every loss and the final parameters equal a failure-free run.

Its ranks are warm (fuzz --warm: forked from a standby pool). What a kill can break is in the
rendezvous, the load, the steps and the saves, not in the imports. The product's own fuzzer
(test_your_trainer) and `make fuzz-trainer` kill cold start-ups."""
import pytest

from tests import fuzz

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(1500)]


def test_kill_anywhere_short():
    stats = fuzz.run(kills=10, seed=11, warm=True)
    report = fuzz.summary(stats)
    print(report)
    assert stats["kills"] >= 10, report
    assert not stats["crashes"] and not stats["bad_resume"] and not stats["keep"], report
    assert stats["bit_exact"] and len(stats["runs"]) >= 4, report
    assert {r["config"] for r in stats["runs"]} == {"sync tp1", "async tp1", "sync tp2", "async tp2"}
