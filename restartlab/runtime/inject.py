"""The failure injector: schedules, gating on `.complete`, fan-out to the job's nodes, and one
line per kill in the phase's injection records (layout; on stdout without --phase-dir). It never matches
processes itself: on each node the failure kind strikes it runs `restartlab kill-ranks` (with
--tag: one restartlab run's ranks; without: every rank of this batch job, whatever program it
runs; see killer.py) and records the receipts."""
import argparse
import dataclasses
import json
import os
import random
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

from . import attempt_record, iofault, killer
from .clock import Clock
from ..tools import options as tool_options
from ..tools import verbs
from .fanout import describe_receipt, fan_out, job_nodes, killer_argv
from .. import failures, programs, schedulers
from ..contracts import layout, live, options
from ..contracts.injections import Injection
from ..contracts.receipts import Receipt
from ..contracts.live import newest_step_seen
from ..contracts.signals import parse_signal

POLL_S = 0.1
FAULT_FANOUT_S = 15.0  # a network fault's node answers before its fault begins; its scheduler's answer may not
SAVE_POLL_S = 0.005   # --fuzz: how often a save window is looked for (a listing of the checkpoint dir)
SAVE_WAIT_WINDOWS = 2  # --fuzz: a kill aimed at a save waits this many --fuzz-window after the launch


# ---------------------------------------------------------------- schedules (pure)
def step_targets(at_steps: Optional[Sequence[Union[int, Sequence[Any]]]] = None, every_steps: Optional[int] = None,
                 train_iters: Optional[int] = None) -> List[Tuple[int, Optional[str]]]:
    """[(step, failure kind or None for the default)], in step order."""
    if at_steps:
        return sorted(set((s, None) if isinstance(s, int) else tuple(s) for s in at_steps),
                      key=lambda t: t[0])
    if every_steps:
        end = train_iters or 10 ** 9
        return [(s, None) for s in range(every_steps, end, every_steps)]
    return []


def timed_offsets(every: Optional[float] = None, mtbf: Optional[float] = None, seed: int = 0) -> Iterator[float]:
    """Seconds from the clock start at which timed kills fire (exponential gaps for mtbf)."""
    t = 0.0
    rng = random.Random(seed)
    while True:
        t += every if every else rng.expovariate(1.0 / cast(float, mtbf))  # run(): one of them is given
        yield t


# ---------------------------------------------------------------- the loop
@dataclasses.dataclass
class Config:
    """The injector's settings: one field per option of tools/options.INJECT, in its order, then the
    Python its killers run with. The table holds each option's flag, help and default;
    tests/test_tool_options.py keeps this class equal to it (contracts/options.config_problems).
    `at_steps` holds the parsed schedule [(step, kind or None)] (tools/options.parse_at_steps)."""
    kind: str = "kill"
    signal: Optional[str] = None
    grace: float = 60.0
    node: Optional[int] = None
    duration: float = 30.0
    flaps: int = 3
    flap_up: float = 5.0
    rate: str = "1mbit"
    rank: int = 0
    all_ranks: bool = False
    errno: str = "EIO"
    after_bytes: int = 0
    root_cmd: Optional[str] = None
    every: Optional[float] = None
    at_steps: Optional[List[Tuple[int, Optional[str]]]] = None
    every_steps: Optional[int] = None
    mtbf: Optional[float] = None
    fuzz: Optional[int] = None
    seed: int = 0
    gate: Optional[str] = None
    wait_first_complete: bool = False
    max_kills: Optional[int] = None
    fuzz_window: float = 10.0
    fuzz_save_share: float = 0.5
    fuzz_save_jitter: float = 0.02
    fuzz_after_complete: bool = False
    fuzz_kinds: Optional[str] = None
    until: Optional[str] = None
    job_end: float = 0.0
    ckpt_dir: Optional[str] = None
    program: Optional[str] = None
    phase_dir: Optional[str] = None
    train_iters: Optional[int] = None
    tag: Optional[str] = None
    fanout: Optional[str] = None
    nodefile: Optional[str] = None
    launcher: str = "hydra"
    python: Optional[str] = None

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> "Config":
        return cls(python=a.python, **{o.key: getattr(a, o.key) for o in tool_options.INJECT})


