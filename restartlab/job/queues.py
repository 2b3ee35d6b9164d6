"""Which of a server's queues take a job.

A job's shape is its nodes, its walltime and how many of the experiment's jobs are in the queue at
once. It is judged against every queue the server has (ServerQueues: qstat -Qf, scontrol show
partition), in the server's own terms. The module gives the queues that take it, and the choice of
`job.queue: auto`. It is pure: the server's answers come in, and lines come out for preflight to
print."""
import functools
import grp
import os
import pwd
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..contracts.units import hms
from ..schedulers.base import QueueLimits, ServerQueues

AUTO = "auto"
MAX_ROUTE_DEPTH = 4  # a routing queue that routes to a routing queue ...: PBS allows it; a loop is not followed


@dataclass
class Shape:
    nodes: int
    walltime: float
    asked: str            # how the nodes were asked, for a finding ("3 node(s) (2 + 1 spare)")
    at_once: int = 1      # the experiment's jobs in the queue together (relaunch.chain: 2, the running
    #                       job submits its continuation)
    user: Optional[str] = None
    wall_at: str = ""     # where job.walltime is set (file:line), for a walltime finding

    def text(self) -> str:
        return f"{self.nodes} node(s) x {hms(self.walltime)}"


def _member(user: Optional[str], q: QueueLimits) -> Optional[str]:
    """Why `user` may not submit to `q` by its access lists, or None."""
    if not user:
        return None
    if q.users_only is not None and user not in q.users_only:
        return "it takes jobs from its listed users only (acl_users), and you are not one of them"
    if q.groups_only is not None:
        mine = groups_of(user)
        if mine is not None and not mine & set(q.groups_only):
            return "it takes jobs from its listed groups only (acl_groups), and none is yours"
    return None


@functools.lru_cache(maxsize=8)
def groups_of(user: str) -> Optional[frozenset]:
    """The names of `user`'s groups as the system resolves them, sssd/LDAP included.

    It uses getgrouplist, not a scan of /etc/group. None when the user is not known here; then
    the groups are not judged."""
    try:
        pw = pwd.getpwnam(user)
        ids = os.getgrouplist(user, pw.pw_gid)
    except (KeyError, OSError):
        return None
    names = set()
    for gid in ids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.add(str(gid))
    return frozenset(names)


def own_limits(q: QueueLimits, s: Shape) -> List[str]:
    """Why `q` itself refuses the shape: its state, nodes and walltime (not its destinations, not
    the user's jobs)."""
    bad, at = [], f" ({s.wall_at})" if s.wall_at else ""
    if not q.enabled:
        bad.append("it is not enabled: the server refuses new jobs")
    if not q.started:
        bad.append("it is not started: a job would wait in it and never run")
    if q.min_nodes is not None and s.nodes < q.min_nodes:
        bad.append(f"it takes at least {q.min_nodes} nodes, the job asks for {s.asked}")
    if q.max_nodes is not None and s.nodes > q.max_nodes:
        bad.append(f"it takes at most {q.max_nodes} nodes, the job asks for {s.asked}")
    if q.total_nodes is not None and s.nodes > q.total_nodes:
        bad.append(f"it has {q.total_nodes} nodes in all, the job asks for {s.asked}: it would never start")
    if q.max_walltime is not None and s.walltime > q.max_walltime:
        bad.append(f"its walltime limit is {hms(q.max_walltime)}, job.walltime is {hms(s.walltime)}{at}")
    if q.min_walltime is not None and s.walltime < q.min_walltime:
        bad.append(f"its shortest walltime is {hms(q.min_walltime)}, job.walltime is {hms(s.walltime)}{at}")
    acl = _member(s.user, q)
    if acl:
        bad.append(acl)
    return bad


def per_user(qs: ServerQueues, q: QueueLimits, s: Shape) -> List[str]:
    """Why the user's jobs already there, or the experiment's own, make the server refuse it."""
    if q.user_queued is None:
        return []
    mine = qs.mine.get(q.name, [])
    if s.at_once > q.user_queued:
        return [f"it takes {q.user_queued} job(s) per user, running or waiting ({q.user_queued_said}), and "
                f"relaunch.chain has {s.at_once} of the experiment's in it at once (the running job submits "
                "its continuation): the server would refuse the continuation"]
    if len(mine) + s.at_once > q.user_queued:
        return [f"it takes {q.user_queued} job(s) per user, running or waiting ({q.user_queued_said}), and you "
                f"have {len(mine)} there ({', '.join(mine)}): the server would refuse this one until "
                f"{'it ends' if len(mine) == 1 else 'they end'} (restartlab submit --after JOB waits for it)"]
    return []


