"""restartlab supervise: the relaunch loop of one phase, run by the job script once per phase:

    restartlab supervise --phase sync --phase-dir EXPT/sync --tag T ... --launch '{"python": ...}' -- python -m restartlab.trainer ...

The launch is a LaunchSpec (tools/launch.py): --launch's JSON and the program's argv after --.

It launches each attempt (its own directory, a fresh rendezvous port, the launch timestamp),
keeps the injector running for the phase, watches each attempt (no progress for hang_timeout, or
startup_timeout before the first step: stopped; a rank that ended badly while the others still
run rank_exit_grace later: stopped), sends the ranks the trainer's preemption signal
once the walltime margin is reached and launches nothing after it, tears down whatever of a failed
attempt is left, runs the node check before each launch when a policy needs it, records each
attempt, and decides: relaunch (after the backoff, within the budget), or stop. The phase's
verdict is its exit status (EXIT_*), its `completed` marker and each attempt's record (layout.py names them).

The decisions live in `Supervisor`; the side effects (processes, signals, the node check, the
injector) in `Procs`, and time in `Clock`: the tests replace both (a fake clock, fake attempts)."""
import argparse
import contextlib
import functools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import attempt_record
from .clock import Clock
from .. import launchers, programs
from ..contracts import layout, options, placeholders, rank_exit
from ..contracts.attempts import PhaseEnd
from . import tap
from ..tools import options as tool_options, verbs
from ..tools.launch import LaunchSpec, SpecError
from ..contracts.exits import (EXIT_BUDGET, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_CHECKPOINT, EXIT_OK, EXIT_USAGE,
                               EXIT_WALLTIME)
from ..contracts.trainer_options import STACKS_SIGNAL
STOP_GRACE_S = 5.0               # the launcher's time to end after a TERM before it gets a KILL
INJECTOR_GRACE_S = 5.0           # the injector stops by itself once the done marker exists
STACKS_WAIT_S = 2.0              # a hung attempt's ranks' time to write their stacks before the KILL


