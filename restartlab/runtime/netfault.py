"""A network fault on this node, for real: its link to the job's other nodes taken down (partition,
flap) or capped (slow_link), then put back, whatever becomes of the process that asked.

`python -m restartlab.runtime.netfault --kind partition --duration 40 --peer HOST ...` runs on the
struck node, through the injector's fan-out (pbsdsh, srun, mpiexec). It does three things:
- It finds the link that carries this node's traffic to `--peer` (`ip route get`).
- It checks that it may change that link with `ip link set DEV up`. That is a no-op that needs
  CAP_NET_ADMIN: root, or `--root-cmd`, e.g. `sudo -n`.
- It starts the restorer and prints its JSON receipt at once.

The fault begins `--delay` later, so that the fan-out's own answer leaves before the link goes
down. pbsdsh's task exit travels over that link.

The restorer is a process of its own session. No fan-out, supervisor or job teardown ends it, and a
SIGKILL of the supervisor leaves the fault to it. It takes the link down and up (`--flaps` times),
or puts a tbf qdisc on it. This kernel has tbf and htb but no netem: a bandwidth cap, no added
delay. It undoes what it did at the first of these:
- The duration is over.
- `--until` exists (the phase's done flag).
- It gets SIGTERM/SIGINT/SIGHUP.
- `--max` has passed (a partition that never heals: `--duration` 0).

It then appends what happened, with the times, to `--log` (layout.Phase.faults): one JSON line per
fault. It carries RESTARTLAB_NETFAULT=<tag> in its environment. That is not the ranks' tag, because
a teardown must not end it before it undoes the fault."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import IO, Any, Dict, List, Optional, Tuple, cast

from ..contracts.envvars import node_name
from ..contracts.faultlog import FaultLog
from ..contracts.receipts import Receipt
from ..tools import verbs

NETFAULT_VAR = "RESTARTLAB_NETFAULT"
KINDS = ("partition", "flap", "slow_link")
TBF_BURST = "32kbit"
TBF_LATENCY = "400ms"
POLL_S = 0.05
UNDO_TRIES = 6     # putting the link back: 6 tries over about 15 s before the restorer gives up and says so


SBIN = ("/usr/sbin", "/sbin")  # where ip and tc live, often not on a batch job's PATH (tc: only there)


def tool(name: str) -> str:
    """ip or tc by its path: SBIN first (where a sudoers rule for root_cmd names them), then the
    job's PATH."""
    found = shutil.which(name, path=os.pathsep.join([*SBIN, os.environ.get("PATH", "")]))
    if not found:
        raise FileNotFoundError(f"{name} (iproute2) is not on this node (PATH, {', '.join(SBIN)})")
    return found


