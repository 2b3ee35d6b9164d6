"""Warm standby restart: a preloaded fork server on the node, and the stub the launcher starts.

A relaunch normally pays, on every rank, a Python start and the imports of torch and the program
(~1.7 s of the demo's ~2.5 s restart here; tens of seconds from a shared file system at scale).
With `relaunch.warm` the supervisor keeps one standby process per node (the *pool*) that has
imported the program's modules once and waits. Each attempt's launcher starts a tiny stub per rank
instead of the program:

    mpiexec ... python -m restartlab.warm stub --socket S -- python -m restartlab.trainer ...

The stub connects to the pool's Unix socket (in a private 0700 directory; the peer's uid is
checked), hands over its argv, environment, working directory and standard streams (the fds
themselves, SCM_RIGHTS), and the pool forks: the child becomes the rank, with the stub's
environment in os.environ, its fds as 0-2, and the program run as __main__ (runpy) from the
already imported modules. The launcher still sees and tears down its own processes, the stubs:

- the stub forwards the signals it can catch (TERM, INT, HUP, USR1, USR2, QUIT) to its rank and
  mirrors the rank's exit status (death by signal N: the stub dies of N);
- the stub's death (a SIGKILL, a launcher teardown) closes the socket: the pool SIGKILLs that rank
  at once; the pool's death kills every rank it forked (PR_SET_PDEATHSIG);
- the pool never gives away itself: it forks per request, so it is ready for the next attempt
  as soon as the last one ended.

Finding ranks by tag: a forked rank's /proc environment is the pool's, not the stub's (Linux
keeps a process's initial environment block). The pool carries the job tag and
RESTARTLAB_WARM_SERVER=<its own pid> (it re-execs itself once to know it), so the killer finds
every active rank by the tag, as before, and tells the idle pool (the one process whose
RESTARTLAB_WARM_SERVER is its own pid) apart: never a rank, only `restartlab teardown` stops it.

What must not happen in the pool before a fork: no CUDA/XPU context (a forked child cannot use
it), no process group or MPI init (sockets and rendezvous state would be shared), no threads the
child needs (a fork copies only the forking thread: the pool refuses to serve when its preload
left more than one thread; OPENBLAS_NUM_THREADS=1 keeps numpy's OpenBLAS pool from starting). The
preload therefore only imports; torch's intra-op thread pool starts lazily in each rank.

This module is torch-free and imports only the standard library at the top: the stub's start is
a bare Python start."""
import array
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time

TAG_VAR = "RESTARTLAB_JOB_TAG"         # the job tag the killer finds ranks by (killer.TAG_VAR)
SERVER_VAR = "RESTARTLAB_WARM_SERVER"  # the pool's own pid, in the pool's (and its ranks') environment
WARM_VAR = "RESTARTLAB_WARM"           # "1" in a warm rank's os.environ (its startup row records it)
SOCKET_NAME = "pool.sock"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)
_HDR = struct.Struct("!I")


class PoolError(RuntimeError):
    """The pool cannot run this request (the stub starts the program cold)."""


NODE_TOKEN = "{node}"  # in a pool directory's path: this node's name (one pool per node)


def node_name() -> str:
    """The scheduler's name for this node (several Slurm nodes can share one host in tests)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_dir(path: str) -> str:
    return path.replace(NODE_TOKEN, node_name())


# ---------------------------------------------------------------- the wire: length-prefixed JSON
UNIX_PATH_MAX = 107  # sun_path: 108 bytes on Linux, the last one a NUL


@contextlib.contextmanager
def unix_path(path: str):
    """`path` as an AF_UNIX address: itself when short enough, else through a descriptor of its
    directory (/proc/self/fd/N/name: Linux). A batch job's TMPDIR can be long (PBS's is
    /var/tmp/pbs.<jobid>, with the server's full name in the job id; the OpenPBS test cluster's
    put the pools' sockets at 112 bytes): bind and connect would fail 'AF_UNIX path too long'."""
    if len(os.fsencode(path)) <= UNIX_PATH_MAX or not os.path.isdir("/proc/self/fd"):
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def send_msg(sock: socket.socket, obj, fds=()) -> None:
    data = json.dumps(obj).encode()
    payload = _HDR.pack(len(data)) + data
    if fds:
        sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(payload)


