"""The standby pool (`python -m restartlab.runtime.warm serve`).

It preloads the program's modules. Then it forks one rank per stub that connects, and the forked
child becomes that rank (`become`)."""
import contextlib
import importlib
import json
import os
import signal
import socket
import struct
import sys
import time

from .. import pystdio
from ..rankexit import die_with_parent
from ...contracts import layout, pycmd
from ...contracts.signals import FORWARDED
from ...contracts.envvars import ATTEMPT_VAR, PHASE_VAR, SERVER_VAR, TAG_VAR, WARM_VAR, node_name
from ...contracts.frozen_imports import frozen_imports
from ...contracts.served import Served
from ...tools import verbs
from ...contracts.warm_messages import Ended, Refused, Started
from .wire import SOCKET_NAME, PoolError, node_dir, recv_request, send_msg, unix_path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import argparse
    import selectors
    from types import FrameType


# ---------------------------------------------------------------- what the pool can run
def split_python(argv: Sequence[str], python: str) -> Tuple[str, str, List[str], bool]:
    """(run: "module", "code" or "script" as contracts/pycmd reads it, target, args, unbuffered) for
    `python [-u] (-m MOD | SCRIPT | -c CODE) ARGS`, where python is the pool's own interpreter (its path, or a name PATH resolves to that path). PoolError
    otherwise."""
    import shutil
    if not argv:
        raise PoolError("no program")
    exe = os.path.abspath(argv[0] if os.sep in argv[0] else (shutil.which(argv[0]) or argv[0]))
    mine = os.path.abspath(python)
    # The same interpreter means the same path, or another name for the same binary in the same
    # directory (a venv's python, python3, python3.11). Its site-packages go with the directory.
    if exe != mine and not (os.path.dirname(exe) == os.path.dirname(mine)
                            and os.path.realpath(exe) == os.path.realpath(mine)):
        raise PoolError(f"{argv[0]} is not the pool's interpreter {python}")
    cmd = pycmd.parse(argv)
    other = [f for f in cmd.flags if f != "-u"]
    if other:
        raise PoolError(f"interpreter option {other[0]} is not supported warm")
    unbuffered = "-u" in cmd.flags
    if cmd.run == "stdin":
        raise PoolError("a program on standard input is not supported warm")
    if not cmd.run:
        raise PoolError("no module or script")
    if cmd.target is None:
        raise PoolError(f"{'-m' if cmd.run == 'module' else '-c'} without an argument")
    return cmd.run, cmd.target, list(cmd.args), unbuffered


def add_rankenv(env: Dict[str, str]) -> None:
    """The variables restartlab.runtime.rankenv gives a cold rank, added to a warm one's `env`."""
    from ..rankenv import torchrun_env
    for k, v in torchrun_env(env).items():
        env.setdefault(k, v)
    pystdio.line_buffered(env)


# ---------------------------------------------------------------- the rank (in the forked child)
def _std_streams(unbuffered: bool) -> None:
    """sys.std* rebuilt on the received fds 0-2 (the pool's own were its log)."""
    import io
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(  # type: ignore[misc]  # sys.__std*__: Final in typeshed
        io.FileIO(0, "r", closefd=False))
    # Unbuffered (restartlab's PYTHONUNBUFFERED, or -u) means line-buffered, as pystdio makes a cold
    # rank's. Each line goes out whole in one write, still at once. Another rank's output never
    # lands inside it.
    line = unbuffered or os.isatty(1)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(  # type: ignore[misc]  # sys.__std*__: Final in typeshed
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), line_buffering=line)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # type: ignore[misc]  # sys.__std*__: Final in typeshed
        io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace")


def _torch_threads() -> None:
    """Set torch's intra-op threads to what the rank's OMP_NUM_THREADS says.

    A cold rank's torch reads OMP_NUM_THREADS at import. A forked rank inherits the pool's setting
    instead, set when the pool imported torch under the pool's environment. A pool started through
    pbsdsh gets the job's environment, not launch.env. Measured here: a warm rank with
    OMP_NUM_THREADS=1 ran 2 threads where its cold relaunch ran 1. Its numbers differed from the
    baseline's in the 7th digit."""
    torch = sys.modules.get("torch")
    want = os.environ.get("OMP_NUM_THREADS", "")
    if torch is None or not want.isdigit() or int(want) < 1:
        return
    try:
        if torch.get_num_threads() != int(want):
            torch.set_num_threads(int(want))
    except Exception as e:  # never the program's failure: said
        sys.stderr.write(f"restartlab: warm rank's threads not set to OMP_NUM_THREADS={want}: {e}\n")


