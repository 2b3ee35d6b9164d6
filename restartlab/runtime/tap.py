"""The progress tap.

A program that does not write restartlab's metrics rows (any program but the bundled trainer) has
its launcher's output read line by line as it arrives. Each line goes to the attempt's output
(layout.Attempt.output) unchanged. Each progress line the adapter recognises becomes a metrics row
of rank 0 (layout.metrics_name(0)). So the collector, the report, the plots and `simulate` read it
as they read the bundled trainer's:

    {"timestamp": <when the line arrived>, "rank": 0, "metrics": {"train/iter": N, "train/loss": x,
     "train/dt": <since the previous progress line, or the program's own dt>, ...}}

A save line (the adapter's `saved`) becomes a row {"train/iter": N, "train/ckpt_<kind>_seconds": s}.
The collector books it as a save stall.

A step's dt measured here (between two progress lines) is the step's time less the blocking saves
(save, stage) that lay between those lines. A save's stall is not productive time.

Some programs log only a save's start (the adapter's `saving`). For them the stall is estimated: the
interval holding that line less the median of the attempt's last intervals without a save. That
needs at least MIN_REFERENCE of them. Otherwise the save is not booked and stays in its step's dt.
The estimate is booked as {"train/ckpt_save_seconds": s, "train/ckpt_estimated": true}.

The first row of an attempt carries:
- train/resumed_from: the program's resume line when the adapter has one, else the highest
  checkpoint present at launch below the first step logged
- train/restart_seconds: launch -> first progress line

When the launcher exits 0 after the last step, a final row {"train/iter": N, "train/finished": true}
marks the phase completed. So does a launcher that ends badly after the last step: a crash at exit,
which the verdict names. The bundled trainer's final row carries its parameters' checksum instead.

The first step logged in an attempt counts no step time, unless the program's progress line gives
its own `dt`."""
import collections
import csv
import json
import os
import statistics
import threading
import time
from typing import IO, Any, Deque, Dict, List, Optional, TextIO

from ..contracts import launch_snapshot, layout, state_record
from ..contracts.launch_snapshot import LaunchSnapshot, WillLoad
from .. import programs
from ..contracts import metric_keys as K

TAIL_LINES = 5  # output lines quoted when an attempt showed no progress
MIN_REFERENCE = 3  # intervals without a save an estimated save stall needs before it
REFERENCE = 20     # ... of which the last this many count
BLOCKING = ("save", "stage")  # save kinds that block the training loop (a drain runs beside it)


