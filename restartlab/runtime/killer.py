"""Node-local rank killer.

It finds the job's training ranks by their environment, never by command line. It kills each
rank's whole process tree and prints a JSON receipt.

Two ways to find the ranks:
- `--tag T`: the processes whose environment holds RESTARTLAB_JOB_TAG=T (one restartlab run).
- No tag: this batch job's ranks, whatever program they run. A rank is a process of this job
  (PBS_JOBID / SLURM_JOB_ID as in our own environment) that a launcher started. Its environment
  holds a launcher's rank variable (PALS, Hydra/PMI, Open MPI, srun, torchrun: the launcher
  registry) with a value its parent does not have. Or it holds a warm standby pool's variable with
  another pid than its own. That is a rank the pool forked, whose environment is the pool's.

These are spared:
- A process with a rank below it. It is a launcher (a Hydra proxy srun started, a torchrun agent).
- The job script. On Slurm it has SLURM_PROCID but no step id.
- restartlab's own tools (RESTARTLAB_TOOL in their environment).
- A parent whose environment we may not read.

It strikes only processes of the user running it (real and effective uid, from psutil). A process
of another user that carries the same tag or job id is skipped and listed in the receipt
(`skipped_other_user`). This holds for root too: root gets no exception.

It never touches this process or its ancestors (the injector, pbsdsh/srun, the launcher that
started us). It never touches a process that is not a rank or a rank's descendant.

Processes are read through psutil. So this works wherever psutil can read another process's
environment (Linux, macOS). Where it cannot, the receipt says how many processes could not be read.
A platform where even our own environment is unreadable is an error, never a silent "nothing found"."""
import json
import os
import signal as _signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Set, Tuple, cast

import psutil

from .. import launchers, schedulers
from ..tools import verbs
from ..contracts import private, usage
from ..contracts.envvars import SERVER_VAR, TAG_VAR, TOOL_VAR, node_name, tag_matches
from ..contracts.receipts import Receipt
from ..contracts.signals import FORWARDED, parse_signal

if TYPE_CHECKING:  # build_parser imports it when called
    import argparse

EXIT_KILLED, EXIT_ERROR, EXIT_USAGE, EXIT_NONE = 0, 1, 2, 10
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


class KillerError(OSError):
    pass


def _check_environ_readable() -> None:
    try:
        psutil.Process().environ()
    except (psutil.AccessDenied, NotImplementedError, OSError) as e:
        raise KillerError(f"psutil cannot read process environments on this platform ({e!r}): "
                          f"ranks cannot be found by their {TAG_VAR}") from None


def _ours(p: psutil.Process) -> bool:
    """The process runs as the user running us (real and effective uid)."""
    u = p.uids()
    return u.real == os.getuid() and u.effective == os.getuid()


def _owner(p: psutil.Process) -> str:
    return private.owner_name(p.uids().real)


def is_pool(pid: int, env: Mapping[str, str]) -> bool:
    """The warm standby pool itself (restartlab.runtime.warm): its environment names its own pid. The
    ranks it forks carry its environment (and the tag) with another pid: they are ranks."""
    return env.get(SERVER_VAR) == str(pid)


def _host_ns() -> Optional[int]:
    """The UTS namespace this process runs in (its host name's), where /proc shows it."""
    try:
        return os.stat("/proc/self/ns/uts").st_ino
    except OSError:
        return None


def _other_host(pid: int, mine: Optional[int]) -> bool:
    """True when `pid` runs as another host: its UTS namespace differs from ours. On a real
    cluster every process we can see is on our host; where several hosts share one kernel (the
    OpenPBS test cluster's network and UTS namespaces, containers) another host's ranks are visible
    and signallable, and must be left to that host's killer. Unreadable: decided by the other rules."""
    if mine is None:
        return False
    try:
        return os.stat(f"/proc/{pid}/ns/uts").st_ino != mine
    except OSError:
        return False