def _run(cmd: List[str]) -> subprocess.CompletedProcess[str]:
    """cmd, its first word that is ip or tc by its path (FileNotFoundError: not there)."""
    cmd = [tool(c) if c in ("ip", "tc") else c for c in cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def route_dev(peer: str) -> str:
    """The link this node's traffic to `peer` leaves on (ValueError: none, or the loopback)."""
    try:
        addr = socket.gethostbyname(peer)
    except OSError as e:
        raise ValueError(f"cannot resolve {peer}: {e}") from None
    r = _run(["ip", "-j", "route", "get", addr])
    if r.returncode != 0:
        raise ValueError(f"ip route get {addr}: {r.stderr.strip() or r.returncode}")
    dev: Optional[str] = (json.loads(r.stdout) or [{}])[0].get("dev")
    if not dev or dev == "lo":
        raise ValueError(f"the route to {peer} ({addr}) leaves on {dev or 'no link'}: {peer} is this node")
    return dev


def plan(a: argparse.Namespace) -> List[Tuple[str, float]]:
    """[(action, seconds to hold it)]: what the restorer does, in order."""
    hold = a.duration if a.duration > 0 else a.max
    if a.kind == "slow_link":
        return [("cap", hold)]
    n = a.flaps if a.kind == "flap" else 1
    out = []
    for i in range(n):
        out.append(("down", hold))
        if i < n - 1:
            out.append(("up", a.flap_up))
    return out


class Restorer:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.root = a.root_cmd.split() if a.root_cmd else []
        self.stop: Optional[str] = None
        self.windows: List[List[Optional[float]]] = []  # [[start, end or None], ...]: the link down (or capped)
        self.errors: List[str] = []
        self.down = self.capped = False

    def on_signal(self, signum: int, _frame: Optional[FrameType]) -> None:
        self.stop = signal.Signals(signum).name

    def ip(self, *args: str) -> bool:
        try:
            r = _run(self.root + list(args))
        except (OSError, subprocess.SubprocessError) as e:
            self.errors.append(f"{' '.join(args)}: {e}")
            return False
        if r.returncode != 0:
            self.errors.append(f"{' '.join(args)}: {r.stderr.strip() or r.returncode}")
        return r.returncode == 0

    def watch_until(self) -> None:
        """Look for the done flag, in a thread of its own.

        The flag lies on a shared file system, which may sit behind the very link that is down. A
        stat there may block until the link is back. The timer, the signals and --max never wait on it."""
        while not self.stop:
            if os.path.exists(self.a.until):
                self.stop = f"{self.a.until} exists"
                return
            time.sleep(POLL_S)

    def hold(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end and not self.stop:
            time.sleep(min(POLL_S, max(0.0, end - time.time())))

    def undo(self) -> None:
        """Put back what was done, retrying (UNDO_TRIES, with back-off) what fails; a window is closed
        only when the link is back."""
        for i in range(UNDO_TRIES):
            if self.down and self.ip("ip", "link", "set", "dev", self.a.dev, "up"):
                self.down = False
            if self.capped and self.ip("tc", "qdisc", "del", "dev", self.a.dev, "root"):
                self.capped = False
            if not (self.down or self.capped) or i == UNDO_TRIES - 1:
                break
            time.sleep(min(8.0, 0.5 * 2 ** i))
        if self.windows and self.windows[-1][1] is None and not (self.down or self.capped):
            self.windows[-1][1] = time.time()

    def run(self) -> int:
        a = self.a
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, self.on_signal)
        if a.until:
            threading.Thread(target=self.watch_until, daemon=True).start()
        try:
            self.hold(max(0.0, a.at - time.time()))
            for action, seconds in plan(a):
                if self.stop:
                    break
                if action == "down":
                    t = time.time()
                    if not self.ip("ip", "link", "set", "dev", a.dev, "down"):
                        break
                    self.down = True
                    self.windows.append([t, None])
                elif action == "cap":
                    t = time.time()
                    if not self.ip("tc", "qdisc", "add", "dev", a.dev, "root", "tbf", "rate", a.rate,
                                   "burst", TBF_BURST, "latency", TBF_LATENCY):
                        break
                    self.capped = True
                    self.windows.append([t, None])
                self.hold(seconds)
                if not self.stop and a.duration <= 0:
                    self.stop = "the walltime margin (--max)"
                if action in ("down", "cap"):
                    self.undo()
        finally:
            self.undo()
            self.write_log()
        return 0 if not self.errors else 1

    def write_log(self) -> None:
        rec = FaultLog(host=socket.gethostname(), node=node_name(), kind=self.a.kind, dev=self.a.dev, tag=self.a.tag,
                       planned_at=self.a.at, duration=self.a.duration, rate=self.a.rate,
                       windows=tuple((cast(float, w[0]), w[1]) for w in self.windows), restored=not (self.down or self.capped),
                       ended_by=self.stop or "duration", errors=tuple(self.errors))
        if self.a.log:
            with open(self.a.log, "a") as f:
                f.write(rec.to_json() + "\n")


def start(a: argparse.Namespace) -> Receipt:
    """The foreground part: the link, the permission, the restorer started; the receipt."""
    receipt = Receipt(host=socket.gethostname(), node=node_name(), time=time.time(), kind=a.kind)
    try:
        return _start(a, receipt)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return receipt.replace(error=str(e))


def _start(a: argparse.Namespace, receipt: Receipt) -> Receipt:
    dev = a.dev or route_dev(a.peer)
    root = a.root_cmd.split() if a.root_cmd else []
    if root:  # by its path: the restorer must not look it up on a PATH behind the link it takes down
        found = shutil.which(root[0])
        if not found:
            raise FileNotFoundError(f"failures.root_cmd: {root[0]} is not on this node")
        a.root_cmd = " ".join([found] + root[1:])
        root = a.root_cmd.split()
    check = _run(root + ["ip", "link", "set", "dev", dev, "up"])
    if check.returncode != 0:
        why = check.stderr.strip() or f"exit {check.returncode}"
        return receipt.replace(dev=dev, error=f"cannot change {dev} here ({' '.join(root + ['ip'])}: {why}): a "
                    f"{a.kind} needs CAP_NET_ADMIN on the node (the job as root, or failures.root_cmd such "
                    f"as 'sudo -n' allowed to run ip and tc)")
    if a.kind == "slow_link":  # tc there, and allowed (a sudoers rule may name ip and not tc)
        check = _run(root + ["tc", "qdisc", "show", "dev", dev])
        if check.returncode != 0:
            return receipt.replace(dev=dev, error=f"cannot run tc here ({' '.join(root + ['tc'])}: "
                        f"{check.stderr.strip() or check.returncode}): slow_link needs it")
    at = time.time() + a.delay
    argv = verbs.argv(sys.executable, "net-fault", "--restore", "--at", repr(at), "--dev", dev, *_pass_on(a))
    env = dict(os.environ, **{NETFAULT_VAR: a.tag or "-"})
    for var in ("RESTARTLAB_JOB_TAG",):  # never found as a rank, never ended by a teardown
        env.pop(var, None)
    err = open(a.log + ".stderr", "a") if a.log else subprocess.DEVNULL  # a restorer's own crash, if any
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                             start_new_session=True, close_fds=True, env=env)
    finally:
        if a.log:
            cast(IO[str], err).close()  # the log file opened above
    until = at + sum(sec for _, sec in plan(a)) if a.duration > 0 else None
    return receipt.replace(dev=dev, at=at, until=until, restorer=p.pid, duration=a.duration,
                           flaps=a.flaps if a.kind == "flap" else None, rate=a.rate if a.kind == "slow_link" else None)