class Injector:
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
        self.spec = programs.resolve(json.loads(a.program) if a.program else {"adapter": "restartlab"})
        self.seen_complete: Optional[int] = None  # the newest complete checkpoint ever seen here
        self.complete_mtime: Optional[float] = None  # the newest complete checkpoint's file time

    def ckpts(self) -> List[programs.Ckpt]:
        return programs.list_ckpts(self.spec, self.a.ckpt_dir) if self.a.ckpt_dir else []

    def newest_complete(self) -> Optional[int]:
        """The newest complete checkpoint's step, by the program's completion rule (and the newest
        ever seen: a program may delete its last good one before it writes the next)."""
        c = programs.newest_complete(self.ckpts())
        if c is not None and (self.seen_complete is None or c.step > self.seen_complete):
            self.seen_complete = c.step
        self.complete_mtime = c.mtime if c else None
        return c.step if c else None

    def target(self) -> Optional[layout.Attempt]:
        """The attempt a strike made now hits: the newest one, or the one after it when it is over
        (the strike retries until the relaunched ranks are there)."""
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
        """Where a strike landed in attempt `att`, looked at once its ranks are dead (the fan-out
        takes a while, the program went on meanwhile): start-up (no step logged), save (something
        in the checkpoint dir that is not a complete checkpoint was written to since the launch:
        `saving` names it), or between saves."""
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
        """SIGTERM/SIGINT: stop now, except in the middle of a strike, which is finished and
        recorded first (a strike without its record would be booked as an uninjected crash)."""
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
        # distinct (host, pid) of the trees' roots (a rank's exit recorder and its program are one):
        # two scheduler nodes on one host may both see the same rank
        return len({(r.host, p) for r in receipts if not r.dry_run for p in r.trees}), receipts

    def strike_here(self, kind: failures.FailureKind, sig: str) -> Receipt:
        """`restartlab kill-ranks` on this host, in this process: the same receipt."""
        try:
            return killer.kill_ranks(self.a.tag, parse_signal(sig), one="--one" in kind.killer_args())
        except (OSError, killer.KillerError) as e:
            return Receipt(host=socket.gethostname(), error=str(e))

    def seen(self, newest: Optional[int], struck: Optional[layout.Attempt]) -> Dict[str, Any]:
        """What a strike's record says of the training it hit (a kill's and a network fault's alike):
        rank 0's newest step, the newest complete checkpoint (ever, and its time), where it landed."""
        return dict(step_seen=newest_step_seen(self.a.phase_dir) if self.a.phase_dir else None,
                    newest_complete=newest, newest_complete_seen=self.seen_complete,
                    complete_mtime=self.complete_mtime if newest is not None else None, **self.where(struck))

    def fault_argv(self, kind: failures.FailureKind, i: int) -> List[str]:
        """runtime/netfault.py's line for node `i`: the link to another node of the job (the first,
        else the second) is the one struck."""
        a = self.a
        peer = self.hosts[0] if i != 0 or len(self.hosts) < 2 else self.hosts[1]
        args = ["--kind", kind.name, "--duration", repr(a.duration), "--flaps", str(a.flaps), "--flap-up",
                repr(a.flap_up), "--rate", a.rate, "--peer", peer]
        if a.job_end:  # undone by the walltime's end at the latest (a partition that never heals)
            args += ["--max", repr(max(1.0, a.job_end - self.clock.time()))]
        for flag, v in (("--root-cmd", a.root_cmd), ("--until", a.until), ("--tag", a.tag),
                        ("--log", layout.Phase(a.phase_dir).faults if a.phase_dir else None)):
            if v:
                args += [flag, v]
        return verbs.argv(cast(str, a.python), "net-fault", *args)  # main() sets it (default: sys.executable)

    def fault(self, reason: str, target_step: Optional[int], kind: failures.FailureKind,
              gate: Optional[str]) -> Injection:
        """A network fault on the kind's node: its link down or capped there, the ranks left alone;
        the record's time is when the fault begins (the receipt's `at`)."""
        a = self.a
        idx = kind.nodes(len(self.hosts), a.node, self.rng)
        t0 = self.clock.time()
        newest = self.newest_complete()
        struck = self.target()
        self.striking = True
        receipts: List[Receipt] = []
        for i in idx:
            receipts += fan_out(cast(str, a.fanout),  # main() sets it
                                self.hosts, [i], self.fault_argv(kind, i), self.slots, a.launcher,
                                timeout=FAULT_FANOUT_S)
        ok = [r for r in receipts if not r.error and r.at]
        rec = Injection(time=min((cast(float, r.at) for r in ok), default=t0), reason=reason, target_step=target_step,
                        gate=gate, kind=kind.name, hosts=tuple(self.hosts[i] for i in idx), killed=0,
                        receipts=tuple(receipts), **self.seen(newest, struck), extra={"faulted": len(ok), "fault": {
                            "duration": a.duration, "flaps": a.flaps if kind.name == "flap" else None,
                            "flap_up": a.flap_up if kind.name == "flap" else None,
                            "rate": a.rate if kind.name == "slow_link" else None,
                            "until": max((r.until or 0 for r in ok), default=None) or None}})
        self.record(rec)
        self.striking = False
        self.kills += 1
        what = f"{kind.name} of {', '.join(rec.hosts)}" + (f" for {a.duration:g}s" if a.duration else ", never healing")
        self.say(f"fault #{self.kills} ({reason}): {what}: " + ("begun" if ok else "NOT made"))
        for r in receipts:
            self.say("  " + (f"{r.host}: error: {r.error}" if r.error else
                             f"{r.host}: {r.dev}: no start time in its receipt" if not r.at else
                             f"{r.host}: {r.dev} from {time.strftime('%H:%M:%S', time.localtime(r.at))}"
                             + (f" to {time.strftime('%H:%M:%S', time.localtime(r.until))}" if r.until else "")))
        if self.terminated:
            raise SystemExit(self.done())
        return rec

    def io_fault(self, reason: str, target_step: Optional[int], kind: failures.FailureKind,
                 gate: Optional[str]) -> Injection:
        """A storage fault: the phase's strike file written whole; the struck rank's preload takes it at
        its next checkpoint write (runtime/iofault). The record's time is the arming. A fuzzed torn
        strike cuts at a byte drawn from the seed (below failures.TORN_SPAN)."""
        a = self.a
        phase = layout.Phase(cast(str, a.phase_dir))  # main() refuses a storage kind without it
        t0 = self.clock.time()
        newest, struck = self.newest_complete(), self.target()
        strike_id = int(t0 * 1000)  # unique across a chain's jobs: each rank takes a strike once
        rank = -1 if a.all_ranks else a.rank
        after = self.rng.randrange(1, failures.TORN_SPAN) if a.fuzz and kind.name == "torn" else a.after_bytes
        fault = {"id": strike_id, "rank": rank, "duration": a.duration,
                 "errno": a.errno if kind.name == "write_errors" else None,
                 "after_bytes": after if kind.name in ("write_errors", "torn") else None,
                 "rate": a.rate if kind.name == "slow_storage" else None}
        os.makedirs(phase.iofault_dir, exist_ok=True)
        iofault.arm(phase.iofault_ctl, strike_id, kind.name, rank, seconds=a.duration,
                    rate=failures.rate_bytes(a.rate) if kind.name == "slow_storage" else 0.0,
                    errno_name=a.errno, after=after, duration=a.duration)
        rec = Injection(time=t0, reason=reason, target_step=target_step, gate=gate, kind=kind.name, killed=0,
                        **self.seen(newest, struck), extra={"faulted": 1, "fault": fault})
        self.record(rec)
        self.kills += 1
        who = "every rank" if rank < 0 else f"rank {rank}"
        self.say(f"fault #{self.kills} ({reason}): {kind.name} armed for {who}'s next checkpoint write")
        if self.terminated:
            raise SystemExit(self.done())
        return rec

    def kill(self, reason: str, target_step: Optional[int] = None, kind_name: Optional[str] = None,
             gate: Optional[str] = None) -> Injection:
        a = self.a
        kind = failures.get(kind_name) if kind_name else self.kind
        if kind.host_fault:
            return self.fault(reason, target_step, kind, gate)
        if kind.storage_fault:
            return self.io_fault(reason, target_step, kind, gate)
        sig = cast(str, a.signal or kind.signal)  # every kind but the faults (returned above) has one
        idx = kind.nodes(len(self.hosts), a.node, self.rng)
        t_kill = self.clock.time()
        newest = self.newest_complete()
        struck = self.target()
        attempts = layout.Phase(a.phase_dir).attempts() if a.phase_dir else []
        deadline = t_kill + 10
        self.striking = True
        while True:  # nothing found (between attempts): retry briefly, the target has not died
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
            struck = attempts[-1] if attempts else None
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

    def live_attempt(self, after: int) -> Optional[layout.Attempt]:
        """The newest attempt, once one numbered above `after` is launched and not over (None: we
        must stop first)."""
        found: List[layout.Attempt] = []

        def launched() -> bool:
            atts = layout.Phase(cast(str, self.a.phase_dir)).attempts()  # main() refuses --fuzz without it
            if atts and atts[-1].index > after and os.path.exists(atts[-1].at_launch) \
                    and not attempt_record.is_over(atts[-1]):
                found[:] = [atts[-1]]
                return True
            return False
        return found[0] if self.sleep_until(launched) else None

    def fuzz(self) -> int:
        """One kill per attempt at a random point: inside a save (the moment a checkpoint being
        written shows up, plus up to --fuzz-save-jitter: 20 ms by default) or anywhere from the launch on (uniformly within
        --fuzz-window). A kill aimed at a save that sees none within SAVE_WAIT_WINDOWS windows of the
        launch strikes then. A checkpoint that becomes complete without having been seen in flight
        (a program that writes it elsewhere and renames it in, as Lightning does) makes the kills
        from then on strike anywhere, said once. The choices come from --seed; what happened is in
        each record."""
        a, last = self.a, 0
        told, window = False, a.fuzz_window
        while self.kills < cast(int, a.fuzz):  # run() calls fuzz() only with it
            att = self.live_attempt(last)
            if att is None:
                break
            t0 = os.stat(att.at_launch).st_mtime
            # once an attempt showed no save, later kills aimed at one strike anywhere instead
            in_save = self.rng.random() < a.fuzz_save_share and not told
            delay, jitter = self.rng.uniform(0, window), self.rng.uniform(0, a.fuzz_save_jitter)
            if in_save:
                deadline = t0 + SAVE_WAIT_WINDOWS * window
                before = self.newest_complete()
                unseen = False  # a checkpoint became complete without ever being seen in flight
                # --fuzz-after-complete: only a save made while a complete checkpoint exists (or
                # existed: one deleted before the next is written counts) is struck
                while True:
                    ready = not a.fuzz_after_complete or self.seen_complete is not None
                    if ready and programs.in_flight(self.spec, cast(str, a.ckpt_dir), t0):  # main(): --fuzz needs it
                        break
                    now = self.newest_complete()
                    unseen = now is not None and (before is None or now > before) and not a.fuzz_after_complete
                    if unseen or attempt_record.is_over(att) or self.clock.time() > deadline or self.stop_reason():
                        break
                    before = now if a.fuzz_after_complete else before
                    self.clock.sleep(SAVE_POLL_S)
                if attempt_record.is_over(att) or self.stop_reason():
                    continue
                if unseen and not told:
                    self.say(f"a checkpoint in {a.ckpt_dir} became complete in attempt {att.index} without being "
                             f"seen in flight (a program that writes its checkpoint elsewhere and renames it in "
                             f"shows none; else check trainer.program.checkpoints): striking now, and anywhere "
                             f"from here on")
                    told = True
                if unseen or self.clock.time() > deadline:  # no save to aim at in time: strike now
                    in_save, delay = False, self.clock.time() - t0
                else:
                    self.clock.sleep(jitter)
            else:
                if self.sleep_until(lambda: attempt_record.is_over(att), deadline=t0 + delay):
                    window = max(0.1, min(window, self.clock.time() - t0) / 2)  # the next one, sooner
                    self.say(f"attempt {att.index} ended before the kill at launch +{delay:.2f}s: the next "
                             f"attempt is struck within {window:.2f}s of its launch")
                    continue
                if self.stop_reason():
                    break
            last = att.index
            kind = self.fuzz_kind()
            self.kill(f"fuzz #{self.kills + 1}: {'inside a save' if in_save else f'launch +{delay:.2f}s'}",
                      kind_name=kind)
        return self.done()

    def fuzz_kind(self) -> Optional[str]:
        """The next fuzzed strike's kind: drawn among --fuzz-kinds (from the seed; nothing drawn for one
        kind, so that a plain kill fuzz's draws stay what they were), else --kind."""
        kinds = [k.strip() for k in (self.a.fuzz_kinds or "").split(",") if k.strip()]
        return (self.rng.choice(kinds) if len(kinds) > 1 else kinds[0]) if kinds else None

    def run(self) -> int:
        a = self.a
        if a.fuzz:
            return self.fuzz()
        targets = step_targets(a.at_steps, a.every_steps, a.train_iters)
        if a.at_steps or a.every_steps:  # a step schedule, even one with no step to strike
            if not targets:  # (once taken for a timed one with no time given: a TypeError)
                self.say(f"--every-steps {a.every_steps} is at or past --train-iters {a.train_iters}: no step to "
                         "strike")
            gate = tool_options.gate_of(a.gate, step_schedule=True)
            # a chained job's injector: the steps an earlier job's injector struck are done
            done = {r.target_step for r in live.read_injections(a.phase_dir) if r.struck} \
                if a.phase_dir else set()
            for s, kind in targets:
                if s in done:
                    self.say(f"step {s}: struck by an earlier job of this experiment")
                    continue
                if gate == "complete":
                    ok = self.sleep_until(lambda: (self.newest_complete() or -1) >= s or self.unmatched())
                    if ok and self.unmatched() and not a.phase_dir:
                        self.say(f"the checkpoint dir {a.ckpt_dir} holds files but nothing matches the checkpoint "
                                 f"pattern {self.spec.get('checkpoints')!r}, and without --phase-dir no step is "
                                 "seen: stopping")
                        break
                    if ok and self.unmatched():
                        gate = "none"
                        self.say(f"the checkpoint dir {a.ckpt_dir} holds files but nothing matches the "
                                 f"checkpoint pattern {self.spec.get('checkpoints')!r} (check "
                                 f"trainer.program.checkpoints): step-aimed kills fire when the step is seen")
                        ok = self.sleep_until(lambda: newest_step_seen(cast(str, a.phase_dir)) >= s)  # main()
                else:  # main(): a step schedule has its --phase-dir
                    ok = self.sleep_until(lambda: newest_step_seen(cast(str, a.phase_dir)) >= s)
                if not ok:
                    break
                self.kill(f"step {s} ({'after .complete' if gate == 'complete' else 'step seen'})", s, kind,
                          "complete" if gate == "complete" else "step")
        else:
            if a.wait_first_complete and not self.sleep_until(lambda: self.newest_complete() is not None):
                return self.done()
            t0 = self.clock.time()
            for off in timed_offsets(a.every, a.mtbf, a.seed):
                if self.sleep_until(lambda: False, deadline=t0 + off) is False and self.stop_reason():
                    break
                if tool_options.gate_of(a.gate, step_schedule=False) == "complete" and not self.sleep_until(
                        lambda: self.newest_complete() is not None):
                    break
                self.kill(f"timed +{off:.1f}s ({'every' if a.every else 'mtbf'})")
        return self.done()

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
            bad = programs.spec_errors(programs.resolve(json.loads(a.program)))
        except (ValueError, AttributeError, KeyError) as e:
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