def recv_msg(sock: socket.socket, want_fds: int = 0):
    """(message, fds); (None, []) at EOF."""
    fds = array.array("i")
    head = b""
    while len(head) < _HDR.size:
        if want_fds and not fds:
            chunk, anc, _, _ = sock.recvmsg(_HDR.size - len(head), socket.CMSG_LEN(want_fds * fds.itemsize))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        else:
            chunk = sock.recv(_HDR.size - len(head))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        head += chunk
    n = _HDR.unpack(head)[0]
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None, list(fds)
        body += chunk
    return json.loads(body), list(fds)


# ---------------------------------------------------------------- what the pool can run
def split_python(argv, python: str):
    """(run, target, args, unbuffered) for `python [-u] (-m MOD | SCRIPT | -c CODE) ARGS`, where
    python is the pool's own interpreter (its path, or a name PATH resolves to that path; a
    `restartlab.rankenv` wrapper is looked through by the caller). PoolError otherwise."""
    import shutil
    if not argv:
        raise PoolError("no program")
    exe = os.path.abspath(argv[0] if os.sep in argv[0] else (shutil.which(argv[0]) or argv[0]))
    mine = os.path.abspath(python)
    # the same interpreter: the same path, or another name for the same binary in the same
    # directory (a venv's python, python3, python3.11: its site-packages go with the directory)
    if exe != mine and not (os.path.dirname(exe) == os.path.dirname(mine)
                            and os.path.realpath(exe) == os.path.realpath(mine)):
        raise PoolError(f"{argv[0]} is not the pool's interpreter {python}")
    rest, unbuffered = list(argv[1:]), False
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        if rest[0] != "-u":
            raise PoolError(f"interpreter option {rest[0]} is not supported warm")
        unbuffered = True
        rest.pop(0)
    if not rest:
        raise PoolError("no module or script")
    if rest[0] in ("-m", "-c"):
        if len(rest) < 2:
            raise PoolError(f"{rest[0]} without an argument")
        return rest[0], rest[1], rest[2:], unbuffered
    if rest[0] == "-":
        raise PoolError("a program on standard input is not supported warm")
    return "script", rest[0], rest[1:], unbuffered


def unwrap_rankenv(argv, env: dict, python: str):
    """`python -m restartlab.rankenv -- PROGRAM...`: its variables added to env (as rankenv does
    before its exec), PROGRAM returned; any other argv unchanged."""
    run, target, args, _ = split_python(argv, python)
    if (run, target) != ("-m", "restartlab.rankenv"):
        return argv
    from .rankenv import torchrun_env
    for k, v in torchrun_env(env).items():
        env.setdefault(k, v)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return args[1:] if args[:1] == ["--"] else args


# ---------------------------------------------------------------- the rank (in the forked child)
def _pdeathsig() -> None:
    """Die with the pool (Linux prctl PR_SET_PDEATHSIG); a no-op where it does not exist."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _std_streams(unbuffered: bool) -> None:
    """sys.std* rebuilt on the received fds 0-2 (the pool's own were its log)."""
    import io
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    line = unbuffered or os.isatty(1)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=line,
                                                   write_through=unbuffered)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True,
                                                   errors="backslashreplace")


