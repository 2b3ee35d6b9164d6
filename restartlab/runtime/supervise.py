"""restartlab supervise: the relaunch loop of one phase, run by the job script once per phase:

    restartlab supervise --phase sync --phase-dir EXPT/sync --tag T ... --launch '{"python": ...}' -- python -m restartlab.trainer ...

The launch is a LaunchSpec (tools/launch.py): --launch's JSON and the program's argv after --.

It keeps the injector running for the phase. For each attempt, it does this:
- It runs the node check before the launch when a policy needs it.
- It launches the attempt, with its own directory, a fresh rendezvous port and the launch timestamp.
- It watches the attempt. An attempt with no progress for hang_timeout is stopped, and so is one
  with none for startup_timeout before the first step. An attempt is also stopped rank_exit_grace
  after a rank ended badly while the others still run.
- Once the walltime margin is reached, it sends the ranks the trainer's preemption signal. It
  launches nothing after that.
- It tears down whatever of a failed attempt is left.
- It records the attempt and decides: relaunch (after the backoff, within the budget), or stop.

The phase's verdict is its exit status (EXIT_*), its `completed` marker and each attempt's record
(layout.py names them).

The decisions live in `Supervisor`. The side effects (processes, signals, the node check, the
injector) live in `Procs`, and time in `Clock`. The tests replace both: a fake clock, fake attempts."""
import argparse
import contextlib
import dataclasses
import functools
import os
import shutil
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, NoReturn, Optional, TextIO, Tuple, cast

from . import attempt_record, iofault
from .clock import Clock
from .. import failures, launchers, programs
from ..contracts import layout, options, placeholders, rank_exit
from ..contracts.attempts import PhaseEnd
from ..contracts.envvars import (ATTEMPT_VAR, EXPT_VAR, LAUNCH_TS_VAR, PHASE_VAR, SLOW_WRITES_VAR, STATE_DIR_VAR,
                                 STATE_EVERY_VAR, slow_writes_value)
from . import attempt_stop
from .attempt_launch import AttemptLaunch, Launched
from .inject_api import Config as InjectConfig
from .injector_proc import INJECTOR_GRACE_S, InjectorProcess
from .interrupts import Interrupted, Interrupts
from .storage_faults import PhaseStorageFaults
from .watch import NODE_POLL_S, STOP_GRACE_S, Watchdog, touch as _touch  # (the times: re-exported)
from ..tools import options as tool_options
from ..tools.launch import LaunchSpec, SpecError
from ..contracts.exits import (EXIT_BUDGET, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_CHECKPOINT, EXIT_OK, EXIT_USAGE,
                               EXIT_WALLTIME)
if TYPE_CHECKING:  # start_pool imports it when the pools start
    from .warm.route import WarmRoute


