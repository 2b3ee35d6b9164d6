"""Run a torchft program of yours as one replica group of a torchft phase.

    python -m restartlab.trainer.ft_hook --outdir DIR --replica-group G --train-iters N -- PROGRAM.py [ARGS]
    python -m restartlab.trainer.ft_hook --outdir DIR --replica-group G --train-iters N -- -m MODULE [ARGS]

The program runs in this interpreter, as `python PROGRAM.py ARGS` would run it: its __main__, its
sys.argv and sys.path[0]. The hook observes torchft 0.2.0's Manager and does not change it.
restartlab wraps four of its methods and calls the originals. It then writes what the phase's
accounting needs, as the bundled torchft trainer does (trainer/ft.py's StepLog):

- one line per step attempted in DIR/ft-rank<R>.jsonl (R: the Manager's group rank);
- restartlab's metrics rows on the group's rank 0.

The wrapped methods record:

- `Manager.__init__`: the program's Manager. It takes the first one, as torchft programs make one.
- `Manager._async_quorum`: the quorum's end time, and whether it asked this group to heal. It runs
  in torchft's quorum thread, with use_async_quorum or without.
- `Manager._apply_pending_state_dict`: a heal applied (a survivor's state loaded).
- `Manager.should_commit`: the step's line. The line holds step, commit, quorum id, participants,
  this group's slot, heal (asked), healed (applied) and heal_s. It also holds the error torchft
  reported for the step (Manager.errored(), e.g. a heal that failed). At a quorum's first step, a
  heal and the last step, it holds the crc32 of the state the Manager would send a healing peer.
  That state is its registered state_dict functions, tensors only, in key order. The crc is taken
  as should_commit returns, before the step's optimizer update. So every group's crc is its state
  after the step before.

torchft's own structured loggers (torchft_quorums, torchft_commits) emit only through
OpenTelemetry (torchft/otel.py). A batch job here cannot reach it, hence the hook. An exception
that ends the program, in its main thread or another, is written to DIR/ft-rank<R>-crash.json. The
record holds the type, message, the innermost frame and its source line. It is written before
Python reports the exception as it would have. The exit status is unchanged. The hook does not
know the loss. The program's output has it."""
import argparse
import os
import runpy
import sys
import threading
import time
import traceback
from typing import Optional

from restartlab.contracts import layout, pycmd
from restartlab.contracts.ft_records import FtCrash, FtStep
from restartlab.contracts.exits import EXIT_USAGE

from .ft import StepLog, state_crc


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(EXIT_USAGE, f"restartlab.trainer.ft_hook: error: {message}\n")


def parse_args(argv):
    p = _Parser(prog="python -m restartlab.trainer.ft_hook",
                description="run a torchft program of yours as one replica group of a torchft phase")
    p.add_argument("--outdir", required=True, help="the attempt's directory (the ft records and metrics rows)")
    p.add_argument("--replica-group", type=int, required=True, help="this group's number (0, 1, ...)")
    p.add_argument("--train-iters", type=int, required=True, help="the program's last step (a crc is taken there)")
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM.py [ARGS] (or -- -m MODULE [ARGS])")
    a = p.parse_args(argv)
    program = a.program
    if program[:1] != ["--"]:
        p.error("no program given: ... -- PROGRAM.py [ARGS] (or -- -m MODULE [ARGS])")
    cmd = pycmd.parse([sys.executable, *program[1:]])
    if cmd.run not in ("module", "script") or not cmd.target or cmd.options:
        p.error("no program given: ... -- PROGRAM.py [ARGS] (or -- -m MODULE [ARGS])")
    return a, cmd


def _manager_crc(m) -> Optional[int]:
    """crc32 of the state the Manager would send a healing peer (its registered state dicts)."""
    return state_crc({k: fn() for k, fn in m._user_state_dicts.items()}) if m._user_state_dicts else None


def _error(m) -> Optional[str]:
    e = m.errored()
    if e is None:
        return None
    orig = getattr(e, "original_exception", e)
    return f"{type(orig).__name__}: {str(orig).strip().splitlines()[0] if str(orig).strip() else ''}"


