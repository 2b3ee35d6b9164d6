"""restartlab simulate: goodput (ETTR) and the best checkpoint interval of a long training run.

It works at any scale, from costs measured on a few nodes (a report's summary, or flags) and a
failure model. It runs a seeded Monte Carlo.

In the model one attempt is one *segment*, from its launch to the next launch:

- From launch to the first productive step takes `restart_s` (imports, rendezvous, checkpoint load).
- Then come cycles of `interval` steps of work and one save.
- Sync saves: the loop blocks `sync_stall_s`. The checkpoint is durable when the save returns.
- Async saves: the loop blocks `async_stall_s` (stage and drain). The checkpoint is durable
  `async_durable_s` after the save began. Steps that run while a save is in the background are
  slower by `interference` (a fraction). At most one save is in flight, so a background longer than
  a cycle stalls the loop.
- A failure at time T after the launch keeps the work of every checkpoint durable before T. It
  loses the rest. A `preempt` keeps all of it and pays one emergency save. The segment ends
  `detection_s[kind]` (fault -> attempt end) + `gap_s` (attempt end -> next launch) after T.

Failures arrive as a Poisson process (exponential times to failure, the job MTBF), so segments are
independent. Each replica draws them all at once, and the run is the cumulative sum (numpy, no
per-step loop). The same draws serve every interval and both modes. With these common random numbers
the curves are smooth and their differences are not noise. ETTR = useful compute seconds / wall
seconds. The run's end keeps all work done, because the job ends with a save."""
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from .collect import restart_cost
from .collect import young_daly as collect_young_daly  # the report's: one definition of C, R and M
from ..contracts import launch_snapshot
from ..contracts import metric_keys as K
from ..contracts.phase_summary import PhaseSummary, YoungDaly
from ..contracts.scenario_record import Program
from ..contracts.sim_result import ModeSweep, Replay, SweepRow
from ..contracts.summary import Summary, SummaryError


PREEMPT = "preempt"
KILL = "kill"
MAX_FAILURES = 5_000_000  # per replica: ~120 MB of draws


class SimulateError(ValueError):
    pass


@dataclass
class Costs:
    step_s: float
    sync_stall_s: float = 0.0
    async_stall_s: float = 0.0
    async_durable_s: float = 0.0
    interference: float = 0.0
    restart_s: float = 0.0
    gap_s: float = 0.0
    detection_s: Dict[str, float] = field(default_factory=lambda: {"kill": 0.0})
    sources: Dict[str, str] = field(default_factory=dict)  # figure -> where it came from

    def save_cost(self, mode: str) -> float:
        return self.sync_stall_s if mode == "sync" else self.async_stall_s


@dataclass
class Failures:
    mtbf_s: float                      # the job's mean time between interruptions
    kinds: Dict[str, float] = field(default_factory=lambda: {"kill": 1.0})  # weights

    @staticmethod
    def at_scale(node_mtbf_s: float, nodes: int, kinds=None, correlated: float = 0.0, burst: int = 1):
        """The job's failures from the per-node MTBF x node count.

        The job sees nodes/node_mtbf node failures per second. A fraction `correlated` of
        interruptions take `burst` nodes at once: one interruption for several node failures."""
        per_event = 1.0 + correlated * (burst - 1)
        return Failures(node_mtbf_s * per_event / nodes, dict(kinds or {"kill": 1.0}))


# ---------------------------------------------------------------- one segment, vectorized
def _cycle(costs: Costs, interval: int, mode: str):
    """(work per cycle W, cycle wall length L, durable offset B after the stage ends)."""
    w = interval * costs.step_s
    if mode == "sync":
        return w, w + costs.sync_stall_s, 0.0
    bg = max(costs.async_durable_s - costs.async_stall_s, 0.0)
    work_wall = w + min(bg, w) * costs.interference
    return w, costs.async_stall_s + max(work_wall, bg), bg