def _rank_hooks() -> None:
    """Install the training-state probe and the slowed writer in a forked rank.

    The hooks are restartlab.trainer.rank_hooks. A cold rank's sitecustomize installs them when its
    program imports torch. Here the pool imported torch before the fork, so no import will trigger
    it. The hooks are imported by name. The pool is a rank's process: it preloads the program's
    modules, torch among them. restartlab's orchestration never imports torch."""
    if "torch" not in sys.modules:
        return
    try:
        importlib.import_module("restartlab.trainer.rank_hooks").install_from_env()
    except Exception as e:  # never the program's failure
        sys.stderr.write(f"restartlab: rank hooks off: {type(e).__name__}: {e}\n")


class RankJob(NamedTuple):
    """What a forked child becomes: the stub's request, its program split into how Python runs it."""
    cwd: str
    env: Dict[str, str]
    run: str            # how the program runs: a script, a module, or code (pycmd)
    target: str
    args: List[str]
    unbuffered: bool


def become(req: RankJob, fds: List[int], pool_pid: int, close: List[int]) -> None:
    """In the forked child: become the rank the stub asked for; never returns."""
    code = 1
    try:
        die_with_parent()
        if os.getppid() != pool_pid:  # the pool died between the fork and the prctl
            os._exit(137)
        os.setsid()
        for s in FORWARDED + (signal.SIGCHLD,):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as a fresh interpreter has it
        # The pool forked with these blocked (Pool.serve). One sent since then is delivered now, to
        # the rank's own dispositions, as it would reach a cold rank this early. It does not reach
        # the pool's handler.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        for fd in close:
            try:
                os.close(fd)
            except OSError:
                pass
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(req.cwd)
        os.environ.clear()
        os.environ.update(req.env)
        os.environ[WARM_VAR] = "1"
        unbuffered = req.unbuffered or bool(os.environ.get("PYTHONUNBUFFERED"))
        _std_streams(unbuffered)
        _torch_threads()
        _rank_hooks()
        code = _run_main(req.run, req.target, req.args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:  # as Python does: the traceback, then death by SIGINT
        import traceback
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback
        with contextlib.suppress(BaseException):  # its stderr may be a broken pipe (its stub struck)
            traceback.print_exc()
        code = 1
    _exit_like_python(code)


def _run_main(run: str, target: str, args: List[str]) -> int:
    import runpy
    if run == "module":
        sys.argv = [target] + list(args)  # runpy puts the module's path in argv[0]
        # a preloaded module runs afresh as __main__ (a package stays: its __main__ runs)
        sys.modules.pop(target + ".__main__", None)
        if not hasattr(sys.modules.get(target), "__path__"):
            sys.modules.pop(target, None)
        sys.path[0:0] = [os.getcwd()]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif run == "code":
        sys.argv = ["-c"] + list(args)
        sys.path[0:0] = [""]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = [target] + list(args)
        sys.path[0:0] = [os.path.dirname(os.path.abspath(target))]
        runpy.run_path(target, run_name="__main__")
    return 0


def _exit_like_python(code: int) -> None:
    """What an interpreter does at its end: atexit handlers, flushed streams; then _exit (the
    pool's other state is not this process's to finalise)."""
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass
    os._exit(code & 0xFF if isinstance(code, int) else 1)


# ---------------------------------------------------------------- the pool
def _log(msg: str) -> None:
    print(f"restartlab warm pool [{os.getpid()}] {time.strftime('%H:%M:%S')}: {msg}", flush=True)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


REQUEST_TIMEOUT_S = 10.0  # a stub sends its request at once; the pool waits no longer for one
# tests: "before_fork=S,before_reply=S,child_start=S,before_refusal=S" (seconds of delay)
TESTPOINT_VAR = "RESTARTLAB_WARM_TESTPOINT"


class Delays(NamedTuple):
    """The fault points' delays, in seconds (0: none)."""
    before_fork: float = 0.0
    child_start: float = 0.0
    before_reply: float = 0.0
    before_refusal: float = 0.0


def _testpoints(text: str) -> Delays:
    """TESTPOINT_VAR's "name=seconds,..." (a name that is no fault point: ValueError)."""
    got: Dict[str, float] = {}
    for part in filter(None, text.split(",")):
        k, _, v = part.partition("=")
        if k.strip() not in Delays._fields:
            raise ValueError(f"{TESTPOINT_VAR}: {k.strip()!r} is not one of {', '.join(Delays._fields)}")
        got[k.strip()] = float(v)
    return Delays(**got)


class Pool:
    def __init__(self, sock_path: str, python: str, state_dir: Optional[str] = None):
        self.path, self.python, self.state_dir = sock_path, python, state_dir
        self.children: Dict[int, Tuple[socket.socket, int]] = {}  # pid -> (conn, pidfd)
        self.stopping = False
        # fault points for the tests: widen the windows in which a stub can die or be signalled
        self.delay = _testpoints(os.environ.get(TESTPOINT_VAR, ""))

    def preload(self, modules: List[str]) -> float:
        """Import `modules` frozen (contracts/frozen_imports).

        No collection, in the pool or a forked rank, touches those objects again. Each touch
        writes the page, a copy-on-write in every rank."""
        import importlib
        t0 = time.time()
        with frozen_imports():
            for m in modules:
                importlib.import_module(m)
        n = _threads()
        if n > 1:
            raise PoolError(f"the preload left {n} threads running; a fork copies only one (set the "
                            f"library's thread count to 1 for the pool, or preload less)")
        return time.time() - t0

    def serve(self, on_ready: Optional[Callable[[], None]] = None) -> None:
        import selectors
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(OSError, KeyError, ValueError):
            os.unlink(self.path + ".new")  # a pool of this node that died before it served
        with unix_path(self.path + ".new") as addr:
            listener.bind(addr)
        os.chmod(self.path + ".new", 0o600)
        listener.listen(256)
        os.rename(self.path + ".new", self.path)  # the socket appears only when the pool can serve
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, ("accept", None))
        _log(f"ready on {self.path}")
        if on_ready:
            on_ready()
        while not self.stopping:
            for key, _ in sel.select(timeout=0.2):  # (a TERM sets `stopping`: seen within 0.2 s)
                # a rank's exit and its stub's hang-up can come in one batch: the exit unregisters both
                if sel.get_map().get(key.fd) is not key:
                    continue
                what, pid = key.data
                if what == "accept":
                    self._accept(listener, sel)
                elif what == "stub":   # the stub hung up (or sent more): its rank goes with it
                    self._stub_gone(pid, sel)
                elif what == "exit":
                    self._reap(pid, sel)
        for pid in list(self.children):
            _kill(pid)

    def _accept(self, listener: socket.socket, sel: "selectors.DefaultSelector") -> None:
        import selectors
        conn, _ = listener.accept()
        fds: List[int] = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            uid = struct.unpack("3i", creds)[1]
            if uid != os.getuid():
                _log(f"refused a connection from uid {uid}")
                conn.close()
                return
            conn.settimeout(REQUEST_TIMEOUT_S)  # a peer that connects and sends nothing cannot hold the pool
            req, fds = recv_request(conn)
            conn.settimeout(None)
            if req is None or len(fds) != 3:
                raise PoolError("a request without its argv or its three standard fds")
            env = dict(req.env)
            if req.rankenv:
                add_rankenv(env)
            run, target, args, unbuffered = split_python(req.argv, self.python)
        except (PoolError, ValueError, OSError) as e:
            _log(f"a request refused: {type(e).__name__}: {e}")  # the stub starts its rank cold: say why
            time.sleep(self.delay.before_refusal)
            try:
                send_msg(conn, Refused(str(e)))
            except OSError:
                pass
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        job = RankJob(req.cwd, env, run, target, list(args), unbuffered)
        _log(f"request from stub pid {req.stub_pid}")
        time.sleep(self.delay.before_fork)
        sys.stdout.flush()
        sys.stderr.flush()
        close = [listener.fileno(), conn.fileno(), sel.fileno()] + \
                [fd for c, p in self.children.values() for fd in (c.fileno(), p)]
        # The pool's pid, taken before the fork. If the pool died before the child first ran, the
        # child's own getppid() is the reaper's, and become()'s check after its prctl would pass.
        me = os.getpid()
        # The stub passes signals on from the moment it knows the pid. That can be before the child
        # has dropped the pool's handlers, which only mark the pool stopping. So the signals stay
        # blocked until it has.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0:  # the parent (or no fork): the pool's own mask back; become() unblocks the child's
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if pid == 0:
            # The child never comes back into this code. An exception that escaped become() would
            # unwind through the pool's frames, and serve_main's finally would remove the pool's
            # directory. On PBS, a rank whose streams broke when its stub was struck did that (#49).
            try:
                time.sleep(self.delay.child_start)
                become(job, fds, me, close)
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        sel.register(conn, selectors.EVENT_READ, ("stub", pid))
        sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        _log(f"rank pid {pid} for stub pid {req.stub_pid}: {run} {target}")
        self._served(pid, req.stub_pid, env)
        time.sleep(self.delay.before_reply)
        try:
            send_msg(conn, Started(pid))
        except OSError:  # the stub is gone: its EOF (next select) kills the rank
            return
        _log(f"stub pid {req.stub_pid} told its rank pid {pid}")  # (from here the stub is the rank's)

    def _served(self, pid: int, stub_pid: Optional[int], env: Dict[str, str]) -> None:
        """A line per rank forked, for the supervisor's attempt record (which attempt: from the
        stub's environment, as the launcher passed it on)."""
        if not self.state_dir:
            return
        rec = Served(env.get(ATTEMPT_VAR), env.get(PHASE_VAR), node_name(), pid, stub_pid, time.time())
        with contextlib.suppress(OSError):
            with open(os.path.join(self.state_dir, layout.served_name(node_name())), "a") as f:
                f.write(rec.to_json() + "\n")

    def _stub_gone(self, pid: int, sel: "selectors.DefaultSelector") -> None:
        conn, _ = self.children[pid]
        try:
            data = conn.recv(4096)  # a stub sends nothing after its request: anything else is dropped
        except OSError:
            data = b""
        if not data:  # EOF: the stub is dead
            _kill(pid)
            sel.unregister(conn)

    def _reap(self, pid: int, sel: "selectors.DefaultSelector") -> None:
        conn, pidfd = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        sel.unregister(pidfd)
        os.close(pidfd)
        with contextlib.suppress(OSError, KeyError, ValueError):
            sel.unregister(conn)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        end = Ended(signal=sig) if sig else Ended(exit=os.WEXITSTATUS(status))
        with contextlib.suppress(OSError, KeyError, ValueError):
            send_msg(conn, end)
        conn.close()
        _log(f"rank pid {pid} ended: {end.to_dict()}")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve_main(a: "argparse.Namespace") -> int:
    if a.parent:  # the pool dies with its supervisor (and its ranks with it: their own PDEATHSIG)
        die_with_parent()
        if os.getppid() != a.parent:
            return 1
    # Our own pid goes in our environment block: by it the killer tells the pool from the ranks it
    # forks. The job tag goes there too: the killer finds the ranks by it. A fan-out may not pass
    # our environment on.
    if os.environ.get(SERVER_VAR) != str(os.getpid()):
        env = dict(os.environ, **{SERVER_VAR: str(os.getpid())})
        if a.tag:
            env[TAG_VAR] = a.tag
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        os.execve(sys.executable, verbs.argv(sys.executable, "warm-pool", *sys.argv[1:]), env)
    d, made = node_dir(a.dir), False
    if a.make_dir:  # one pool per node, started by the fan-out: its directory is its own to make
        from ...contracts import private
        try:
            made = private.ensure_dir(d)
        except OSError as e:
            _log(f"FAILED: pool directory: {e}")
            return 1
    pool = Pool(os.path.join(d, SOCKET_NAME), a.python or sys.executable, a.state_dir)

    def ready() -> None:
        if a.state_dir:
            with open(os.path.join(a.state_dir, layout.ready_name(node_name())), "w") as f:
                f.write(f"{os.getpid()}\n")

    def stop(signum: int, frame: Optional["FrameType"]) -> None:
        pool.stopping = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        took = pool.preload([m for m in a.preload.split(",") if m])
    except Exception as e:  # an import that fails: the supervisor launches cold and says why
        _log(f"FAILED to preload: {type(e).__name__}: {e}")
        return 1
    _log(f"preloaded {a.preload} in {took:.2f}s; {sys.executable} on {node_name()}")
    try:
        pool.serve(ready)
    finally:
        if made:
            from ...contracts import private
            with contextlib.suppress(OSError, KeyError, ValueError):
                private.remove_tree(d)
    _log("stopped")
    return 0
