"""One attempt's launch, and what the relaunch loop watches of it.

- The launcher process. A pidfd wakes the loop the moment it exits.
- The tap (tap.py). It reads a program's output when the program writes no metrics rows of its own.
- When the attempt last showed progress.
- Whether it has stepped.
- The first rank that ended badly, by its exit record."""
import os
import select
import subprocess
from typing import IO, Any, Dict, List, Optional, Set, Tuple, cast

from .. import programs
from ..contracts import layout, placeholders, rank_exit
from ..contracts.envvars import LAUNCH_TS_VAR, LOSS_LINE_VAR, STATE_DIR_VAR, STATE_EVERY_VAR
from . import tap

PUMP_DRAIN_S = 5.0  # after the launcher ended: how long the tap may still read what it wrote


class Launched:
    """One attempt's launcher process."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc
        self.pid = proc.pid
        try:  # a pidfd wakes us the moment the launcher exits (Popen.wait polls in 50 ms steps)
            self._fd: Optional[int] = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._fd = None

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        """The exit status once the launcher has ended, None if it still runs after `timeout`
        (None: wait until it ends). Death by signal N is 128+N, as a shell reports it
        (launchers.signal_of reads that)."""
        if timeout is None:  # (once read as 0 where a pidfd was open: the stop after a KILL got None)
            rc = self.proc.wait()
            return self._ended(rc)
        if self._fd is not None and self.proc.poll() is None and timeout:
            p = select.poll()
            p.register(self._fd, select.POLLIN)
            p.poll(max(0, timeout) * 1000)
        try:
            rc = self.proc.wait(timeout=0 if self._fd is not None else timeout)
        except subprocess.TimeoutExpired:
            return None
        return self._ended(rc)

    def _ended(self, rc: int) -> int:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return 128 - rc if rc < 0 else rc

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass


class AttemptLaunch:
    """The attempts of one phase: started, read and watched. `spec` is the program's adapter spec
    (programs.resolve); `ft_group` >= 0: a torchft replica group (progress is a committed step)."""

    def __init__(self, spec: programs.Spec, ckpt_dir: Optional[str], phase_dir: str, ft_group: int = -1):
        self.spec, self.ckpt_dir, self.phase_dir, self.ft_group = spec, ckpt_dir, phase_dir, ft_group
        # attempt path -> (Tap, Pump, Follow) of a program whose output is read
        self.taps: Dict[str, Tuple[tap.Tap, tap.Pump, Optional[tap.Follow]]] = {}
        self.launched_at: Dict[str, float] = {}  # attempt path -> its launch time
        self.launcher_pids: Dict[str, int] = {}  # attempt path -> its launcher's pid (a hang's process snapshot)
        # attempt path -> (exit records read, [its first failure])
        self.exits_read: Dict[str, Tuple[Set[str], List[Optional[rank_exit.RankExit]]]] = {}

    def start(self, argv: List[str], att: layout.Attempt, env: Dict[str, str]) -> Launched:
        """Start the attempt; first, what the checkpoint dir holds (which checkpoint a correct
        resume loads, which one the program's own rule picks). A program that does not write
        restartlab's metrics rows has its output read by a tap (tap.py)."""
        ckpts = []
        if self.ckpt_dir:
            ckpts = programs.list_ckpts(self.spec, self.ckpt_dir)
            tap.write_snapshot(att, tap.snapshot(self.spec, self.ckpt_dir, ckpts))
        self.launched_at[att.path] = float(env[LAUNCH_TS_VAR])
        env = dict(os.environ, **env)
        if not programs.taps(self.spec):
            with open(att.output, "ab") as out:
                proc = subprocess.Popen(argv, cwd=att.path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            self.launcher_pids[att.path] = proc.pid
            return Launched(proc)
        from_probe = not self.spec.progress and not self.spec.progress_file and \
            bool(env.get(STATE_DIR_VAR)) and env.get(STATE_EVERY_VAR, "1") != "0"
        if from_probe and self.spec.loss_line:  # rank 0's probe reads the loss lines as they are printed
            env[LOSS_LINE_VAR] = self.spec.loss_line
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python program's progress lines as they happen (rankenv
        # makes each line whole: runtime/pystdio.py; the launcher and the exit recorder need no shim)
        proc = subprocess.Popen(argv, cwd=att.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.launcher_pids[att.path] = proc.pid
        # where the steps come from the probe: the checkpoint the program's rule loads numbers them
        loads = programs.will_load(self.spec, ckpts, self.ckpt_dir) if from_probe and ckpts and self.ckpt_dir else None
        t = tap.Tap(self.spec, att, float(env[LAUNCH_TS_VAR]), ckpts, loads.step if loads else None)
        pump = tap.Pump(cast(IO[bytes], proc.stdout), att, t)  # stdout=PIPE
        pump.start()
        follow = None
        if self.spec.progress_file:  # progress from a file the program appends to
            follow = tap.Follow(self.placeholders(self.spec.progress_file, att), t)
            follow.start()
        elif from_probe:  # no progress pattern: the steps are rank 0's optimizer steps (the probe's records)
            t.from_probe = True
            follow = tap.Follow(att.state(0), t, probe=True)
            follow.start()
        self.taps[att.path] = (t, pump, follow)
        return Launched(proc)

    def placeholders(self, text: str, att: layout.Attempt) -> str:
        """{attempt_dir}, {phase_dir} and {ckpt_dir} of a program's path, filled for this attempt."""
        return placeholders.fill(text, {placeholders.ATTEMPT_DIR: att.path, placeholders.PHASE_DIR: self.phase_dir,
                                        placeholders.CKPT_DIR: self.ckpt_dir})

    def finish(self, att: layout.Attempt, rc: int, train_iters: int) -> Optional[str]:
        """After the launcher ended: the tap reads the rest and writes the final row; a warning
        when the program showed no progress at all."""
        t, pump, follow = self.taps.pop(att.path, (None, None, None))
        if t is None:
            return None
        assert pump is not None  # stored with its tap
        pump.join(PUMP_DRAIN_S)  # a rank that outlived its launcher may hold the pipe: not waited for
        if follow is not None:
            follow.stop()         # and the progress file's last records
        # A program that ended badly after its last step still finished if that step's checkpoint is complete.
        # This holds for a program that saves. Otherwise the relaunch resumes and writes the checkpoint.
        # A program killed before that save did not finish.
        final_saved = True
        if rc != 0 and self.ckpt_dir:
            newest = programs.newest_complete(programs.list_ckpts(self.spec, self.ckpt_dir)) \
                if os.path.isdir(self.ckpt_dir) else None
            final_saved = newest is not None and newest.step >= train_iters
        return t.finish(rc, train_iters, final_saved)

    def last_activity(self, att: layout.Attempt) -> Optional[float]:
        """When the attempt last showed activity.

        By default, when it last wrote output or a metrics row (file times).
        - A tapped program: its last progress line, whatever else it prints.
        - A torchft replica group: its last committed step. Its log shows every quorum, committed or not.

        Before the first progress line or committed step, the launch time counts."""
        if att.path in self.taps:
            return self.taps[att.path][0].last_progress
        if self.ft_group >= 0:
            paths, times = att.metrics_files(), [self.launched_at.get(att.path, 0.0)]
        else:
            paths, times = [att.output] + att.metrics_files(), []
        for p in paths:
            try:
                times.append(os.stat(p).st_mtime)
            except OSError:
                pass
        return max(times) if times else None

    def has_stepped(self, att: layout.Attempt) -> bool:
        if att.path in self.taps:
            return self.taps[att.path][0].stepped
        return bool(att.metrics_files())

    def failed_rank(self, att: layout.Attempt) -> Optional[rank_exit.RankExit]:
        """The first rank of the attempt that ended badly by its exit record (an exit status or a
        signal), or None. Each record is read once (an attempt of many ranks writes as many when it
        ends): the ones not read yet at each look."""
        seen, first = self.exits_read.setdefault(att.path, (set(), [None]))
        try:
            names = [n for n in os.listdir(att.exits_dir) if n not in seen and not n.endswith(".tmp")]
        except OSError:
            return first[0]
        seen.update(names)
        bad = rank_exit.first_failure(rank_exit.read_all(os.path.join(att.exits_dir, n) for n in names))
        if bad is not None and (first[0] is None or bad.time < first[0].time):
            first[0] = bad
        return first[0]