def _scan(entry: str, unreadable: Optional[List[int]] = None, this_node: bool = False,
          others: Optional[Dict[int, str]] = None, standby: bool = False) -> Dict[int, Tuple[Dict[str, str], int]]:
    """{pid: (environment, parent pid)} of this user's live processes whose environment holds
    the exact entry NAME=value.

    Each process is read once.
    - `unreadable` collects the PIDs whose environment we may not read.
    - `others` collects {pid: user} of the matching processes of another user.
    - `this_node`: only this node's processes. Under Slurm, that is this Slurm node's, because several
      node daemons may share one host, as in the tests. A process of another host sharing our kernel
      never counts (_other_host).
    - An idle warm standby pool is never a rank. Only `standby` includes it."""
    _check_environ_readable()
    name, _, value = entry.partition("=")
    node = os.environ.get("SLURMD_NODENAME") if this_node else None
    host_ns = _host_ns() if this_node else None
    found = {}
    for p in psutil.process_iter():
        try:
            env = p.environ()
            v = env.get(name)
            if (v == value or (name == TAG_VAR and v is not None and tag_matches(v, value))) \
                    and p.status() != psutil.STATUS_ZOMBIE \
                    and not (node and env.get("SLURMD_NODENAME", node) != node) \
                    and not _other_host(p.pid, host_ns) \
                    and (standby or not is_pool(p.pid, env)):
                if _ours(p):
                    found[p.pid] = (env, p.ppid())
                elif others is not None:
                    others[p.pid] = _owner(p)
        except _GONE:
            pass
        except psutil.AccessDenied:
            if unreadable is not None:
                unreadable.append(p.pid)
    return found


def find_by_env(entry: str, unreadable: Optional[List[int]] = None) -> List[int]:
    """Live PIDs whose environment holds the exact entry NAME=value."""
    return sorted(_scan(entry, unreadable))


def find_tagged(tag: str, unreadable: Optional[List[int]] = None, others: Optional[Dict[int, str]] = None,
                standby: bool = False) -> List[int]:
    """This user's PIDs whose environment holds RESTARTLAB_JOB_TAG=<tag> exactly.

    A torchft phase's group's <tag>.g<k> matches too (envvars.group_tag). Under Slurm, only those of
    this Slurm node count. `standby`: the warm standby pool too."""
    return sorted(_scan(f"{TAG_VAR}={tag}", unreadable, this_node=True, others=others, standby=standby))


def _environ(pid: int) -> Dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def ancestors(pid: int) -> Set[int]:
    try:
        return {pid} | {p.pid for p in psutil.Process(pid).parents()}
    except _GONE:
        return {pid}


def _ending(p: psutil.Process) -> bool:
    """Its command line is gone: the process is ending (or exec'd nothing readable; another
    user's that we may not read is not taken for ending)."""
    try:
        return not p.cmdline()
    except psutil.AccessDenied:
        return False


def _tree(pid: int, others: Optional[Dict[int, str]] = None) -> List[psutil.Process]:
    """The process and its descendants that are this user's (`others` {pid: user}: the rest)."""
    try:
        root = psutil.Process(pid)
        # The root ended since the scan (a zombie), or it is ending. For an ending process, the kernel
        # has released its memory (no command line left). It has also handed its children to another
        # parent, before the process turns zombie. Either way its children are orphans now. Each is
        # found as its own tree: one rank, not two (Hydra's teardown racing a strike, fresh-clone CI
        # at 409efc3). The root is no target.
        if root.status() == psutil.STATUS_ZOMBIE or _ending(root):
            return []
        procs = [root] + root.children(recursive=True)
    except _GONE:
        return []
    mine = []
    for p in procs:
        try:
            if _ours(p):
                mine.append(p)
            elif others is not None:
                others[p.pid] = _owner(p)
        except _GONE:
            pass
    return mine


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.Error, OSError):
        return ""


def no_job_error() -> str:
    return (f"no --tag and not inside a batch job (none of {', '.join(schedulers.jobid_vars())} is set): "
            f"give the run's --tag")


