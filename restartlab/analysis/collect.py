"""Read an experiment once into attempt records, then account for it (pure numbers).

The read model: `load_phase` opens every file of a phase once. Those files are:
  - each attempt's record, launch record, launch snapshot, output and rank 0's metrics stream
  - the phase's injections, node checks, end records and checkpoint markers
It keeps what any judge needs in one `AttemptData` per launch and one `PhaseData` (what was measured).
`contracts.layout.Attempt` and `Phase` are where its files lie.
`survival` and `report` judge those records without opening a file.

Definitions (docs/design.md):
  lost steps  = last step completed before the kill - step of the checkpoint resumed from
  downtime    = first step completed after the resume - kill time
  recompute   = time from that first step to the step that equals the last step before the kill.
                It is the rest of the steps computed twice. The first one is inside downtime.
  overhead    = wall(phase) - wall(baseline) = downtime + recompute + save stalls + residual
  ETTR        = productive time / wall time; productive = train/dt of every step that was kept
Each metrics file is streamed once, with constant memory per row. What is kept:
  - one number per save
  - a bounded, thinned (time, step) trace per attempt, for the plots
  - the loss of each step, only for a comparison with the baseline"""
import heapq
import math
import os
import re
import statistics
from array import array
from bisect import bisect_left, bisect_right
from itertools import chain
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, cast

from ..contracts import ckptdir, launch_snapshot, layout, state_record
from ..contracts.launch_snapshot import LaunchSnapshot
from ..contracts.attempts import (INJECTION_SLACK_S, AttemptRecord, LaunchRecord, NotARecord, completed_row, injected,
                                  injections_into, phase_end, PhaseOutcome)
from ..contracts.jsonvalue import number as _num  # the records' rule for a number, on every row too
from ..programs.base import clean_line
from ..contracts.injections import Injection
from ..contracts import iofaults, jobruns
from ..contracts.jobruns import JobRun
from ..contracts.iofaults import IOFaultEvent
from ..contracts.receipts import NodeCheck
from ..contracts.faultlog import FaultLog
from ..contracts.live import Malformed, bad_nodes_between, read_injections, read_node_checks, read_typed
from ..contracts import metric_keys as K
from ..contracts.metrics_row import read_line
from ..contracts.phase_summary import (ExpectedLoss, FailureEvent, Handover, Interference, KindStats, Overhead,
                                       PhaseSummary, Quantiles, RequeueParts, WalltimeStop, YoungDaly, save_figure)
from . import netfaults, storagefaults
from .runs import rerun, run_record

GAPS = 64             # the longest gaps between steps kept per attempt (analysis/netfaults.py)
TRACE_POINTS = 20000  # per phase (split over its attempts, at least 50 each), for the progress plot
SAVE_KEYS = (K.SAVE_S, K.STAGE_S, K.DRAIN_S)


@dataclass
class AttemptData:
    """One launch, as the analysis knows it: everything its files say, read once."""
    index: int
    path: str                             # rank 0's metrics file
    number: Optional[int] = None          # its directory's number (attempts/<k>), when read from one
    record: Optional[AttemptRecord] = None         # the supervisor's record of it (None: none)
    at_launch: Optional[LaunchSnapshot] = None  # the checkpoints its launch found (layout.Attempt.at_launch)
    first_row: Optional[dict] = None      # the first metrics row with a step and a loss
    last_row: Optional[dict] = None       # the last good metrics row (the final one: a checksum)
    error: Optional[str] = None           # the line of its output naming a crash (not completed)
    launch_ts: Optional[float] = None
    end_ts: Optional[float] = None
    exit_code: Optional[int] = None
    recorded: bool = False                # the supervisor's record was read (its verdict stands)
    completed: bool = False
    hang: bool = False                    # the relaunch loop's watchdog stopped it
    preempted: bool = False               # the trainer stopped on the preemption signal (exit 5)
    timed_out: bool = False               # a rank's process-group timeout fired
    walltime: bool = False                # the job script's walltime warning stopped it
    hosts: Optional[List[str]] = None     # the nodes it ran on (node-check chose them), if known
    unrecorded: bool = False              # it has a launch record but no end record (cut short with its job)
    ranks: Optional[int] = None
    warm_ranks: Optional[int] = None      # ranks forked by the warm standby pools (None: cold phase)
    job: Optional[str] = None             # the batch job it ran in (a chain has several)
    job_start: Optional[float] = None     # when that run of the job began (a requeued job runs again)
    emergency_step: Optional[int] = None  # the step of its emergency checkpoint (train/preempted)
    resumed_from: int = 0
    first_ts: Optional[float] = None      # first step completed in this attempt
    first_iter: Optional[int] = None
    last_iter: int = 0                    # last step completed (logged by rank 0)
    last_ts: Optional[float] = None
    restart_seconds: Optional[float] = None
    startup: Dict[str, float] = field(default_factory=dict)
    kept_dt: float = 0.0                  # sum of train/dt of steps that were not recomputed later
    ts_at: Dict[int, float] = field(default_factory=dict)  # ts of requested iters only
    gaps: List[tuple] = field(default_factory=list)        # the GAPS longest (gap s, ts before, ts after, step
                                                           # before) between two steps rank 0 logged: stand-stills
    hang_ts: Optional[float] = None       # when the watchdog decided to stop it (its hang marker's time)
    unreached: List[str] = field(default_factory=list)     # nodes its teardown could not reach
    failed_saves: List[tuple] = field(default_factory=list)  # (step, error) of each save that failed (no .complete)
    evidence: Optional[tuple] = None      # no end record: (time, what) of the last thing it left, its end
    evidence_seen: List[tuple] = field(default_factory=list)  # (time, what) of each file it left (_ends)
    trace: List[tuple] = field(default_factory=list)       # (ts, iter), thinned to < 2*trace_cap
    trace_cap: int = 1000
    trace_stride: int = 1
    trace_seen: int = 0
    state: Dict[int, list] = field(default_factory=dict)  # {rank: its StateRecords} (load_phase(losses=True))

    @property
    def last_step(self) -> Optional[int]:
        """The last step it completed, None if it completed none."""
        return self.last_iter if self.first_ts is not None else None

    def add_trace(self, ts, it):
        """Keep every trace_stride-th step; when the buffer fills, drop every other point and
        double the stride. Memory stays bounded however long the attempt is."""
        if self.trace_seen % self.trace_stride == 0:
            self.trace.append((ts, it))
            if len(self.trace) >= 2 * self.trace_cap:
                self.trace = self.trace[::2]
                self.trace_stride *= 2
        self.trace_seen += 1