# ---------------------------------------------------------------- the parts the tests replace
class Procs:
    """The supervisor's side effects on real processes and files.

    The tests replace this whole object. Each side effect is the job of its own module:
    - attempt_launch: the attempt's launch and what is watched of it
    - attempt_stop: stopping what is left of it
    - warm/route: the warm standby pools
    - injector_proc: the injector
    - nodes: the node check"""

    def __init__(self, cfg: "Config"):
        self.cfg = cfg
        self.spec = programs.from_argv(cfg.program)
        self.attempts = AttemptLaunch(self.spec, cfg.ckpt_dir, cfg.phase_dir, cfg.ft_group)
        self.injector = InjectorProcess()
        self.warm: Optional["WarmRoute"] = None  # the warm standby pools' route, once started

    def which(self, exe: str) -> bool:
        return shutil.which(exe) is not None

    def preflight(self, launch: LaunchSpec) -> Optional[str]:
        """Why the program cannot run here (its adapter's check on a program of yours), or None."""
        return programs.preflight(self.spec, list(launch.program)) if launch.rankenv else None

    def free_port(self) -> int:
        return int(os.environ.get("MASTER_PORT") or launchers.free_port())

    # -- the attempt (attempt_launch)
    def launch(self, argv: List[str], att: layout.Attempt, env: Dict[str, str]) -> Launched:
        return self.attempts.start(argv, att, env)

    def finish(self, att: layout.Attempt, rc: int) -> Optional[str]:
        return self.attempts.finish(att, rc, self.cfg.train_iters)

    def last_activity(self, att: layout.Attempt) -> Optional[float]:
        return self.attempts.last_activity(att)

    def has_stepped(self, att: layout.Attempt) -> bool:
        return self.attempts.has_stepped(att)

    def failed_rank(self, att: layout.Attempt) -> Optional[rank_exit.RankExit]:
        return self.attempts.failed_rank(att)

    # -- what is left of it (attempt_stop)
    def teardown(self, att: layout.Attempt, sig: str = "KILL") -> List[str]:
        """The nodes that did not answer."""
        return attempt_stop.teardown(self.cfg, att, sig)

    def dump_stacks(self, att: layout.Attempt) -> None:
        attempt_stop.dump_stacks(self.cfg, att, self.attempts.launcher_pids.get(att.path), self.say)

    def say(self, msg: str, err: bool = False) -> None:
        print(f"restartlab: phase {self.cfg.phase}: {msg}", file=sys.stderr if err else sys.stdout, flush=True)

    # -- the nodes (nodes)
    def node_check(self, phase: layout.Phase, k: int) -> Optional[int]:
        """Nodes the next attempt gets (its hosts in --hosts-file); None: too few healthy ones."""
        from . import nodes
        cfg = nodes.Config(**(self.cfg.node_check or {}), fanout=self.cfg.fanout, launcher=self.cfg.launcher,
                           nodefile=self.cfg.nodefile, policy=self.cfg.node_policy, log=phase.node_checks,
                           attempt=k, hosts_out=self.cfg.hosts_file)
        with open(phase.node_check_log, "a") as log, contextlib.redirect_stderr(log):
            return nodes.check_all(cfg)

    def answering(self, names: List[str]) -> List[str]:
        """Which of the nodes `names` answer now (each given relaunch.teardown_timeout)."""
        from . import nodes
        return nodes.answering(self.cfg.fanout, self.cfg.nodefile, self.cfg.launcher, names, self.cfg.teardown_timeout)

    def hosts(self) -> List[str]:
        from .fanout import read_nodefile
        return read_nodefile(self.cfg.nodefile)[0]

    # -- the injector (injector_proc)
    def start_injector(self, phase: layout.Phase) -> None:
        self.injector.start(inject_argv(self.cfg, phase), phase)

    def stop_injector(self, grace: float = INJECTOR_GRACE_S) -> None:
        self.injector.stop(grace)

    # -- the warm standby pools (warm/route)
    def start_pool(self, phase: layout.Phase) -> Optional[str]:
        from .fanout import job_nodes
        from .warm.route import WarmRoute
        self.warm = WarmRoute(self.cfg, self.spec)
        return self.warm.start(phase, *job_nodes(self.cfg.nodefile, self.cfg.fanout))

    def launch_argv(self, launch: LaunchSpec, attempt_dir: str,
                    wait: bool = True) -> Tuple[List[str], Optional[Tuple[str, bool]]]:
        if self.warm is None:
            return launch.cold_argv(attempt_dir), None
        return self.warm.argv(launch, attempt_dir, wait)

    def warm_ranks(self, k: int) -> Optional[int]:
        """Ranks of attempt k the pools forked (None: not a warm phase; 0: all cold)."""
        if not self.cfg.warm:
            return None
        from .warm.standby import served_in
        return served_in(layout.Phase(self.cfg.phase_dir).warm_dir, k)

    def stop_pool(self) -> None:
        if self.warm is not None:
            self.warm.stop()


# ---------------------------------------------------------------- configuration
@dataclasses.dataclass
class Config:
    """The supervisor's settings: the program's argv, then one field per option of
    tools/options.SUPERVISE (the required ones first). The table holds each option's flag, help and
    default; tests/test_tool_options.py keeps this class equal to it (contracts/options.config_problems).
    `node_check` and `inject` hold the embedded tool's values (--node-check-*, --inject-*), None when
    off. `launch_spec` is the launch (--launch and the program) as a LaunchSpec."""
    argv: List[str]
    phase: str
    phase_dir: str
    tag: str
    launch: str
    train_iters: int = 100
    max_attempts: int = 10
    backoff: float = 0.0
    master_suffix: str = ""
    hang_timeout: float = 600.0
    teardown_timeout: float = 15.0
    node_wait: float = 600.0
    startup_timeout: float = 1200.0
    rank_exit_grace: float = 60.0
    walltime_margin: float = 120.0
    stop_at: float = 0.0
    preempt_signal: str = "TERM"
    fanout: str = "local"
    nodefile: Optional[str] = None
    job: str = "local"
    node_policy: str = "same"
    node_check: Optional[Dict[str, Any]] = None
    hosts_file: Optional[str] = None
    inject: Optional[Dict[str, Any]] = None
    ckpt_dir: Optional[str] = None
    program: Optional[str] = None
    warm: bool = False
    warm_preload: Optional[str] = None
    state_every: int = 10
    slow_writes_rank: int = 0
    slow_writes_seconds: float = 0.0
    slow_writes_hold: str = "inside"
    tick: float = 1.0
    ft_groups: int = 0
    ft_min_replicas: int = 1
    ft_heartbeat_timeout: float = 5.0
    ft_join_timeout: float = 60.0
    ft_group: int = -1

    @classmethod
    def from_args(cls, a: argparse.Namespace, argv: List[str]) -> "Config":
        """SpecError when --launch is not a launch spec."""
        vals = {o.key: getattr(a, o.key) for o in tool_options.SUPERVISE}
        vals["nodefile"] = tool_options.nodefile_default(a.nodefile)
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