def job_id_entry(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """'SLURM_JOB_ID=123' / 'PBS_JOBID=4.server': this batch job's id, from the first scheduler
    whose id variable is in `env` (default: ours); None outside a batch job."""
    env = os.environ if env is None else env
    s = schedulers.from_env(env)
    return f"{s.jobid_var}={env[cast(str, s.jobid_var)]}" if s else None  # from_env: s has a jobid_var


def rank_entries(env: Mapping[str, str]) -> List[str]:
    """['PMI_RANK=3', 'SLURM_PROCID=1']: the rank variables of every launcher that matches, in
    the registry's order (the order rank discovery tries them)."""
    return [f"{ln.rank_var}={env[ln.rank_var]}" for ln in launchers.LAUNCHERS.all() if ln.matches(env)]


def job_ranks(job: str, unreadable: Optional[List[int]] = None,
              others: Optional[Dict[int, str]] = None) -> Dict[int, str]:
    """{pid: 'PMI_RANK=3'}: this node's ranks of the job `job` ('VAR=id'), by the rules in the
    module's docstring."""
    procs = _scan(job, unreadable, this_node=True, others=others)
    ranks = {}
    for pid, (env, ppid) in procs.items():
        if TOOL_VAR in env:
            continue
        if SERVER_VAR in env:  # forked by a warm standby pool: a rank, with the pool's environment
            ranks[pid] = f"{SERVER_VAR}={env[SERVER_VAR]}"  # (its stub, under the launcher, is one too)
            continue
        inherited = rank_entries(procs[ppid][0] if ppid in procs else _environ(ppid))
        new = [e for e in rank_entries(env) if e not in inherited]
        if new:  # named by the launcher rank discovery would pick (a Hydra rank whose proxy already
            ranks[pid] = new[0]  # died also shows srun's variable as new)
    launchers_ = set()  # a rank with another rank above it in the tree: that one is a launcher
    for pid in ranks:
        up = procs[pid][1]
        while up in procs:
            if up in ranks:
                launchers_.add(up)
            up = procs[up][1]
    protected = ancestors(os.getpid())
    return {pid: what for pid, what in ranks.items() if pid not in launchers_ and pid not in protected}


def targets(tag: Optional[str], roots: Optional[List[int]] = None, unreadable: Optional[List[int]] = None,
            others: Optional[Dict[int, str]] = None, standby: bool = False,
            trees: Optional[List[int]] = None) -> Dict[int, str]:
    """This user's tagged processes (or `roots`) and their descendants, minus ourselves and our
    ancestors.

    - `others` collects {pid: user}: the matching processes of another user, left alone.
    - `standby`: the warm standby pool too.
    - `trees` collects the found processes that no other found process had below it when walked.

    That gives one process per rank's tree. A rank's exit recorder and its program are one tree, and
    so are a program and its workers. Each walk is judged as it ran. So a rank whose recorder dies
    meanwhile (Hydra's teardown racing a strike) is not counted twice.

    A walked process is no tree if its walk found nothing below it and it has ended by the end of
    the walks. It may have ended between its check and the read of its children. Its program,
    handed to another parent, is then walked as its own tree. And one that ended before the strike
    is not a rank the strike took."""
    protected = ancestors(os.getpid())
    found: Dict[int, str] = {}
    walked: Dict[int, Tuple[psutil.Process, int]] = {}  # a walked process: how many descendants its walk found
    below: Set[int] = set()
    # tag None (kill_ranks of a batch job) comes with its roots: never looked for
    for root in (find_tagged(cast(str, tag), unreadable, others, standby) if roots is None else roots):
        tree = _tree(root, others)
        if tree:
            walked[tree[0].pid] = (tree[0], len(tree) - 1)
            below.update(p.pid for p in tree[1:])
        for p in tree:
            if p.pid not in protected and p.pid not in found:
                found[p.pid] = _cmdline(p)
    if trees is not None:
        trees.extend(sorted(pid for pid, (p, n) in walked.items()
                            if pid in found and pid not in below and (n or not _ended(p))))
    return found


def _ended(p: psutil.Process) -> bool:
    """The process is gone, a zombie, or ending (no command line left).

    Gone: its pid not reused since the walk (psutil compares start times). Another user's process
    that we may not read is not taken for ended."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE or _ending(p)
    except _GONE:
        return True
    except psutil.AccessDenied:
        return False


def _rank_roots(tag: str, others: Optional[Dict[int, str]] = None) -> List[int]:
    """This user's tagged processes whose parent is untagged (the ranks, not their children).
    Under warm restart those are the stubs and the ranks the pool forked: the forked ones, which
    do the work (a SIGSTOP to a stub would stop nothing; the stub mirrors its rank's death)."""
    tagged = _scan(f"{TAG_VAR}={tag}", this_node=True, others=others)
    roots = sorted(pid for pid, (_, ppid) in tagged.items() if ppid not in tagged)
    forked = [pid for pid in roots if SERVER_VAR in tagged[pid][0]]
    return forked or roots


def _stub(cmdline: str) -> bool:
    """A warm rank's stub (runtime/warm/stub.py): it stands in for a rank the standby pool forked."""
    return f" {' '.join(verbs.module_argv('warm-pool'))} stub " in f" {cmdline} "


def _forked_ranks(pids: Dict[int, str]) -> Set[int]:
    """The processes among `pids` that a standby pool forked as ranks: its direct children (the pool's
    environment names the pool's pid). A rank's own children are not among them."""
    out = set()
    for pid in pids:
        try:
            p = psutil.Process(pid)
            server = p.environ().get(SERVER_VAR, "")
            if server.isdigit() and p.ppid() == int(server):
                out.add(pid)
        except (psutil.Error, OSError):
            pass
    return out


def signalled(procs: Dict[int, str], sig: int) -> List[int]:
    """Which of the struck processes get `sig` from the killer. A warm rank is found twice: its stub
    (under the launcher) and the rank the pool forked. The stub passes a catchable signal on to its
    rank, so for those signals the forked rank is left to its stub. Signalled here as well, it got
    each one twice, and a preemption's handler ran twice. The rank's own children get it here, as a
    cold rank's do. SIGKILL and SIGSTOP go to every process: a stub cannot pass those on."""
    if sig not in FORWARDED or not any(_stub(c) for c in procs.values()):
        return sorted(procs)
    # Every forked rank is left out, not only those whose stub is here. A rank's stub lives as long as
    # the rank: the pool SIGKILLs a rank whose stub hangs up. So a rank without a stub is already ending.
    forked = _forked_ranks(procs)
    return sorted(p for p in procs if p not in forked)


def kill_ranks(tag: Optional[str], sig: int = _signal.SIGKILL, dry_run: bool = False, one: bool = False,
               job: Optional[str] = None, standby: bool = False) -> Receipt:
    """Signal this node's ranks (by `tag`, else of the batch job `job`, default this one) and
    their process trees; `one`: only the lowest-PID rank; `standby`: the run's warm standby pool
    too (teardown at the end). Returns the receipt."""
    unreadable: List[int] = []
    others: Dict[int, str] = {}
    ranks: Dict[int, str] = {}
    trees: List[int] = []
    if tag is None:
        job = job or job_id_entry()
        if job is None:
            raise KillerError(no_job_error())
        ranks = job_ranks(job, unreadable, others)
        forked = [p for p in sorted(ranks) if ranks[p].startswith(SERVER_VAR + "=")]
        roots = (forked or sorted(ranks))[:1] if one else sorted(ranks)  # one: the rank that works
        procs = targets(tag, roots, others=others, trees=trees)
    elif one:  # one rank: the lowest-PID rank and its tree
        procs = targets(tag, [r for r in _rank_roots(tag, others) if r not in ancestors(os.getpid())][:1],
                        others=others, trees=trees)
    else:
        procs = targets(tag, unreadable=unreadable, others=others, standby=standby, trees=trees)
    errors: Dict[str, str] = {}
    if not dry_run:
        for pid in signalled(procs, sig):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except OSError as e:
                errors[str(pid)] = str(e)
    return Receipt(host=socket.gethostname(), node=node_name(), time=time.time(), tag=tag,
                   job=job if tag is None else None, signal=_signal.Signals(sig).name, dry_run=dry_run,
                   pids=tuple(sorted(procs)), cmdlines={str(p): c for p, c in sorted(procs.items())},
                   roots=tuple(trees), ranks={str(p): ranks[p] for p in sorted(procs) if p in ranks},
                   unreadable=len(unreadable), skipped_other_user={str(p): u for p, u in sorted(others.items())},
                   errors=errors)


def is_gone(pid: int) -> bool:
    """Exited (or a zombie waiting to be reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except _GONE:
        return True


def build_parser() -> "argparse.ArgumentParser":
    import argparse
    p = argparse.ArgumentParser(prog="restartlab kill-ranks",
                                description="kill this node's training ranks of one job (found by their environment)",
                                epilog=usage.epilog("kill-ranks"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tag", help=f"only the ranks of one restartlab run ({TAG_VAR}); default: every "
                   "rank of this batch job (PBS_JOBID / SLURM_JOB_ID and a launcher's rank variable)")
    p.add_argument("--signal", default="KILL", help="signal name or number (default KILL)")
    p.add_argument("--dry-run", action="store_true", help="list what would be killed")
    p.add_argument("--one", action="store_true", help="only one rank (lowest PID) and its process tree")
    p.add_argument("--standby", action="store_true", help="with --tag: the run's warm standby pool too "
                   "(never counted as a rank otherwise)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    if a.tag is None and job_id_entry() is None:
        print(f"restartlab kill-ranks: error: {no_job_error()}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sig = _signal.Signals(parse_signal(a.signal))
    except ValueError as e:
        print(f"restartlab kill-ranks: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        receipt = kill_ranks(a.tag, sig, a.dry_run, a.one, standby=a.standby)
    except OSError as e:
        print(Receipt(host=socket.gethostname(), error=str(e)).to_json())
        return EXIT_ERROR
    print(receipt.to_json(), flush=True)
    if receipt.errors:
        return EXIT_ERROR
    return EXIT_KILLED if receipt.pids else EXIT_NONE