# ---------------------------------------------------------------- the parts the tests replace
class Launched:
    """One attempt's launcher process."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid
        try:  # a pidfd wakes us the moment the launcher exits (Popen.wait polls in 50 ms steps)
            self._fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self._fd = None

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        """The exit status once the launcher has ended, None if it still runs after `timeout`.
        Death by signal N is 128+N, as a shell reports it (launchers.signal_of reads that)."""
        if self._fd is not None and self.proc.poll() is None and timeout:
            p = select.poll()
            p.register(self._fd, select.POLLIN)
            p.poll(max(0, timeout) * 1000)
        try:
            rc = self.proc.wait(timeout=0 if self._fd is not None else timeout)
        except subprocess.TimeoutExpired:
            return None
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


PUMP_DRAIN_S = 5.0  # after the launcher ended: how long the tap may still read what it wrote


class Procs:
    """The supervisor's side effects on real processes and files."""

    def __init__(self, cfg: "Config"):
        self.cfg = cfg
        self.injector: Optional[subprocess.Popen] = None
        self.spec = programs.resolve(json.loads(cfg.program) if cfg.program else {"adapter": "restartlab"})
        self.taps = {}  # attempt path -> (Tap, Pump) of a program whose output is read
        self.launched_at = {}  # attempt path -> its launch time
        self.launcher_pids = {}  # attempt path -> its launcher's pid (a hang's process snapshot)
        self.exits_read = {}  # attempt path -> (exit records read, [its first failure])
        self.pool = None  # the warm standby pools (warm.standby.Standby) of this phase
        self.pool_served = False  # said that they serve

    def which(self, exe: str) -> bool:
        return shutil.which(exe) is not None

    def preflight(self, launch: LaunchSpec) -> Optional[str]:
        """Why the program cannot run here (its adapter's check on a program of yours), or None."""
        return programs.preflight(self.spec, list(launch.program)) if launch.rankenv else None

    def free_port(self) -> int:
        return int(os.environ.get("MASTER_PORT") or launchers.free_port())

    def launch(self, argv: List[str], att: layout.Attempt, env: dict) -> Launched:
        """Start the attempt; first, what the checkpoint dir holds (which checkpoint a correct
        resume loads, which one the program's own rule picks). A program that does not write
        restartlab's metrics rows has its output read by a tap (tap.py)."""
        ckpts = []
        if self.cfg.ckpt_dir:
            ckpts = programs.list_ckpts(self.spec, self.cfg.ckpt_dir)
            tap.write_snapshot(att, tap.snapshot(self.spec, self.cfg.ckpt_dir, ckpts))
        self.launched_at[att.path] = float(env["RESTARTLAB_LAUNCH_TS"])
        env = dict(os.environ, **env)
        if not self.spec["tap"]:
            with open(att.output, "ab") as out:
                proc = subprocess.Popen(argv, cwd=att.path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            self.launcher_pids[att.path] = proc.pid
            return Launched(proc)
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python program's progress lines as they happen
        proc = subprocess.Popen(argv, cwd=att.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.launcher_pids[att.path] = proc.pid
        t = tap.Tap(self.spec, att, float(env["RESTARTLAB_LAUNCH_TS"]), ckpts)
        pump = tap.Pump(proc.stdout, att, t)
        pump.start()
        follow = None
        if self.spec.get("progress_file"):  # progress from a file the program appends to
            follow = tap.Follow(self.placeholders(self.spec["progress_file"], att), t)
            follow.start()
        self.taps[att.path] = (t, pump, follow)
        return Launched(proc)

    def placeholders(self, text: str, att: layout.Attempt) -> str:
        """{attempt_dir}, {phase_dir} and {ckpt_dir} of a program's path, filled for this attempt."""
        return placeholders.fill(text, {placeholders.ATTEMPT_DIR: att.path, placeholders.PHASE_DIR: self.cfg.phase_dir,
                                        placeholders.CKPT_DIR: self.cfg.ckpt_dir})

    def finish(self, att: layout.Attempt, rc: int) -> Optional[str]:
        """After the launcher ended: the tap reads the rest and writes the final row; a warning
        when the program showed no progress at all."""
        t, pump, follow = self.taps.pop(att.path, (None, None, None))
        if t is None:
            return None
        pump.join(PUMP_DRAIN_S)  # a rank that outlived its launcher may hold the pipe: not waited for
        if follow is not None:
            follow.stop()         # and the progress file's last records
        return t.finish(rc, self.cfg.train_iters)

    def teardown(self, att: layout.Attempt, sig: str = "KILL") -> None:
        """`sig` to whatever of this job's ranks is left, on every node (found by the tag)."""
        from .teardown import teardown
        with open(att.teardown_log, "a") as log, contextlib.redirect_stdout(log):
            teardown(self.cfg.tag, sig, self.cfg.fanout, self.cfg.nodefile, self.cfg.launcher)

    def dump_stacks(self, att: layout.Attempt) -> None:
        """A hung attempt says where it was: its processes on this node (procsnap: the launcher's
        tree and the tagged ones, each one's state and the kernel function it sleeps in) into
        layout.Attempt.hang_procs; and the bundled trainer's ranks that can still run write their
        threads' Python stacks into the attempt's output (trainer_options.STACKS_SIGNAL) before the
        KILL. A program of the user's gets no signal: its signals are its own."""
        from . import procsnap
        pid = self.launcher_pids.get(att.path)
        try:
            procsnap.write(att.hang_procs, pid if pid is not None else -1, self.cfg.tag)
        except OSError as e:
            self.say(f"cannot record the hung attempt's processes: {e}", err=True)
        if self.cfg.program:
            return
        self.teardown(att, STACKS_SIGNAL)
        time.sleep(STACKS_WAIT_S)

    def last_activity(self, att: layout.Attempt) -> Optional[float]:
        """When the attempt last wrote output or a metrics row (file times); a tapped program:
        its last progress line (the launch before the first), whatever else it prints; a torchft
        replica group: its last committed step (torchft logs every quorum, committed or not), the
        launch before the first."""
        if att.path in self.taps:
            return self.taps[att.path][0].last_progress
        if self.cfg.ft_group >= 0:
            paths, times = att.metrics_files(), [self.launched_at.get(att.path, 0.0)]
        else:
            paths, times = [att.output] + att.metrics_files(), []
        for p in paths:
            try:
                times.append(os.stat(p).st_mtime)
            except OSError:
                pass
        return max(times) if times else None

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

    def has_stepped(self, att: layout.Attempt) -> bool:
        if att.path in self.taps:
            return self.taps[att.path][0].stepped
        return bool(att.metrics_files())

    def node_check(self, phase: layout.Phase, k: int) -> Optional[int]:
        """Nodes the next attempt gets (its hosts in --hosts-file); None: too few healthy ones."""
        from . import nodes
        cfg = nodes.Config(**(self.cfg.node_check or {}), fanout=self.cfg.fanout, launcher=self.cfg.launcher,
                           nodefile=self.cfg.nodefile, policy=self.cfg.node_policy, log=phase.node_checks,
                           attempt=k, hosts_out=self.cfg.hosts_file)
        with open(phase.node_check_log, "a") as log, contextlib.redirect_stderr(log):
            return nodes.check_all(cfg)

    def start_injector(self, phase: layout.Phase) -> None:
        argv = verbs.argv(sys.executable, "inject", *inject_argv(self.cfg, phase))
        with open(phase.injector_log, "ab") as log:
            self.injector = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop_injector(self, grace: float = INJECTOR_GRACE_S) -> None:
        if self.injector is None:
            return
        try:
            self.injector.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.injector.terminate()
            try:
                self.injector.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.injector.kill()
                self.injector.wait()
        self.injector = None

    def hosts(self) -> List[str]:
        from .fanout import read_nodefile
        return read_nodefile(self.cfg.nodefile)[0]

    def start_pool(self, phase: layout.Phase) -> Optional[str]:
        """Start the warm standby pools (one per node) without waiting for them: they preload
        while the phase's first attempt starts cold. None, or why they cannot start."""
        from .fanout import job_nodes
        from .warm.standby import Standby, default_preload
        from .warm.wire import PoolError
        cfg = self.cfg
        hosts, slots = job_nodes(cfg.nodefile, cfg.fanout)
        if cfg.fanout == "local" and len(hosts) > 1:
            return f"fanout local reaches this node only, and the job has {len(hosts)} nodes"
        try:
            preload = cfg.warm_preload or programs.ADAPTERS.get(self.spec["adapter"]).preload
            self.pool = Standby(cfg.launch_spec.python, cfg.tag, phase.warm_log,
                                preload or default_preload(cfg.launch_spec.program), fanout=cfg.fanout,
                                hosts=hosts, slots=slots, launcher=cfg.launcher, state_dir=phase.warm_dir)
        except (PoolError, OSError) as e:
            self.stop_pool()
            return f"the standby pool did not start ({e}; see {phase.warm_log})"
        self.pool_served = False
        return None

    def launch_argv(self, launch: LaunchSpec, attempt_dir: str,
                    wait: bool = True) -> Tuple[List[str], Optional[Tuple[str, bool]]]:
        """The attempt's argv, through the pools' stubs when they serve, else cold; and what to say
        (text, is it a fall-back) the first time they serve, or when they cannot. A relaunch
        (`wait`) waits for pools still preloading: they started before the attempt that failed, so
        what is left of their preload is less than a cold start's imports. The phase's first
        launch does not wait: it starts cold beside them. A cold rank starts through the exit
        recorder (runtime/rankexit.py), a warm one's stub records its end itself."""
        from .warm.wire import PoolError
        if self.pool is None:
            return launch.cold_argv(attempt_dir), None
        pool = self.pool
        try:
            if wait:
                pool.wait_ready(max(0.0, self.cfg.startup_timeout - (time.time() - pool.started)))
            elif not pool.ready():
                return launch.cold_argv(attempt_dir), None
            if not pool.alive():
                raise PoolError(f"a pool exited ({pool.last_line()})")
        except (PoolError, OSError) as e:
            self.stop_pool()
            return launch.cold_argv(attempt_dir), (f"the standby pool cannot serve ({e}; see {pool.log_path})", True)
        note = None
        if not self.pool_served:
            self.pool_served = True
            note = (f"the standby pool serves (preloaded in {pool.ready_after:.1f}s; see {pool.log_path})", False)
        return launch.stub_argv(pool.dir, attempt_dir), note

    def warm_ranks(self, k: int) -> Optional[int]:
        """Ranks of attempt k the pools forked (None: not a warm phase; 0: all cold)."""
        if not self.cfg.warm:
            return None
        from .warm.standby import served_in
        return served_in(layout.Phase(self.cfg.phase_dir).warm_dir, k)

    def stop_pool(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None


# ---------------------------------------------------------------- configuration
class _Settings:
    @classmethod
    def from_args(cls, a: argparse.Namespace, argv: List[str]) -> "Config":
        """SpecError when --launch is not a launch spec."""
        vals = {o.key: getattr(a, o.key) for o in tool_options.SUPERVISE}
        vals["nodefile"] = tool_options.nodefile_default(vals["nodefile"])
        vals["node_check"] = tool_options.SUPERVISE_NODE_CHECK.values(a) if a.node_check else None
        vals["inject"] = tool_options.SUPERVISE_INJECT.values(a) if a.inject else None
        cfg = cls(argv=list(argv), **vals)
        cfg.launch_spec  # parsed (and refused) here, not at the first launch
        return cfg

    @functools.cached_property
    def launch_spec(self) -> LaunchSpec:
        """--launch and the program's argv (after --) as one LaunchSpec."""
        return LaunchSpec.from_json(self.launch, self.argv)

    @property
    def launcher(self) -> str:
        return self.launch_spec.launcher


Config = options.config_class(
    "Config", tool_options.SUPERVISE, module=__name__, head=[("argv", List[str])],
    # on: the embedded tool's values (--inject-*, --node-check-*); off: None
    values={"node_check": Dict[str, Any], "inject": Dict[str, Any]}, bases=[_Settings],
    doc="""The supervisor's settings: the program's argv, then one field per option of
    tools/options.SUPERVISE (its required ones first), each default the table's; `launch_spec`
    is the launch (--launch and the program) as a LaunchSpec.""")


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ---------------------------------------------------------------- the loop
class Supervisor:
    def __init__(self, cfg: "Config", clock: Clock = None, procs: Procs = None, out=None):
        self.cfg = cfg
        self.clock = clock or Clock()
        self.procs = procs or Procs(cfg)
        self.phase = layout.Phase(cfg.phase_dir)
        self.out = out or sys.stdout
        self.current: Optional[Launched] = None
        self.bad_rank_seen = {}  # attempt path -> when this loop first saw a rank's bad end

    def say(self, msg: str, err: bool = False) -> None:
        print(f"restartlab: phase {self.cfg.phase}: {msg}", file=sys.stderr if err else self.out, flush=True)

    def past_stop(self) -> bool:
        return self.cfg.stop_at > 0 and self.clock.time() >= self.cfg.stop_at

    # -- one attempt
    def _argv_and_env(self, k: int, att: layout.Attempt, relaunch: bool = True):
        """The attempt's argv (from the launch spec: the program's {attempt_dir} filled in, the nodes
        the node check chose), the variables the ranks get and the rank count when the node check
        chose it (0: the scenario's)."""
        cfg, ranks = self.cfg, 0
        launch = cfg.launch_spec.filled({placeholders.ATTEMPT_DIR: att.path})
        master = os.environ.get("MASTER_ADDR") or socket.gethostname()
        if cfg.node_check is not None:
            n = self.procs.node_check(self.phase, k)
            if n is None:
                self.say(f"too few healthy nodes to launch attempt {k} (see {self.phase.node_checks})", err=True)
                return None, None, 0
            if cfg.node_policy != "same":
                launch = launch.with_nodes(n)
                shutil.copyfile(cfg.hosts_file, att.hosts)
                with open(cfg.hosts_file) as f:
                    first = next((h.strip() for h in f if h.strip()), None)
                hosts = self.procs.hosts()
                if first and hosts and first != hosts[0]:  # rank 0 runs on the first host
                    master = os.environ.get("MASTER_ADDR") or first
                ranks = launch.ranks
        argv, note = self.procs.launch_argv(launch, att.path, wait=relaunch)
        if note:
            text, fallback = note
            self.say(f"warm restart: {text}: {'cold' if fallback else 'warm'} launches from attempt {k}",
                     err=fallback)
        env = {"RESTARTLAB_LAUNCH_TS": repr(self.clock.time()), "MASTER_ADDR": master,
               "MASTER_PORT": str(self.procs.free_port()),
               "RESTARTLAB_EXPT": os.path.basename(os.path.dirname(os.path.abspath(cfg.phase_dir))),
               "RESTARTLAB_PHASE": cfg.phase, "RESTARTLAB_ATTEMPT": str(k)}
        return argv, env, ranks

    def watch(self, run: Launched, att: layout.Attempt) -> int:
        """Wait for the attempt to end; the walltime warning and the watchdog meanwhile."""
        cfg = self.cfg
        while True:
            rc = run.wait(cfg.tick)
            if rc is not None:
                return rc
            if not os.path.exists(att.walltime) and self.past_stop():
                self.walltime_warning(att)
            if self.peers_left_waiting(att):
                return self.stop_stuck(run, att)
            last = self.procs.last_activity(att)
            limit = cfg.hang_timeout if self.procs.has_stepped(att) else cfg.startup_timeout
            if last is not None and self.clock.time() - last > limit:
                self.say(f"no progress in {att.path} for {limit:g}s: stopping the attempt", err=True)
                _touch(att.hang)
                return self.stop_stuck(run, att)

    def stop_stuck(self, run: Launched, att: layout.Attempt) -> int:
        """An attempt that will not end by itself: where its ranks are (stacks, processes), then
        KILL to them on every node, then the launcher stopped; its exit status."""
        self.procs.dump_stacks(att)
        self.procs.teardown(att)
        return self.stop(run)

    def peers_left_waiting(self, att: layout.Attempt) -> bool:
        """A rank ended badly (its exit record) relaunch.rank_exit_grace ago, as this loop first saw
        it, and the launch still runs: its peers wait for it in a collective or a rendezvous until
        their own timeout, since a launcher may not end them (Hydra does only when a rank dies by a
        signal; an exit status it leaves alone). Not after the walltime warning, whose emergency
        checkpoint has the margin's time."""
        grace = self.cfg.rank_exit_grace
        if grace <= 0 or os.path.exists(att.walltime):
            return False
        bad = self.procs.failed_rank(att)
        if bad is None:
            return False
        seen = self.bad_rank_seen.setdefault(att.path, self.clock.time())
        if self.clock.time() - seen < grace:
            return False
        self.say(f"rank {bad.rank} on {bad.node} ended ({bad.how()}) and the others still run "
                 f"{grace:g}s later: stopping the attempt (relaunch.rank_exit_grace)", err=True)
        return True

    def stop(self, run: Launched) -> int:
        """TERM to the launcher, KILL after STOP_GRACE_S; its exit status."""
        run.signal(signal.SIGTERM)
        rc = run.wait(STOP_GRACE_S)
        if rc is None:
            run.signal(signal.SIGKILL)
            rc = run.wait(None)
        return rc

    def walltime_warning(self, att: layout.Attempt) -> None:
        """The ranks write an emergency checkpoint and exit; the marker says: do not relaunch."""
        _touch(att.walltime)
        self.say(f"walltime warning ({self.cfg.walltime_margin:g}s left): SIG{self.cfg.preempt_signal} to "
                 f"the ranks for an emergency checkpoint", err=True)
        self.procs.teardown(att, self.cfg.preempt_signal)

    # -- the phase
    def run(self) -> int:
        cfg, phase = self.cfg, self.phase
        if os.path.exists(phase.completed):
            src = phase.reused_from()
            self.say(f"recorded in {src} (restartlab run --baseline-from): not run again" if src
                     else "finished by an earlier job of this experiment")
            return EXIT_OK
        if self.past_stop():
            self.say("not started (walltime): the walltime margin is reached", err=True)
            return EXIT_WALLTIME
        os.makedirs(phase.attempts_dir, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(phase.done)
        launcher = cfg.launch_spec.launcher_argv()[0]
        if not self.procs.which(launcher):
            self.say(f"FAILED: launcher '{launcher}' is not on PATH in the job "
                     f"(PATH={os.environ.get('PATH', '')})", err=True)
            return EXIT_FAILED
        problem = self.procs.preflight(cfg.launch_spec)
        if problem:  # one line, before an attempt is spent on it
            self.say(f"FAILED: the program cannot run: {problem}", err=True)
            attempt_record.write_end(phase, PhaseEnd.CANNOT_RUN, 0, cfg.job or None, why=problem)
            return EXIT_FAILED
        if cfg.warm:
            why = self.procs.start_pool(phase)
            self.say(f"warm restart: {why}: cold launches" if why else
                     "warm restart: the standby pool starts beside the first attempt (which starts cold)",
                     err=bool(why))
        if cfg.inject is not None:
            self.procs.start_injector(phase)
        self.say(f"started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
        try:
            verdict, k, tries = self._attempts()
        finally:
            _touch(phase.done)
            self.procs.stop_injector()
            self.procs.stop_pool()
        attempt_record.write_end(phase, verdict, k, cfg.job or None)
        if verdict == PhaseEnd.COMPLETED:
            _touch(phase.completed)
            self.say(f"finished after {k} attempt(s) {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
            return EXIT_OK
        if verdict == PhaseEnd.WALLTIME:
            self.say("stopped by the walltime warning; its newest checkpoint is the emergency one", err=True)
            return EXIT_WALLTIME
        self.say(f"FAILED: {tries} attempt(s) in this job did not reach the last step", err=True)
        return EXIT_BUDGET if verdict == PhaseEnd.BUDGET else EXIT_FAILED

    def _attempts(self):
        """(verdict, last attempt number, attempts made in this job); verdict is completed,
        walltime, budget (max_attempts used up), or failed (relaunching cannot help)."""
        cfg, phase = self.cfg, self.phase
        done = phase.attempts()
        k = done[-1].index if done else 0  # a chained job goes on numbering the attempts before it
        tries = 0
        while tries < cfg.max_attempts:
            if self.past_stop():
                self.say(f"walltime margin reached: no attempt launched after attempt {k}", err=True)
                return PhaseEnd.WALLTIME, k, tries
            k, tries = k + 1, tries + 1
            att = phase.attempt(k)
            os.makedirs(att.path, exist_ok=True)
            argv, env, ranks = self._argv_and_env(k, att, relaunch=tries > 1)
            if argv is None:
                return PhaseEnd.FAILED, k, tries
            launch_ts = float(env["RESTARTLAB_LAUNCH_TS"])
            attempt_record.launched(att, k, launch_ts, cfg.job or None)
            self.current = self.procs.launch(argv, att, env)
            try:
                rc = self.watch(self.current, att)
            except Interrupted:
                rc = self.stop(self.current)
                self.procs.finish(att, rc)
                self._record(att, k, launch_ts, rc, ranks)
                raise
            end_ts = self.clock.time()
            self.current = None
            if rc != 0:  # nothing of a failed attempt outlives it
                self.procs.teardown(att)
            warning = self.procs.finish(att, rc)
            if warning:
                self.say(f"attempt {k}: {warning}", err=True)
            if self._record(att, k, launch_ts, rc, ranks, end_ts):
                return PhaseEnd.COMPLETED, k, tries
            if os.path.exists(att.walltime):
                return PhaseEnd.WALLTIME, k, tries
            if rc == EXIT_NO_CHECKPOINT:  # complete checkpoints exist, none loads: relaunching cannot help
                self.say(f"no complete checkpoint loads (see {att.output}): not relaunching", err=True)
                return PhaseEnd.FAILED, k, tries
            if tries < cfg.max_attempts:
                self.clock.sleep(cfg.backoff)
        return PhaseEnd.BUDGET, k, tries

    def _record(self, att, k, launch_ts, rc, ranks, end_ts=None) -> bool:
        return attempt_record.record(att, self.phase, k, launch_ts, end_ts or self.clock.time(), rc,
                                     self.cfg.train_iters, self.cfg.launcher, ranks, self.cfg.job,
                                     out=self.out, warm_ranks=self.procs.warm_ranks(k))


def _touch(path: str) -> None:
    with open(path, "a"):
        pass


# ---------------------------------------------------------------- the verb
def inject_argv(cfg: Config, phase: layout.Phase) -> List[str]:
    """`restartlab inject`'s flags: the phase's failure settings (--inject-*), and where to find the
    phase, its ranks and its nodes from the supervisor's own."""
    return tool_options.injector_argv(cfg.inject or {}, phase.path, cfg.ckpt_dir, cfg.program, cfg.train_iters,
                                      cfg.tag, cfg.fanout, cfg.launcher, cfg.nodefile)


def build_parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    options.add_to_parser(p, tool_options.SUPERVISE)
    tool_options.SUPERVISE_NODE_CHECK.add_to_parser(p)
    tool_options.SUPERVISE_INJECT.add_to_parser(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- the program's own argv (its executable first)")
    return p


class _ParseError(Exception):
    pass


class _Quiet(argparse.ArgumentParser):
    def error(self, message):
        raise _ParseError(message)


def _inject_problem(argv: List[str]) -> Optional[str]:
    p = _Quiet(prog="restartlab inject")
    tool_options.add_inject_args(p)
    try:
        p.parse_args(argv)
    except _ParseError as e:
        return str(e)
    return None


def main(a: argparse.Namespace) -> int:
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        print("restartlab supervise: error: no program (give its argv after --)", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = Config.from_args(a, argv)
    except SpecError as e:
        print(f"restartlab supervise: error: --launch: {e}", file=sys.stderr)
        return EXIT_USAGE
    if cfg.node_check is not None and not cfg.hosts_file:
        print("restartlab supervise: error: --node-check needs --hosts-file", file=sys.stderr)
        return EXIT_USAGE
    if cfg.inject is not None:  # checked by the injector's own parser now, not when the phase starts it
        problem = _inject_problem(inject_argv(cfg, layout.Phase(cfg.phase_dir)))
        if problem:
            print(f"restartlab supervise: error: --inject: {problem}", file=sys.stderr)
            return EXIT_USAGE
    def on_signal(signum, _frame):
        raise Interrupted(signum)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    if cfg.ft_groups:  # torchft replica groups, each under a loop of its own (ft_phase.py)
        from .ft_phase import FtPhase
        ft = FtPhase(cfg, Procs(cfg))
        try:
            return ft.run()
        except Interrupted as e:
            print(f"restartlab: phase {cfg.phase}: interrupted ({e}): its replica groups, the injector and "
                  f"the lighthouse are stopped", file=sys.stderr, flush=True)
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, signal.SIG_IGN)
            return ft.interrupt()
    sup = Supervisor(cfg)
    try:
        return sup.run()
    except Interrupted as e:
        print(f"restartlab: phase {cfg.phase}: interrupted ({e}): the attempt and the injector are stopped",
              file=sys.stderr, flush=True)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)  # finish stopping what we started
        if sup.current is not None:
            sup.stop(sup.current)
        if sup.procs.injector is not None:
            sup.procs.injector.terminate()
            sup.procs.stop_injector()
        if sup.phase.started():
            attempt_record.write_end(sup.phase, PhaseEnd.INTERRUPTED, len(sup.phase.attempts()), cfg.job or None, e.signum)
        return EXIT_INTERRUPTED