def refusals(qs: ServerQueues, name: str, s: Shape, depth: int = 0) -> List[str]:
    """Every reason queue `name` refuses the shape (empty: it takes it). A routing queue takes it
    when its own limits do and one of its destinations does."""
    q = qs.queues.get(name)
    if q is None:
        return [f"it does not exist on this server ({qs.source})"]
    bad = own_limits(q, s) + per_user(qs, q, s)
    if depth == 0 and q.from_route_only:
        via = [r.name for r in qs.queues.values() if name in r.route_to]
        bad.append("it takes jobs from a routing queue only (from_route_only)"
                   + (f": submit to {', '.join(via)}" if via else ""))
    if bad or not q.route_to or depth >= MAX_ROUTE_DEPTH:
        return bad
    local = [d for d in q.route_to if "@" not in d]
    if len(local) < len(q.route_to):
        return []  # a destination on another server: not judged from here
    why = {d: refusals(qs, d, s, depth + 1) for d in local}
    if any(not w for w in why.values()):
        return []
    return ["none of its destinations takes it (" + "; ".join(f"{d}: {w[0]}" for d, w in why.items()) + ")"]


def waits(qs: ServerQueues, name: str, s: Shape) -> List[str]:
    """What makes a job the queue takes wait: the user's running limit already reached."""
    q = qs.queues.get(name)
    if q is None or q.user_run is None:
        return []
    mine = qs.mine.get(name, [])
    if len(mine) >= q.user_run:
        return [f"it runs {q.user_run} job(s) per user at a time ({q.user_run_said}) and you have {len(mine)} "
                f"there ({', '.join(mine)}): this job waits until {'it ends' if len(mine) == 1 else 'one ends'}"]
    return []


def _order(q: QueueLimits) -> Tuple:
    """auto's preference order.

    A debug queue comes first, for a job that fits one. ALCF's debug and debug-scaling give the
    shortest wait for a short test. Then comes the queue whose limits are tightest around the job."""
    big = float("inf")
    return (not q.name.startswith("debug"), q.max_nodes if q.max_nodes is not None else big,
            q.max_walltime if q.max_walltime is not None else big, q.name)


def takers(qs: ServerQueues, s: Shape, avoid: Sequence[str] = ()) -> List[str]:
    """The queues a job may be submitted to that take the shape, in auto's order.

    It leaves out a queue that takes jobs from a routing queue only, and any queue in `avoid`."""
    ok = [q for q in qs.queues.values() if not q.from_route_only and q.name not in avoid
          and not refusals(qs, q.name, s)]
    return [q.name for q in sorted(ok, key=_order)]


def pick(qs: ServerQueues, s: Shape, avoid: Sequence[str] = ()) -> Optional[str]:
    """The queue `job.queue: auto` picks.

    That is the first queue that takes the shape where it will not wait on the user's running
    limit. Failing that, it is the first queue that takes the shape."""
    found = takers(qs, s, avoid)
    free = [n for n in found if not waits(qs, n, s)]
    best = free or found
    return best[0] if best else None


def summary(qs: ServerQueues, s: Shape, avoid: Sequence[str] = ()) -> str:
    """One line for a refused job: which queues take it, or, when none does, each queue's first reason."""
    found = takers(qs, s, avoid)
    if found:
        return (f"queue(s) here that take {s.text()}: {', '.join(found)} (set job.queue: {found[0]}, or job.queue: "
                f"{AUTO})")
    direct = [q for q in qs.queues.values() if not q.from_route_only]
    if not direct:
        return f"no queue here takes {s.text()}: the server lists no queue that takes jobs directly"
    return (f"no queue here takes {s.text()}: " + "; ".join(
        f"{q.name}: {(refusals(qs, q.name, s) or ['(listed in job.queue_avoid)'])[0]}"
        for q in sorted(direct, key=_order)))


def user_name(env=os.environ) -> Optional[str]:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return env.get("USER")