@dataclass
class PhaseData:
    name: str
    attempts: List[AttemptData] = field(default_factory=list)
    injections: List[Injection] = field(default_factory=list)
    # one 8-byte double per save (exact median/p90); saves are a small fraction of rows
    saves: Dict[str, "array"] = field(default_factory=lambda: {k: array("d") for k in SAVE_KEYS})
    saves_estimated: int = 0  # of them, estimated from the step times (a program's save-start line)
    finalize: List[float] = field(default_factory=list)
    node_checks: List[NodeCheck] = field(default_factory=list)
    faults: List[FaultLog] = field(default_factory=list)  # the network faults' restorers' lines (layout.Phase.faults)
    iofaults: List[IOFaultEvent] = field(default_factory=list)  # the storage faults' events (layout.Phase.iofaults)
    storage_strikes: List[Injection] = field(default_factory=list)  # as armed (injections: as they struck)
    job_runs: List[JobRun] = field(default_factory=list)  # what the scheduler said of each rerun (layout.Expt.job_runs)
    # step time beside a background save vs without one: [count, sum] each (first steps left out)
    dt_busy: List[float] = field(default_factory=lambda: [0, 0.0])
    dt_idle: List[float] = field(default_factory=lambda: [0, 0.0])
    warnings: List[str] = field(default_factory=list)
    ended: Optional[PhaseOutcome] = None  # how its latest supervisor ended (contracts/attempts.py: phase_end)
    losses: Optional[Dict[int, float]] = None  # {step: loss} of the steps it kept (losses=True)
    losses_logged: bool = False           # some came from the program's own log line (rounded as it prints them)
    _kill_index: Optional[tuple] = field(default=None, repr=False)

    def kills(self, t0, t1, number=None) -> List[Injection]:
        """The injections that struck attempt `number`, which ran from t0 to t1, in the injector's order.

        It follows attempt.injected's rule: by the attempt a record names, else by its time. It reads an
        index built once (by attempt, the others by time), not a scan of every record per attempt."""
        if number is None:
            return injections_into(self.injections, t0, t1)
        if self._kill_index is None:
            tagged: Dict[int, list] = {}
            timed = []
            for i, r in enumerate(self.injections):
                if not r.struck:
                    continue
                if r.attempt is not None:
                    tagged.setdefault(r.attempt, []).append((i, r))
                elif r.time is not None:
                    timed.append((r.time, i, r))
            timed.sort(key=lambda x: (x[0], x[1]))
            self._kill_index = (tagged, [t for t, _, _ in timed], [(i, r) for _, i, r in timed])
        tagged, times, timed = self._kill_index
        hits = list(tagged.get(number, []))
        if t0 is not None and t1 is not None:
            lo, hi = bisect_left(times, t0), bisect_right(times, t1 + INJECTION_SLACK_S)
            hits += [x for x in timed[lo:hi] if injected(x[1], t0, t1, number)]
        return [r for _, r in sorted(hits, key=lambda x: x[0])]


def iter_rows(path, warnings):
    """(line number, metrics dict, timestamp) for each good line (contracts/metrics_row); garbage is
    reported and skipped. A last line without its newline is an attempt killed mid-write: named, not
    called malformed."""
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            try:
                m, ts = read_line(line)
            except (ValueError, KeyError, TypeError) as e:
                if not line.strip():
                    continue
                torn = not line.endswith("\n")
                warnings.append(f"{path}:{n}: skipped a torn last line (killed mid-write)" if torn else
                                Malformed(f"{path}:{n}: skipped a malformed line ({type(e).__name__}: {str(e)[:80]})"))
                continue
            yield n, m, ts


class _Rows:
    """One attempt's rank-0 metrics, opened once: its first training row can be looked at (where the
    attempt resumed from, which the attempt before it needs) before the rest is streamed. What the
    look ahead finds wrong is told when the stream reaches it, in the file's order."""

    def __init__(self, path) -> None:
        self._said: list = []          # warnings until the stream starts
        self._to = self._said
        self._rows = iter_rows(path, self)
        self._seen: list = []

    def append(self, warning) -> None:
        self._to.append(warning)

    def stream(self, warnings: list):
        """Every row, the looked-at ones first; warnings into `warnings` from here on."""
        warnings.extend(self._said)
        self._to = warnings
        seen, self._seen = self._seen, []
        return chain(seen, self._rows)

    def first(self) -> Optional[dict]:
        for row in self._rows:
            self._seen.append(row)
            if K.ITER in row[1] and K.LOSS in row[1]:
                return row[1]
        return None