def _pass_on(a: argparse.Namespace) -> List[str]:
    out = ["--kind", a.kind, "--duration", repr(a.duration), "--flaps", str(a.flaps), "--flap-up", repr(a.flap_up),
           "--rate", a.rate, "--max", repr(a.max)]
    for k in ("root_cmd", "until", "log", "tag"):
        if getattr(a, k):
            out += [f"--{k.replace('_', '-')}", getattr(a, k)]
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m restartlab.runtime.netfault", description=__doc__.split("\n")[0])
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--duration", type=float, required=True, help="seconds down (or capped); 0: until --until/--max")
    p.add_argument("--flaps", type=int, default=1, help="flap: how many times down")
    p.add_argument("--flap-up", type=float, default=5.0, help="flap: seconds up between two downs")
    p.add_argument("--rate", default="1mbit", help="slow_link: tc's rate (1mbit, 500kbit)")
    p.add_argument("--peer", help="a node of the job: the link to it is the one struck")
    p.add_argument("--dev", help="the link (default: the route to --peer)")
    p.add_argument("--root-cmd", default="", help="what runs ip and tc as root (e.g. 'sudo -n')")
    p.add_argument("--until", help="undo at once when this file exists (the phase's done flag)")
    p.add_argument("--max", type=float, default=3600.0, help="undo after this long whatever happens")
    p.add_argument("--delay", type=float, default=1.0, help="the fault begins this long after the receipt")
    p.add_argument("--log", help="append what happened here (layout.Phase.faults)")
    p.add_argument("--tag", default="", help="the run's tag, in the restorer's RESTARTLAB_NETFAULT")
    p.add_argument("--restore", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--at", type=float, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    if a.restore:
        return Restorer(a).run()
    if not (a.dev or a.peer):
        print(Receipt(host=socket.gethostname(), node=node_name(), error="--peer or --dev needed").to_json())
        return 2
    r = start(a)
    print(r.to_json(), flush=True)
    return 1 if r.error else 0


if __name__ == "__main__":
    sys.exit(main())