def _work_done(t, costs, w, L):
    """Work (compute seconds) done by time t after a launch, saved or not."""
    x = np.maximum(t - costs.restart_s, 0.0)
    full = np.floor(x / L)
    return full * w + np.minimum(x - full * L, w)


def _kept(t, kinds_idx, preempt_idx, costs, w, L, B):
    """Work that survives a failure at t: that of the checkpoints durable before t (a preempt's
    emergency checkpoint keeps everything done)."""
    n = np.floor(np.maximum(t - costs.restart_s - B, 0.0) / L)
    kept = n * w
    if preempt_idx is not None:
        pre = kinds_idx == preempt_idx
        kept = np.where(pre, _work_done(t, costs, w, L), kept)
    return kept


@dataclass
class RunResult:
    """One replica of a simulated run."""
    ettr: float
    failures: int
    lost_s: float       # work done and lost to the failures
    downtime_s: float   # restarts, detections and gaps
    useful_s: float


def simulate_run(costs: Costs, fail: Failures, interval: int, mode: str, hours: float,
                 draws: "Draws") -> RunResult:
    """One replica (its `draws`) of a run of `hours` wall hours at this interval and mode."""
    horizon = hours * 3600.0
    w, L, B = _cycle(costs, interval, mode)
    t, k = draws.t, draws.kind
    det = draws.detection
    pre = draws.preempt_idx
    extra = np.where(k == pre, costs.sync_stall_s if mode == "sync" else costs.async_durable_s, 0.0) \
        if pre is not None else 0.0
    seg = t + det + costs.gap_s + extra               # wall of each failed segment
    ends = np.cumsum(seg)
    m = int(np.searchsorted(ends, horizon, side="right"))  # failures that fit in the run
    if m == len(t):
        raise SimulateError("internal: too few failure draws for the horizon")
    kept = _kept(t[:m], k[:m], pre, costs, w, L, B)
    done = _work_done(t[:m], costs, w, L)
    start_last = ends[m - 1] if m else 0.0
    last = float(_work_done(np.array([horizon - start_last]), costs, w, L)[0])
    useful = float(kept.sum()) + last
    down = float((np.minimum(t[:m], costs.restart_s) + det[:m] + costs.gap_s).sum()) + \
        min(horizon - start_last, costs.restart_s)
    return RunResult(ettr=useful / horizon, failures=m, lost_s=float((done - kept).sum()), downtime_s=down,
                     useful_s=useful)


@dataclass
class Draws:
    t: np.ndarray
    kind: np.ndarray
    detection: np.ndarray
    preempt_idx: Optional[int]


def draw(costs: Costs, fail: Failures, hours: float, rng: np.random.Generator) -> Draws:
    """Enough exponential times to failure (and kinds) to cover `hours` with room to spare."""
    names = list(fail.kinds)
    p = np.array([fail.kinds[n] for n in names], dtype=float)
    p /= p.sum()
    expect = hours * 3600.0 / fail.mtbf_s
    if expect > MAX_FAILURES:
        raise SimulateError(f"{expect:,.0f} failures per replica (a {fail.mtbf_s:g} s MTBF over {hours / 24:g} "
                            f"days): more than {MAX_FAILURES:,}; shorten --days or check the MTBF")
    n = int(expect + 10 * math.sqrt(expect + 1) + 20)
    t = rng.exponential(fail.mtbf_s, n)
    kind = rng.choice(len(names), size=n, p=p)
    missing = [x for x in names if x not in costs.detection_s]
    if missing:
        raise SimulateError(f"no detection time for failure kind(s) {', '.join(missing)}: give "
                            f"--detection {missing[0]}=SECONDS")
    det = np.array([costs.detection_s[x] for x in names])[kind]
    return Draws(t, kind, det, names.index(PREEMPT) if PREEMPT in names else None)