def _finalize_latencies(ckpt_dir, warnings) -> List[float]:
    """save start -> .complete of every complete checkpoint (from the bundled trainer's markers;
    an empty marker is another program's, ezpz's say, with nothing to time)."""
    out = []
    for c in ckptdir.complete_markers(ckpt_dir):
        try:
            marker = ckptdir.read_marker(c)
        except OSError:
            warnings.append(f"{c}: unreadable marker")
            continue
        except ValueError:  # not a marker's JSON: no times in it, named below as malformed
            marker = ckptdir.Marker()
        if marker is None:
            continue
        if marker.finalize_s is None:
            warnings.append(Malformed(f"{c}: malformed marker (no complete_ts/save_start numbers)"))
        else:
            out.append(marker.finalize_s)
    return out


def _attempt_from_dir(a: AttemptData, att: layout.Attempt, warnings) -> None:
    """The attempt's record (the supervisor's), or without one its launch record, and its launch snapshot.

    For an attempt that did not complete, also what its output says (one read)."""
    a.at_launch = launch_snapshot.read(att.at_launch)
    _read_record(a, att, warnings)
    try:  # the watchdog's decision, made before its stop: there even when its supervisor died in the stop
        a.hang_ts = os.stat(att.hang).st_mtime
        a.hang = True
    except OSError:
        pass
    if not a.recorded:  # cut short with its job: its end is the last thing it left (load_phase decides)
        a.evidence_seen = _evidence(att)
    a.unreached = _unreached(att.teardown_log)
    if not a.completed:
        seen, a.error = _read_output(att.output)
        a.timed_out = seen and a.recorded


EVIDENCE = (("output", "its output's last write"), ("teardown_log", "its teardown's last line"),
            ("hang", "the watchdog's decision"))


def _evidence(att: layout.Attempt) -> List[tuple]:
    """(time, what) of each file an attempt without an end record left.

    Its end is the newest of them and its last step that falls inside its span (_ends)."""
    seen = []
    for name, what in EVIDENCE:
        try:
            seen.append((os.stat(getattr(att, name)).st_mtime, what))
        except OSError:
            continue
    return seen


def _ends(atts: List["AttemptData"]) -> None:
    """Each attempt without an end record ends at its last sign of life.

    That is the newest of its last step and the files it left, between its launch and the next
    attempt's. A file's time outside that span (a copy's, say) is no evidence."""
    for i, a in enumerate(atts):
        if a.recorded:
            continue
        hi = atts[i + 1].launch_ts if i + 1 < len(atts) else None
        seen = [(t, w) for t, w in a.evidence_seen
                if (a.launch_ts is None or t >= a.launch_ts) and (hi is None or t <= hi)]
        if a.last_ts is not None:
            seen.append((a.last_ts, "its last step"))
        if seen:
            a.evidence = max(seen)
            a.end_ts = a.evidence[0]


UNREACHABLE = re.compile(r"; unreachable: ([^;]+)")


def _unreached(path) -> List[str]:
    """The nodes an attempt's teardown log names unreachable (runtime/teardown.py's line)."""
    try:
        with open(path, errors="replace") as f:
            found = [h.strip() for m in UNREACHABLE.finditer(f.read()) for h in m.group(1).split(",")]
    except OSError:
        return []
    return sorted(set(found))


def _read_record(a: AttemptData, att: layout.Attempt, warnings) -> None:
    """Launch/end time, exit code and completion from the attempt's record.

    Without one (cut short with its job), its launch, job and job run come from its launch record."""
    try:
        rec = AttemptRecord.read(att)
    except NotARecord as e:
        warnings.append(Malformed(f"{att.record}: malformed ({e})"))
        return
    if rec is None:
        a.unrecorded = True  # warned of in load_phase unless its job ran again (the report tells that)
        launch = LaunchRecord.read(att)
        if launch is None:
            return
        a.launch_ts, a.job, a.job_start = launch.launch_ts, launch.job, launch.job_start
        if os.path.exists(att.hosts):
            with open(att.hosts) as f:
                a.hosts = [h.strip() for h in f if h.strip()]
        return
    a.record = rec
    a.recorded = True
    a.launch_ts, a.end_ts = rec.launch_ts, rec.end_ts
    a.exit_code, a.completed = rec.exit_code, rec.completed
    a.hang, a.preempted, a.walltime = rec.hang, rec.preempted, rec.walltime
    a.hosts = rec.hosts if rec.hosts is not None else a.hosts
    a.job = rec.job if rec.job is not None else a.job
    a.job_start, a.ranks, a.warm_ranks = rec.job_start, rec.ranks, rec.warm_ranks


PG_TIMEOUT = b"Timed out waiting"  # what gloo says when a collective's peer never came
# A line of a crashed program's output that says why: an exception with its message, a C++
# exception's what(), or a fatal signal's line. The first of them is the cause, the rest its echo.
ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception|EnforceNotMet)\b.*?:\s*\S|\bwhat\(\):\s*\S|Segmentation fault|"
                        r"\bFatal Python error\b")
TAIL_BYTES = 256 * 1024


def _read_output(path, chunk: int = 1 << 20) -> tuple:
    """One pass over a (possibly large) launcher output: (whether it mentions PG_TIMEOUT, the first
    line in its last TAIL_BYTES that names a crash, or None)."""
    seen, tail = False, b""
    try:
        with open(path, "rb") as f:
            while True:
                b = f.read(chunk)
                if not b:
                    break
                buf = tail + b
                seen = seen or PG_TIMEOUT in buf
                tail = buf[-TAIL_BYTES:]
    except OSError:
        return False, None
    return seen, error_line(tail.decode("utf-8", "replace"))


