"""The injector's strikes that are not signals: a network fault on a node (runtime/netfault.py,
through the job's fan-out) and a storage fault armed for a rank's next checkpoint write
(runtime/iofault). Each writes the strike's record (contracts/injections.Injection) as a kill does."""
import os
import time
from typing import List, Optional, cast

from . import iofault
from .fanout import fan_out
from .. import failures
from ..contracts import layout
from ..contracts.injections import Injection, NetFault, StorageFault
from ..contracts.typed_json import to_dict
from ..contracts.receipts import Receipt
from ..tools import verbs
from .inject_api import Striker

FAULT_FANOUT_S = 15.0  # a network fault's node answers before its fault begins; its scheduler's answer may not


def fault_argv(inj: Striker, kind: failures.FailureKind, i: int) -> List[str]:
    """runtime/netfault.py's line for node `i`: the link to another node of the job (the first,
    else the second) is the one struck."""
    a = inj.a
    peer = inj.hosts[0] if i != 0 or len(inj.hosts) < 2 else inj.hosts[1]
    args = ["--kind", kind.name, "--duration", repr(a.duration), "--flaps", str(a.flaps), "--flap-up",
            repr(a.flap_up), "--rate", a.rate, "--peer", peer]
    if a.job_end:  # undone by the walltime's end at the latest (a partition that never heals)
        args += ["--max", repr(max(1.0, a.job_end - inj.clock.time()))]
    for flag, v in (("--root-cmd", a.root_cmd), ("--until", a.until), ("--tag", a.tag),
                    ("--log", layout.Phase(a.phase_dir).faults if a.phase_dir else None)):
        if v:
            args += [flag, v]
    return verbs.argv(cast(str, a.python), "net-fault", *args)  # main() sets it (default: sys.executable)


def net_fault(inj: Striker, reason: str, target_step: Optional[int], kind: failures.FailureKind,
          gate: Optional[str]) -> Injection:
    """A network fault on the kind's node: its link goes down or is capped there.

    The ranks are left alone. The record's time is when the fault begins (the receipt's `at`)."""
    a = inj.a
    idx = kind.nodes(len(inj.hosts), a.node, inj.rng)
    t0 = inj.clock.time()
    newest = inj.newest_complete()
    struck = inj.target()
    inj.striking = True
    receipts: List[Receipt] = []
    for i in idx:
        receipts += fan_out(cast(str, a.fanout),  # main() sets it
                            inj.hosts, [i], fault_argv(inj, kind, i), inj.slots, a.launcher,
                            timeout=FAULT_FANOUT_S)
    ok = [r for r in receipts if not r.error and r.at]
    rec = Injection(time=min((cast(float, r.at) for r in ok), default=t0), reason=reason, target_step=target_step,
                    gate=gate, kind=kind.name, hosts=tuple(inj.hosts[i] for i in idx), killed=0,
                    receipts=tuple(receipts), **inj.seen(newest, struck), extra={"faulted": len(ok), "fault": to_dict(
                        NetFault(duration=a.duration, flaps=a.flaps if kind.name == "flap" else None,
                                 flap_up=a.flap_up if kind.name == "flap" else None,
                                 rate=a.rate if kind.name == "slow_link" else None,
                                 until=max((r.until or 0 for r in ok), default=None) or None))})
    inj.record(rec)
    inj.striking = False
    inj.kills += 1
    what = f"{kind.name} of {', '.join(rec.hosts)}" + (f" for {a.duration:g}s" if a.duration else ", never healing")
    inj.say(f"fault #{inj.kills} ({reason}): {what}: " + ("begun" if ok else "NOT made"))
    for r in receipts:
        inj.say("  " + (f"{r.host}: error: {r.error}" if r.error else
                         f"{r.host}: {r.dev}: no start time in its receipt" if not r.at else
                         f"{r.host}: {r.dev} from {time.strftime('%H:%M:%S', time.localtime(r.at))}"
                         + (f" to {time.strftime('%H:%M:%S', time.localtime(r.until))}" if r.until else "")))
    if inj.terminated:
        raise SystemExit(inj.done())
    return rec


def io_fault(inj: Striker, reason: str, target_step: Optional[int], kind: failures.FailureKind,
             gate: Optional[str]) -> Injection:
    """A storage fault: the phase's strike file written whole; the struck rank's preload takes it at
    its next checkpoint write (runtime/iofault). The record's time is the arming. A fuzzed torn
    strike cuts at a byte drawn from the seed (below failures.TORN_SPAN)."""
    a = inj.a
    phase = layout.Phase(cast(str, a.phase_dir))  # main() refuses a storage kind without it
    t0 = inj.clock.time()
    newest, struck = inj.newest_complete(), inj.target()
    strike_id = int(t0 * 1000)  # unique across a chain's jobs: each rank takes a strike once
    rank = -1 if a.all_ranks else a.rank
    after = inj.rng.randrange(1, failures.TORN_SPAN) if a.fuzz and kind.name == "torn" else a.after_bytes
    fault = StorageFault(id=strike_id, rank=rank, duration=a.duration,
                         errno=a.errno if kind.name == "write_errors" else None,
                         after_bytes=after if kind.name in ("write_errors", "torn") else None,
                         rate=a.rate if kind.name == "slow_storage" else None)
    os.makedirs(phase.iofault_dir, exist_ok=True)
    inj.striking = True  # a TERM from here on waits for the record: an armed strike is always booked
    iofault.arm(phase.iofault_ctl, strike_id, kind.name, rank, seconds=a.duration,
                rate=failures.rate_bytes(a.rate) if kind.name == "slow_storage" else 0.0,
                errno_name=a.errno, after=after, duration=a.duration)
    rec = Injection(time=t0, reason=reason, target_step=target_step, gate=gate, kind=kind.name, killed=0,
                    **inj.seen(newest, struck), extra={"faulted": 1, "fault": to_dict(fault)})
    inj.record(rec)
    inj.striking = False
    inj.kills += 1
    who = "every rank" if rank < 0 else f"rank {rank}"
    inj.say(f"fault #{inj.kills} ({reason}): {kind.name} armed for {who}'s next checkpoint write")
    if inj.terminated:
        raise SystemExit(inj.done())
    return rec