def become(req: dict, fds, pool_pid: int, close) -> None:
    """In the forked child: become the rank the stub asked for; never returns."""
    code = 1
    try:
        _pdeathsig()
        if os.getppid() != pool_pid:  # the pool died between the fork and the prctl
            os._exit(137)
        os.setsid()
        for s in FORWARDED + (signal.SIGCHLD,):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as a fresh interpreter has it
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
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        os.environ[WARM_VAR] = "1"
        run, target, args, unbuffered = req["run"], req["target"], req["args"], req["unbuffered"]
        unbuffered = unbuffered or bool(os.environ.get("PYTHONUNBUFFERED"))
        _std_streams(unbuffered)
        code = _run_main(run, target, args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:  # as Python does: the traceback, then death by SIGINT
        import traceback
        traceback.print_exc()
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    _exit_like_python(code)


def _run_main(run: str, target: str, args) -> int:
    import runpy
    if run == "-m":
        sys.argv = [target] + list(args)  # runpy puts the module's path in argv[0]
        # a preloaded module runs afresh as __main__ (a package stays: its __main__ runs)
        sys.modules.pop(target + ".__main__", None)
        if not hasattr(sys.modules.get(target), "__path__"):
            sys.modules.pop(target, None)
        sys.path[0:0] = [os.getcwd()]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif run == "-c":
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
TESTPOINT_VAR = "RESTARTLAB_WARM_TESTPOINT"  # tests: "before_fork=S,before_reply=S" (seconds of delay)


def _testpoints(text: str) -> dict:
    out = {}
    for part in filter(None, text.split(",")):
        k, _, v = part.partition("=")
        out[k.strip()] = float(v)
    return out


class Pool:
    def __init__(self, sock_path: str, python: str, state_dir: str = None):
        self.path, self.python, self.state_dir = sock_path, python, state_dir
        self.children = {}  # pid -> (conn, pidfd)
        self.stopping = False
        # fault points for the tests: widen the windows in which a stub can die or be signalled
        self.delay = _testpoints(os.environ.get(TESTPOINT_VAR, ""))

    def preload(self, modules) -> float:
        import importlib
        t0 = time.time()
        for m in modules:
            importlib.import_module(m)
        n = _threads()
        if n > 1:
            raise PoolError(f"the preload left {n} threads running; a fork copies only one (set the "
                            f"library's thread count to 1 for the pool, or preload less)")
        return time.time() - t0

    def serve(self, on_ready=None) -> None:
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

    def _accept(self, listener, sel) -> None:
        import selectors
        conn, _ = listener.accept()
        fds = []
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            uid = struct.unpack("3i", creds)[1]
            if uid != os.getuid():
                _log(f"refused a connection from uid {uid}")
                conn.close()
                return
            conn.settimeout(REQUEST_TIMEOUT_S)  # a peer that connects and sends nothing cannot hold the pool
            req, fds = recv_msg(conn, want_fds=3)
            conn.settimeout(None)
            if req is None or len(fds) != 3:
                raise PoolError("a request without its argv or its three standard fds")
            env = dict(req["env"])
            argv = unwrap_rankenv(req["argv"], env, self.python)
            run, target, args, unbuffered = split_python(argv, self.python)
        except (PoolError, ValueError, KeyError, OSError) as e:
            try:
                send_msg(conn, {"error": str(e)})
            except OSError:
                pass
            conn.close()
            for fd in fds:
                os.close(fd)
            return
        job = {"cwd": req["cwd"], "env": env, "run": run, "target": target, "args": args, "unbuffered": unbuffered}
        _log(f"request from stub pid {req.get('stub_pid')}")
        time.sleep(self.delay.get("before_fork", 0))
        sys.stdout.flush()
        sys.stderr.flush()
        close = [listener.fileno(), conn.fileno(), sel.fileno()] + \
                [fd for c, p in self.children.values() for fd in (c.fileno(), p)]
        pid = os.fork()
        if pid == 0:
            become(job, fds, os.getppid(), close)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pid] = (conn, pidfd)
        sel.register(conn, selectors.EVENT_READ, ("stub", pid))
        sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        _log(f"rank pid {pid} for stub pid {req.get('stub_pid')}: {run} {target}")
        self._served(pid, req.get("stub_pid"), env)
        time.sleep(self.delay.get("before_reply", 0))
        try:
            send_msg(conn, {"pid": pid})
        except OSError:  # the stub is gone: its EOF (next select) kills the rank
            return
        _log(f"stub pid {req.get('stub_pid')} told its rank pid {pid}")  # (from here the stub is the rank's)

    def _served(self, pid: int, stub_pid, env: dict) -> None:
        """A line per rank forked, for the supervisor's attempt record (which attempt: from the
        stub's environment, as the launcher passed it on)."""
        if not self.state_dir:
            return
        rec = {"attempt": env.get("RESTARTLAB_ATTEMPT"), "phase": env.get("RESTARTLAB_PHASE"), "node": node_name(),
               "rank_pid": pid, "stub_pid": stub_pid, "time": time.time()}
        with contextlib.suppress(OSError):
            with open(os.path.join(self.state_dir, f"{node_name()}.served.jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")

    def _stub_gone(self, pid: int, sel) -> None:
        conn, _ = self.children[pid]
        try:
            data = conn.recv(4096)  # a stub sends nothing after its request: anything else is dropped
        except OSError:
            data = b""
        if not data:  # EOF: the stub is dead
            _kill(pid)
            sel.unregister(conn)

    def _reap(self, pid: int, sel) -> None:
        conn, pidfd = self.children.pop(pid)
        _, status = os.waitpid(pid, 0)
        sel.unregister(pidfd)
        os.close(pidfd)
        with contextlib.suppress(OSError, KeyError, ValueError):
            sel.unregister(conn)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        msg = {"signal": sig} if sig else {"exit": os.WEXITSTATUS(status)}
        with contextlib.suppress(OSError, KeyError, ValueError):
            send_msg(conn, msg)
        conn.close()
        _log(f"rank pid {pid} ended: {msg}")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve_main(a) -> int:
    if a.parent:  # the pool dies with its supervisor (and its ranks with it: their own PDEATHSIG)
        _pdeathsig()
        if os.getppid() != a.parent:
            return 1
    # our own pid in our environment block: the killer tells the pool from the ranks it forks;
    # the job tag: the killer finds the ranks by it (a fan-out may not pass our environment on)
    if os.environ.get(SERVER_VAR) != str(os.getpid()):
        env = dict(os.environ, **{SERVER_VAR: str(os.getpid())})
        if a.tag:
            env[TAG_VAR] = a.tag
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        os.execve(sys.executable, [sys.executable, "-m", "restartlab.warm"] + sys.argv[1:], env)
    d, made = node_dir(a.dir), False
    if a.make_dir:  # one pool per node, started by the fan-out: its directory is its own to make
        from . import private
        try:
            made = private.ensure_dir(d)
        except OSError as e:
            _log(f"FAILED: pool directory: {e}")
            return 1
    pool = Pool(os.path.join(d, SOCKET_NAME), a.python or sys.executable, a.state_dir)

    def ready():
        if a.state_dir:
            with open(os.path.join(a.state_dir, f"{node_name()}.ready"), "w") as f:
                f.write(f"{os.getpid()}\n")

    def stop(signum, frame):
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
            from . import private
            with contextlib.suppress(OSError, KeyError, ValueError):
                private.remove_tree(d)
    _log("stopped")
    return 0


# ---------------------------------------------------------------- the supervisor's side
PROGRAM_TOKEN = "@RL_PROGRAM@"  # in a rendered launch argv: where the program's own argv starts
POOL_BIN = ("-m", "restartlab.warm")
BUNDLED_PRELOAD = "restartlab.trainer.warmup"
READY_POLL_S = 0.05


def program_at(argv) -> int:
    """Where the program starts in a launch argv: after PROGRAM_TOKEN, else the first word that
    names a python interpreter (-1: none)."""
    if PROGRAM_TOKEN in argv:
        return argv.index(PROGRAM_TOKEN) + 1
    import re
    return next((i for i, w in enumerate(argv) if re.fullmatch(r"python[0-9.]*", os.path.basename(w))), -1)


def cold_argv(argv):
    return [w for w in argv if w != PROGRAM_TOKEN]


def stub_argv(argv, pool_dir: str):
    """The launch argv with each rank's program started through the stub."""
    i = program_at(argv)
    launch, prog = [w for w in argv[:i] if w != PROGRAM_TOKEN], argv[i:]
    return launch + [prog[0], *POOL_BIN, "stub", "--dir", pool_dir, "--"] + prog


def default_preload(argv) -> str:
    i = program_at(argv)
    return BUNDLED_PRELOAD if argv[i + 1:i + 3] == ["-m", "restartlab.trainer"] else "torch"


def served_in(state_dir: str, attempt: int) -> int:
    """How many ranks of `attempt` the pools forked, from their <node>.served.jsonl in
    `state_dir` (0 when there is none: every rank started cold)."""
    n = 0
    try:
        names = os.listdir(state_dir)
    except OSError:
        return 0
    for name in names:
        if name.endswith(".served.jsonl"):
            with contextlib.suppress(OSError), open(os.path.join(state_dir, name)) as f:
                for line in f:
                    with contextlib.suppress(ValueError, AttributeError):
                        n += json.loads(line).get("attempt") == str(attempt)
    return n


class Standby:
    """The supervisor's handle on the standby pools: one on this node (fanout local), or one on
    each of the job's nodes, started through the job's fan-out (srun --overlap, pbsdsh, mpiexec);
    started once per phase, stopped at its end."""

    def __init__(self, argv, tag: str, log_path: str, preload=None, env=None, fanout: str = "local",
                 hosts=None, slots=None, launcher: str = "hydra", state_dir: str = None):
        import secrets
        import shutil
        import subprocess
        import tempfile

        from . import private
        i = program_at(argv)
        if i < 0:
            raise PoolError("no python interpreter in the launch command to preload for")
        self.python, self.log_path = argv[i], log_path
        # the pools' state: a private one when the caller keeps none (tests, benchmarks)
        self.own_state = state_dir is None
        if self.own_state:
            self.state_dir = tempfile.mkdtemp(prefix="restartlab-warm-state-")
        else:  # the phase's: this job's pools start afresh
            self.state_dir = state_dir
            shutil.rmtree(state_dir, ignore_errors=True)
            os.makedirs(state_dir)
        self.tag, self.fanout, self.hosts, self.slots, self.launcher = tag, fanout, hosts, slots, launcher
        self.preload = preload or default_preload(argv)
        serve = [self.python, *POOL_BIN, "serve", "--preload", self.preload, "--python", self.python, "--tag", tag,
                 "--state-dir", self.state_dir]
        # the tag reaches the pool as an argument (it puts it in its own environment): the fan-out's
        # own processes (srun, pbsdsh, mpiexec) must not carry it, or a strike would kill them
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != TAG_VAR}
        if fanout == "local":
            self.dir = private.make_dir(tempfile.gettempdir(), f"restartlab-warm-{tag}-")
            cmds, self.expect, self.remote = [serve + ["--dir", self.dir, "--parent", str(os.getpid())]], 1, False
        else:
            from . import schedulers
            from .inject import fanout_cmds
            self.dir = os.path.join(tempfile.gettempdir(),
                                    f"restartlab-warm-{tag}-{secrets.token_hex(4)}-{NODE_TOKEN}")
            argv_ = serve + ["--dir", self.dir, "--make-dir"]
            if fanout in schedulers.names() and not schedulers.get(fanout).fanout_relays_output:
                # pbsdsh hands no output back (it goes to the job's output file): each pool
                # appends to the log itself (the phase dir is on the shared file system)
                argv_ = ["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', os.path.abspath(log_path), *argv_]
            cmds = fanout_cmds(fanout, hosts, range(len(hosts)), argv_, slots, launcher)
            self.expect, self.remote = len(hosts), True
        self.started, self.ready_after = time.time(), None
        with open(log_path, "ab") as log:
            self.procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
                          for c in cmds]
        self.proc = self.procs[0]

    def ready(self) -> bool:
        """Every pool serves (a look, no wait); PoolError when one has exited first."""
        if self.ready_after is not None:
            return True
        if sum(1 for f in os.listdir(self.state_dir) if f.endswith(".ready")) >= self.expect:
            self.ready_after = time.time() - self.started
            return True
        dead = next((p for p in self.procs if p.poll() is not None), None)
        if dead is not None:
            raise PoolError(f"the pool exited ({dead.returncode}): {self.last_line()}")
        return False



    def wait_ready(self, timeout: float) -> None:
        """Until every pool serves; PoolError (why, from the log) when one died or took too long."""
        deadline = time.time() + timeout
        while not self.ready():
            if time.time() > deadline:
                raise PoolError(f"the pool did not finish its preload in {time.time() - self.started:.0f}s")
            time.sleep(READY_POLL_S)

    def last_line(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [x.strip() for x in f if x.strip()]
            return lines[-1] if lines else "(no output)"
        except OSError:
            return "(no log)"

    def _term_remote(self) -> None:
        from . import failures
        from .inject import fan_out, killer_argv
        argv = killer_argv(sys.executable, self.tag, "TERM", failures.get("kill")) + ["--standby"]
        fan_out(self.fanout, self.hosts, range(len(self.hosts)), argv, self.slots, self.launcher)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self, grace: float = 5.0) -> None:
        """TERM (a pool SIGKILLs its ranks, removes its directory and exits; a fan-out passes the
        TERM on), KILL after `grace`; this node's directory removed."""
        import shutil
        import subprocess

        from . import private
        if self.remote:  # every node's pool, by the tag, as teardown reaches the ranks (a fan-out
            self._term_remote()  # like pbsdsh may not pass a TERM on): each exits, and its fan-out
            deadline = time.time() + grace
            for p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if not self.remote:
            try:
                private.remove_tree(self.dir)
            except (OSError, private.UnsafePath):
                pass
        if self.own_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)