OURS = "restartlab:"  # how restartlab's own notes in a rank's output begin (never the program's crash)


def error_line(text: str, width: int = 300) -> Optional[str]:
    """The first line of `text` (an output's tail) that names a crash, cut to `width`, or None.

    restartlab's own notes are passed over. "restartlab: ... off: ValueError: ..." says a probe or hook
    stood aside, and a crash after it is the program's."""
    for raw in text.splitlines():
        line = clean_line(raw)
        if ERROR_LINE.search(line) and not line.startswith(OURS):
            return line if len(line) <= width else line[:width - 3] + "..."
    return None


def _stream_attempt(a: AttemptData, rows, keep_upto, want, ph: PhaseData) -> None:
    """One pass over an attempt's rank-0 metrics: first/last step, kept step time, save costs (and
    each step's loss, when the phase keeps them)."""
    losses, busy, idle, saves = ph.losses, ph.dt_busy, ph.dt_idle, ph.saves
    ITER, LOSS, DT, INFLIGHT, PREEMPTED = K.ITER, K.LOSS, K.DT, K.CKPT_INFLIGHT, K.PREEMPTED  # locals: the hot loop
    LOGGED = K.LOSS_LOGGED
    m = None
    gaps, prev, floor = a.gaps, None, 0.0  # the longest gaps between steps, kept as a small heap
    for n, m, ts in rows:
        it = m.get(ITER)
        if it.__class__ is not int:
            if isinstance(it, float) and it.is_integer():
                it = int(it)
            if not isinstance(it, int) or isinstance(it, bool):
                if it is not None:
                    ph.warnings.append(Malformed(f"{a.path}:{n}: malformed train/iter {str(it)[:40]!r}: line skipped"))
                continue
        if LOSS in m:
            if a.first_ts is None:
                a.first_ts, a.first_iter = ts, it
                a.restart_seconds = _num(m.get(K.RESTART_S))
                a.startup = {k: v for k, v in m.items() if k.startswith(K.STARTUP) and _num(v) is not None}
                if a.launch_ts is None:
                    a.launch_ts = _num(m.get(K.STARTUP_LAUNCH_TS))
            if prev is not None and ts - prev[0] > floor:
                heapq.heappush(gaps, (ts - prev[0], prev[0], ts, prev[1]))
                if len(gaps) > GAPS:
                    heapq.heappop(gaps)
                    floor = gaps[0][0]
            prev = (ts, it)
            a.last_iter, a.last_ts = it, ts
            a.add_trace(ts, it)
            dt = m.get(DT, 0.0)
            if dt.__class__ is not float:
                dt = _num(dt)
            if dt is None:
                ph.warnings.append(Malformed(f"{a.path}:{n}: malformed train/dt {str(m.get(K.DT))[:40]!r}: counted as 0"))
            else:
                if it <= keep_upto:
                    a.kept_dt += dt
                if it != a.first_iter:  # an attempt's first step carries its warm-up
                    acc = busy if m.get(INFLIGHT) else idle
                    acc[0] += 1
                    acc[1] += dt
            if it in want:
                a.ts_at[it] = ts
            if losses is not None:
                loss = m[LOSS]
                if isinstance(loss, (int, float)) and not isinstance(loss, bool):
                    losses[it] = float(loss)
        elif LOGGED in m and losses is not None:  # the program's own log line's loss (its step from the probe)
            loss = _num(m[LOGGED])
            if loss is not None:
                losses[it] = loss
                ph.losses_logged = True
        if PREEMPTED in m and _num(m[PREEMPTED]) is not None:
            a.emergency_step = int(m[PREEMPTED])
        failed = m.get(K.CKPT_FAILED, m.get(K.CKPT_FAILED_STEP))
        if failed is not None and _num(failed) is not None:  # the bundled trainer's failed save (trainer/checkpoint.py)
            a.failed_saves.append((int(failed), str(m.get(K.CKPT_ERROR) or "")[:300]))
        for key in SAVE_KEYS:
            if key in m and _num(m[key]) is not None:
                saves[key].append(float(m[key]))
                ph.saves_estimated += m.get(K.SAVE_ESTIMATED) is True
        if not a.recorded and completed_row(m):  # ezpz files: no record, the final row decides
            a.completed = True
    a.last_row = m
    gaps.sort(reverse=True)
    if a.last_ts is not None and (not a.trace or a.trace[-1][1] != a.last_iter):
        a.trace.append((a.last_ts, a.last_iter))  # the plot ends where the attempt did
    if a.end_ts is None:
        a.end_ts = a.last_ts
    if a.launch_ts is None:
        a.launch_ts = a.first_ts


