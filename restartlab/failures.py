"""Failure-kind plug-ins: one class per kind of failure the injector can cause, registered by
name in KINDS. A kind owns its signal, which nodes (and ranks) it strikes, what follows the
signal (a preemption's grace period). The collector books a strike under its record's `kind`. Scenario validation
(`failures.kind`) and `restartlab inject --kind` choices come from this registry."""
import random
import re
from typing import Callable, List, Optional

from .contracts.registry import Registry


class FailureKind:
    name = ""
    signal: Optional[str] = "KILL"  # default signal (a scenario's failures.signal overrides)
    one_rank = False             # strike one rank's process tree per node, not all of them
    host_fault = False           # not a signal: the node's link (runtime/netfault.py), its ranks left alive
    storage_fault = False        # not a signal: the ranks' checkpoint writes (runtime/iofault), armed for the next save
    needs = ""                   # what it needs on the nodes besides the job's own rights (validate says it)
    doc = ""

    def nodes(self, n_hosts: int, node: Optional[int], rng: random.Random) -> List[int]:
        """Indices (into the job's unique hosts) of the nodes to strike."""
        raise NotImplementedError

    def killer_args(self) -> List[str]:
        """Extra arguments for the node-local `restartlab kill-ranks`."""
        return ["--one"] if self.one_rank else []

    def follow_up(self, grace: float, attempt_over: Callable[[], bool], strike: Callable[[str], int],
                  clock) -> dict:
        """After the signal went out: more to do? (`strike(sig)` fans a signal out to the same
        targets and returns how many processes it reached; `clock`: the injector's time and sleep.)
        Returns what to add to the record."""
        return {}


KINDS: Registry[FailureKind] = Registry("failure kind")
register = KINDS.register


@register
class Kill(FailureKind):
    name = "kill"
    doc = "every rank on every node of the job (the default)"

    def nodes(self, n_hosts, node, rng):
        return list(range(n_hosts))


@register
class Node(FailureKind):
    name = "node"
    doc = "every rank of one node (failures.node, else a node chosen from the seed)"

    def nodes(self, n_hosts, node, rng):
        return [node if node is not None else rng.randrange(n_hosts)]


@register
class Rank(FailureKind):
    name = "rank"
    one_rank = True
    doc = "one rank and its process tree (on failures.node, else the first node)"

    def nodes(self, n_hosts, node, rng):
        return [node if node is not None else 0]


@register
class Hang(FailureKind):
    name = "hang"
    signal = "STOP"
    one_rank = True
    doc = "SIGSTOP one rank: nothing exits; the watchdog or the process-group timeout must notice"

    def nodes(self, n_hosts, node, rng):
        return [node if node is not None else rng.randrange(n_hosts)]


@register
class Preempt(FailureKind):
    name = "preempt"
    signal = "TERM"
    doc = ("SIGTERM to every rank (a scheduler's preemption or walltime), then SIGKILL after "
           "failures.grace: the trainer checkpoints and exits in between")

    def nodes(self, n_hosts, node, rng):
        return list(range(n_hosts))

    def follow_up(self, grace, attempt_over, strike, clock):
        """KILL after `grace` unless the attempt ended. It looks once more at the deadline: an attempt
        that ended in the last poll is followed at once by its relaunch, which the KILL would hit."""
        deadline = clock.time() + grace
        while not attempt_over():
            left = deadline - clock.time()
            if left <= 0:
                return {"grace": grace, "escalated": strike("KILL")}
            clock.sleep(min(0.2, left))
        return {"grace": grace, "escalated": 0}


