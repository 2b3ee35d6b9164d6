"""Fan-out: one command on each of the job's nodes, in parallel.

The command goes through the scheduler (pbsdsh, srun --overlap), or as one launch over exactly those
hosts (mpiexec). Each node's JSON receipt is parsed. The injector, the node check, teardown and the
warm pools' stop all reach the nodes here. The job's nodes come from its node file (PBS Pro: one
line per MPI slot) or from the scheduler."""
import os
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Iterable, List, Optional, Tuple

from .. import failures, launchers, schedulers
from ..contracts.envvars import EXPT_DIR_VAR, FANOUT_DIR_VAR
from ..contracts.receipts import Receipt, parse as parse_receipts
from ..tools import verbs

FANOUT_TIMEOUT_S = 60


# ---------------------------------------------------------------- the job's nodes
def read_nodefile(nodefile: Optional[str]) -> Tuple[List[str], List[int]]:
    """(unique hosts in order, line index of each host's first line). PBS Pro writes a host once
    per MPI slot (mpiprocs), and `pbsdsh -n` indexes those slots, not the unique hosts."""
    if not nodefile or not os.path.exists(nodefile):
        return [socket.gethostname()], [0]
    hosts, slots = [], []
    with open(nodefile) as f:
        for i, h in enumerate(line.strip() for line in f if line.strip()):
            if h not in hosts:
                hosts.append(h)
                slots.append(i)
    return (hosts, slots) if hosts else ([socket.gethostname()], [0])


def job_nodes(nodefile: Optional[str], fanout: Optional[str]) -> Tuple[List[str], Optional[List[int]]]:
    """read_nodefile; without a node file (a user's own job), the hosts the scheduler gave it."""
    hosts, slots = read_nodefile(nodefile)
    if not nodefile and fanout in schedulers.names():
        asked = schedulers.get(fanout).job_hosts(os.environ)
        if asked:
            return asked, None
    return hosts, slots


# ---------------------------------------------------------------- fan-out
def killer_argv(python: str, tag: Optional[str], sig: str, kind: failures.FailureKind) -> List[str]:
    """kill-ranks on one node; tag None: every rank of the batch job it runs in."""
    return verbs.argv(python, "kill-ranks", *(["--tag", tag] if tag else []), "--signal", sig, *kind.killer_args())


def fanout_cmds(fanout: str, hosts: List[str], indices: Iterable[int], argv: List[str],
                slots: Optional[List[int]] = None, launcher: str = "pals") -> List[List[str]]:
    """The commands that run `argv` once on each node in `indices`.

    Through the scheduler (pbsdsh, srun --overlap), that is one command per node. With `mpiexec`
    (ALCF style), it is one launch over exactly those hosts, in the job's launcher's syntax."""
    if fanout == "mpiexec":
        return [launchers.get(launcher).fanout_argv([hosts[i] for i in indices], argv)]
    sched = schedulers.get(fanout)
    return [sched.fanout_cmd(i, hosts, argv, slots) for i in indices]


# Runs argv and puts its stdout, stderr and exit status in files named after $0.
# It is for a fan-out that does not hand them back (pbsdsh).
# The rc file comes last and whole: it is written, then renamed.
_RELAY_SH = '"$@" >"$0.out" 2>"$0.err"; echo $? >"$0.rc.tmp" && mv "$0.rc.tmp" "$0.rc"'


def relay_dir() -> str:
    """Where a fan-out's commands leave their output when the scheduler does not relay it.

    It is a directory every node sees: the experiment's, else the job's submission directory, else here."""
    base = (os.environ.get(FANOUT_DIR_VAR) or os.environ.get(EXPT_DIR_VAR)
            or os.environ.get("PBS_O_WORKDIR") or os.getcwd())
    return tempfile.mkdtemp(prefix=".restartlab-fanout-", dir=base)


def _relayed(path: str) -> Tuple[Optional[int], str, str]:
    """(exit status or None when the command never finished there, stdout, stderr)."""
    def read(suffix: str) -> Optional[str]:
        try:
            with open(path + suffix, errors="replace") as f:
                return f.read()
        except OSError:
            return None
    rc = read(".rc")
    return (int(rc) if rc and rc.strip().isdigit() else None), read(".out") or "", read(".err") or ""


def fan_out(fanout: str, hosts: List[str], indices: Iterable[int], argv: List[str], slots: Optional[List[int]] = None,
            launcher: str = "pals", timeout: float = FANOUT_TIMEOUT_S) -> List[Receipt]:
    """Run `argv` once on each node in `indices` (in parallel); parse each JSON receipt. A node that has
    not answered in `timeout` seconds (they all start together: one deadline) gets a receipt of its
    own, `unreachable` and named, and holds up no other."""
    indices = list(indices)
    relay = None
    if fanout != "mpiexec" and not schedulers.get(fanout).fanout_relays_output:
        relay = relay_dir()
        cmds = [schedulers.get(fanout).fanout_cmd(i, hosts, ["/bin/sh", "-c", _RELAY_SH, os.path.join(relay, str(i)),
                                                              *argv], slots) for i in indices]
    else:
        cmds = fanout_cmds(fanout, hosts, indices, argv, slots, launcher)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    deadline = time.time() + timeout  # one deadline for all: they run in parallel
    receipts: List[Receipt] = []
    try:
        for i, c, p in zip(indices, cmds, procs):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                if relay is None:  # the output came back through the fan-out: a receipt printed before the kill counts
                    got = parse_receipts(out)
                    receipts += got
                    if fanout == "mpiexec":  # one launch for every node: name those that did not answer
                        seen = {r.host for r in got} | {r.node for r in got}
                        receipts += [_no_answer(hosts[j], c, timeout) for j in indices if hosts[j] not in seen]
                    elif not got:
                        receipts.append(_no_answer(hosts[i], c, timeout))
                    continue
                if _relayed(os.path.join(relay, str(i)))[0] is None:
                    receipts.append(_no_answer(hosts[i], c, timeout))
                    continue  # else: the command ran there; the scheduler's own answer did not come back
            rc = p.returncode
            if relay is not None:
                rc, out, task_err = _relayed(os.path.join(relay, str(i)))
                if rc is None:
                    receipts.append(Receipt(host=hosts[i], cmd=tuple(c), error=f"the command did not run on node "
                                            f"{hosts[i]} ({c[0]} exited {p.returncode}: {err.strip()[-300:] or 'no message'})"))
                    continue
                err = task_err + err
            got = parse_receipts(out)
            receipts += got
            if not got:
                receipts.append(Receipt(host=hosts[i], cmd=tuple(c), error=f"rc={rc}: {err.strip()[-300:]}"))
    finally:
        for p in procs:  # interrupted (a signal to the supervisor): none of ours outlives the fan-out
            if p.poll() is None:
                p.kill()
                p.wait()
        if relay is not None:
            shutil.rmtree(relay, ignore_errors=True)
    return receipts


def _no_answer(host: str, cmd: List[str], timeout: float) -> Receipt:
    return Receipt(host=host, node=host, cmd=tuple(cmd), unreachable=True,
                   error=f"no answer from {host} in {timeout:g}s (unreachable, or its command still runs)")



def describe_receipt(r: Receipt) -> str:
    """One line per node: what was signalled there, and which ranks."""
    if r.error:
        return f"{r.where or list(r.cmd)}: error: {r.error}"
    what = ", ".join(f"{p}" + (f" ({r.ranks[str(p)]})" if str(p) in r.ranks else "") for p in r.pids)
    return f"{r.node}: {r.signal} {'would reach' if r.dry_run else '->'} {what or 'nothing'}"