def load_phase(name, attempt_dirs=None, metrics_files=None, phase_dir=None, losses=False) -> PhaseData:
    """Either an experiment phase directory (attempts/<k>/...) or a list of ezpz JSONL files
    (one attempt each, in name order). Every file is opened once. `losses`: keep each kept step's
    loss (PhaseData.losses), for a comparison with the baseline."""
    ph = PhaseData(name, losses={} if losses else None)
    if phase_dir:
        lp = layout.Phase(phase_dir)
        attempt_dirs = lp.attempts()
        for x in lp.stray_entries():
            ph.warnings.append(Malformed(f"{x}: malformed attempts entry (not a numbered directory): ignored"))
        ph.injections = read_injections(phase_dir, ph.warnings)
        ph.node_checks = read_node_checks(phase_dir, ph.warnings)
        ph.faults = read_typed(lp.faults, FaultLog.from_json, "a network fault's record", ph.warnings)
        ph.iofaults = iofaults.read(lp.iofaults, ph.warnings)
        ph.storage_strikes, ph.injections = storagefaults.effective(ph.injections, ph.iofaults)
        ph.finalize = _finalize_latencies(lp.ckpts, ph.warnings)
        ph.ended = phase_end(lp)
    elif attempt_dirs:
        attempt_dirs = [layout.Attempt(d) for d in attempt_dirs]
    paths = [d.metrics(0) for d in attempt_dirs] if attempt_dirs else list(metrics_files or [])
    cap = max(50, TRACE_POINTS // max(1, len(paths)))
    atts = [AttemptData(i, p, trace_cap=cap) for i, p in enumerate(paths, 1)]
    for a in atts:
        if attempt_dirs:
            a.number = attempt_dirs[a.index - 1].index
            _attempt_from_dir(a, attempt_dirs[a.index - 1], ph.warnings)
            if losses:  # a comparison with the baseline: what each rank's training state was, step by step
                a.state = {r: state_record.read(f) for r, f in attempt_dirs[a.index - 1].state_files().items()}
    rows: List[Optional[_Rows]] = [None] * len(atts)

    def opened(k) -> Optional[_Rows]:
        """Attempt k's metrics, opened (at most two files at a time) and its first row read."""
        a = atts[k]
        if rows[k] is None and os.path.isfile(a.path):
            rows[k] = _Rows(a.path)
            a.first_row = rows[k].first()
            if a.first_row is not None:
                a.resumed_from = int(_num(a.first_row.get(K.RESUMED_FROM)) or 0)
        return rows[k]

    # one pass over each attempt, in order; the next one's first row says which steps it recomputes
    for k, a in enumerate(atts):
        mine = opened(k)
        if k + 1 < len(atts):
            opened(k + 1)
        if mine is None:
            ph.warnings.append(Malformed(f"{a.path}: malformed: not a file") if os.path.exists(a.path) else
                               f"{a.path}: missing (the attempt died before its first step?)")
            continue
        keep_upto = atts[k + 1].resumed_from if k + 1 < len(atts) else math.inf
        _stream_attempt(a, mine.stream(ph.warnings), keep_upto, {atts[k - 1].last_iter} if k > 0 else set(), ph)
        rows[k] = None
    ph.attempts = atts
    _ends(atts)
    if phase_dir and any(rerun(a, b) for a, b in zip(atts, atts[1:])):  # read only where a job ran again
        ph.job_runs = jobruns.read(layout.Expt(os.path.dirname(os.path.abspath(phase_dir))).job_runs, ph.warnings)
    for a, b in zip(atts, atts[1:] + [None]):
        # an attempt without an end record whose job ran again is explained (the report's between-runs line)
        if a.unrecorded and not (b is not None and rerun(a, b)):
            ph.warnings.append(f"{os.path.dirname(a.path)}: no readable attempt record")
    return ph


def _queue_wait(a: AttemptData, b: AttemptData) -> Optional[float]:
    """Attempt a's end -> b's launch when they ran in different jobs of a chain (None: the same job).
    Two runs of one job (the scheduler requeued it: same id, another start) are no chain: the time
    between them is the failure's (_rerun)."""
    if not (a.job and b.job and a.job != b.job):
        return None
    return (b.launch_ts - a.end_ts) if (b.launch_ts and a.end_ts) else 0.0


def handovers(ph: PhaseData) -> List[Handover]:
    """Where one job of a chain ended and the next took over. These are not failures.

    Each gives the queue wait between them and the steps the hand-over lost (0 after a walltime stop)."""
    ran = _ran(ph)
    return [Handover(attempt=a.index, from_job=a.job, to_job=b.job, queue_wait_s=_queue_wait(a, b),
                     walltime_stop=a.walltime, lost_steps=a.last_iter - b.resumed_from)
            for a, b in zip(ran, ran[1:]) if _queue_wait(a, b) is not None]


def _ran(ph: PhaseData) -> List[AttemptData]:
    """The attempts that left a record or a step. One with neither was cut short with its
    supervisor (its job killed or requeued before it started training): the failure before it is
    paired with the attempt that carried on (survival names the cut one)."""
    return [a for a in ph.attempts if a.recorded or a.first_ts is not None]


def failure_events(ph: PhaseData) -> List[FailureEvent]:
    """One event per attempt that ended without finishing and was followed by another.

    A chain's hand-over after a walltime stop is not a failure (see handovers). After a failure that
    used up the relaunch budget, the hand-over is one, and the queue wait is not in its downtime."""
    out = []
    ran = _ran(ph)
    for k in range(len(ran) - 1):
        a, b = ran[k], ran[k + 1]
        queued = _queue_wait(a, b)
        if queued is not None and a.walltime:
            continue
        queued = queued or 0.0
        kills = ph.kills(a.launch_ts, a.end_ts, a.number)
        kill_ts = kills[0].time if kills else a.end_ts
        lost = a.last_iter - b.resumed_from
        newest = kills[0].newest_complete if kills else None  # what was complete when it struck
        again = rerun(a, b)
        ev = FailureEvent(
            attempt=a.index, kill_ts=kill_ts, injected=bool(kills),
            kind=kills[0].booked_kind if kills else None, detected_by=detected_by(a, again),
            detection_s=(a.end_ts - kill_ts) if (a.end_ts and kill_ts) else None,
            step_at_kill=a.last_iter, resumed_from=b.resumed_from, lost_steps=lost,
            downtime_s=(b.first_ts - kill_ts - queued) if (b.first_ts and kill_ts) else None,
            recompute_s=0.0, restart_s=b.restart_seconds, startup=b.startup, warm_ranks=b.warm_ranks,
            launch_gap_s=(b.launch_ts - a.end_ts - queued) if (b.launch_ts and a.end_ts) else None,
            queue_wait_s=queued, newest_complete_at_kill=newest,
            # where it landed: the steps taken since the newest complete save
            steps_after_save=(a.last_iter - newest) if newest is not None else None,
            gate=kills[0].gate if kills else None,
            rerun=requeue_parts(a, b, ph.job_runs) if again else None)
        if lost > 1 and a.last_iter in b.ts_at and b.first_ts:
            ev.recompute_s = b.ts_at[a.last_iter] - b.first_ts
        node_recovery(ev, a, b, ph.node_checks, ph.job_runs if again else ())
        if again and not a.recorded and a.hang_ts and kill_ts is not None and kill_ts <= a.hang_ts:
            # The watchdog decided, then the job's run ended under it. Detection is at the decision (its
            # marker's time). The gap runs from there: the stop that could not finish, the requeue, the next
            # run's start.
            ev.detection_s = a.hang_ts - kill_ts
            if b.launch_ts:
                ev.launch_gap_s = b.launch_ts - a.hang_ts
        if ev.detected_by == "scheduler" and ev.rerun:
            # No end record. What is known is when the scheduler marked one of its nodes down, not when the
            # run ended (between that and the next run's start).
            downs = [n.since for n in ev.rerun.nodes if "down" in str(n.state).lower()
                     and kill_ts is not None and kill_ts <= n.since <= (b.job_start or n.since)]
            t = ev.rerun.requeued_at
            if not downs and t and kill_ts is not None and kill_ts <= t <= (b.job_start or t):  # no node named: the requeue's
                downs = [t]
            ev.detection_s = (min(downs) - kill_ts) if downs and kill_ts is not None else None
            if downs and b.launch_ts:  # the gap from the scheduler's noticing on: R = detection + gap + restart
                ev.launch_gap_s = b.launch_ts - min(downs)
        out.append(ev)
    return out


def node_recovery(ev: FailureEvent, a: AttemptData, b: AttemptData, checks: List[NodeCheck],
                  runs: Sequence[JobRun] = ()) -> None:
    """Record into ev the nodes found bad after attempt a, and how the relaunch recovered.

    The bad nodes are those the health checks after attempt a, up to b's, found bad. The relaunch used
    the same nodes, a spare in a bad node's place, or fewer nodes (ranks before -> after). b may have
    run in another run of a's job (`runs`: the job's run records). Then, where the attempts do not
    name their nodes, it takes the nodes each run had: the scheduler chose them."""
    bad = bad_nodes_between(checks, a.index, b.index)
    before, after = a.hosts, b.hosts
    if runs:
        ra, rb = run_record(runs, a), run_record(runs, b)
        before = before or (list(ra.hosts) if ra and ra.hosts else None)
        after = after or (list(rb.hosts) if rb and rb.hosts else None)
    ev.bad_nodes, ev.ranks_before, ev.ranks_after, ev.hosts_before, ev.hosts_after = bad, a.ranks, b.ranks, before, after
    ev.recovery = ("the job's next run, on the same nodes" if before and before == after else
                   "the job's next run (its nodes not recorded)") if runs else "same nodes"
    if before and after and before != after:
        gone = [h for h in before if h not in after]
        new = [h for h in after if h not in before]
        if runs:
            ev.recovery = f"the job's next run: {', '.join(after)}" + (
                f" ({', '.join(new)} for {', '.join(gone)})" if gone and new else "")
        elif len(after) == len(before):
            ev.recovery = f"spares: {', '.join(new)} for {', '.join(gone)}"
        else:
            ev.recovery = f"shrink: {len(before)} -> {len(after)} node(s), without {', '.join(gone)}"


@dataclass(frozen=True)
class Detection:
    """What noticed a failure and ended its attempt: the report's summary carries the key; the text is
    for people."""
    key: str
    text: str


DETECTIONS = {d.key: d for d in (
    Detection("trainer", "trainer (preemption signal: emergency checkpoint, exit 5)"),
    Detection("watchdog", "watchdog (no progress for relaunch.hang_timeout)"),
    Detection("pg_timeout", "process-group timeout (a peer never came)"),
    Detection("launcher", "launcher (a rank died: the launcher ended the rest)"),
    Detection("scheduler", "scheduler (the job's run ended under it, and the job was requeued)"),
)}


def detected_by(a: AttemptData, again: bool = False) -> str:
    """Which mechanism ended a failed attempt: a key of DETECTIONS. An attempt without an end
    record whose job ran again was ended with its job's run (no rank's death is known)."""
    if a.preempted:
        return "trainer"
    if a.hang:
        return "watchdog"
    if a.timed_out:
        return "pg_timeout"
    if again and not a.recorded:
        return "scheduler"
    return "launcher"


def requeue_parts(a: AttemptData, b: AttemptData, runs: List[JobRun]) -> RequeueParts:
    """The time between two runs of one job, in its parts.

    The parts start with how attempt a ended: the watchdog's decision, the last evidence. Next is what
    the scheduler said when the job ran again. That is the next run's record (runtime/jobrun.py): the
    nodes that went down or came back. Then come the run's start, b's launch and b's first step."""
    run = run_record(runs, b)
    return RequeueParts(
        job=a.job, next_attempt=b.number or b.index, stopped_at=a.hang_ts, stopped_by="watchdog" if a.hang_ts else None,
        end_ts=a.end_ts, end_evidence=(a.evidence or (None, None))[1] if not a.recorded else "its end record",
        run_start=b.job_start, run=run.run if run else None,
        scheduler_start=run.started if run else None, scheduler=run.scheduler if run else None,
        requeued_at=run.requeued if run else None, eligible_at=run.eligible if run else None,
        scheduler_error=run.error if run else None, nodes=list(run.nodes) if run else [],
        launch_ts=b.launch_ts, first_ts=b.first_ts,
        between_runs_s=(b.job_start - a.end_ts) if (b.job_start and a.end_ts) else None)


KIND_FIGURES = ("detection_s", "launch_gap_s", "restart_s", "lost_steps", "recompute_s", "downtime_s")


def by_kind(events: List[FailureEvent]) -> Dict[str, KindStats]:
    """Per failure kind: how many, and the median of each figure.

    Detection is fault -> attempt end. Relaunch gap is attempt end -> next launch. Restart is
    launch -> first step."""
    out = {}
    for kind in sorted({e.kind or "not injected" for e in events}):
        evs = [e for e in events if (e.kind or "not injected") == kind]
        out[kind] = KindStats(len(evs), sorted({e.detected_by for e in evs}),
                              **{key: known_median(getattr(e, key) for e in evs) for key in KIND_FIGURES})
    return out


def known_median(xs) -> Optional[float]:
    """The median of the values that are known; None without any."""
    known = [x for x in xs if x is not None]
    return statistics.median(known) if known else None


def quantiles(xs: Sequence[float]) -> Quantiles:
    if not xs:
        return Quantiles(count=0, median=None, p90=None, total=0.0)
    s = sorted(xs)
    p90 = s[min(len(s) - 1, int(math.ceil(0.9 * len(s))) - 1)]
    return Quantiles(count=len(s), median=statistics.median(s), p90=p90, total=sum(s))


def summarize_phase(ph: PhaseData) -> PhaseSummary:
    atts = [a for a in ph.attempts if a.launch_ts is not None]
    wall = (max(a.end_ts for a in atts if a.end_ts) - min(cast(float, a.launch_ts) for a in atts)) if atts else None
    hand = handovers(ph)
    queued = sum(h.queue_wait_s or 0 for h in hand)
    if wall is not None:
        # Waiting in the queue between jobs of a chain is not the job's wall time. The time between
        # two runs of one job (a requeue) is: it is a failure's downtime.
        wall -= queued
    ev = failure_events(ph)
    productive = sum(a.kept_dt for a in ph.attempts)
    stalls = sum(sum(ph.saves[k]) for k in SAVE_KEYS)
    first = min(atts, key=lambda a: cast(float, a.launch_ts)) if atts else None
    inter = interference(ph)
    inter_s = inter.busy_steps * (inter.busy_dt_s - inter.idle_dt_s) if inter else 0.0
    step_dt = (ph.dt_idle[1] / ph.dt_idle[0]) if ph.dt_idle[0] else None
    return PhaseSummary(
        phase=ph.name, wall_s=wall, attempts=len(ph.attempts),
        kills=sum(1 for r in ph.injections if r.struck),
        steps=max((a.last_iter for a in ph.attempts), default=0),
        completed=any(a.completed for a in ph.attempts),
        failures=ev,
        by_kind=by_kind(ev),
        lost_steps=sum(e.lost_steps for e in ev),
        downtime_s=sum(e.downtime_s or 0 for e in ev),
        recompute_s=sum(e.recompute_s or 0 for e in ev),
        save_stall_s=stalls,
        saves_estimated=ph.saves_estimated,
        save={save_figure(k): quantiles(v) for k, v in ph.saves.items()},
        finalize=quantiles(ph.finalize),
        productive_s=productive,
        ettr=(productive / wall) if wall else None,
        walltime_stop=walltime_stop(ph),
        interference=inter,
        # the seconds the steps beside a background save took beyond the same steps without one
        interference_s=inter_s,
        # Mean time of a step with no save in flight and not an attempt's first. Its warm-up is in the
        # start-up or the downtime. This is the phase's own step time, which step-time drift compares.
        step_dt_s=step_dt,
        # each network fault (partition, flap, slow_link): its time down, the stand-still, who noticed when
        network_faults=netfaults.accounts(ph, step_dt),
        # each storage fault (stall_writes, slow_storage, write_errors, torn): the rank, the write, what followed
        storage_faults=storagefaults.accounts(ph, ph.storage_strikes, ph.iofaults),
        first_start_s=(first.first_ts - cast(float, first.launch_ts)) if first and first.first_ts else None,
        jobs=sorted({a.job for a in ph.attempts if a.job}),
        handovers=hand, queue_wait_s=queued,
        # What a failure at a random time would lose, beside the measured loss. Kills gated on .complete
        # land just after a save: their loss is the least a failure costs, not the typical.
        expected_loss=expected_loss(save_interval_steps(ph), ph.dt_busy[0] / len(ph.saves[K.STAGE_S])
                                    if ph.saves[K.STAGE_S] else 0.0),
        warnings=ph.warnings)


def save_interval_steps(ph: PhaseData) -> Optional[float]:
    """The phase's own save interval in steps, or None with fewer than two checkpoints.

    It is the median gap between the complete checkpoints its attempts' launches found (any
    program's: layout.Attempt.at_launch)."""
    steps = sorted({s for a in ph.attempts if a.at_launch for s, complete in a.at_launch.checkpoints if complete})
    gaps = [y - x for x, y in zip(steps, steps[1:]) if y > x]
    return float(statistics.median(gaps)) if gaps else None


def expected_loss(interval: Optional[float], lag_steps: float = 0.0) -> Optional[ExpectedLoss]:
    """The steps a failure at a random time loses on average: (S-1)/2 + l.

    S is the save interval, in steps. l is the number of steps a save stays incomplete while the
    loop trains on. For a background save, l is its steps in flight. For a sync save, l is 0: the
    save is complete before the loop goes on.

    A failure x whole steps after a save loses x, with x uniform over 0..S-1. During that save's
    first l steps, it loses x + S instead. On average that is (S-1)/2 + l."""
    if not interval:
        return None
    lag = min(interval, lag_steps)
    return ExpectedLoss(per_failure=(interval - 1) / 2 + lag, save_interval_steps=interval, complete_lag_steps=lag)


def interference(ph: PhaseData) -> Optional[Interference]:
    """How much slower a step is while an async save runs in the background.

    That is mean step time beside a save / without one - 1. None without steps of both kinds."""
    (nb, sb), (ni, si) = ph.dt_busy, ph.dt_idle
    if not nb or not ni or not si:
        return None
    return Interference(busy_steps=int(nb), idle_steps=int(ni), busy_dt_s=sb / nb, idle_dt_s=si / ni,
                        slowdown=(sb / nb) / (si / ni) - 1.0)


def walltime_stop(ph: PhaseData) -> Optional[WalltimeStop]:
    """The phase's last attempt, when the walltime warning ended it.

    It gives the last step, the step of its emergency checkpoint, and the steps that checkpoint does
    not hold (0 when it landed)."""
    a = ph.attempts[-1] if ph.attempts else None
    if a is None or not a.walltime:
        return None
    return WalltimeStop(attempt=a.index, last_step=a.last_iter, emergency_checkpoint=a.emergency_step,
                        lost_steps=(a.last_iter - a.emergency_step) if a.emergency_step is not None else None)


def is_baseline(phase_checkpoint: Optional[str]) -> bool:
    """The baseline is the phase that saves no checkpoints (checkpoint: none), whatever its name."""
    return phase_checkpoint == "none"


def overhead(phase: PhaseSummary, baseline: Optional[PhaseSummary]) -> Optional[Overhead]:
    """What a phase costs beyond the baseline, and what explains it.

    Overhead = downtime + recompute + save stalls + background interference + step-time drift +
    residual.

    Both phases are taken net of their first launch's start-up (launch -> first step). So a cold first
    launch is not booked as a failure's cost: whichever phase runs first pays the file cache and the
    imports. The start-ups of relaunches are in the downtime.

    Step-time drift is the phase's step time against the baseline's, times the phase's steps. It uses
    the steps without a save in flight, first steps left out. A shared node's noise moves every step of
    a phase: +-10-30% per phase measured here. So the residual is only what nothing explains."""
    if not baseline or phase.wall_s is None or baseline.wall_s is None:
        return None
    if not (phase.completed and baseline.completed):
        return None  # a phase that did not reach its last step has no wall time to compare
    first, base_first = phase.first_start_s or 0.0, baseline.first_start_s or 0.0
    diff = (phase.wall_s - first) - (baseline.wall_s - base_first)
    drift = None
    if phase.step_dt_s is not None and baseline.step_dt_s is not None:
        drift = (phase.step_dt_s - baseline.step_dt_s) * (phase.steps or 0)
    parts = (phase.downtime_s, phase.recompute_s, phase.save_stall_s, phase.interference_s or 0.0, drift or 0.0)
    return Overhead(*parts, measured_s=diff, residual_s=diff - sum(parts), first_start_s=first,
                    baseline_first_start_s=base_first)


def restart_cost(restart_s, gap_s, detection_s) -> float:
    """R of Young-Daly: what a failure costs beyond the lost work (fault -> attempt end, the
    relaunch gap, launch -> first step). One definition for the report and `simulate`."""
    return (restart_s or 0.0) + (gap_s or 0.0) + (detection_s or 0.0)


def phase_restart_cost(events: List[FailureEvent]) -> Optional[float]:
    """R from a phase's failures: the medians of restart, relaunch gap and detection."""
    parts = [known_median(e.restart_s for e in events), known_median(e.launch_gap_s for e in events),
             known_median(e.detection_s for e in events)]
    return None if all(x is None for x in parts) else restart_cost(*parts)


def young_daly(save_cost_s, restart_cost_s, mtbf_s) -> YoungDaly:
    """Young's and Daly's intervals, with what they were computed from.

    Young: sqrt(2 C M). Daly (first order): sqrt(2 C (M + R)) - C, for C < 2M. C is the save's stall,
    R = restart_cost() and M the MTBF."""
    made_of = dict(mtbf_s=mtbf_s, save_cost_s=save_cost_s, restart_cost_s=restart_cost_s)
    if not save_cost_s or save_cost_s <= 0 or not mtbf_s:
        return YoungDaly(young_s=None, daly_s=None, **made_of)
    young = math.sqrt(2 * save_cost_s * mtbf_s)
    daly = math.sqrt(2 * save_cost_s * (mtbf_s + (restart_cost_s or 0))) - save_cost_s \
        if save_cost_s < 2 * mtbf_s else mtbf_s
    return YoungDaly(young_s=young, daly_s=daly, **made_of)
