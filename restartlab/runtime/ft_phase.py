"""A phase that recovers without a restart: torchft replica groups (`restartlab supervise --ft-groups N`).

The supervisor of such a phase starts torchft's lighthouse. Then it starts one relaunch loop per
replica group, and the phase's injector over all of them. A group's loop is `restartlab supervise`
again, in PHASE/groups/g<k>, with the program's {group} filled in. The rank variable
TORCHFT_LIGHTHOUSE tells the group where the lighthouse is.

Group k's ranks carry the tag <tag>.g<k> (envvars.group_tag). Its own loop's teardown finds only
them. The phase's injector finds every group's ranks as <tag>'s.

A strike of kind `rank` ends one rank, and its launcher ends the rest of its group. A `kill` strikes
every group: a job-wide failure no replica survives. A group whose attempt dies is relaunched by its
own loop and heals from a surviving group. The others are never restarted.

The phase ends when every group's loop has ended, or when one group completed the last step and the
others' grace is over (wait_groups). Its accounting and verdict (restartlab.analysis.ft_accounting)
go to PHASE/ft.json and its last lines.

Torch- and torchft-free: the lighthouse is torchft's own executable, found on PATH."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, TextIO

from .. import launchers
from ..contracts import ft_records, layout, options
from ..contracts.attempts import PhaseEnd
from ..contracts.envvars import group_tag
from ..contracts.exits import EXIT_BUDGET, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_WALLTIME
from . import attempt_record
from ..tools import options as tool_options, verbs

LIGHTHOUSE = "torchft_lighthouse"
LIGHTHOUSE_READY_S = 30.0   # the lighthouse listens within this long, or the phase ends
LIGHTHOUSE_TRIES = 3        # starts, each on a new free port, before the phase ends
STOP_GRACE_S = 10.0         # a group's loop's time to stop its attempt after a TERM
# Once a group has completed the last step, a group behind it (in the quorum, in step) gets this long to
# complete its own. RESTARTLAB_FT_DONE_GRACE_S overrides it. A group still relaunching is stopped at once.
DONE_GRACE_S = 30.0
POLL_S = 0.2
DONE_GRACE_VAR = "RESTARTLAB_FT_DONE_GRACE_S"


def lighthouse_argv(exe: str, host: str, port: int, cfg: Any) -> List[str]:  # cfg: supervise.Config (it imports us)
    return [exe, "--bind", f"{host}:{port}", "--min_replicas", str(cfg.ft_min_replicas),
            "--join_timeout_ms", str(int(cfg.ft_join_timeout * 1000)),
            "--heartbeat_timeout_ms", str(int(cfg.ft_heartbeat_timeout * 1000))]


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [x.strip() for x in f if x.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def group_argv(cfg: Any, g: int) -> List[str]:
    """`restartlab supervise` of replica group g.

    It has the phase's settings but its own directory. It has no injector, because the phase's
    injector strikes every group. It has no groups of its own."""
    vals = {o.key: getattr(cfg, o.key) for o in tool_options.SUPERVISE}
    tag = group_tag(cfg.tag, g)
    launch = cfg.launch_spec.for_group(g, tag)  # the group's ranks carry its own tag, {group} its number
    vals.update(phase=f"{cfg.phase}.g{g}", phase_dir=layout.Phase(cfg.phase_dir).group(g).path, tag=tag,
                inject=False, node_check=False, ft_groups=0, ft_group=g, launch=launch.to_json())
    return verbs.argv(sys.executable, "supervise", *options.to_argv(tool_options.SUPERVISE, vals), "--",
                      *launch.program)


class FtPhase:
    def __init__(self, cfg: Any, procs: Any, out: Optional[TextIO] = None) -> None:
        self.cfg, self.procs = cfg, procs   # procs: the supervisor's Procs (its injector)
        self.phase = layout.Phase(cfg.phase_dir)
        self.out = out or sys.stdout
        self.lighthouse: Optional[subprocess.Popen[bytes]] = None
        self.groups: Dict[int, subprocess.Popen[bytes]] = {}
        self.stopped: List[int] = []  # groups stopped because the training was done

    def say(self, msg: str, err: bool = False) -> None:
        print(f"restartlab: phase {self.cfg.phase}: {msg}", file=sys.stderr if err else self.out, flush=True)

    def start_lighthouse(self) -> Optional[str]:
        """Start torchft's lighthouse on this host; None, or why it did not start (one line)."""
        exe = shutil.which(LIGHTHOUSE)
        if exe is None:
            return f"{LIGHTHOUSE} is not on PATH (pip install 'restartlab[torchft]')"
        host = socket.gethostbyname(socket.gethostname())
        why = None
        for _ in range(LIGHTHOUSE_TRIES):  # a port picked free may be taken before the lighthouse binds it
            port = launchers.free_port()
            why = self._start_lighthouse(lighthouse_argv(exe, host, port, self.cfg), host, port)
            if why is None:
                self.address = f"http://{host}:{port}"
                return None
        return why

    def _start_lighthouse(self, argv: List[str], host: str, port: int) -> Optional[str]:
        with open(self.phase.lighthouse_log, "ab") as log:
            log.write(f"restartlab: {' '.join(argv)}\n".encode())
            log.flush()
            self.lighthouse = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               start_new_session=True)
        deadline = time.time() + LIGHTHOUSE_READY_S
        while not listening(host, port):
            if self.lighthouse.poll() is not None:
                return f"the lighthouse exited ({self.lighthouse.returncode}): {last_line(self.phase.lighthouse_log)}"
            if time.time() > deadline:
                self.stop_lighthouse()
                return f"the lighthouse does not listen on {host}:{port} after {LIGHTHOUSE_READY_S:g}s"
            time.sleep(0.05)
        return None

    def stop_lighthouse(self) -> None:
        p, self.lighthouse = self.lighthouse, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def start_groups(self) -> None:
        # The groups share the node. Each rank's CPU threads are the node's / (ranks in its group x groups).
        # REPLICA_GROUP_ID and NUM_REPLICA_GROUPS are the names torchft's own examples read (train_ddp.py).
        n = str(self.cfg.ft_groups)
        for g in range(self.cfg.ft_groups):
            env = dict(os.environ, TORCHFT_LIGHTHOUSE=self.address, RESTARTLAB_FT_GROUPS=n, NUM_REPLICA_GROUPS=n,
                       REPLICA_GROUP_ID=str(g))
            env.pop("MASTER_PORT", None)  # each group's loop picks its own (its ranks' store)
            os.makedirs(self.phase.group(g).path, exist_ok=True)
            with open(self.phase.group(g).supervise_log, "ab") as log:
                self.groups[g] = subprocess.Popen(group_argv(self.cfg, g), env=env, stdout=log,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop_groups(self, sig: int = signal.SIGTERM, which: Optional[List[int]] = None) -> None:
        procs = [p for g, p in self.groups.items() if which is None or g in which]
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        deadline = time.time() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def relaunching(self, g: int) -> bool:
        """Group g's loop is between attempts, or its attempt has not committed a step yet.

        A group that has completed the phase is not relaunching. Its loop may still be writing its end."""
        gp = self.phase.group(g)
        if os.path.exists(gp.completed):
            return False
        atts = gp.attempts()
        return not atts or not atts[-1].metrics_files() or os.path.exists(atts[-1].record)

    def newest_commit(self, g: int) -> Optional[int]:
        """The newest step group g's current attempt committed (its rank 0's records); None: none."""
        atts = self.phase.group(g).attempts()
        path = atts[-1].ft_records().get(0) if atts else None
        steps = [x.step for x in ft_records.read_steps(path) if x.commit] if path else []
        return max(steps) if steps else None

    def late(self, done_step: Optional[int]) -> List[int]:
        """The running groups to stop as soon as the training is done.

        These are the groups still relaunching, and those not in step. A group is in step when its
        newest commit is within one of the step the done group completed.

        A relaunch that found no peer (the others done, or leaving) starts over alone. It commits its
        own step 1, 2, ... This was seen under load. The survivor finished its last 45 steps before
        the struck group's relaunch took its first. That group then trained the whole run again."""
        def out_of_step(g: int) -> bool:
            newest = self.newest_commit(g)  # None (no record that reads): not known to be out of step
            return done_step is not None and newest is not None and newest < done_step - 1
        return sorted(g for g, p in self.groups.items()
                      if p.poll() is None and (self.relaunching(g) or out_of_step(g)))

    def wait_groups(self) -> Dict[int, Optional[int]]:
        """Wait until every group's loop has ended, and return {group: exit status}.

        Once one group has completed the last step, the training is done. Then:
        - A group still relaunching (no commit in its current attempt) is stopped at once. It would
          find no peer and train the whole run again from a fresh start.
        - A group that has already started over is stopped at once too (late()).
        - The others get DONE_GRACE_S to complete theirs. In the quorum they are in step. Then their
          loops are stopped too.

        A stopped group's exit status is None. self.stopped names those groups."""
        done_at = None
        while any(p.poll() is None for p in self.groups.values()):
            done = [] if done_at is not None else \
                [g for g in self.groups if os.path.exists(self.phase.group(g).completed)]
            if done:
                done_at = time.time()
                steps = [s for s in map(self.newest_commit, done) if s is not None]
                late = self.late(max(steps) if steps else None)
                if late:
                    self.stopped = late
                    self.say(f"the training is done (a group completed the last step): stopping group(s) {late}, "
                             "still relaunching or not in step")
                    self.stop_groups(which=late)
            if done_at is not None and time.time() - done_at > float(os.environ.get(DONE_GRACE_VAR) or DONE_GRACE_S):
                behind = sorted(g for g, p in self.groups.items() if p.poll() is None)
                if behind:
                    self.stopped = sorted(set(self.stopped) | set(behind))
                    self.say(f"the training is done (a group completed the last step): stopping group(s) "
                             f"{behind}, behind after {float(os.environ.get(DONE_GRACE_VAR) or DONE_GRACE_S):g}s")
                    self.stop_groups(which=behind)
                break
            time.sleep(POLL_S)
        return {g: (None if g in self.stopped else p.returncode) for g, p in self.groups.items()}

    def run(self) -> int:
        cfg, phase = self.cfg, self.phase
        if os.path.exists(phase.completed):
            self.say("finished by an earlier job of this experiment")
            return EXIT_OK
        os.makedirs(phase.groups_dir, exist_ok=True)
        if os.path.exists(phase.done):
            os.unlink(phase.done)
        why = self.start_lighthouse()
        if why:
            self.stop_lighthouse()
            self.say(f"FAILED: torchft's lighthouse did not start: {why} (see {phase.lighthouse_log})", err=True)
            attempt_record.write_end(phase, PhaseEnd.CANNOT_RUN, 0, cfg.job or None, why=f"lighthouse: {why}")
            return EXIT_FAILED
        self.say(f"torchft: lighthouse at {self.address} (min_replicas {cfg.ft_min_replicas}, heartbeat timeout "
                 f"{cfg.ft_heartbeat_timeout:g}s); {cfg.ft_groups} replica group(s), each under its own relaunch loop")
        rcs: Dict[int, Optional[int]] = {}
        try:
            self.start_groups()
            if cfg.inject is not None:
                self.procs.start_injector(phase)
            rcs = self.wait_groups()
        finally:
            with open(phase.done, "a"):
                pass
            if any(p.poll() is None for p in self.groups.values()):
                self.stop_groups()
            self.procs.stop_injector()
            self.stop_lighthouse()
        self.account()
        ran = [rc for rc in rcs.values() if rc is not None]  # a group stopped after the training was done: not counted
        verdict = PhaseEnd.COMPLETED if ran and all(rc == 0 for rc in ran) else (
            PhaseEnd.WALLTIME if EXIT_WALLTIME in ran else PhaseEnd.BUDGET if EXIT_BUDGET in ran else PhaseEnd.FAILED)
        attempt_record.write_end(phase, verdict, sum(len(g.attempts()) for g in phase.groups()), cfg.job or None)
        if verdict == PhaseEnd.COMPLETED:
            with open(phase.completed, "a"):
                pass
            return EXIT_OK
        self.say(f"FAILED: replica groups' loops ended {rcs}", err=True)
        return {PhaseEnd.WALLTIME: EXIT_WALLTIME, PhaseEnd.BUDGET: EXIT_BUDGET}.get(verdict, EXIT_FAILED)

    def account(self) -> None:
        """The accounting and verdict (restartlab.analysis.ft_accounting, run as its own process:
        the job's runtime does not import the analysis) into PHASE/ft.json, its lines into ours."""
        r = subprocess.run(verbs.argv(sys.executable, "ft-accounting", self.phase.path, str(self.cfg.train_iters)),
                           capture_output=True, text=True)
        for line in r.stdout.splitlines():
            self.say(line)
        if r.returncode:
            self.say(f"the accounting failed ({r.returncode}): {r.stderr.strip()[-500:]}", err=True)

    def interrupt(self) -> int:
        """SIGTERM/SIGINT to the phase's supervisor: stop every group's loop, the injector and the
        lighthouse."""
        self.stop_groups()
        self.procs.injector.terminate()
        self.procs.stop_injector()
        self.stop_lighthouse()
        attempt_record.write_end(self.phase, PhaseEnd.INTERRUPTED, 0, self.cfg.job or None)
        return EXIT_INTERRUPTED
