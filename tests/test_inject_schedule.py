"""The injector's schedule logic on a fake clock (as tests/test_supervise.py drives the relaunch loop):
timed schedules, the step gate on `.complete`, the fuzz window that shrinks after an attempt ended
first, the strike's retry between attempts, a kind's follow-up grace, and the stops (--max-kills,
--until). Real files in a phase directory, fake seconds, no process is signalled: the strike is
the test's. tests/test_killer_inject.py has the same logic with real ranks."""
import argparse
import json
import os
import shutil

import pytest

from restartlab.contracts import ckptdir, layout, live
from restartlab.contracts.receipts import Receipt
from restartlab.runtime import inject
from restartlab.runtime.clock import Clock
from restartlab.tools import options as tool_options

T0 = 1_800_000_000.0


class World(Clock):
    """Fake time; the events scheduled with `at` happen when the clock passes their time."""

    def __init__(self):
        self.t, self.events, self.slept = T0, [], 0.0

    def time(self):
        return self.t

    def sleep(self, seconds):
        if seconds > 0:
            self.t += seconds
            self.slept += seconds
        due = sorted((e for e in self.events if e[0] <= self.t), key=lambda e: e[0])
        self.events = [e for e in self.events if e[0] > self.t]
        for _, fn in due:
            fn()

    def at(self, t, fn):
        self.events.append((T0 + t, fn))


class Injector(inject.Injector):
    """The real schedule logic; a strike reaches whatever `ranks(t)` says are there, at fake time t."""

    def __init__(self, a, world, ranks=lambda t: 1, on_strike=None):
        super().__init__(a, clock=world)
        self.world, self.ranks, self.on_strike, self.strikes = world, ranks, on_strike, []

    def strike(self, kind, idx, sig):
        n = self.ranks(self.world.t - T0)
        self.strikes.append((round(self.world.t - T0, 3), sig, n))
        if n and self.on_strike:
            self.on_strike(self.world.t - T0)
        return n, [Receipt(host="h", roots=tuple(range(n)))]

    def say(self, msg):
        self.said = getattr(self, "said", []) + [msg]


def config(tmp_path, *args):
    p = argparse.ArgumentParser()
    tool_options.add_inject_args(p)
    a = inject.Config.from_args(p.parse_args(["--tag", "t", "--fanout", "local", "--phase-dir", str(tmp_path / "p"),
                                             *args]))
    a.python = "python"
    os.makedirs(a.phase_dir, exist_ok=True)
    return a


def kills(tmp_path):
    """(fake seconds, record) of each strike that reached ranks, from the phase's injection file."""
    return [(round(r.time - T0, 3), r) for r in live.read_injections(str(tmp_path / "p")) if r.struck]


def launch(phase: layout.Phase, k: int, t: float):
    """Attempt k launched at fake time t: its directory and its launch snapshot (its mtime: the launch)."""
    att = phase.attempt(k)
    os.makedirs(att.path, exist_ok=True)
    with open(att.at_launch, "w") as f:
        f.write("{}")
    os.utime(att.at_launch, (T0 + t, T0 + t))
    return att


def end(att: layout.Attempt):
    with open(att.record, "w") as f:
        json.dump({"attempt": att.index}, f)


def complete(ckpts: str, step: int):
    d = os.path.join(ckpts, ckptdir.step_dirname(step))
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, ckptdir.COMPLETE), "w").close()


def test_a_timed_schedule_strikes_on_its_offsets_and_stops_at_max_kills(tmp_path):
    w = World()
    inj = Injector(config(tmp_path, "--every", "30s", "--max-kills", "3"), w)
    assert inj.run() == 0
    times = [t for t, _ in kills(tmp_path)]
    assert [r.gate for _, r in kills(tmp_path)] == [None] * 3  # timed: at random moments of the run
    assert len(times) == 3 and all(30 * i <= t <= 30 * i + inject.POLL_S + 1e-6 for i, t in zip((1, 2, 3), times)), times
    assert "--max-kills" in inj.said[-1] and w.slept < 91  # it stopped right after the third


def test_until_stops_the_schedule_between_strikes(tmp_path):
    w = World()
    a = config(tmp_path, "--every", "10s", "--until", str(tmp_path / "p" / "done"))
    w.at(25, lambda: open(a.until, "w").close())
    inj = Injector(a, w)
    inj.run()
    assert [round(t) for t, _ in kills(tmp_path)] == [10, 20] and "done exists" in inj.said[-1]


