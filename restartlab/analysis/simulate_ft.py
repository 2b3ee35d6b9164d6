"""restartlab simulate --torchft: the goodput of torchft replica groups.

It uses the same failure model as the restart strategy's (simulate.py). The costs are measured in a
torchft phase (a report's summary) or given as flags.

The model:

- G replica groups train in lockstep.
- Failures arrive as a Poisson process at the job's MTBF. Each strikes one group, chosen uniformly.
- At a failure every surviving group stalls `stall_s`, then trains on. The stall is the step it could
  not commit and the wait for a quorum without the struck group.
- The struck group is out for `rejoin_s`: the kill to its first commit (detection, relaunch, process
  start, heal). Meanwhile nobody trains its share of every step.
- A failure that strikes a group already out extends its absence.
- When every group is out at once, there is no survivor to heal from. Then torchft starts over. With
  `min_replicas` 1 it does so silently, from a fresh initialisation. The model counts this
  (`all_groups_lost`). Without checkpoints it charges it as the loss of all the work done so far.

Goodput = the groups' trained share of the step slots over wall time, times 1 / (1 + step_overhead).
The step overhead is torchft's quorum and commit each step, as a fraction of a step. The simulation
is seeded. Independent replicas give a 95% confidence half-width."""
import math
import statistics
from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

from ..contracts.sim_result import FtSweep
from ..contracts.summary import Summary


@dataclass
class FtCosts:
    groups: int
    stall_s: float
    rejoin_s: float
    step_overhead: float = 0.0
    sources: Dict[str, str] = field(default_factory=dict)


def _trained(out_until: np.ndarray, a: float, b: float) -> float:
    """Group-seconds trained in [a, b]: each group from when it is back (or a) to b."""
    back = np.clip(out_until, a, b)
    return float(np.sum(b - back))


@dataclass
class FtRun:
    """One replica of a simulated run of replica groups."""
    goodput: float
    failures: int
    all_groups_lost: int   # failures that struck the last group still training
    stall_s: float         # the survivors' stalls


def one_run(c: FtCosts, mtbf_s: float, hours: float, rng: np.random.Generator) -> FtRun:
    G, T = c.groups, hours * 3600.0
    out_until = np.zeros(G)
    trained, t, failures, lost_all, stalled = 0.0, 0.0, 0, 0, 0.0
    while True:
        nxt = t + rng.exponential(mtbf_s)
        if nxt >= T:
            trained += _trained(out_until, t, T)
            break
        trained += _trained(out_until, t, nxt)
        failures += 1
        g = int(rng.integers(G))
        others_in = [h for h in range(G) if h != g and out_until[h] <= nxt]
        if not others_in:  # no survivor to heal from: every group starts over
            lost_all += 1
            trained = 0.0
            out_until[:] = nxt + c.rejoin_s
        else:
            out_until[g] = max(out_until[g], nxt + c.rejoin_s)  # struck while out: its relaunch starts over
            # the survivors' stall: no group trains for stall_s (the struck one is out anyway)
            stall_end = nxt + c.stall_s
            trained -= sum(min(stall_end, T) - nxt for _ in others_in)
            stalled += c.stall_s
        t = nxt
    goodput = max(0.0, trained) / (G * T) / (1.0 + c.step_overhead)
    return FtRun(goodput=goodput, failures=failures, all_groups_lost=lost_all, stall_s=stalled)


def simulate(c: FtCosts, mtbf_s: float, days: float, replicas: int, seed: int) -> FtSweep:
    rng = np.random.default_rng(seed + 7919)  # its own stream: the restart sweep's draws stay as they were
    runs = [one_run(c, mtbf_s, days * 24.0, rng) for _ in range(replicas)]
    g = np.array([r.goodput for r in runs])
    half = 1.96 * g.std(ddof=1) / math.sqrt(len(g)) if len(g) > 1 else float("nan")
    return FtSweep(groups=c.groups, goodput=float(g.mean()), ci95=float(half),
                   failures_per_day=float(np.mean([r.failures for r in runs])) / days,
                   all_groups_lost_per_run=float(np.mean([r.all_groups_lost for r in runs])),
                   analytic=analytic(c, mtbf_s))


def analytic(c: FtCosts, mtbf_s: float) -> float:
    """First-order goodput: failures are rare and never leave two groups out at once.

    Each failure costs every surviving group stall_s and the struck group rejoin_s, out of G
    group-seconds per second."""
    G = c.groups
    per_failure = ((G - 1) * c.stall_s + c.rejoin_s) / G
    return max(0.0, 1.0 - per_failure / mtbf_s) / (1.0 + c.step_overhead)


def costs_from_summary(summary: Summary) -> Optional[FtCosts]:
    """The torchft phases of a report's summary (its `torchft`): the medians over their failures."""
    fts = [f for f in summary.torchft.values() if f.failures]
    if not fts:
        return None
    stalls = [x.survivor_stall_s for f in fts for x in f.failures if x.survivor_stall_s is not None]
    rejoins = [r.rejoin_s for f in fts for x in f.failures for r in x.relaunch.values() if r and r.rejoin_s is not None]
    if not stalls or not rejoins:
        return None
    src = "measured (median over the summary's torchft failures)"
    return FtCosts(groups=fts[0].groups, stall_s=statistics.median(stalls), rejoin_s=statistics.median(rejoins),
                   sources={"stall_s": src, "rejoin_s": src, "groups": "the summary's torchft phase",
                            "step_overhead": "assumed (0: --ft-step-overhead)"})