class Tap:
    def __init__(self, spec: programs.Spec, att: layout.Attempt, launch_ts: float, at_launch: List[programs.Ckpt],
                 loads: Optional[int] = None):
        self.spec, self.att, self.launch_ts = spec, att, launch_ts
        self.at_launch = at_launch
        self.loads = loads                 # from_probe: the step of the checkpoint the program's rule loads
        self.from_probe = False            # steps from the training-state probe (probe_record)
        self.offset: Optional[int] = None  # ... numbered from here (the step resumed from)
        self.lock = threading.Lock()
        self.out: Optional[TextIO] = None  # the metrics file, opened at the first progress line
        self.last_step: Optional[int] = None
        self.last_ts: Optional[float] = None
        self.last_progress = launch_ts     # the watchdog's clock: the last progress line (or the launch)
        self.resumed: Optional[int] = None  # the program's own resume line
        self.tail: List[str] = []
        self.rows = 0
        self.blocked = 0.0                 # seconds of saves (their lines) since the last progress line
        self.saving = False                # a save's start line since the last progress line
        self.plain: Deque[float] = collections.deque(maxlen=REFERENCE)  # the last intervals without a save

    @property
    def stepped(self) -> bool:
        return self.rows > 0

    def feed(self, raw: bytes, ts: float) -> None:
        text = raw.decode("utf-8", errors="replace")
        with self.lock:
            for part in text.splitlines():  # \n, and \r: a progress bar redraws with it
                self._line(programs.clean_line(part), ts)

    def _line(self, line: str, ts: float) -> None:
        if not line:
            return
        self.tail = (self.tail + [line])[-TAIL_LINES:]
        if self.resumed is None and self.rows == 0:
            self.resumed = programs.parse_resumed(self.spec, line, self.at_launch)
        p = None if self.spec.progress_file else programs.parse_progress(self.spec, line)
        if p is not None:
            self._row(p, ts)
            return
        saved = programs.parse_saved(self.spec, line)
        if saved is not None and self.out is not None:  # a save before the first step: not booked
            self._write(ts, {K.ITER: saved.step if saved.step is not None else self.last_step,
                             K.ckpt_seconds(saved.kind): saved.seconds})
            if saved.kind in BLOCKING:
                self.blocked += saved.seconds
        elif self.out is not None and programs.parse_saving(self.spec, line):
            self.saving = True

    def record(self, rec: Dict[str, Any], ts: float) -> None:
        """One record of the program's progress file (Follow)."""
        p = programs.parse_record(self.spec, rec)
        if p is not None:
            with self.lock:
                self._row(p, ts)

    def probe_record(self, rec: Dict[str, Any]) -> None:
        """Book one record of rank 0's training-state probe (trainer/state_probe.py).

        This serves where the scenario gives no progress. Each optimizer step is a step, at the time
        it began. Steps are numbered from the step the attempt resumed from: its own resume line,
        else the checkpoint its rule loads at the launch (`loads`). A load's record and another
        optimizer's are not steps."""
        line = state_record.probe_line(rec)
        if line is None or line.load or line.opt != 0:
            return
        k, ts = line.step, line.time
        with self.lock:
            if line.loss_line:  # the program's loss line, as rank 0's probe saw it printed after step k
                if line.logged_loss is not None and k >= 1 and self.offset is not None and self.out is not None:
                    self._write(ts, {K.ITER: self.offset + k, K.LOSS_LOGGED: line.logged_loss})
                return
            if self.offset is None:
                self.offset = self.resumed if self.resumed is not None else (self.loads or 0)
            self._row(programs.Progress(self.offset + k), ts)

    def _row(self, p: programs.Progress, ts: float) -> None:
        step = p.step
        if self.last_step is not None and step <= self.last_step:
            return  # another rank's copy of a line already booked, or a repeated line
        m: Dict[str, Any] = {K.ITER: step, K.LOSS: p.loss}
        if p.dt is not None:
            m[K.DT] = p.dt
        elif self.last_ts is not None:
            m[K.DT] = self._step_time(ts - self.last_ts, ts)
        self.blocked, self.saving = 0.0, False
        if self.rows == 0:
            evidence = self.resumed is not None
            below = [c.step for c in self.at_launch if c.step < step]
            m.update({K.RESUMED_FROM: self.resumed if evidence else max(below, default=0),
                      K.RESUME_EVIDENCE: "line" if evidence else "inferred",
                      K.RESTART_S: ts - self.launch_ts, K.STARTUP_LAUNCH_TS: self.launch_ts})
            self.out = open(self.att.metrics(0), "a")
        self._write(ts, m)
        self.last_step, self.last_ts, self.last_progress = step, ts, ts

    def _step_time(self, interval: float, ts: float) -> float:
        """The step's time in an interval between two progress lines, less the saves in it.

        A save counts its own line's seconds, or the estimate from its start line, which is booked here."""
        if self.blocked:
            return max(0.0, interval - self.blocked)
        if not self.saving:
            self.plain.append(interval)
            return interval
        if len(self.plain) < MIN_REFERENCE:
            return interval  # too few steps to compare with: not booked, the save stays in the step
        step_s = statistics.median(self.plain)
        stall = max(0.0, interval - step_s)
        self._write(ts, {K.ITER: self.last_step, K.SAVE_S: stall, K.SAVE_ESTIMATED: True})
        return interval - stall

    def _write(self, ts: float, m: Dict[str, Any]) -> None:
        assert self.out is not None  # opened by the first row, before any other is written
        self.out.write(json.dumps({"timestamp": ts, "rank": 0, "metrics": m}) + "\n")
        self.out.flush()
        self.rows += 1

    def finish(self, rc: int, last_step: int, final_saved: bool = True) -> Optional[str]:
        """Finish the attempt's rows after the launcher exited.

        - It writes the final row when the program reached its last step and ended. A crash at exit
          counts too, once its last step's checkpoint is complete (`final_saved`). The verdict names
          the crash. Without that checkpoint, the relaunch writes it.
        - It returns a warning (one sentence) when no progress line was seen at all."""
        with self.lock:
            now = time.time()
            resumed = self.resumed if self.resumed is not None or not self.from_probe else self.loads
            if rc == 0 and self.rows == 0 and resumed is not None and resumed >= last_step:
                # killed between its last save and its exit: the relaunch resumed at the last step and
                # had nothing left to train. It finished (a phase that waited for a progress line here
                # would relaunch it until its budget ran out).
                self.out = open(self.att.metrics(0), "a")
                self._write(now, {K.ITER: resumed, K.LOSS: None, K.RESUMED_FROM: resumed,
                                  K.RESUME_EVIDENCE: "line" if self.resumed is not None else "inferred",
                                  K.RESTART_S: now - self.launch_ts, K.STARTUP_LAUNCH_TS: self.launch_ts})
                self.last_step = resumed
            if self.last_step is not None and self.last_step >= last_step and (rc == 0 or final_saved):
                # It reached the last step, so it finished, whatever its exit. A crash at exit is a finding
                # of survival.py, e.g. gloo's threads aborting a process that never destroyed its group.
                # Relaunched, it would resume at its final checkpoint and train past the last step.
                self._write(now, {K.ITER: self.last_step, K.FINISHED: True})
            if self.out is not None:
                self.out.close()
                self.out = None
            if self.rows == 0:
                shown = " | ".join(self.tail) or "(no output)"
                where = (f"its progress file (check trainer.program.progress_file: {self.spec.progress_file!r} "
                         f"and progress_fields)") if self.spec.progress_file else \
                    (f"{self.att.state(0)} (no trainer.program.progress: the steps are rank 0's torch optimizer "
                     f"steps, and none was recorded)") if self.from_probe else \
                    f"{self.att.output} (check trainer.program.progress: {self.spec.progress!r})"
                return f"no progress seen in {where}; its last lines: {shown[-600:]}"
        return None