# ---------------------------------------------------------------- the loop
class Supervisor:
    def __init__(self, cfg: "Config", clock: Optional[Clock] = None, procs: Optional[Procs] = None,
                 out: Optional[TextIO] = None, interrupts: Optional[Interrupts] = None):
        self.cfg = cfg
        self.interrupts = interrupts or Interrupts()  # main() installs its handler
        self.clock = clock or Clock()
        self.procs = procs or Procs(cfg)
        self.phase = layout.Phase(cfg.phase_dir)
        self.out = out or sys.stdout
        self.current: Optional[Launched] = None
        self.watchdog = Watchdog(cfg, self.clock, self.procs, self.say)
        self.io = PhaseStorageFaults(injector_settings(cfg), self.phase, cfg.ckpt_dir, self.say)
        self.io_env: Dict[str, str] = {}
        self.end_why: Optional[str] = None  # why the phase failed, where a reason is known (its end record's `why`)

    def say(self, msg: str, err: bool = False) -> None:
        print(f"restartlab: phase {self.cfg.phase}: {msg}", file=sys.stderr if err else self.out, flush=True)

    # -- one attempt
    def _argv_and_env(self, k: int, att: layout.Attempt,
                      relaunch: bool = True) -> Tuple[Optional[List[str]], Optional[Dict[str, str]], int]:
        """The attempt's argv, the variables the ranks get, and the rank count.

        The argv comes from the launch spec, with the program's {attempt_dir} filled in and the nodes
        the node check chose. The rank count is the node check's choice (0: the scenario's)."""
        cfg, ranks = self.cfg, 0
        launch = cfg.launch_spec.filled({placeholders.ATTEMPT_DIR: att.path})
        master = launchers.master_addr(socket.gethostname(), cfg.master_suffix)
        if cfg.node_check is not None:
            n = self.procs.node_check(self.phase, k)
            if n is None:
                self.say(f"too few healthy nodes to launch attempt {k} (see {self.phase.node_checks})", err=True)
                return None, None, 0
            if cfg.node_policy != "same":
                launch = launch.with_nodes(n)
                assert cfg.hosts_file is not None  # main(): --node-check needs --hosts-file
                shutil.copyfile(cfg.hosts_file, att.hosts)
                with open(cfg.hosts_file) as f:
                    first = next((h.strip() for h in f if h.strip()), None)
                hosts = self.procs.hosts()
                if first and hosts and first != hosts[0]:  # rank 0 runs on the first host
                    master = launchers.master_addr(first, cfg.master_suffix)
                ranks = launch.ranks
        argv, note = self.procs.launch_argv(launch, att.path, wait=relaunch)
        if note:
            text, fallback = note
            self.say(f"warm restart: {text}: {'cold' if fallback else 'warm'} launches from attempt {k}",
                     err=fallback)
        env = {LAUNCH_TS_VAR: repr(self.clock.time()), "MASTER_ADDR": master,
               "MASTER_PORT": str(self.procs.free_port()),
               EXPT_VAR: os.path.basename(os.path.dirname(os.path.abspath(cfg.phase_dir))),
               PHASE_VAR: cfg.phase, ATTEMPT_VAR: str(k)}
        # The ranks' training-state fingerprints go into the attempt's directory (0: none). Both are
        # always set, so that a launcher's forwarding by name (Open MPI's -x) never names an unset variable.
        env.update({STATE_DIR_VAR: os.path.abspath(att.path), STATE_EVERY_VAR: str(cfg.state_every)})
        # failures.slow_writes: that rank's torch.save files held half-written (trainer/slow_writes.py)
        env[SLOW_WRITES_VAR] = slow_writes_value(cfg.slow_writes_rank, cfg.slow_writes_seconds, cfg.slow_writes_hold)
        env.update(self.io_env)  # failures.kind stall_writes, slow_storage, write_errors, torn (runtime/iofault)
        return argv, env, ranks

    # -- the phase
    def run(self) -> int:
        cfg, phase = self.cfg, self.phase
        if os.path.exists(phase.completed):
            src = phase.reused_from()
            self.say(f"recorded in {src} (restartlab run --baseline-from): not run again" if src
                     else "finished by an earlier job of this experiment")
            return EXIT_OK
        if self.watchdog.past_stop():
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
        iofault.disarm(phase.iofault_ctl)  # a strike armed by an earlier job's injector (SIGKILLed first) is over
        try:
            self.io_env = self.io.rank_env()
        except iofault.BuildError as e:
            self.say(f"FAILED: the storage faults cannot be made: {e}", err=True)
            attempt_record.write_end(phase, PhaseEnd.CANNOT_RUN, 0, cfg.job or None, why=str(e))
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
            iofault.disarm(phase.iofault_ctl)  # no process of a later phase or job takes this phase's strike
        attempt_record.write_end(phase, verdict, k, cfg.job or None, why=self.end_why)
        if verdict == PhaseEnd.COMPLETED:
            _touch(phase.completed)
            self.say(f"finished after {k} attempt(s) {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
            return EXIT_OK
        if verdict == PhaseEnd.WALLTIME:
            self.say("stopped by the walltime warning; its newest checkpoint is the emergency one", err=True)
            return EXIT_WALLTIME
        self.say(f"FAILED: {tries} attempt(s) in this job did not reach the last step", err=True)
        return EXIT_BUDGET if verdict == PhaseEnd.BUDGET else EXIT_FAILED

    def _attempts(self) -> Tuple[PhaseEnd, int, int]:
        """(verdict, last attempt number, attempts made in this job); verdict is completed,
        walltime, budget (max_attempts used up), or failed (relaunching cannot help)."""
        cfg, phase = self.cfg, self.phase
        done = phase.attempts()
        k = done[-1].index if done else 0  # a chained job goes on numbering the attempts before it
        tries = 0
        while tries < cfg.max_attempts:
            if self.watchdog.past_stop():
                self.say(f"walltime margin reached: no attempt launched after attempt {k}", err=True)
                return PhaseEnd.WALLTIME, k, tries
            k, tries = k + 1, tries + 1
            att = phase.attempt(k)
            os.makedirs(att.path, exist_ok=True)
            argv, env, ranks = self._argv_and_env(k, att, relaunch=tries > 1)
            if argv is None:
                return PhaseEnd.FAILED, k, tries
            if self.watchdog.past_stop():  # reached while the node check ran or the pools preloaded
                shutil.rmtree(att.path, ignore_errors=True)
                self.say(f"walltime margin reached: no attempt launched after attempt {k - 1}", err=True)
                return PhaseEnd.WALLTIME, k - 1, tries - 1
            launch_ts = float(cast(Dict[str, str], env)[LAUNCH_TS_VAR])  # with an argv, an env
            attempt_record.launched(att, k, launch_ts, cfg.job or None)
            self.current = self.procs.launch(argv, att, cast(Dict[str, str], env))
            try:
                rc = self.watchdog.watch(self.current, att)
            except Interrupted:
                rc = self.watchdog.stop(self.current)
                self.procs.finish(att, rc)
                self._record(att, k, launch_ts, rc, ranks)
                raise
            end_ts = self.clock.time()
            self.current = None
            lost: List[str] = []
            if rc != 0:  # nothing of a failed attempt outlives it
                lost = self.procs.teardown(att) or []
            # A signal here raises once the attempt is recorded. The teardown before is not held: on a node
            # that does not answer it takes up to relaunch.teardown_timeout (15 s), past PBS's kill_delay
            # (10 s) after its TERM, and SIGKILL would then leave no record at all.
            with self.interrupts.held():
                warning = self.procs.finish(att, rc)
                if warning:
                    self.say(f"attempt {k}: {warning}", err=True)
                completed = self._record(att, k, launch_ts, rc, ranks, end_ts)
            if completed:
                if rc != 0:  # relaunched, it would resume at its final checkpoint and train past the last step
                    self.say(f"attempt {k} reached the last step, then exited {rc}: finished, not relaunched "
                             "(a crash at exit: the report names it)", err=True)
                return PhaseEnd.COMPLETED, k, tries
            if os.path.exists(att.walltime):
                return PhaseEnd.WALLTIME, k, tries
            if rc == EXIT_NO_CHECKPOINT:  # complete checkpoints exist, none loads: relaunching cannot help
                self.say(f"no complete checkpoint loads (see {att.output}): not relaunching", err=True)
                return PhaseEnd.FAILED, k, tries
            full = out_of_space(att.output) if not self.io.heals_space() else None
            if full:  # a full file system or quota is still full at the next launch: relaunching cannot help
                self.end_why = f"a rank's write failed for want of space ({full}; see {att.output})"
                self.say(f"{self.end_why}: not relaunching until space is freed", err=True)
                return PhaseEnd.FAILED, k, tries
            if tries < cfg.max_attempts:
                still = self.watchdog.wait_for_nodes(lost, k, att)
                if still:  # a launch onto a node that does not answer fails at once: a crash loop
                    them = "it" if len(still) == 1 else "them"
                    self.end_why = (f"{', '.join(still)} did not answer for {cfg.node_wait:.0f} s after attempt {k}'s "
                                    f"stop could not reach {them}: relaunching on the same nodes cannot help "
                                    f"(relaunch.on_node_loss: spares or shrink go on without {them})")
                    self.say(f"{self.end_why}: not relaunching", err=True)
                    return PhaseEnd.FAILED, k, tries
                self.clock.sleep(cfg.backoff)
        return PhaseEnd.BUDGET, k, tries

    def _record(self, att: layout.Attempt, k: int, launch_ts: float, rc: int, ranks: int,
                end_ts: Optional[float] = None) -> bool:
        return attempt_record.record(att, self.phase, k, launch_ts, end_ts or self.clock.time(), rc,
                                     self.cfg.train_iters, self.cfg.launcher, ranks, self.cfg.job,
                                     out=self.out, warm_ranks=self.procs.warm_ranks(k))


NO_SPACE = ("No space left on device", "Disk quota exceeded")  # strerror(ENOSPC), strerror(EDQUOT)
TAIL_BYTES = 64 * 1024
TAIL_LINES = 30  # how the attempt ended: its output's last lines (a save that failed earlier and was
#                  survived, the trainer going on, is not how it ended)


def out_of_space(output: str) -> Optional[str]:
    """The line among the last TAIL_LINES of an attempt's output that says a write failed for want of
    space (how it ended), else None."""
    try:
        with open(output, "rb") as f:
            f.seek(max(0, os.path.getsize(output) - TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()[-TAIL_LINES:]):
        if any(w in line for w in NO_SPACE):
            return " ".join(line.split())[:200]
    return None


# ---------------------------------------------------------------- the verb
def inject_argv(cfg: Config, phase: layout.Phase) -> List[str]:
    """`restartlab inject`'s flags: the phase's failure settings (--inject-*), and where to find the
    phase, its ranks and its nodes from the supervisor's own."""
    return tool_options.injector_argv(cfg.inject or {}, phase.path, cfg.ckpt_dir, cfg.program, cfg.train_iters,
                                      cfg.tag, cfg.fanout, cfg.launcher, cfg.nodefile,
                                      job_end=cfg.stop_at)


def build_parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    options.add_to_parser(p, tool_options.SUPERVISE)
    tool_options.SUPERVISE_NODE_CHECK.add_to_parser(p)
    tool_options.SUPERVISE_INJECT.add_to_parser(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- the program's own argv (its executable first)")
    return p


class _ParseError(Exception):
    pass


class _Quiet(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)


def _inject_parser() -> "_Quiet":
    p = _Quiet(prog="restartlab inject")
    tool_options.add_inject_args(p)
    return p


def _inject_problem(argv: List[str]) -> Optional[str]:
    try:
        _inject_parser().parse_args(argv)
    except _ParseError as e:
        return str(e)
    return None


def injector_settings(cfg: Config) -> Optional[InjectConfig]:
    """The phase's injector's settings, as its own parser reads the line the supervisor starts it with.

    None: the phase has no injector. main() has already refused a line that does not parse."""
    if cfg.inject is None:
        return None
    return InjectConfig.from_args(_inject_parser().parse_args(inject_argv(cfg, layout.Phase(cfg.phase_dir))))


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
    interrupts = Interrupts()  # the first TERM or INT stops the phase; a later one does not stop the stopping
    interrupts.install()
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
    sup = Supervisor(cfg, interrupts=interrupts)
    try:
        return sup.run()
    except Interrupted as e:
        print(f"restartlab: phase {cfg.phase}: interrupted ({e}): the attempt and the injector are stopped",
              file=sys.stderr, flush=True)
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)  # finish stopping what we started
        if sup.current is not None:
            sup.watchdog.stop(sup.current)
        sup.procs.injector.terminate()
        sup.procs.stop_injector()
        sup.procs.stop_pool()  # a signal before run()'s own cleanup began: a pool on another node has no other end
        if sup.phase.started():
            attempt_record.write_end(sup.phase, PhaseEnd.INTERRUPTED, len(sup.phase.attempts()), cfg.job or None, e.signum)
        return EXIT_INTERRUPTED