def sweep(costs: Costs, fail: Failures, intervals: Sequence[int], modes=("sync", "async"),
          days: float = 30.0, replicas: int = 20, seed: int = 0) -> Dict[str, ModeSweep]:
    """ETTR per (mode, interval): mean over replicas and a 95% confidence half-width."""
    rng = np.random.default_rng(seed)
    hours = days * 24.0
    reps = [draw(costs, fail, hours, rng) for _ in range(replicas)]
    out: Dict[str, ModeSweep] = {}
    for mode in modes:
        rows = []
        for iv in intervals:
            runs = [simulate_run(costs, fail, iv, mode, hours, d) for d in reps]
            e = np.array([r.ettr for r in runs])
            half = 1.96 * e.std(ddof=1) / math.sqrt(len(e)) if len(e) > 1 else float("nan")
            rows.append(SweepRow(interval_steps=iv, interval_s=iv * costs.step_s, ettr=float(e.mean()),
                                 ci95=float(half),
                                 failures_per_day=float(np.mean([r.failures for r in runs])) / days,
                                 lost_h_per_day=float(np.mean([r.lost_s for r in runs])) / 3600 / days,
                                 downtime_h_per_day=float(np.mean([r.downtime_s for r in runs])) / 3600 / days))
        best = max(rows, key=lambda r: r.ettr)
        yd = young_daly(costs, fail, mode)
        out[mode] = ModeSweep(rows=rows, best=best, young_s=yd.young_s, daly_s=yd.daly_s)
    return out


# ---------------------------------------------------------------- analytic references
def young_daly(costs: Costs, fail: Failures, mode: str) -> YoungDaly:
    """Young's and Daly's intervals, in seconds of work between saves.

    Young: sqrt(2 C M). Daly's first-order refinement: sqrt(2 C (M + R)) - C. C is the loop's stall
    per save, R the downtime per failure."""
    r = restart_cost(costs.restart_s, costs.gap_s, _mean_detection(costs, fail))
    return collect_young_daly(costs.save_cost(mode), r, fail.mtbf_s)


def _mean_detection(costs: Costs, fail: Failures) -> float:
    tot = sum(fail.kinds.values())
    return sum(w / tot * costs.detection_s.get(k, 0.0) for k, w in fail.kinds.items())


def renewal_ettr(costs: Costs, fail: Failures, interval: int, mode: str = "sync") -> float:
    """Exact long-run ETTR of the model for exponential failures and kill-like kinds (renewal-
    reward: expected kept work per segment / expected segment length)."""
    w, L, B = _cycle(costs, interval, mode)
    lam = 1.0 / fail.mtbf_s
    q = math.exp(-lam * L)
    kept = w * math.exp(-lam * (costs.restart_s + B)) * q / (1.0 - q)
    return kept / (fail.mtbf_s + _mean_detection(costs, fail) + costs.gap_s)


def first_order_ettr(costs: Costs, fail: Failures, interval: int, mode: str = "sync") -> float:
    """The textbook first-order model: (W / L) x (1 - (R + D + G + B + L/2) / M). Its error is of
    order ((R + L) / M)^2."""
    w, L, B = _cycle(costs, interval, mode)
    down = costs.restart_s + _mean_detection(costs, fail) + costs.gap_s + B + L / 2
    return (w / L) * (1.0 - down / fail.mtbf_s)


def default_intervals(costs: Costs, fail: Failures, n: int = 20) -> List[int]:
    """n intervals (in steps), log-spaced from a tenth to ten times Young's, whole and distinct."""
    ys = [y for y in (young_daly(costs, fail, m).young_s for m in ("sync", "async")) if y]
    y = min(ys) if ys else 100 * costs.step_s
    lo, hi = max(costs.step_s, y / 10), max(costs.step_s, y * 10)
    steps = sorted({max(1, round(x / costs.step_s)) for x in np.geomspace(lo, hi, n)})
    return steps


# ---------------------------------------------------------------- measured costs
def load_summary(path: str) -> Dict[str, PhaseSummary]:
    """{phase name: phase summary} from a report's summary; a clear error otherwise."""
    try:
        return Summary.read(path).by_phase()
    except SummaryError as e:
        raise SimulateError(str(e)) from None