# ---------------------------------------------------------------- the stub (under the launcher)
def stub_main(a) -> int:
    """Hand this rank to the pool and stand in for it; the program cold (exec) when the pool
    cannot take it."""
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        print("restartlab warm stub: error: no program (give it after --)", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pending = []
    rank = [0]

    def forward(signum, frame):
        if rank[0]:
            try:
                os.kill(rank[0], signum)
            except ProcessLookupError:
                pass
        else:
            pending.append(signum)
    try:
        with unix_path(os.path.join(node_dir(a.dir), SOCKET_NAME)) as addr:
            sock.connect(addr)
        for s in FORWARDED:  # from now on a signal is the rank's
            signal.signal(s, forward)
        send_msg(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "stub_pid": os.getpid()},
                 fds=(0, 1, 2))
        msg, _ = recv_msg(sock)
        if msg is None or "pid" not in msg:
            raise PoolError((msg or {}).get("error", "the pool hung up"))
    except (OSError, PoolError) as e:
        for s in FORWARDED:
            signal.signal(s, signal.SIG_DFL)
        print(f"restartlab warm stub: standby pool not usable ({e}; {os.path.join(node_dir(a.dir), SOCKET_NAME)} "
              f"on {node_name()}): starting the program cold", file=sys.stderr, flush=True)
        sock.close()
        try:
            os.execvp(argv[0], argv)
        except OSError as e2:
            print(f"restartlab warm stub: error: cannot run {argv[0]!r}: {e2.strerror}", file=sys.stderr)
            return 127
    rank[0] = msg["pid"]
    for s in pending:
        forward(s, None)
    while True:
        try:
            msg, _ = recv_msg(sock)
            break
        except InterruptedError:
            continue
    if msg is None:  # the pool died (and its ranks with it)
        print("restartlab warm stub: the standby pool died", file=sys.stderr, flush=True)
        return 137
    if msg.get("signal"):  # die as the rank died: the launcher reports the same
        sig = msg["signal"]
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return int(msg.get("exit", 1))


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m restartlab.warm", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("serve", help="the node's standby pool: preload, then fork one rank per stub")
    s.add_argument("--dir", required=True, help="the pool's private directory (its socket)")
    s.add_argument("--preload", default="torch", help="modules to import before serving (comma-separated)")
    s.add_argument("--python", default=None, help="the interpreter the programs name (default: this one)")
    s.add_argument("--parent", type=int, default=0, help="exit with this process (the supervisor)")
    s.add_argument("--tag", default=None, help="the job tag (the ranks are found by it)")
    s.add_argument("--state-dir", default=None, help="where to say it serves (<node>.ready) and which "
                   "ranks it forked (<node>.served.jsonl)")
    s.add_argument("--make-dir", action="store_true", help="a pool per node: make --dir itself ({node}: "
                   "this node's name)")
    t = sub.add_parser("stub", help="stand in for a rank under the launcher")
    t.add_argument("--dir", required=True)
    t.add_argument("argv", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    return serve_main(a) if a.verb == "serve" else stub_main(a)


if __name__ == "__main__":
    sys.exit(main())