class Observer:
    """The hook's state: the program's Manager and the step being attempted."""

    def __init__(self, a):
        self.a = a
        self.manager = None
        self.log: Optional[StepLog] = None
        self.t0 = time.time()     # the step's start: the previous should_commit's return
        self.tq = None            # its quorum's end
        self.heal = False         # the quorum asked this group to heal
        self.healed = False       # a survivor's state was loaded
        self.last_quorum = None
        self.lock = threading.Lock()

    def install_when_imported(self) -> None:
        """Wrap the Manager when the program imports torchft.manager.

        It does not wrap it before. The program's first lines run as they would without the hook,
        e.g. what it sets before it imports torch."""
        import importlib.abc
        import importlib.machinery
        obs = self

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "torchft.manager":
                    return None
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                if spec is None or spec.loader is None:
                    return spec
                exec_module = spec.loader.exec_module

                def exec_and_install(module):
                    exec_module(module)
                    obs.host_store()
                    obs.install(module.Manager)
                spec.loader.exec_module = exec_and_install
                return spec
        sys.meta_path.insert(0, Finder())

    def host_store(self) -> None:
        """Host the replica group's TCPStore on group rank 0 when no launcher does.

        The store is at MASTER_ADDR:MASTER_PORT, and torchft's Manager joins it as a client.
        torchrun's agent hosts it and tells the ranks so (TORCHELASTIC_USE_AGENT_STORE). Then
        init_process_group joins it too. Under mpiexec, PALS or srun (restartlab.runtime.rankenv)
        nobody would host it. So group rank 0 hosts it here, as torchrun would. It does not when
        torchrun runs the program. Nor does it when the program's own init_process_group hosts it
        already (the port is taken)."""
        env = os.environ
        if env.get("TORCHELASTIC_USE_AGENT_STORE") or not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
            return
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        if env.get("RANK", "0") != "0":
            return
        from torch.distributed import TCPStore
        try:
            self.store = TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=True, wait_for_workers=False)
        except RuntimeError:  # the program's own store is there
            self.store = None

    def install(self, Manager) -> None:
        obs = self
        orig = {n: getattr(Manager, n) for n in ("__init__", "_async_quorum", "_apply_pending_state_dict",
                                                 "should_commit")}

        def __init__(m, *args, **kwargs):
            orig["__init__"](m, *args, **kwargs)
            if obs.manager is None:
                obs.manager = m
                obs.log = StepLog(obs.a.outdir, m._group_rank, obs.a.replica_group, obs.a.log_interval)
                obs.t0 = time.time()  # the first step starts when the Manager is up

        def _async_quorum(m, *args, **kwargs):
            try:
                return orig["_async_quorum"](m, *args, **kwargs)
            finally:
                if m is obs.manager:
                    obs.tq, obs.heal = time.time(), bool(m._healing)

        def _apply_pending_state_dict(m, *args, **kwargs):
            applied = m._pending_state_dict is not None
            out = orig["_apply_pending_state_dict"](m, *args, **kwargs)
            if m is obs.manager and applied:
                obs.healed = True
            return out

        def should_commit(m, *args, **kwargs):
            commit = orig["should_commit"](m, *args, **kwargs)
            if m is obs.manager:
                obs.step_done(m, commit)
            return commit

        Manager.__init__ = __init__
        Manager._async_quorum = _async_quorum
        Manager._apply_pending_state_dict = _apply_pending_state_dict
        Manager.should_commit = should_commit

    def step_done(self, m, commit: bool) -> None:
        t = time.time()
        step = m.current_step() if commit else m.current_step() + 1  # a commit has counted the step
        quorum = m._quorum_id
        checked = self.healed or quorum != self.last_quorum or step == self.a.train_iters
        crc = _manager_crc(m) if checked else None
        tq = self.tq if self.tq is not None else self.t0
        self.log.write(FtStep(t0=self.t0, tq=tq, t=t, step=step, commit=bool(commit), quorum=quorum,
                              participants=m.num_participants(), slot=m.participating_rank(), heal=self.heal,
                              healed=self.healed, heal_s=(tq - self.t0) if self.heal else None, crc=crc,
                              error=_error(m), loss=None))
        self.last_quorum = quorum
        self.t0, self.tq, self.heal, self.healed = time.time(), None, False, False

    def crashed(self, exc_type, exc, tb) -> None:
        """The exception that ends the program, to DIR/ft-rank<R>-crash.json (first one wins)."""
        with self.lock:
            rank = self.manager._group_rank if self.manager is not None else int(os.environ.get("RANK", "0"))
            path = os.path.join(self.a.outdir, layout.ft_crash_name(rank))
            if os.path.exists(path):
                return
            frames = traceback.extract_tb(tb)
            last = frames[-1] if frames else None
            rec = FtCrash(time=time.time(), type=exc_type.__name__, message=str(exc).strip()[:2000],
                          file=last.filename if last else None, line=last.lineno if last else None,
                          code=last.line if last else None, thread=threading.current_thread().name,
                          step=(self.manager.current_step() + 1) if self.manager is not None else None)
            os.makedirs(self.a.outdir, exist_ok=True)
            with open(path, "w") as f:
                f.write(rec.to_json())

    def finish(self) -> None:
        if self.log is not None:
            m = self.manager
            self.log.close(m.current_step(), _manager_crc(m), finished=True)
            self.log = None


def main(argv=None) -> int:
    a, cmd = parse_args(list(sys.argv[1:] if argv is None else argv))
    import importlib.util
    if importlib.util.find_spec("torchft") is None:
        print("restartlab.trainer.ft_hook: error: torchft is not installed (pip install 'restartlab[torchft]')",
              file=sys.stderr)
        return EXIT_USAGE
    obs = Observer(a)
    obs.install_when_imported()
    default_thread_hook = threading.excepthook

    def thread_hook(args):
        if args.exc_type is not SystemExit:
            obs.crashed(args.exc_type, args.exc_value, args.exc_traceback)
        default_thread_hook(args)
    threading.excepthook = thread_hook
    if cmd.run == "module":
        sys.argv = [cmd.target, *cmd.args]
        run = lambda: runpy.run_module(cmd.target, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        if not os.path.isfile(cmd.target):
            print(f"restartlab.trainer.ft_hook: error: {cmd.target}: no such file", file=sys.stderr)
            return EXIT_USAGE
        sys.argv = [cmd.target, *cmd.args]
        sys.path[0] = os.path.dirname(os.path.abspath(cmd.target))
        run = lambda: runpy.run_path(cmd.target, run_name="__main__")  # noqa: E731
    try:
        run()
    except SystemExit as e:
        if e.code not in (None, 0):
            obs.crashed(SystemExit, e, e.__traceback__)
        else:
            obs.finish()
        raise
    except BaseException as e:
        obs.crashed(type(e), e, e.__traceback__)
        raise
    obs.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