def _median(xs):
    """The median of the numbers among xs (None if there are none)."""
    xs = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(xs) if xs else None


def costs_from_summary(path: str, phases: Optional[Sequence[str]] = None) -> Costs:
    """Costs from a report's summary, from only the phases named, if given.

    The step time comes from the baseline, else from the first phase with steps. The sync stall comes
    from a phase with sync saves. The async stall (stage + drain) and durability (save -> .complete)
    come from a phase with async saves. Restart, relaunch gap and detection per kind are medians over
    the phases' failures."""
    allp = load_summary(path)
    use = {n: p for n, p in allp.items() if not phases or n in phases}
    if phases and not use:
        raise SimulateError(f"{path}: no phase named {', '.join(phases)} (has: {', '.join(allp)})")
    src: Dict[str, str] = {}
    with_steps = [(n, p) for n, p in allp.items() if p.steps and p.productive_s]
    # the baseline: the phase with checkpoint: none (the report records each phase's mode)
    found = next(((n, q) for n, q in with_steps if q.checkpoint == "none"), with_steps[0] if with_steps else None)
    if found is None:
        raise SimulateError(f"{path}: no phase with steps and productive_s: cannot tell the step time")
    name, p = found
    c = Costs(step_s=p.productive_s / p.steps, sources=src)
    src["step_s"] = f"{path}: {name} productive_s / steps"
    for n, ph in use.items():
        s = ph.saves(K.SAVE_S).median
        if s is not None and "sync_stall_s" not in src:
            c.sync_stall_s, src["sync_stall_s"] = s, f"{path}: {n} save.ckpt_save_seconds median"
        st = ph.saves(K.STAGE_S).median
        if st is not None and "async_stall_s" not in src:
            c.async_stall_s = st + (ph.saves(K.DRAIN_S).median or 0.0)
            src["async_stall_s"] = f"{path}: {n} save stage + drain medians"
            fin = ph.finalize.median
            if fin is not None:
                c.async_durable_s = fin
                src["async_durable_s"] = f"{path}: {n} finalize (save -> .complete) median"
            if ph.interference:
                slow = ph.interference.slowdown
                c.interference = max(0.0, slow)
                src["interference"] = (f"{path}: {n} mean step time beside a background save / "
                                       f"without one - 1 ({slow:+.3f})")
    evs = [e for ph in use.values() for e in ph.failures]
    for key, attr in (("restart_s", "restart_s"), ("launch_gap_s", "gap_s")):
        v = _median(getattr(e, key) for e in evs)
        if v is not None:
            setattr(c, attr, v)
            src[attr] = f"{path}: median {key} over {len(evs)} failure(s)"
    kinds = {e.kind or "kill" for e in evs}
    det = {k: _median(e.detection_s for e in evs if (e.kind or "kill") == k) for k in kinds}
    det = {k: v for k, v in det.items() if v is not None}
    if det:
        c.detection_s = det
        src["detection_s"] = f"{path}: median detection_s per kind"
    return c


# ---------------------------------------------------------------- replay of a measured phase
@dataclass
class FaultCosts:
    """What one measured failure cost, where it was measured (None: the medians stand in, and for
    kept_steps the model's own lost work)."""
    restart_s: Optional[float] = None
    detection_s: Optional[float] = None
    gap_s: Optional[float] = None
    kept_steps: Optional[int] = None


@dataclass
class Fault:
    """A failure to replay: seconds from the end of its attempt's first step, its kind, its own costs."""
    t: float
    kind: str = "kill"
    own: FaultCosts = field(default_factory=FaultCosts)


@dataclass
class ReplayRun:
    wall_s: float
    ettr: float      # 0 for a run with no work and no wall (replay refuses a phase without steps)
    failures: int


