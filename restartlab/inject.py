"""The failure injector: schedules, gating on `.complete`, fan-out to the job's nodes, and one
line per kill in the phase's injection records (layout; on stdout without --phase-dir). It never matches
processes itself: on each node the failure kind strikes it runs `restartlab kill-ranks` (with
--tag: one restartlab run's ranks; without: every rank of this batch job, whatever program it
runs; see killer.py) and records the receipts."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator, List, Optional, Tuple

from . import attempt, ckptdir, failures, killer, launchers, layout, live, schedulers, tool_options
from .live import newest_step_seen

POLL_S = 0.1
FANOUT_TIMEOUT_S = 60


# ---------------------------------------------------------------- schedules (pure)
def step_targets(at_steps=None, every_steps=None, train_iters=None) -> List[Tuple[int, Optional[str]]]:
    """[(step, failure kind or None for the default)], in step order."""
    if at_steps:
        return sorted(set((s, None) if isinstance(s, int) else tuple(s) for s in at_steps),
                      key=lambda t: t[0])
    if every_steps:
        end = train_iters or 10 ** 9
        return [(s, None) for s in range(every_steps, end, every_steps)]
    return []


def timed_offsets(every=None, mtbf=None, seed=0) -> Iterator[float]:
    """Seconds from the clock start at which timed kills fire (exponential gaps for mtbf)."""
    t = 0.0
    rng = random.Random(seed)
    while True:
        t += every if every else rng.expovariate(1.0 / mtbf)
        yield t


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


def job_nodes(nodefile: Optional[str], fanout: str) -> Tuple[List[str], Optional[List[int]]]:
    """read_nodefile; without a node file (a user's own job), the hosts the scheduler gave it."""
    hosts, slots = read_nodefile(nodefile)
    if not nodefile and fanout in schedulers.names():
        asked = schedulers.get(fanout).job_hosts(os.environ)
        if asked:
            return asked, None
    return hosts, slots


# ---------------------------------------------------------------- fan-out
def killer_argv(python, tag, sig, kind: failures.FailureKind):
    """kill-ranks on one node; tag None: every rank of the batch job it runs in."""
    return [python, "-m", "restartlab.cli", "kill-ranks", *(["--tag", tag] if tag else []),
            "--signal", sig, *kind.killer_args()]


def fan_out(fanout, hosts, indices, argv, slots=None, launcher="pals", timeout=FANOUT_TIMEOUT_S) -> List[dict]:
    """Run `argv` once on each node in `indices` (in parallel); parse each JSON receipt.
    `mpiexec`: one launch over exactly those hosts, in the job's launcher's syntax."""
    if fanout == "mpiexec":  # ALCF style: one process per chosen node
        cmds = [launchers.get(launcher).fanout_argv([hosts[i] for i in indices], argv)]
    else:
        sched = schedulers.get(fanout)
        cmds = [sched.fanout_cmd(i, hosts, argv, slots) for i in indices]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    deadline = time.time() + timeout  # one deadline for all: they run in parallel
    receipts = []
    for c, p in zip(cmds, procs):
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            receipts.append({"cmd": c, "error": f"timed out after {timeout:g}s"})
            continue
        parsed = False
        for line in out.splitlines():
            try:
                receipts.append(json.loads(line))
                parsed = True
            except ValueError:
                pass
        if not parsed:
            receipts.append({"cmd": c, "error": f"rc={p.returncode}: {err.strip()[-300:]}"})
    return receipts


def describe_receipt(r: dict) -> str:
    """One line per node: what was signalled there, and which ranks."""
    if r.get("error"):
        return f"{r.get('node') or r.get('host') or r.get('cmd')}: error: {r['error']}"
    ranks = r.get("ranks") or {}
    what = ", ".join(f"{p}" + (f" ({ranks[str(p)]})" if str(p) in ranks else "") for p in r.get("pids", []))
    return f"{r.get('node')}: {r.get('signal')} {'would reach' if r.get('dry_run') else '->'} {what or 'nothing'}"


# ---------------------------------------------------------------- the loop
class Injector:
    def __init__(self, a):
        self.a = a
        self.kills = 0
        self.log_path = layout.Phase(a.phase_dir).injections if a.phase_dir else None
        self.kind = failures.get(a.kind)
        self.hosts, self.slots = job_nodes(a.nodefile, a.fanout)
        self.rng = random.Random(a.seed)
        self.striking = False   # between the first signal of a strike and its record
        self.terminated = None  # the signal that asked us to stop

    def on_terminate(self, signum, _frame):
        """SIGTERM/SIGINT: stop now, except in the middle of a strike, which is finished and
        recorded first (a strike without its record would be booked as an uninjected crash)."""
        self.terminated = signal.Signals(signum).name
        if not self.striking:
            raise SystemExit(self.done())

    def say(self, msg):
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
            newest = ckptdir.newest_complete_step(a.ckpt_dir, verify=False)
            if newest is not None and newest >= a.train_iters:
                return "training finished"
        return None

    def sleep_until(self, pred, deadline=None) -> bool:
        """Poll pred() every POLL_S; False if we must stop (or the deadline passed) first."""
        while True:
            if pred():
                return True
            if self.stop_reason() or (deadline is not None and time.time() >= deadline):
                return False
            time.sleep(POLL_S)

    def strike(self, kind, idx, sig):
        """Fan `sig` out to the nodes `idx`; (distinct processes reached, receipts)."""
        receipts = fan_out(self.a.fanout, self.hosts, idx, killer_argv(self.a.python, self.a.tag, sig, kind),
                           self.slots, self.a.launcher)
        # distinct (host, pid): two scheduler nodes on one host may both see the same rank
        return len({(r.get("host"), p) for r in receipts if not r.get("dry_run") for p in r.get("pids", [])}), receipts

    def kill(self, reason, target_step=None, kind_name=None):
        a = self.a
        kind = failures.get(kind_name) if kind_name else self.kind
        sig = a.signal or kind.signal
        idx = kind.nodes(len(self.hosts), a.node, self.rng)
        t_kill = time.time()
        newest = ckptdir.newest_complete_step(a.ckpt_dir, verify=False) if a.ckpt_dir else None
        attempts = layout.Phase(a.phase_dir).attempts() if a.phase_dir else []
        deadline = t_kill + 10
        self.striking = True
        while True:  # nothing found (between attempts): retry briefly, the target has not died
            killed, receipts = self.strike(kind, idx, sig)
            if killed or time.time() > deadline or self.stop_reason():
                break
            time.sleep(0.2)
        rec = {"time": t_kill, "reason": reason, "target_step": target_step,
               "step_seen": newest_step_seen(a.phase_dir) if a.phase_dir else None,
               "newest_complete": newest, "signal": sig, "kind": kind.name,
               "hosts": [self.hosts[i] for i in idx], "killed": killed, "receipts": receipts}
        self.record(rec)  # now: the relaunch loop books the attempt as injected when it ends
        self.striking = False
        self.kills += 1
        self.say(f"kill #{self.kills} ({reason}): {killed} process(es) on {len(idx)} node(s), "
                 f"newest complete step {newest}")
        for r in receipts:
            self.say("  " + describe_receipt(r))
        if self.terminated:
            raise SystemExit(self.done())
        if killed:
            struck = attempts[-1] if attempts else None
            more = kind.follow_up(a.grace, lambda: struck is not None and attempt.is_over(struck),
                                  lambda s: self.strike(kind, idx, s)[0])
            if more:  # a second line, "killed": 0 so that nobody counts it as another failure
                self.record(dict(more, time=time.time(), follow_up_of=t_kill, kind=kind.name, killed=0))
                self.say(f"  follow-up: {more}")
        return rec

    def record(self, rec):
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        else:  # the record is the receipt: without a phase dir it goes to stdout
            print(json.dumps(rec), flush=True)

    def run(self):
        a = self.a
        targets = step_targets(a.at_steps, a.every_steps, a.train_iters)
        if targets:
            gate = tool_options.gate_of(a.gate, step_schedule=True)
            # a chained job's injector: the steps an earlier job's injector struck are done
            done = {r.get("target_step") for r in live.read_injections(a.phase_dir) if r.get("killed")} \
                if a.phase_dir else set()
            for s, kind in targets:
                if s in done:
                    self.say(f"step {s}: struck by an earlier job of this experiment")
                    continue
                if gate == "complete":
                    ok = self.sleep_until(lambda: (ckptdir.newest_complete_step(a.ckpt_dir, verify=False) or -1) >= s)
                else:
                    ok = self.sleep_until(lambda: newest_step_seen(a.phase_dir) >= s)
                if not ok:
                    break
                self.kill(f"step {s} ({'after .complete' if gate == 'complete' else 'step seen'})", s, kind)
        else:
            if a.wait_first_complete and not self.sleep_until(
                    lambda: ckptdir.newest_complete_step(a.ckpt_dir, verify=False) is not None):
                return self.done()
            t0 = time.time()
            for off in timed_offsets(a.every, a.mtbf, a.seed):
                if self.sleep_until(lambda: False, deadline=t0 + off) is False and self.stop_reason():
                    break
                if tool_options.gate_of(a.gate, step_schedule=False) == "complete" and not self.sleep_until(
                        lambda: ckptdir.newest_complete_step(a.ckpt_dir, verify=False) is not None):
                    break
                self.kill(f"timed +{off:.1f}s ({'every' if a.every else 'mtbf'})")
        return self.done()

    def done(self):
        self.say(f"stopping: {self.stop_reason() or 'schedule exhausted'}; {self.kills} kill(s)")
        return 0


def add_args(p):
    tool_options.add_inject_args(p)


def main(a) -> int:
    if not a.tag and killer.job_id_entry() is None:
        print(f"restartlab inject: error: {killer.no_job_error()}", file=sys.stderr)
        return 2
    if a.wait_first_complete and not a.ckpt_dir:
        print("restartlab inject: error: --wait-first-complete needs --ckpt-dir", file=sys.stderr)
        return 2
    step_schedule = bool(a.at_steps or a.every_steps)
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
