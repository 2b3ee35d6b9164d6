"""The smoke job's ranks: their records, read as they come, and judged.

There is one record per rank of a launch (contracts/smoke.SmokeRank). The judgement checks every
rank on the job's hosts, torch on each, and one all-reduce across them."""
import subprocess
import time
from typing import Callable, Dict, List

from ..contracts import layout
from ..contracts.smoke import SmokeRank, read_rank

RANKS_TIMEOUT_S = 300   # a launch's ranks to start, import torch and all-reduce (a cold Lustre import)
FAILED_GRACE_S = 10      # after one rank failed, the others' records are waited for this long


class RankRecords:
    """`want` ranks over `hosts`; `add(name, ok, detail, failed_hosts)` records a check (Smoke.add)."""

    def __init__(self, want: int, hosts: List[str], add: Callable[..., bool]) -> None:
        self.want, self.hosts, self.add = want, hosts, add

    @staticmethod

    def read_records(outdir: str) -> Dict[int, SmokeRank]:
        recs = {}
        for path in layout.Attempt(outdir).smoke_records():
            r = read_rank(path)
            if r is not None:
                recs[r.rank] = r
        return recs

    def records(self, proc: subprocess.Popen[bytes], outdir: str, wait_exit: bool) -> Dict[int, SmokeRank]:
        """The ranks' records once all are written (and, wait_exit, the launch has ended), or the
        launch ended, or the time is up. A rank that failed (its record says why) leaves its peers
        waiting for a group that cannot form: the others get FAILED_GRACE_S to write theirs."""
        want, deadline = self.want, time.time() + RANKS_TIMEOUT_S
        while time.time() < deadline:
            recs = self.read_records(outdir)
            done = proc.poll() is not None
            if (len(recs) >= want and (not wait_exit or done)) or done:
                break
            if any(r.error for r in recs.values()):
                deadline = min(deadline, time.time() + FAILED_GRACE_S)
            time.sleep(0.2)
        return self.read_records(outdir)

    def tail(self, outdir: str, n: int = 4) -> str:
        try:
            with open(layout.Attempt(outdir).output, errors="replace") as f:
                return " | ".join(x.strip() for x in f.read().strip().splitlines()[-n:])[-400:]
        except OSError:
            return ""

    def judge(self, recs: Dict[int, SmokeRank], proc: "subprocess.Popen[bytes]", outdir: str, attempt: int) -> bool:
        """The checks of one launch's records: ranks (launch 1) or relaunch (launch 2); the first
        launch's also torch and allreduce. Whether the ranks' check passed."""
        want = self.want
        missing = sorted(set(range(want)) - set(recs))
        hosts_seen = sorted({str(r.host) for r in recs.values()})
        stray = [h for h in hosts_seen if h not in self.hosts]
        idle = [h for h in self.hosts if h not in hosts_seen]
        why = ""
        if missing:
            ended = proc.poll()
            why = (f"; ranks {missing[:8]}{'...' if len(missing) > 8 else ''} never wrote their record "
                   + (f"(the launcher exited {ended}: {self.tail(outdir)})" if ended is not None else
                      f"in {RANKS_TIMEOUT_S} s"))
        names = ", ".join(sorted({str(r.launcher) for r in recs.values()}))
        ok = self.add("ranks" if attempt == 1 else "relaunch",
                      not missing and not stray and not idle and (attempt == 1 or proc.returncode == 0),
                      f"launch {attempt}: {len(recs)} of {want} rank(s) on {len(hosts_seen)} of {len(self.hosts)} "
                      f"host(s)" + (f" ({names} variables)" if names else "") + why
                      + (f"; ranks on hosts the job was not given: {stray}" if stray else "")
                      + (f"; no rank on {idle}" if idle else "")
                      + (f"; the launcher exited {proc.returncode}: {self.tail(outdir)}"
                         if attempt > 1 and proc.returncode and "the launcher exited" not in why else ""),
                      stray + idle)
        if attempt > 1:
            return ok
        if not recs:
            self.add("torch", False, "not seen: no rank reported")
            self.add("allreduce", False, "not seen: no rank reported")
            return ok
        noimport = sorted({str(r.host) for r in recs.values() if r.torch is None})
        devs = sorted({(r.device, r.devices) for r in recs.values() if r.torch is not None}, key=str)
        versions = sorted({r.torch for r in recs.values() if r.torch is not None})
        self.add("torch", not noimport, f"torch {', '.join(versions) or '?'}"
                 f" on {len(recs) - sum(1 for r in recs.values() if r.torch is None)} rank(s); device, count: {devs}"
                 + "".join(f"; rank {r.rank} on {r.host}: {r.error}" for r in recs.values() if r.torch is None), noimport)
        bad = [r for r in recs.values() if not r.allreduce_ok]
        backend = sorted({r.backend for r in recs.values() if r.backend})
        expected = next(iter(recs.values())).allreduce_expected
        self.add("allreduce", not bad and not missing,
                 f"{'/'.join(backend) or 'no backend'}: {len(recs) - len(bad)} of {want} rank(s) all-reduced to "
                 f"{'?' if expected is None else expected}"
                 + "".join(f"; rank {r.rank} on {r.host}: {r.error or r.allreduce}" for r in bad[:4]),
                 [str(r.host) for r in bad])
        return ok
