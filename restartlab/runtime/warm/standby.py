"""The supervisor's side of a warm restart.

- The standby pools: started, waited for and stopped. There is one here, or one on each of the
  job's nodes through its fan-out.
- The preload a program gets by default.
- How many ranks of an attempt the pools forked.

The launch through the stubs is the launch spec's (tools/launch.py)."""
import contextlib
import glob
import json
import os
import sys
import time

from ...contracts import layout, served
from ...contracts.envvars import TAG_VAR
from ...contracts.placeholders import NODE_TOKEN
from ...tools import verbs
from .wire import PoolError
from typing import List, Mapping, Optional, cast


POOL_BIN = tuple(verbs.module_argv("warm-pool"))
READY_POLL_S = 0.05


def served_in(state_dir: str, attempt: int) -> int:
    """How many ranks of `attempt` the pools forked, from their <node>.served.jsonl in
    `state_dir` (0 when there is none: every rank started cold)."""
    return sum(r.attempt == str(attempt) for r in served.read(glob.glob(os.path.join(state_dir, layout.served_name("*")))))


class Standby:
    """The supervisor's handle on the standby pools.

    There is one pool on this node (fanout local), or one on each of the job's nodes. Those start
    through the job's fan-out (srun --overlap, pbsdsh, mpiexec). The pools start once per phase and
    stop at its end."""

    def __init__(self, python: str, tag: str, log_path: str, preload: str, env: Optional[Mapping[str, str]] = None,
                 fanout: str = "local", hosts: Optional[List[str]] = None, slots: Optional[List[int]] = None,
                 launcher: str = "hydra", state_dir: Optional[str] = None):
        import secrets
        import shutil
        import subprocess
        import tempfile

        from ...contracts import private
        self.python, self.log_path = python, log_path
        # the pools' state: a private one when the caller keeps none (tests, benchmarks)
        self.own_state = state_dir is None
        if self.own_state:
            self.state_dir = tempfile.mkdtemp(prefix="restartlab-warm-state-")
        else:  # the phase's: this job's pools start afresh
            assert state_dir is not None  # own_state is False
            self.state_dir = state_dir
            shutil.rmtree(state_dir, ignore_errors=True)
            os.makedirs(state_dir)
        self.tag, self.fanout, self.hosts, self.slots, self.launcher = tag, fanout, hosts, slots, launcher
        self.preload = preload
        serve = [self.python, *POOL_BIN, "serve", "--preload", self.preload, "--python", self.python, "--tag", tag,
                 "--state-dir", self.state_dir]
        # The tag reaches the pool as an argument, and the pool puts it in its own environment. The
        # fan-out's own processes (srun, pbsdsh, mpiexec) must not carry it, or a strike would kill them.
        env = {k: v for k, v in (os.environ if env is None else env).items() if k != TAG_VAR}
        if fanout == "local":
            self.dir = private.make_dir(tempfile.gettempdir(), f"restartlab-warm-{tag}-")
            cmds, self.expect, self.remote = [serve + ["--dir", self.dir, "--parent", str(os.getpid())]], 1, False
        else:
            from ... import schedulers
            from ..fanout import fanout_cmds
            self.dir = os.path.join(tempfile.gettempdir(),
                                    f"restartlab-warm-{tag}-{secrets.token_hex(4)}-{NODE_TOKEN}")
            argv_ = serve + ["--dir", self.dir, "--make-dir"]
            if fanout in schedulers.names() and not schedulers.get(fanout).fanout_relays_output:
                # pbsdsh hands no output back: it goes to the job's output file. So each pool
                # appends to the log itself (the phase dir is on the shared file system).
                argv_ = ["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', os.path.abspath(log_path), *argv_]
            # hosts: a fan-out's caller gives them (warm/route.py)
            cmds = fanout_cmds(fanout, cast(List[str], hosts), range(len(cast(List[str], hosts))), argv_, slots,
                               launcher)
            self.expect, self.remote = len(cast(List[str], hosts)), True
        self.started = time.time()
        self.ready_after: Optional[float] = None
        with open(log_path, "ab") as log:
            self.procs = [subprocess.Popen(c, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
                          for c in cmds]
        self.proc = self.procs[0]

    def ready(self) -> bool:
        """Every pool serves (a look, no wait); PoolError when one has exited first."""
        if self.ready_after is not None:
            return True
        if len(glob.glob(os.path.join(self.state_dir, layout.ready_name("*")))) >= self.expect:
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
        from ... import failures
        from ..fanout import fan_out, killer_argv
        argv = killer_argv(sys.executable, self.tag, "TERM", failures.get(failures.Kill.name)) + ["--standby"]
        fan_out(self.fanout, cast(List[str], self.hosts), range(len(cast(List[str], self.hosts))), argv, self.slots,
                self.launcher)  # remote: hosts given

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self, grace: float = 5.0) -> None:
        """TERM (a pool SIGKILLs its ranks, removes its directory and exits; a fan-out passes the
        TERM on), KILL after `grace`; this node's directory removed."""
        import shutil
        import subprocess

        from ...contracts import private
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
