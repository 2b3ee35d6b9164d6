"""The failure injector.

It runs the schedules, gates on `.complete` and fans out to the job's nodes. It writes one line per
kill in the phase's injection records (layout), or on stdout without --phase-dir.

It never matches processes itself. On each node the failure kind strikes, it runs `restartlab
kill-ranks` and records the receipts. With --tag, that strikes one restartlab run's ranks. Without
it, it strikes every rank of this batch job, whatever program it runs (see killer.py)."""
import argparse
import os
import random
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

from . import attempt_record, inject_faults, inject_fuzz, inject_schedule, killer
from .inject_api import Config  # re-exported: the injector's settings
from .inject_schedule import step_targets, timed_offsets  # re-exported: the pure schedules
from .clock import Clock
from ..tools import options as tool_options
from .fanout import describe_receipt, fan_out, job_nodes, killer_argv
from .. import failures, programs, schedulers
from ..contracts import layout, live, options
from ..contracts.injections import Injection
from ..contracts.receipts import Receipt
from ..contracts.live import newest_step_seen
from ..contracts.signals import parse_signal

POLL_S = 0.1


# ---------------------------------------------------------------- the loop
class Injector:
    """The strikes of one phase, or of `restartlab inject` by hand.

    It holds the schedule and what each strike does. A kill is here. A network or storage fault is in
    inject_faults. The fuzz is in inject_fuzz."""

    def __init__(self, a: Config, clock: Optional[Clock] = None):
        self.a = a
        self.clock = clock or Clock()  # the schedule's time (the tests' is fake)
        self.kills = 0
        self.log_path = layout.Phase(a.phase_dir).injections if a.phase_dir else None
        self.kind = failures.get(a.kind)
        self.hosts, self.slots = job_nodes(a.nodefile, a.fanout)
        self.rng = random.Random(a.seed)
        self.striking = False   # between the first signal of a strike and its record
        self.terminated: Optional[str] = None  # the signal that asked us to stop
        self.spec = programs.from_argv(a.program)
        self.seen_complete: Optional[int] = None  # the newest complete checkpoint ever seen here
        self.complete_mtime: Optional[float] = None  # the newest complete checkpoint's file time

    def ckpts(self) -> List[programs.Ckpt]:
        return programs.list_ckpts(self.spec, self.a.ckpt_dir) if self.a.ckpt_dir else []

    def newest_complete(self) -> Optional[int]:
        """The newest complete checkpoint's step, by the program's completion rule.

        It also keeps the newest ever seen. A program may delete its last good one before it writes the next."""
        c = programs.newest_complete(self.ckpts())
        if c is not None and (self.seen_complete is None or c.step > self.seen_complete):
            self.seen_complete = c.step
        self.complete_mtime = c.mtime if c else None
        return c.step if c else None

    def target(self) -> Optional[layout.Attempt]:
        """The attempt a strike made now hits.

        That is the newest attempt, or the one after it when the newest is over. The strike retries
        until the relaunched ranks are there."""
        atts = layout.Phase(self.a.phase_dir).attempts() if self.a.phase_dir else []
        if not atts:
            return None
        assert self.a.phase_dir is not None  # it listed them
        return layout.Phase(self.a.phase_dir).attempt(atts[-1].index + 1) if attempt_record.is_over(atts[-1]) else atts[-1]

    def unmatched(self) -> bool:
        """The checkpoint dir holds something, and the checkpoint pattern matches none of it."""
        try:
            return bool(self.a.ckpt_dir and os.listdir(self.a.ckpt_dir)) and not self.ckpts()
        except OSError:
            return False

    def where(self, att: Optional[layout.Attempt]) -> Dict[str, Any]:
        """Where a strike landed in attempt `att`.

        It looks once the ranks are dead. The fan-out takes a while, and the program went on meanwhile.
        The answer is one of:
        - `start-up`: no step logged.
        - `save`: something in the checkpoint dir that is not a complete checkpoint was written to
          since the launch. `saving` names it.
        - `between saves`."""
        if att is None:
            return {"where": None}  # (the fields of contracts.injections.Injection it fills)
        try:
            launched = os.stat(att.at_launch).st_mtime
        except OSError:
            launched = None
        torn = programs.in_flight(self.spec, self.a.ckpt_dir, launched) if launched and self.a.ckpt_dir else []
        where = "start-up" if not os.path.exists(att.metrics(0)) else "save" if torn else "between saves"
        return {"where": where, "attempt": att.index, "saving": tuple(torn)}

    def on_terminate(self, signum: int, _frame: Optional[FrameType]) -> None:
        """On SIGTERM/SIGINT, stop now, except in the middle of a strike.

        A strike in progress is finished and recorded first. A strike without its record would be
        booked as an uninjected crash."""
        self.terminated = signal.Signals(signum).name
        if not self.striking:
            raise SystemExit(self.done())

    def say(self, msg: str) -> None:
        print(f"[inject {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def stop_reason(self) -> Optional[str]:
        a = self.a
        if self.terminated:
            return f"{self.terminated} received"
        if a.until and os.path.exists(a.until):
            return f"{a.until} exists"
        if a.max_kills is not None and self.kills >= a.max_kills:
            return f"{self.kills} kill(s) made (--max-kills)"
        if a.train_iters and a.ckpt_dir:
            newest = self.newest_complete()
            if newest is not None and newest >= a.train_iters:
                return "training finished"
        return None

    def sleep_until(self, pred: Callable[[], bool], deadline: Optional[float] = None) -> bool:
        """Poll pred() every POLL_S; False if we must stop (or the deadline passed) first."""
        while True:
            if pred():
                return True
            if self.stop_reason() or (deadline is not None and self.clock.time() >= deadline):
                return False
            self.clock.sleep(POLL_S)

    def strike(self, kind: failures.FailureKind, idx: List[int], sig: str) -> Tuple[int, List[Receipt]]:
        """Fan `sig` out to the nodes `idx`; (distinct process trees reached, receipts). On the local
        scheduler every node is this host: the killer runs in this process (a `kill-ranks`
        process would first spend ~0.15 s starting Python, while the program goes on)."""
        if self.a.fanout == "local":
            receipts = [self.strike_here(kind, sig) for _ in idx]
        else:
            receipts = fan_out(cast(str, self.a.fanout), self.hosts, idx,  # main() sets both
                               killer_argv(cast(str, self.a.python), self.a.tag, sig, kind),
                               self.slots, self.a.launcher)
        # Count the distinct (host, pid) of the trees' roots. A rank's exit recorder and its program are one tree.
        # Two scheduler nodes on one host may both see the same rank.
        return len({(r.host, p) for r in receipts if not r.dry_run for p in r.trees}), receipts

    def strike_here(self, kind: failures.FailureKind, sig: str) -> Receipt:
        """`restartlab kill-ranks` on this host, in this process: the same receipt."""
        try:
            return killer.kill_ranks(self.a.tag, parse_signal(sig), one="--one" in kind.killer_args())
        except (OSError, killer.KillerError) as e:
            return Receipt(host=socket.gethostname(), error=str(e))

    def seen(self, newest: Optional[int], struck: Optional[layout.Attempt]) -> Dict[str, Any]:
        """What a strike's record says of the training it hit.

        A kill's record and a network fault's say the same: rank 0's newest step, the newest complete
        checkpoint (ever, and its time), and where the strike landed."""
        return dict(step_seen=newest_step_seen(self.a.phase_dir) if self.a.phase_dir else None,
                    newest_complete=newest, newest_complete_seen=self.seen_complete,
                    complete_mtime=self.complete_mtime if newest is not None else None, **self.where(struck))

    def kill(self, reason: str, target_step: Optional[int] = None, kind_name: Optional[str] = None,
             gate: Optional[str] = None) -> Injection:
        a = self.a
        kind = failures.get(kind_name) if kind_name else self.kind
        if kind.host_fault:
            return inject_faults.net_fault(self, reason, target_step, kind, gate)
        if kind.storage_fault:
            return inject_faults.io_fault(self, reason, target_step, kind, gate)
        sig = cast(str, a.signal or kind.signal)  # every kind but the faults (returned above) has one
        idx = kind.nodes(len(self.hosts), a.node, self.rng)
        t_kill = self.clock.time()
        newest = self.newest_complete()
        deadline = t_kill + 10
        self.striking = True
        while True:  # nothing found (between attempts): retry briefly, the target has not died
            # The attempt is taken again at each try. An attempt whose ranks are dead but not yet
            # recorded is still the newest; its relaunch, which a retry reaches, is the one struck.
            struck = self.target()
            killed, receipts = self.strike(kind, idx, sig)
            if killed or self.clock.time() > deadline or self.stop_reason():
                break
            self.clock.sleep(0.2)
        rec = Injection(time=t_kill, reason=reason, target_step=target_step, gate=gate, signal=sig, kind=kind.name,
                        hosts=tuple(self.hosts[i] for i in idx), killed=killed, receipts=tuple(receipts),
                        **self.seen(newest, struck))
        self.record(rec)  # now: the relaunch loop books the attempt as injected when it ends
        self.striking = False
        self.kills += 1
        self.say(f"kill #{self.kills} ({reason}): {killed} rank(s) (process trees) on {len(idx)} node(s), "
                 f"newest complete step {newest}")
        for r in receipts:
            self.say("  " + describe_receipt(r))
        if self.terminated:
            raise SystemExit(self.done())
        if killed:
            more = kind.follow_up(a.grace, lambda: struck is not None and attempt_record.is_over(struck),
                                  lambda s: self.strike(kind, idx, s)[0], self.clock)
            if more:  # a second line, "killed": 0 so that nobody counts it as another failure
                self.record(Injection(time=self.clock.time(), follow_up_of=t_kill, kind=kind.name, killed=0, extra=more))
                self.say(f"  follow-up: {more}")
        return rec

    def record(self, rec: Injection) -> None:
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(rec.to_json() + "\n")
        else:  # the record is the receipt: without a phase dir it goes to stdout
            print(rec.to_json(), flush=True)

    def run(self) -> int:
        a = self.a
        if a.fuzz:
            return inject_fuzz.fuzz(self)
        if a.at_steps or a.every_steps:  # a step schedule, even one with no step to strike
            return inject_schedule.by_steps(self)
        return inject_schedule.timed(self)

    def done(self) -> int:
        self.say(f"stopping: {self.stop_reason() or 'schedule exhausted'}; {self.kills} kill(s)")
        return 0


def add_args(p: argparse.ArgumentParser) -> None:
    tool_options.add_inject_args(p)


def main(args: argparse.Namespace) -> int:
    a = Config.from_args(args)
    if not a.tag and killer.job_id_entry() is None:
        print(f"restartlab inject: error: {killer.no_job_error()}", file=sys.stderr)
        return 2
    drawn = [k.strip() for k in (a.fuzz_kinds or "").split(",") if k.strip()]
    if any(k not in failures.FUZZ_KINDS for k in drawn):
        print(f"restartlab inject: error: --fuzz-kinds {a.fuzz_kinds}: a fuzz draws among "
              f"{', '.join(failures.FUZZ_KINDS)}", file=sys.stderr)
        return 2
    io = [k for k in failures.kinds_of(a.kind, [k for _, k in a.at_steps or []], a.fuzz_kinds)
          if failures.get(k).storage_fault]
    if "slow_storage" in io:
        try:
            failures.rate_bytes(a.rate)
        except ValueError as e:
            print(f"restartlab inject: error: --rate: {e}", file=sys.stderr)
            return 2
    if io and not a.phase_dir:
        print(f"restartlab inject: error: {', '.join(io)} arms the phase's strike file: it needs --phase-dir "
              f"(the phase's ranks must run with its preload: a phase of `restartlab run`)", file=sys.stderr)
        return 2
    if a.fuzz and not (a.ckpt_dir and a.phase_dir):
        print("restartlab inject: error: --fuzz needs --ckpt-dir and --phase-dir", file=sys.stderr)
        return 2
    if a.program:
        try:
            bad = programs.spec_errors(programs.from_argv(a.program))
        except (ValueError, KeyError) as e:  # not a JSON object; an adapter restartlab does not have
            bad = [("program", str(e))]
        if bad:
            print(f"restartlab inject: error: --program: {bad[0][0]}: {bad[0][1]}", file=sys.stderr)
            return 2
    if a.wait_first_complete and not a.ckpt_dir:
        print("restartlab inject: error: --wait-first-complete needs --ckpt-dir", file=sys.stderr)
        return 2
    step_schedule = bool(a.at_steps or a.every_steps)
    if step_schedule and not a.phase_dir and tool_options.gate_of(a.gate, True) != "complete":
        print(f"restartlab inject: error: a step schedule with --gate {a.gate} needs --phase-dir: the steps are read "
              "from the phase's metrics", file=sys.stderr)  # (gated on .complete, --ckpt-dir is enough)
        return 2
    if tool_options.gate_of(a.gate, step_schedule) == "complete" and step_schedule and not a.ckpt_dir:
        print("restartlab inject: error: gated step schedules need --ckpt-dir", file=sys.stderr)
        return 2
    a.python = a.python or sys.executable
    a.nodefile = tool_options.nodefile_default(a.nodefile)
    if a.fanout is None:
        sched = schedulers.from_env(os.environ)
        a.fanout = sched.name if sched else "local"
    if a.phase_dir:
        os.makedirs(a.phase_dir, exist_ok=True)
    inj = Injector(a)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, inj.on_terminate)
    return inj.run()