def replay_run(costs: Costs, mode: str, interval: int, total_steps: int, faults: Sequence[Fault],
               cold_start_s: float, exit_s: Optional[float] = None) -> ReplayRun:
    """The model run once, deterministically, with the failures a real phase had.

    Each failure uses its own measured costs where it has them. The first attempt reaches the end of
    its first step in `cold_start_s`, with no checkpoint to load. Every later one reaches it in its
    restart. Both include that step, as the report's restart does. So one step moves from start-up to
    training: the save cycles of a resumed attempt start with its first step.

    Wall is each failed attempt (start-up, training until the fault, detection) and its gap. Add the
    last attempt: start-up, the remaining steps and their saves. With async, add the last save's
    background before exit.

    `exit_s` is the last attempt's measured time from its last step to its end. It covers its exit,
    the launcher's teardown and an async save's background. It takes the place of the model's
    background."""
    w, L, B = _cycle(costs, interval, mode)
    total = total_steps * costs.step_s
    kept = wall = 0.0
    start = cold_start_s - costs.step_s
    run = Costs(**dict(asdict(costs), restart_s=0.0))  # times below are from the first step
    for fault in faults:
        own, kind = fault.own, fault.kind
        ta = np.array([max(float(fault.t) + costs.step_s, 0.0)])
        detection = own.detection_s if own.detection_s is not None else \
            costs.detection_s.get(kind, costs.detection_s.get(KILL, 0.0))
        if kind == PREEMPT:
            k = float(_work_done(ta, run, w, L)[0])
            wall += costs.sync_stall_s if mode == "sync" else costs.async_durable_s
        else:
            k = float(_kept(ta, np.array([0]), None, run, w, L, B)[0])
        if own.kept_steps is not None:
            k = own.kept_steps * costs.step_s
        kept = min(total, kept + k)
        wall += start + float(ta[0]) + detection + (own.gap_s if own.gap_s is not None else costs.gap_s)
        start = (own.restart_s if own.restart_s is not None else costs.restart_s) - costs.step_s
    rest = total - kept
    saves = math.ceil(rest / w - 1e-9) if rest > 0 else 0
    wall += start + rest + saves * (L - w) + (exit_s if exit_s is not None else (B if saves else 0.0))
    return ReplayRun(wall_s=wall, ettr=total / wall if wall else 0.0, failures=len(faults))


def _program_interval(expt, phase: str, program: Program) -> int:
    """A program's save interval, read from its checkpoints.

    The program's own arguments set it, and restartlab does not parse them. So the interval comes from
    the steps of the checkpoints in the phase's checkpoint dir (the one its launches recorded)."""
    from .. import programs
    ph = expt.phase(phase)
    ckpt_dir = ph.ckpts  # unless its first launch recorded another (every launch records the same)
    snap = launch_snapshot.read(ph.attempt(1).at_launch)
    ckpt_dir = (snap.ckpt_dir if snap else None) or ckpt_dir
    interval = programs.save_interval(programs.list_ckpts(programs.resolve(program), ckpt_dir))
    if not interval:
        raise SimulateError(f"{ckpt_dir}: no checkpoint of phase {phase} whose step is known, to read the "
                            f"program's save interval from (trainer.program.checkpoints)")
    return interval