class Follow(threading.Thread):
    """Reads the records a program appends to its progress file into the tap, as they arrive.

    The file is trainer.program.progress_file: JSONL, or CSV with a header row. It polls every
    POLL_S. What the file held at the launch is an earlier attempt's, so reading starts at its end.
    It starts from the beginning again when the file shrinks or is replaced (a program that rewrites
    it per launch). A line is read once it ends with a newline. stop() reads what is left."""
    POLL_S = 0.1

    def __init__(self, path: str, tap: Tap, probe: bool = False):
        super().__init__(daemon=True, name="restartlab-follow")
        self.path, self.tap, self.probe = path, tap, probe  # probe: the records are the state probe's
        self.csv = path.endswith(".csv")
        self.halt = threading.Event()
        self.header: Optional[List[str]]  # the CSV header row, once read
        self.ino, self.pos, self.header, self.rest = None, 0, None, b""
        self.lock = threading.Lock()  # poll() from this thread and from stop()'s
        st = self._stat()
        if st is not None:  # an earlier attempt's records: skipped
            self.ino, self.pos = st.st_ino, st.st_size

    def _stat(self) -> Optional[os.stat_result]:
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def run(self) -> None:
        while not self.halt.wait(self.POLL_S):
            self.poll()

    def stop(self, timeout: float = 2.0) -> None:
        self.halt.set()
        if self.ident is not None:  # started
            self.join(timeout)
        self.poll()

    def poll(self) -> None:
        with self.lock:
            self._poll()

    def _poll(self) -> None:
        st = self._stat()
        if st is None:
            return
        if st.st_ino != self.ino or st.st_size < self.pos:  # new, replaced or rewritten: from its start
            self.ino, self.pos, self.header, self.rest = st.st_ino, 0, None, b""
        if st.st_size == self.pos:
            return
        try:
            with open(self.path, "rb") as f:
                if self.csv and self.header is None and self.pos > 0:
                    self.header = next(csv.reader([f.readline().decode("utf-8", "replace")]), None)
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return
        self.pos += len(data)
        *lines, self.rest = (self.rest + data).split(b"\n")
        ts = time.time()
        for raw in lines:
            text = raw.decode("utf-8", "replace").strip()
            if text:
                self._line(text, ts)

    def _line(self, text: str, ts: float) -> None:
        if not self.csv:
            try:
                rec = json.loads(text)
            except ValueError:
                return
        else:
            row = next(csv.reader([text]), [])
            if self.header is None:
                self.header = row
                return
            rec = dict(zip(self.header, row))
        if self.probe:
            self.tap.probe_record(rec)
        else:
            self.tap.record(rec, ts)


class Pump(threading.Thread):
    """Copies a pipe to the attempt's output file and the tap, line by line, as it arrives."""

    def __init__(self, pipe: IO[bytes], att: layout.Attempt, tap: Tap):
        super().__init__(daemon=True, name="restartlab-tap")
        self.pipe, self.tap = pipe, tap
        self.log = open(att.output, "ab", buffering=0)

    def run(self) -> None:
        try:
            for raw in iter(self.pipe.readline, b""):
                self.log.write(raw)
                self.tap.feed(raw, time.time())
        except (OSError, ValueError):
            pass
        finally:
            self.log.close()


def snapshot(spec: programs.Spec, ckpt_dir: str, ckpts: List[programs.Ckpt]) -> LaunchSnapshot:
    """What the checkpoint dir holds at a launch.

    That is every checkpoint (step, complete), the newest complete one (what a correct resume loads),
    and the one the program's own rule picks."""
    good, pick = programs.newest_complete(ckpts), programs.will_load(spec, ckpts, ckpt_dir)
    loads = None
    if pick:  # a torn one: why it is not complete, and what it holds, for the verdict
        loads = WillLoad(pick.step, pick.path, pick.complete) if pick.complete else WillLoad(
            pick.step, pick.path, False, programs.why_not_complete(spec.complete or "", pick.path, pick.step, ckpt_dir),
            tuple(_holds(pick.path)))
    return LaunchSnapshot(ckpt_dir, spec.selects, spec.complete,
                          tuple((c.step, c.complete) for c in ckpts), good.step if good else None,
                          good.path if good else None, loads)


def _holds(path: str, most: int = 12) -> List[str]:
    """The names directly in a checkpoint directory (at most `most`, sorted), [] for a file."""
    try:
        return sorted(os.listdir(path))[:most] if os.path.isdir(path) else []
    except OSError:
        return []


def write_snapshot(att: layout.Attempt, snap: LaunchSnapshot) -> None:
    launch_snapshot.write(att.at_launch, snap)
