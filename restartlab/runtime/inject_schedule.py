"""The injector's schedules besides the fuzz, and the pure functions that make them.

- Strikes at training steps (failures.schedule.at_steps, every_steps). They are gated on the
  step's .complete or on the step being seen.
- Timed strikes (every, mtbf)."""
import random
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union, cast

from ..contracts import live
from ..contracts.live import newest_step_seen
from ..tools import options as tool_options
from .inject_api import Striker


def step_targets(at_steps: Optional[Sequence[Union[int, Sequence[Any]]]] = None, every_steps: Optional[int] = None,
                 train_iters: Optional[int] = None) -> List[Tuple[int, Optional[str]]]:
    """[(step, failure kind or None for the default)], in step order."""
    if at_steps:
        return sorted(set((s, None) if isinstance(s, int) else tuple(s) for s in at_steps),
                      key=lambda t: t[0])
    if every_steps:
        end = train_iters or 10 ** 9
        return [(s, None) for s in range(every_steps, end, every_steps)]
    return []


def timed_offsets(every: Optional[float] = None, mtbf: Optional[float] = None, seed: int = 0) -> Iterator[float]:
    """Seconds from the clock start at which timed kills fire (exponential gaps for mtbf)."""
    t = 0.0
    rng = random.Random(seed)
    while True:
        t += every if every else rng.expovariate(1.0 / cast(float, mtbf))  # run(): one of them is given
        yield t


def by_steps(inj: Striker) -> int:
    """Strike at each target step, once the step's checkpoint is complete (gate complete) or the
    step is seen (gate step).

    A step that an earlier job of a chain struck is not struck again."""
    a = inj.a
    targets = step_targets(a.at_steps, a.every_steps, a.train_iters)
    if not targets:  # (once taken for a timed one with no time given: a TypeError)
        inj.say(f"--every-steps {a.every_steps} is at or past --train-iters {a.train_iters}: no step to strike")
    gate = tool_options.gate_of(a.gate, step_schedule=True)
    # a chained job's injector: the steps an earlier job's injector struck are done
    done = {r.target_step for r in live.read_injections(a.phase_dir) if r.struck} if a.phase_dir else set()
    for s, kind in targets:
        if s in done:
            inj.say(f"step {s}: struck by an earlier job of this experiment")
            continue
        if gate == "complete":
            ok = inj.sleep_until(lambda: (inj.newest_complete() or -1) >= s or inj.unmatched())
            if ok and inj.unmatched() and not a.phase_dir:
                inj.say(f"the checkpoint dir {a.ckpt_dir} holds files but nothing matches the checkpoint "
                        f"pattern {inj.spec.checkpoints!r}, and without --phase-dir no step is "
                        "seen: stopping")
                break
            if ok and inj.unmatched():
                gate = "none"
                inj.say(f"the checkpoint dir {a.ckpt_dir} holds files but nothing matches the "
                        f"checkpoint pattern {inj.spec.checkpoints!r} (check "
                        f"trainer.program.checkpoints): step-aimed kills fire when the step is seen")
                ok = inj.sleep_until(lambda: newest_step_seen(cast(str, a.phase_dir)) >= s)  # main()
        else:  # main(): a step schedule has its --phase-dir
            ok = inj.sleep_until(lambda: newest_step_seen(cast(str, a.phase_dir)) >= s)
        if not ok:
            break
        inj.kill(f"step {s} ({'after .complete' if gate == 'complete' else 'step seen'})", s, kind,
                 "complete" if gate == "complete" else "step")
    return inj.done()


def timed(inj: Striker) -> int:
    """Strike at each offset of the timed schedule (every, mtbf).

    With --wait-first-complete, the first strike waits for the first complete checkpoint. With gate
    complete, each strike is gated on one."""
    a = inj.a
    if a.wait_first_complete and not inj.sleep_until(lambda: inj.newest_complete() is not None):
        return inj.done()
    t0 = inj.clock.time()
    for off in timed_offsets(a.every, a.mtbf, a.seed):
        if inj.sleep_until(lambda: False, deadline=t0 + off) is False and inj.stop_reason():
            break
        if tool_options.gate_of(a.gate, step_schedule=False) == "complete" and not inj.sleep_until(
                lambda: inj.newest_complete() is not None):
            break
        inj.kill(f"timed +{off:.1f}s ({'every' if a.every else 'mtbf'})")
    return inj.done()