def replay(expt_dir: str, phase: str) -> Replay:
    """Simulated vs measured ETTR of one phase of a finished experiment.

    The inputs are the phase's own. Its measured costs come from the report's summary: its step time,
    save cost, restarts, gaps and detections, and its first attempt's cold start. The save interval
    and steps come from its scenario. The failure times are its actual ones.

    The model runs twice:

    - `simulated_*` gives each failure its own measured restart, gap, detection and steps kept. This
      checks the model's accounting of start-ups, saves and the remaining work.
    - `median_*` gives every failure the medians and the model's own lost work, as a forecast from the
      report would.

    In `median_*` the lost work is the model's, from the failure's time. A kill gated on a save's
    `.complete` lands at a cycle's edge. There a step-time spread of 1% can move it a whole interval
    (10 steps, ~2% of a short phase). The medians also add the spread of the restarts. On a shared
    machine that can move a few-failure phase by several percent."""
    from . import collect
    from .. import scenario
    from ..contracts import layout
    expt = layout.Expt(expt_dir)
    summary = expt.summary
    phases = load_summary(summary)
    if phase not in phases:
        raise SimulateError(f"{summary}: no phase {phase!r} (has: {', '.join(phases)})")
    ph = phases[phase]
    try:
        sc = scenario.read_resolved(expt.scenario)
        mode = next(p.checkpoint for p in sc.phases if p.name == phase)
        program = sc.trainer.program
        interval, steps = (None, program.steps) if program else (sc.trainer.save_interval, sc.trainer.train_iters)
    except (scenario.ScenarioError, StopIteration) as e:
        raise SimulateError(f"{expt.scenario}: cannot read phase {phase}'s checkpoint mode, "
                            f"trainer.save_interval and trainer.train_iters ({type(e).__name__}: {e})") from None
    if mode not in ("sync", "async"):
        raise SimulateError(f"phase {phase} saves no checkpoints (checkpoint: {mode}): nothing to replay")
    if program:  # its own program's saves: the interval its checkpoints show
        interval = _program_interval(expt, phase, program)
    if not ph.steps or not ph.productive_s:
        raise SimulateError(f"{summary}: phase {phase} has no productive steps to replay")
    costs = costs_from_summary(summary, [phase])
    costs.step_s = ph.productive_s / ph.steps  # its own step time
    costs.sources["step_s"] = f"{summary}: {phase} productive_s / steps"
    # that mean already holds the slowdown of the steps beside a save: not a second time
    costs.interference, costs.sources["interference"] = 0.0, "in the phase's own mean step time"
    attempts = collect.load_phase(phase, phase_dir=expt.phase(phase).path).attempts
    first = attempts[0] if attempts else None
    if first is None or first.first_ts is None or first.launch_ts is None:
        raise SimulateError(f"{expt_dir}/{phase}: its first attempt has no launch time or first step")
    faults = []
    for ev in ph.failures:  # not `e`: the except clause above binds that name
        if not 1 <= ev.attempt <= len(attempts):
            raise SimulateError(f"{summary}: phase {phase} has a failure whose attempt it does not have ({ev.attempt})")
        a = attempts[ev.attempt - 1]
        if ev.kill_ts is None and a.first_ts is not None:
            raise SimulateError(f"{summary}: phase {phase}'s failure of attempt {ev.attempt} has no time")
        own = FaultCosts(restart_s=ev.restart_s, gap_s=ev.launch_gap_s, detection_s=ev.detection_s,
                         kept_steps=ev.resumed_from - (a.resumed_from or 0))
        # an attempt that died before its first step spent all of it starting up
        faults.append(Fault(ev.kill_ts - a.first_ts if ev.kill_ts is not None and a.first_ts is not None else 0.0,
                            ev.kind or KILL, own))
    cold = first.first_ts - first.launch_ts
    # The phase's wall runs to its last attempt's end, so the time after its last step is its own.
    # It took 0.14-0.24 s in 7 local-scenario runs here, beside a busy process. It grows with the load.
    last = attempts[-1]
    exit_s = max(0.0, last.end_ts - last.last_ts) if last.end_ts and last.last_ts and last.completed else None
    assert interval is not None  # the scenario's, or read from the program's checkpoints above
    sim = replay_run(costs, mode, interval, steps, faults, cold, exit_s)
    med = replay_run(costs, mode, interval, steps, [Fault(f.t, f.kind) for f in faults], cold, exit_s)
    measured = ph.ettr

    def err(x):
        return (x / measured - 1) if measured and x else None
    return Replay(phase=phase, mode=mode, interval_steps=interval, steps=steps,
                  failures=len(faults), simulated_ettr=sim.ettr, simulated_wall_s=sim.wall_s,
                  measured_ettr=measured, measured_wall_s=ph.wall_s, relative_error=err(sim.ettr),
                  median_ettr=med.ettr, median_wall_s=med.wall_s, median_relative_error=err(med.ettr),
                  exit_s=exit_s, costs=asdict(costs))