class NetworkKind(FailureKind):
    """A node's link to the others, taken down or capped, while its ranks stay alive and wait.

    runtime/netfault.py does it on the struck node. That node undoes it itself, whatever becomes
    of the job."""
    host_fault = True
    signal = None
    needs = ("CAP_NET_ADMIN on the struck node (ip and tc as root: the job runs as root, or failures.root_cmd, "
             "e.g. 'sudo -n', may run them) and a job of 2 or more nodes on a scheduler")

    def nodes(self, n_hosts, node, rng):
        """failures.node, else a node drawn from the seed, never the first.

        The injector and the relaunch loop run on the first node, so cutting it off would cut
        them off too."""
        if node is not None:
            return [node]
        return [rng.randrange(1, n_hosts) if n_hosts > 1 else 0]


@register
class Partition(NetworkKind):
    name = "partition"
    doc = ("one node cut off the network for failures.duration (0: it never heals; undone when the phase is "
           "done), its ranks alive: they wait in a collective")


@register
class Flap(NetworkKind):
    name = "flap"
    doc = "one node's link down failures.duration, up failures.flap_up, failures.flaps times"


@register
class SlowLink(NetworkKind):
    name = "slow_link"
    doc = "one node's link capped at failures.rate (tc tbf: bandwidth only, no added delay) for failures.duration"


class StorageKind(FailureKind):
    """The ranks' writes under the checkpoint directory made to stall, crawl, fail or stop short, below
    every writer (runtime/iofault: a preload the phase's ranks get). A strike arms it; the rank's next
    checkpoint write takes it. failures.rank picks the rank (-1: every rank)."""
    storage_fault = True
    signal = None
    needs = ("a C compiler (cc, gcc or clang) where the job starts, to build the preload; ranks that are "
             "dynamically linked programs (Python is)")

    def nodes(self, n_hosts, node, rng):
        return []


@register
class StallWrites(StorageKind):
    name = "stall_writes"
    doc = ("the rank's checkpoint writes block for failures.duration from its next save's first write on (a "
           "starved OST), then go on")


@register
class SlowStorage(StorageKind):
    name = "slow_storage"
    doc = "the rank's checkpoint writes held to failures.rate (bytes: 10mbps, or tc's bits: 80mbit) for failures.duration"


@register
class WriteErrors(StorageKind):
    name = "write_errors"
    doc = ("write, fsync and rename under the checkpoint directory fail with failures.errno (EIO, ENOSPC) once "
           "failures.after_bytes of the next save are written, for failures.duration (0: for good, relaunches too)")


@register
class Torn(StorageKind):
    name = "torn"
    doc = ("the rank's checkpoint writes cut short once failures.after_bytes of them are written after the strike "
           "(0: half its first write), and the rank SIGKILLed at that moment")


# failures.rate: tc's rate units (slow_link's tbf takes them as they are; slow_storage's preload in bytes a second)
RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)", re.I)
_RATE_BYTES = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
               "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "tbps": 1e12}


def rate_bytes(text: str) -> float:
    """A tc rate ('80mbit', '10mbps') in bytes a second; ValueError when it is not one."""
    m = RATE.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"{text!r} is not a rate (a number and one of {', '.join(_RATE_BYTES)}: 500kbit, 10mbps)")
    return float(m.group(1)) * _RATE_BYTES[m.group(2).lower()]


# The kinds a kill-anywhere fuzz may draw. Each ends the attempt it strikes. A stall, a crawl or an
# error that a program may survive would leave the fuzz waiting for an attempt that never comes.
FUZZ_KINDS = ("kill", "node", "rank", "torn")
TORN_SPAN = 1 << 20  # a fuzzed torn strike cuts at a byte drawn below this


def kinds_of(kind: Optional[str], at_steps=None, fuzz_kinds: Optional[str] = None) -> List[str]:
    """Every kind a phase's failures may strike with: failures.kind, the at_steps items' and the
    fuzz's draw."""
    out = {kind or "kill"} | {k for k in (at_steps or []) if k}
    out |= {k.strip() for k in (fuzz_kinds or "").split(",") if k.strip()}
    return sorted(out)


def get(name: str) -> FailureKind:
    return KINDS.get(name)

