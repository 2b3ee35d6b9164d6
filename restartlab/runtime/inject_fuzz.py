"""The injector's fuzz: one strike per attempt at a point drawn from the seed (restartlab fuzz,
failures.schedule.fuzz)."""
import os
from typing import List, Optional, cast

from . import attempt_record
from .. import programs
from ..contracts import layout
from .inject_api import Striker

SAVE_POLL_S = 0.005   # --fuzz: how often a save window is looked for (a listing of the checkpoint dir)
SAVE_WAIT_WINDOWS = 2  # --fuzz: a kill aimed at a save waits this many --fuzz-window after the launch


def live_attempt(inj: Striker, after: int) -> Optional[layout.Attempt]:
    """The newest attempt, once one numbered above `after` is launched and not over (None: we
    must stop first)."""
    found: List[layout.Attempt] = []

    def launched() -> bool:
        atts = layout.Phase(cast(str, inj.a.phase_dir)).attempts()  # main() refuses --fuzz without it
        if atts and atts[-1].index > after and os.path.exists(atts[-1].at_launch) \
                and not attempt_record.is_over(atts[-1]):
            found[:] = [atts[-1]]
            return True
        return False
    return found[0] if inj.sleep_until(launched) else None


def fuzz(inj: Striker) -> int:
    """One kill per attempt at a random point: inside a save (the moment a checkpoint being
    written shows up, plus up to --fuzz-save-jitter: 20 ms by default) or anywhere from the launch on (uniformly within
    --fuzz-window). A kill aimed at a save that sees none within SAVE_WAIT_WINDOWS windows of the
    launch strikes then. A checkpoint that becomes complete without having been seen in flight
    (a program that writes it elsewhere and renames it in, as Lightning does) makes the kills
    from then on strike anywhere, said once. The choices come from --seed; what happened is in
    each record."""
    a, last = inj.a, 0
    told, window = False, a.fuzz_window
    while inj.kills < cast(int, a.fuzz):  # run() calls fuzz() only with it
        att = live_attempt(inj, last)
        if att is None:
            break
        t0 = os.stat(att.at_launch).st_mtime
        # once an attempt showed no save, later kills aimed at one strike anywhere instead
        in_save = inj.rng.random() < a.fuzz_save_share and not told
        delay, jitter = inj.rng.uniform(0, window), inj.rng.uniform(0, a.fuzz_save_jitter)
        if in_save:
            deadline = t0 + SAVE_WAIT_WINDOWS * window
            before = inj.newest_complete()
            unseen = False  # a checkpoint became complete without ever being seen in flight
            # With --fuzz-after-complete, only a save made while a complete checkpoint exists is struck.
            # A complete checkpoint deleted before the next is written still counts.
            while True:
                ready = not a.fuzz_after_complete or inj.seen_complete is not None
                if ready and programs.in_flight(inj.spec, cast(str, a.ckpt_dir), t0):  # main(): --fuzz needs it
                    break
                now = inj.newest_complete()
                unseen = now is not None and (before is None or now > before) and not a.fuzz_after_complete
                if unseen or attempt_record.is_over(att) or inj.clock.time() > deadline or inj.stop_reason():
                    break
                before = now if a.fuzz_after_complete else before
                inj.clock.sleep(SAVE_POLL_S)
            if attempt_record.is_over(att) or inj.stop_reason():
                continue
            if unseen and not told:
                inj.say(f"a checkpoint in {a.ckpt_dir} became complete in attempt {att.index} without being "
                         f"seen in flight (a program that writes its checkpoint elsewhere and renames it in "
                         f"shows none; else check trainer.program.checkpoints): striking now, and anywhere "
                         f"from here on")
                told = True
            if unseen or inj.clock.time() > deadline:  # no save to aim at in time: strike now
                in_save, delay = False, inj.clock.time() - t0
            else:
                inj.clock.sleep(jitter)
        else:
            if inj.sleep_until(lambda: attempt_record.is_over(att), deadline=t0 + delay):
                window = max(0.1, min(window, inj.clock.time() - t0) / 2)  # the next one, sooner
                inj.say(f"attempt {att.index} ended before the kill at launch +{delay:.2f}s: the next "
                         f"attempt is struck within {window:.2f}s of its launch")
                continue
            if inj.stop_reason():
                break
        last = att.index
        kind = fuzz_kind(inj)
        inj.kill(f"fuzz #{inj.kills + 1}: {'inside a save' if in_save else f'launch +{delay:.2f}s'}",
                  kind_name=kind)
    return inj.done()


def fuzz_kind(inj: Striker) -> Optional[str]:
    """The next fuzzed strike's kind: drawn among --fuzz-kinds, else --kind.

    The draw uses the seed. With one kind nothing is drawn, so that a plain kill fuzz's draws stay
    what they were."""
    kinds = [k.strip() for k in (inj.a.fuzz_kinds or "").split(",") if k.strip()]
    return (inj.rng.choice(kinds) if len(kinds) > 1 else kinds[0]) if kinds else None