def test_a_step_schedule_gated_on_complete_strikes_once_each_checkpoint_is_complete(tmp_path):
    w = World()
    ckpts = str(tmp_path / "ckpts")
    os.makedirs(ckpts)
    a = config(tmp_path, "--at-steps", "10,20", "--gate", "complete", "--ckpt-dir", ckpts, "--train-iters", "100")
    w.at(5, lambda: complete(ckpts, 10))
    w.at(17.5, lambda: complete(ckpts, 20))
    inj = Injector(a, w)
    inj.run()
    got = kills(tmp_path)
    assert [r.target_step for _, r in got] == [10, 20] and [r.newest_complete for _, r in got] == [10, 20]
    assert [r.gate for _, r in got] == ["complete", "complete"]  # the report says such kills land just after a save
    assert 5 <= got[0][0] <= 5 + inject.POLL_S + 1e-6 and 17.5 <= got[1][0] <= 17.5 + inject.POLL_S + 1e-6, got


def test_a_strike_between_attempts_retries_until_the_relaunched_ranks_are_there(tmp_path):
    """The schedule's moment falls between two attempts, so there is no rank to signal.

    The strike retries every 0.2 s, up to 10 s. The record is of the strike that reached the new
    attempt's ranks."""
    w = World()
    inj = Injector(config(tmp_path, "--every", "30s", "--max-kills", "1"), w, ranks=lambda t: 2 if t >= 33 else 0)
    inj.run()
    (t, rec), = kills(tmp_path)
    assert t == pytest.approx(30, abs=inject.POLL_S + 1e-6) and rec.killed == 2  # the record's time: when it began
    assert [n for _, _, n in inj.strikes] == [0] * (len(inj.strikes) - 1) + [2]
    assert inj.strikes[-1][0] == pytest.approx(33, abs=0.21)


def test_a_strike_that_reaches_the_relaunch_is_booked_to_the_relaunch(tmp_path):
    """At the strike (t=30) attempt 1's ranks are dead, but its record comes only at 31: the
    supervisor tears the attempt down first. Attempt 2 launches at 31.5, its ranks there at 32. The
    retries reach attempt 2's ranks, and the record says attempt 2. A preemption's KILL then waits on
    attempt 2's end, not attempt 1's. Mutation: the attempt taken once, before the retries -> the
    record says attempt 1 (two strikes on it, and attempt 2's death reads as a crash nobody caused),
    and the KILL is never sent."""
    phase = layout.Phase(str(tmp_path / "p"))
    for kind, signals in (("kill", ["KILL"]), ("preempt", ["TERM", "KILL"])):
        shutil.rmtree(phase.path, ignore_errors=True)
        w = World()
        a1 = launch(phase, 1, 0)
        w.at(31, lambda: end(a1))
        w.at(31.5, lambda: launch(phase, 2, 31.5))
        inj = Injector(config(tmp_path, "--every", "30s", "--max-kills", "1", "--kind", kind, "--grace", "20s"), w,
                       ranks=lambda t: 0 if 29 <= t < 32 else 2)
        inj.run()
        (t, rec), = kills(tmp_path)
        assert rec.attempt == 2 and rec.killed == 2, rec
        assert [s for _, s, n in inj.strikes if n] == signals, inj.strikes


def test_a_strike_that_never_finds_ranks_gives_up_after_ten_seconds(tmp_path):
    w = World()
    inj = Injector(config(tmp_path, "--every", "30s", "--max-kills", "1"), w, ranks=lambda t: 0)
    inj.run()
    recs = live.read_injections(str(tmp_path / "p"))
    assert len(recs) == 1 and recs[0].killed == 0 and not kills(tmp_path)  # said, not booked as a failure
    assert inj.strikes[-1][0] == pytest.approx(40, abs=0.21)


def test_a_preemption_escalates_after_its_grace_unless_the_attempt_ended(tmp_path):
    """failures.kind preempt: TERM, then KILL when the attempt has not ended within the grace.

    The grace is 20 fake seconds, with no real wait. The follow-up is a line of its own that counts
    as no failure."""
    phase = layout.Phase(str(tmp_path / "p"))
    for ends_at, escalated in ((None, 1), (8, 0)):
        w = World()
        att = launch(phase, 1, 0)
        if os.path.exists(att.record):
            os.unlink(att.record)
        os.unlink(phase.injections) if os.path.exists(phase.injections) else None
        if ends_at is not None:
            w.at(30 + ends_at, lambda: end(att))
        inj = Injector(config(tmp_path, "--every", "30s", "--max-kills", "1", "--kind", "preempt", "--grace", "20s"), w)
        inj.run()
        recs = live.read_injections(phase.path)
        assert [r.killed > 0 for r in recs] == [True, False] and recs[0].signal == "TERM"
        assert recs[1].extra == {"grace": 20.0, "escalated": escalated} and recs[1].follow_up_of == recs[0].time
        assert [s for _, s, _ in inj.strikes] == (["TERM", "KILL"] if escalated else ["TERM"])
        if escalated:
            assert inj.strikes[-1][0] == pytest.approx(50, abs=0.21)


