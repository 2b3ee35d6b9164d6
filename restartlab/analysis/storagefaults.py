"""A phase's storage faults, each told as what it did.

The kinds are failures.StorageKind: stall_writes, slow_storage, write_errors and torn. Each account
tells:

- Which rank took it, at which checkpoint write.
- What the write met: blocked T s, held to a rate, an errno from byte N, or a file cut at byte N and
  the rank killed.
- What followed. The attempt went on, or it ended and the next one resumed from some checkpoint. A
  torn or failed checkpoint is named, with whether the resume stayed off it.

The accounts come from the injector's records and the ranks' preload's events (contracts/iofaults.py).
Opens no file, except to see whether the struck checkpoint was ever completed."""
import dataclasses
import os
import re
from typing import Dict, List, Optional

from .. import failures
from ..contracts.iofaults import IOFaultEvent
from ..contracts.phase_summary import StorageFault
from .netfaults import _attempt_at

ERRNO_NAMES = {5: "EIO", 28: "ENOSPC"}
STEP = re.compile(r"(\d+)")


def _checkpoint(ev: IOFaultEvent) -> Optional[str]:
    """The checkpoint a file belongs to: its first path part under the checkpoint directory."""
    if not ev.file or not ev.dir or not ev.file.startswith(ev.dir.rstrip("/") + "/"):
        return None
    return os.path.relpath(ev.file, ev.dir).split(os.sep)[0]


def _step_of(ckpt: Optional[str]) -> Optional[int]:
    m = STEP.search(ckpt or "")
    return int(m.group(1)) if m else None


def account(ph, inj, events: List[IOFaultEvent], rank: Optional[int]) -> StorageFault:
    """One strike on one rank (rank None: no rank took it)."""
    fault = inj.storage_fault
    mine = [e for e in events if e.rank == rank] if rank is not None else []
    begin = next((e for e in mine if e.event == "begin"), None)
    end = next((e for e in mine if e.event == "end"), None)
    err = next((e for e in mine if e.event == "error"), None)
    cut = next((e for e in mine if e.event == "cut"), None)
    out = StorageFault(kind=inj.kind, id=fault.id, rank=rank, armed_at=inj.time, armed_step=inj.step_seen,
                       took_at=begin.at if begin else None)
    if begin is None:
        out.effect = "armed; no checkpoint write of " + ("any rank" if (fault.rank or 0) < 0 else
                                                         f"rank {fault.rank}") + " followed"
        out.text = describe(out)
        return out
    first = cut or err or begin
    out.file = os.path.relpath(first.file, first.dir) if first.file and first.dir else first.file
    out.checkpoint = _checkpoint(first)
    if inj.kind == "stall_writes":
        out.blocked_s = round(end.at - begin.at, 3) if end else None
        out.effect = (f"its writes blocked {out.blocked_s:.1f} s" if end else
                      f"its writes blocked from then on (no end seen: the rank ended first)")
    elif inj.kind == "slow_storage":
        out.effect = f"its writes held to {begin.rate / 1e6:g} MB/s for {begin.duration:g} s"
    elif inj.kind == "write_errors":
        if err:
            out.errno, out.bytes = ERRNO_NAMES.get(err.errno, str(err.errno)), err.bytes
            out.effect = (f"{out.errno} from write/fsync/rename after {err.bytes} byte(s) of the save"
                          + (f", for {begin.duration:g} s" if begin.duration else ", for good"))
        else:
            out.effect = f"its save wrote fewer than {begin.after} byte(s): no call failed"
    elif inj.kind == "torn":
        if cut:
            out.bytes = cut.bytes
            out.effect = f"{out.file} cut at byte {cut.bytes} and the rank SIGKILLed"
        else:
            out.effect = "taken, but no write reached the cut"
    i = _attempt_at(ph, begin.at)
    if i is not None:
        a = ph.attempts[i]
        b = ph.attempts[i + 1] if i + 1 < len(ph.attempts) else None
        out.attempt = a.number or a.index
        out.followed = _followed(a, b, out, begin.at)
    out.text = describe(out)
    return out


def _followed(a, b, out: StorageFault, t) -> str:
    """What became of the attempt the strike hit, and of the checkpoint it hit."""
    if a.end_ts is None:
        return "the attempt had not ended when the records stop"
    if a.completed:
        return "the attempt went on and finished"
    ended = f"attempt {out.attempt} ended {a.end_ts - t:.1f} s later" + (
        f" (exit {a.exit_code})" if a.exit_code is not None else "")
    if b is None:
        return ended + "; no attempt followed"
    if b.first_ts is None:
        return ended + f"; attempt {b.number or b.index} took no step (the verdict says why)"
    step = _step_of(out.checkpoint)
    res = f"attempt {b.number or b.index} resumed from step {b.resumed_from}"
    if step is not None and out.kind in ("torn", "write_errors"):
        res += (f", not the struck {out.checkpoint}" if b.resumed_from != step else
                f": the struck {out.checkpoint} itself, LOADED")
    return ended + "; " + res


def describe(f: StorageFault) -> str:
    who = f"rank {f.rank}" if f.rank is not None else "no rank"
    where = f" at {f.file}" if f.file else ""
    return (f"{f.kind} (armed at step {f.armed_step}): {who}{where}: {f.effect}"
            + (f"; {f.followed}" if f.followed else ""))


def _is_storage(inj) -> bool:
    try:
        return bool(inj.kind) and failures.get(inj.kind).storage_fault
    except KeyError:  # a kind this version does not know
        return False


ENDS_ATTEMPT = ("cut", "error")  # the events after which the rank's program ends (torn), or may (an errno)


def effective(injections, events: List[IOFaultEvent]):
    """Return (the storage strikes as armed, the injections as they struck).

    A storage strike is armed at one time and strikes at the rank's next checkpoint write. As a
    failure it counts only where its cut or its first error happened, at that time. Its attempt is
    found by that time. A stall or a slowed write ends no attempt, so it is no failure. Its account
    is the storage table's."""
    first: Dict[Optional[int], IOFaultEvent] = {}  # strike id -> its first end; asked for None too (no id)
    for e in events:
        if e.event in ENDS_ATTEMPT and (e.id not in first or e.at < first[e.id].at):
            first[e.id] = e
    armed, struck = [], []
    for inj in injections:
        if not _is_storage(inj):
            struck.append(inj)
            continue
        armed.append(inj)
        hit = first.get(inj.storage_fault.id)
        if hit is not None:
            struck.append(dataclasses.replace(inj, time=hit.at, attempt=None))
        else:
            struck.append(dataclasses.replace(inj, extra=dict(inj.extra, faulted=0)))
    return armed, struck


def accounts(ph, strikes, events: List[IOFaultEvent]) -> List[StorageFault]:
    """Each storage strike of the phase (as armed), on each rank that took it (collect.summarize_phase's
    `storage_faults`)."""
    out = []
    for inj in strikes:
        if not inj.struck or not _is_storage(inj):
            continue
        sid = inj.storage_fault.id
        mine = [e for e in events if e.id == sid]
        ranks = sorted({e.rank for e in mine})
        out += [account(ph, inj, mine, r) for r in ranks] or [account(ph, inj, [], None)]
    return out