def test_a_preemption_whose_attempt_ends_after_the_last_poll_is_not_escalated():
    """The attempt ends after the last 0.2 s poll but by the grace's end, and its relaunch follows
    at once: a KILL then would hit the relaunch. The follow-up looks once more at the deadline and
    sends none. Mutation: KILL at the deadline without that look -> escalated 1."""
    from restartlab import failures
    w = World()
    w.t = 0.0
    kills = []
    got = failures.get("preempt").follow_up(0.3, lambda: w.time() >= 0.3, lambda s: kills.append(s) or 2, w)
    assert got == {"grace": 0.3, "escalated": 0} and kills == [], (got, kills)
    got = failures.get("preempt").follow_up(0.3, lambda: False, lambda s: kills.append(s) or 2, w)
    assert got == {"grace": 0.3, "escalated": 2} and kills == ["KILL"], (got, kills)


def test_the_fuzz_window_shrinks_after_an_attempt_ends_before_its_kill(tmp_path):
    """--fuzz: one kill per attempt, at a random moment within --fuzz-window of its launch.

    An attempt that ends before its kill makes the next window half what it lived.
    The next kill lands in that window."""
    w = World()
    phase = layout.Phase(str(tmp_path / "p"))
    ckpts = str(tmp_path / "ckpts")
    os.makedirs(ckpts)
    a = config(tmp_path, "--fuzz", "2", "--fuzz-window", "50s", "--fuzz-save-share", "0", "--seed", "3",
               "--ckpt-dir", ckpts)
    delay = __import__("random").Random(3).uniform(0, 50)
    assert delay > 4  # (the seed's first delay: the attempt below ends before it)
    att1 = launch(phase, 1, 0)
    w.at(4, lambda: end(att1))                  # attempt 1 ends by itself at 4 s
    w.at(6, lambda: launch(phase, 2, 6))        # attempt 2 at 6 s: struck within 2 s (4 / 2) of its launch
    state = {"k": 2}

    def relaunch(t):  # each strike ends its attempt; the next one starts a second later
        att = phase.attempt(state["k"])
        end(att)
        state["k"] += 1
        w.at(t + 1, lambda k=state["k"], t=t: launch(phase, k, t + 1))
    inj = Injector(a, w, on_strike=relaunch)
    inj.run()
    got = kills(tmp_path)
    # it noticed the end at its next look (4 s + up to POLL_S): the window is half of that
    said = [m for m in inj.said if "ended before the kill" in m]
    window = float(said[0].split("struck within ")[1].split("s ")[0]) if len(said) == 1 else None
    assert window is not None and 2.0 <= window <= 2.0 + inject.POLL_S / 2 + 0.01, inj.said
    assert got[0][1].attempt == 2 and 6 <= got[0][0] <= 6 + window + inject.POLL_S, got
    assert got[1][1].attempt == 3 and got[1][0] - got[0][0] - 1 <= window + inject.POLL_S, got  # it stays that small
    assert w.slept < 20


def test_a_step_schedule_with_no_step_to_strike_says_so_and_strikes_nothing(tmp_path):
    """--every-steps at --train-iters leaves no step: the injector says so and ends.

    The type checker found this (#64.3). The injector took it for a timed schedule with no time
    given, and died of a TypeError."""
    w = World()
    a = config(tmp_path, "--every-steps", "100", "--train-iters", "100", "--gate", "none")
    inj = Injector(a, w)
    assert inj.run() == 0 and kills(tmp_path) == []
    assert any("no step to strike" in s for s in inj.said), inj.said


def test_a_step_schedule_without_its_phase_dir_is_refused_unless_gated_on_complete(tmp_path):
    """A step schedule gated on the step seen needs --phase-dir; one gated on .complete does not.

    The steps are read from the phase's metrics. Without --phase-dir, a step schedule gated on the
    step seen once died of a TypeError at its first wait. The type checker found this (#64.3).
    It is now refused up front. Gated on .complete (the default), --ckpt-dir is enough, as
    docs/how-it-runs.md shows it. Review found that my first fix refused that too."""
    import subprocess
    import sys
    base = [sys.executable, "-m", "restartlab.cli", "inject", "--at-steps", "5", "--tag", "t", "--fanout", "local"]
    r = subprocess.run(base + ["--gate", "none"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "a step schedule with --gate none needs --phase-dir" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    (tmp_path / "done").write_text("")
    r = subprocess.run(base + ["--ckpt-dir", str(tmp_path), "--until", str(tmp_path / "done")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "stopping" in r.stdout + r.stderr, r.stdout + r.stderr
