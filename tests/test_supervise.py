"""The supervisor's decisions, with a fake clock and fake attempts (no processes, no sleeping):
relaunch, budget, backoff, exit_no_checkpoint, the hang and start-up watchdog, the walltime
margin, node checks, teardown, the injector's lifetime, chained numbering. Real files: each
attempt's record and markers are written where the collector reads them. The end-to-end runs
with real ranks are in test_collect, test_failure_kinds, test_nodes and test_slurm."""
import contextlib
import io
import json
import os
import signal

import pytest

from restartlab.runtime import attempt_record as attempt, supervise
from restartlab.tools import options as tool_options
from restartlab.contracts import attempts, layout
from restartlab.runtime.supervise import Config, Supervisor
from restartlab.tools.launch import LaunchSpec

LAUNCH = '{"python": "python"}'  # --launch: one rank of `python`'s program under Hydra
from restartlab.contracts.exits import EXIT_NO_CHECKPOINT, EXIT_PREEMPTED
from restartlab.contracts.rank_exit import RankExit

ITERS = 20


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t
        self.sleeps = []

    def time(self):
        return self.t

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += max(0.0, s)


class FakeAttempt:
    """A scripted attempt. It exits `rc` after `runs` seconds (None: never, unless signalled).
    It writes a metrics row every `step_every` seconds until `stalls_at`, then nothing more.
    It logs its final row when it completes (rc 0)."""

    def __init__(self, rc=0, runs=10.0, step_every=1.0, stalls_at=None, first_step_at=0.5,
                 on_term=143, term_delay=0.5, rank_fails_at=None):
        self.rc, self.runs, self.step_every, self.stalls_at = rc, runs, step_every, stalls_at
        self.rank_fails_at = rank_fails_at  # one rank's exit record says it ended with exit 1 then
        self.first_step_at, self.on_term, self.term_delay = first_step_at, on_term, term_delay
        self.signals = []
        self.exit_at = None

    def start(self, clock, att):
        self.clock, self.att, self.t0 = clock, att, clock.t
        self.exit_at = None if self.runs is None else self.t0 + self.runs
        self.pid = 4242

    # -- what Procs asks of it
    def activity(self):
        now = self.clock.t
        end = min(x for x in (now, self.exit_at, self.stalls_at and self.t0 + self.stalls_at) if x is not None)
        return self.t0 + 0.01 if end < self.t0 + self.first_step_at else end

    def failed_rank(self):
        if self.rank_fails_at is None or self.clock.t < self.t0 + self.rank_fails_at:
            return None
        return RankExit("0", "h0", 4243, 1, None, self.t0 + self.rank_fails_at)

    def stepped(self):
        return self.clock.t >= self.t0 + self.first_step_at and (
            self.stalls_at is None or self.stalls_at >= self.first_step_at)

    # -- the Launched interface
    def wait(self, timeout):
        if self.clock.t > self.t0 + 10 ** 5:  # a decision that never ends an attempt fails, not hangs
            raise AssertionError("the attempt has run 10^5 fake seconds: nothing ended it")
        if self.exit_at is None:
            if timeout is None:
                raise AssertionError("the supervisor waits forever on an attempt that never exits")
            self.clock.t += timeout
            return None
        if timeout is None or self.exit_at <= self.clock.t + timeout:
            self.clock.t = max(self.clock.t, self.exit_at)
            self._finish()
            return self.rc
        self.clock.t += timeout
        return None

    def _finish(self):
        if self.rc == 0 and not getattr(self, "_wrote", False):
            self._wrote = True
            with open(self.att.metrics(0), "a") as f:
                f.write(json.dumps({"timestamp": self.clock.t, "rank": 0,
                                    "metrics": {"train/iter": ITERS, "train/params_crc": 7}}) + "\n")

    def signal(self, sig):
        self.signals.append(sig)
        if sig == signal.SIGKILL:
            self.rc, self.exit_at = 137, self.clock.t
        elif sig == signal.SIGTERM and self.on_term is not None and (
                self.exit_at is None or self.exit_at > self.clock.t + self.term_delay):
            self.rc, self.exit_at = self.on_term, self.clock.t + self.term_delay

    def ranks_signalled(self, sig):
        """The ranks got `sig` from a teardown (the walltime warning's TERM: emergency checkpoint)."""
        if sig == "TERM" and self.on_term is not None:
            self.rc, self.exit_at = EXIT_PREEMPTED, self.clock.t + self.term_delay


class FakeProcs:
    def __init__(self, clock, attempts, on_path=True, nodes=None):
        self.clock, self.queue, self.on_path, self.nodes = clock, list(attempts), on_path, nodes
        self.launched, self.teardowns, self.events, self.argvs, self.envs = [], [], [], [], []
        self.injector = None

    def which(self, exe):
        return self.on_path

    cannot_run = None  # preflight's answer (None: the program can run)

    def preflight(self, argv):
        return self.cannot_run

    pool_why = None      # start_pool's answer (None: the pool serves)
    pool_dies_at = None  # the attempt from which launch_argv finds the pool gone

    def start_pool(self, phase):
        self.events.append(("start_pool",))
        return self.pool_why

    def launch_argv(self, launch, attempt_dir, wait=True):
        k = len(self.launched) + 1
        self.events.append(("launch_argv", k, wait))
        argv = launch.cold_argv(attempt_dir)
        if self.pool_dies_at is not None and k >= self.pool_dies_at:
            note, self.pool_dies_at = (("the standby pool exited", True) if k == self.pool_dies_at else None), 10**9
            return argv, note
        return argv, None

    def warm_ranks(self, k):
        return None

    def stop_pool(self):
        if ("start_pool",) in self.events:
            self.events.append(("stop_pool",))

    def free_port(self):
        return 29500 + len(self.launched)

    def launch(self, argv, att, env):
        a = self.queue.pop(0)
        a.start(self.clock, att)
        self.launched.append(a)
        self.argvs.append(argv)
        self.envs.append(env)
        self.events.append(("launch", att.index, self.clock.t))
        return a

    unreachable = ()  # each teardown's unreachable nodes, in turn (then none)
    answers = ()      # answering(): each call's nodes that answer, in turn (then all of them)

    def teardown(self, att, sig="KILL"):
        self.teardowns.append((att.index, sig))
        self.events.append(("teardown", att.index, sig))
        if self.launched:
            self.launched[-1].ranks_signalled(sig)
        lost, self.unreachable = list(self.unreachable[:1]), list(self.unreachable[1:])
        return lost[0] if lost else []

    def answering(self, names):
        self.events.append(("answering", tuple(names), self.clock.t))
        answers = list(self.answers)
        back = answers.pop(0) if answers else names
        self.answers = answers
        return [n for n in names if n in back]

    def dump_stacks(self, att):
        self.events.append(("stacks", att.index))

    def finish(self, att, rc):
        self.events.append(("finish", att.index, rc))

    def last_activity(self, att):
        return self.launched[-1].activity()

    def has_stepped(self, att):
        return self.launched[-1].stepped()

    def failed_rank(self, att):
        return self.launched[-1].failed_rank()

    def node_check(self, phase, k):
        n = self.nodes.pop(0)
        if n is not None:
            with open(self.hosts_file, "w") as f:
                f.writelines(f"h{i}\n" for i in range(n))
        self.events.append(("node_check", k, n))
        return n

    def hosts(self):
        return ["h0", "h1", "h2"]

    def start_injector(self, phase):
        self.events.append(("injector_start",))

    def stop_injector(self, grace=5.0):
        self.events.append(("injector_stop", os.path.exists(layout.Phase(self.phase_dir).done)))


def make(tmp_path, attempts, **kw):
    clock = FakeClock()
    phase_dir = str(tmp_path / "expt" / "sync")
    os.makedirs(phase_dir, exist_ok=True)
    on_path, nodes = kw.pop("on_path", True), kw.pop("nodes", None)
    launch = LaunchSpec(python="python", launcher="hydra", nodes=3, ranks_per_node=kw.pop("ranks_per_node", 1),
                        env={"RESTARTLAB_JOB_TAG": "T"})
    cfg = Config(phase="sync", phase_dir=phase_dir, tag="T", argv=["train", "--outdir", "{attempt_dir}"],
                 launch=launch.to_json(), train_iters=ITERS, **kw)
    procs = FakeProcs(clock, attempts, on_path, nodes)
    procs.phase_dir, procs.hosts_file = phase_dir, kw.get("hosts_file")
    sup = Supervisor(cfg, clock=clock, procs=procs, out=open(os.devnull, "w"))
    return sup, procs, clock, layout.Phase(phase_dir)


def records(phase):
    return [json.load(open(a.record)) for a in phase.attempts()]


def test_first_attempt_completes(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=0, runs=10)])
    assert sup.run() == supervise.EXIT_OK
    assert os.path.exists(phase.completed) and os.path.exists(phase.done)
    [r] = records(phase)
    assert r["completed"] and r["exit_code"] == 0 and r["end_ts"] - r["launch_ts"] == pytest.approx(10)
    assert procs.teardowns == []  # nothing to tear down after a clean exit


def test_relaunch_after_a_failure_until_completed(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                    backoff=3.0)
    assert sup.run() == supervise.EXIT_OK
    r = records(phase)
    assert [x["exit_code"] for x in r] == [137, 0] and [x["completed"] for x in r] == [False, True]
    assert procs.teardowns == [(1, "KILL")]  # what is left of the failed attempt, before the relaunch
    assert clock.sleeps == [3.0]             # the backoff, between the attempts
    assert r[1]["launch_ts"] - r[0]["end_ts"] == pytest.approx(3.0)
    assert procs.envs[0]["MASTER_PORT"] != procs.envs[1]["MASTER_PORT"]  # a fresh rendezvous port
    assert procs.envs[1]["RESTARTLAB_ATTEMPT"] == "2"


def test_budget_used_up(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=1, runs=2) for _ in range(3)],
                                    max_attempts=3, backoff=1.0)
    assert sup.run() == supervise.EXIT_BUDGET
    assert len(procs.launched) == 3
    assert clock.sleeps == [1.0, 1.0]  # no backoff after the last attempt
    assert not os.path.exists(phase.completed) and os.path.exists(phase.done)


def test_no_loadable_checkpoint_stops_relaunching(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=EXIT_NO_CHECKPOINT, runs=2), FakeAttempt()],
                                    max_attempts=5)
    assert sup.run() == supervise.EXIT_FAILED
    assert len(procs.launched) == 1


def test_watchdog_stops_a_hung_attempt(tmp_path):
    # steps for 30 s, then nothing (a stopped rank): stopped hang_timeout after its last row
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=0, runs=None, stalls_at=30), FakeAttempt(runs=5)],
                                    hang_timeout=60, startup_timeout=600, tick=1.0)
    assert sup.run() == supervise.EXIT_OK
    first = records(phase)[0]
    assert first["hang"] and not first["completed"]
    assert 90 <= first["end_ts"] - first["launch_ts"] <= 92.5  # 30 s of steps + 60 s of silence (+ a tick + TERM)
    assert procs.launched[0].signals == [signal.SIGTERM]
    assert (1, "KILL") in procs.teardowns
    # first the ranks are asked for their stacks (into the attempt's output), then killed
    ev = [e for e in procs.events if e[0] in ("stacks", "teardown")]
    assert ev[:2] == [("stacks", 1), ("teardown", 1, "KILL")], ev


def test_a_rank_that_ended_badly_stops_its_waiting_peers_after_the_grace(tmp_path):
    """One rank's exit record says exit 1 at 3 s while the launch runs on.
    Its peers wait for it: Hydra ends them only when a rank dies by a signal. The attempt is
    stopped rank_exit_grace after the loop saw it (stacks first, then the KILL). That is long
    before the start-up watchdog, and it is not booked as a hang. The relaunch completes."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=None, first_step_at=10 ** 6, rank_fails_at=3),
                                               FakeAttempt(runs=5)],
                                    rank_exit_grace=20, startup_timeout=1200, tick=1.0)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert sup.run() == supervise.EXIT_OK
    first = records(phase)[0]
    assert not first["hang"] and not first["completed"]
    assert 23 <= first["end_ts"] - first["launch_ts"] <= 25.5  # 3 s + the 20 s grace (+ a tick + TERM)
    ev = [e for e in procs.events if e[0] in ("stacks", "teardown")]
    assert ev[:2] == [("stacks", 1), ("teardown", 1, "KILL")], ev
    assert "rank 0 on h0 ended (exit 1) and the others still run 20s later: stopping the attempt" in err.getvalue()


@pytest.mark.parametrize("why", ["off", "walltime"])
def test_no_grace_when_off_or_after_the_walltime_warning(tmp_path, why):
    """rank_exit_grace 0 leaves a rank's bad end to the watchdogs.
    After the walltime warning the ranks' emergency checkpoint has the margin's time. So a rank
    that exits 5 first stops nobody."""
    kw = dict(rank_exit_grace=0) if why == "off" else dict(rank_exit_grace=5, walltime_margin=60, stop_at=1000.0 + 2)
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=40, on_term=None, rank_fails_at=3), FakeAttempt(runs=5)],
                                    startup_timeout=1200, tick=1.0, **kw)
    sup.run()
    first = records(phase)[0]
    assert first["end_ts"] - first["launch_ts"] == pytest.approx(40, abs=1.01)  # it ran to its own end
    assert ("stacks", 1) not in procs.events


def test_watchdog_kills_a_launcher_deaf_to_term(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=None, stalls_at=5, on_term=None), FakeAttempt(runs=5)],
                                    hang_timeout=10, tick=1.0)
    assert sup.run() == supervise.EXIT_OK
    assert procs.launched[0].signals == [signal.SIGTERM, signal.SIGKILL]
    first = records(phase)[0]
    assert first["exit_code"] == 137
    assert first["end_ts"] - first["launch_ts"] == pytest.approx(5 + 10 + 1 + supervise.STOP_GRACE_S, abs=1.01)


def test_startup_timeout_before_the_first_step(tmp_path):
    # no step yet: hang_timeout (10 s) does not apply, startup_timeout (100 s) does
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=None, first_step_at=10 ** 6), FakeAttempt(runs=5)],
                                    hang_timeout=10, startup_timeout=100, tick=1.0)
    assert sup.run() == supervise.EXIT_OK
    first = records(phase)[0]
    assert first["hang"] and 100 <= first["end_ts"] - first["launch_ts"] <= 102.5


def test_a_slow_start_is_not_a_hang(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=0, runs=80, first_step_at=70)],
                                    hang_timeout=10, startup_timeout=100, tick=1.0)
    assert sup.run() == supervise.EXIT_OK
    assert not records(phase)[0]["hang"]


def test_walltime_margin_during_an_attempt(tmp_path):
    # the margin starts 50 s in: the ranks get the preemption signal, checkpoint, exit 5; no relaunch
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=0, runs=None), FakeAttempt()],
                                    stop_at=1050.0, preempt_signal="TERM", tick=1.0, hang_timeout=1000)
    assert sup.run() == supervise.EXIT_WALLTIME
    assert len(procs.launched) == 1
    r = records(phase)[0]
    assert r["walltime"] and r["preempted"] and r["exit_code"] == EXIT_PREEMPTED
    assert (1, "TERM") in procs.teardowns
    assert not os.path.exists(phase.completed)


def test_walltime_stop_on_the_last_allowed_attempt_is_a_walltime_stop(tmp_path):
    # the budget is used up too, but the attempt stopped for the walltime: exit 5 (a chain
    # continues it), not the budget's 6
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=0, runs=None)], max_attempts=1,
                                    stop_at=1050.0, tick=1.0, hang_timeout=1000)
    assert sup.run() == supervise.EXIT_WALLTIME


def test_walltime_margin_reached_before_a_relaunch(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=5), FakeAttempt()],
                                    stop_at=1004.0, backoff=0.0, tick=10.0)
    assert sup.run() == supervise.EXIT_WALLTIME
    assert len(procs.launched) == 1  # the first attempt ran past the stop; nothing launched after it
    # Nor prepared: no node check, no wait for the pools.
    assert [e for e in procs.events if e[0] == "launch_argv"] == [("launch_argv", 1, False)], procs.events


def test_no_phase_starts_past_the_walltime_margin(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt()], stop_at=900.0)
    assert sup.run() == supervise.EXIT_WALLTIME
    assert procs.launched == [] and procs.events == []


def test_a_phase_completed_by_an_earlier_job_is_not_run(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt()])
    open(phase.completed, "w").close()
    assert sup.run() == supervise.EXIT_OK and procs.launched == []


def test_a_chained_job_goes_on_numbering(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=3)])
    for k in (1, 2):
        os.makedirs(phase.attempt(k).path)
    assert sup.run() == supervise.EXIT_OK
    assert [a.index for a in phase.attempts()] == [1, 2, 3] and os.path.exists(phase.attempt(3).record)


def test_launcher_not_on_path(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt()], on_path=False)
    assert sup.run() == supervise.EXIT_FAILED and procs.launched == []


def test_a_program_that_cannot_run_spends_no_attempt_and_says_why_once(tmp_path, capsys):
    """The adapter's preflight answers before the first launch.
    ezpz's preflight finds it not installed, a flag it does not take, or a scheduler it would
    mistake. There is no attempt, no injector, and one line. The phase's end record carries the
    reason for the report."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt()], inject={"every": 5.0})
    procs.cannot_run = "ezpz is not installed for /usr/bin/python3"
    assert sup.run() == supervise.EXIT_FAILED and procs.launched == [] and procs.events == []
    assert capsys.readouterr().err.count("ezpz is not installed") == 1 and phase.attempts() == []
    end = attempts.phase_end(phase)
    assert end.how == "cannot_run" and end.text == "not started: ezpz is not installed for /usr/bin/python3"


def test_injector_lives_as_long_as_the_phase(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=3), FakeAttempt(runs=3)], inject={"every": 5.0})
    assert sup.run() == supervise.EXIT_OK
    kinds = [e[0] for e in procs.events]
    assert kinds[0] == "injector_start" and kinds[-1] == "injector_stop"
    assert procs.events[-1][1] is True  # the done marker is there before the injector is stopped


def test_warm_pool_that_cannot_start_is_said_once_and_stopped_with_the_phase(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=3), FakeAttempt(runs=3)], warm=True)
    procs.pool_why = "the standby pool did not start (boom)"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert sup.run() == supervise.EXIT_OK
    assert err.getvalue().count("boom") == 1 and "cold launches" in err.getvalue()
    assert procs.events[0] == ("start_pool",) and procs.events[-1] == ("stop_pool",)


def test_warm_pool_lost_mid_phase_is_said_once(tmp_path):
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=3), FakeAttempt(rc=137, runs=3),
                                               FakeAttempt(runs=3)], warm=True)
    procs.pool_dies_at = 2
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert sup.run() == supervise.EXIT_OK
    assert err.getvalue().count("standby pool exited") == 1 and "cold launches from attempt 2" in err.getvalue()
    # the phase's first launch does not wait for the pool (it starts cold beside it); relaunches do
    assert [e[2] for e in procs.events if e[0] == "launch_argv"] == [False, True, True]


def test_node_check_before_each_attempt_shrinks_the_launch(tmp_path):
    hosts = layout.Expt(str(tmp_path / "expt")).hosts_attempt
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=3), FakeAttempt(runs=3)], nodes=[3, 2],
                                    node_check={}, node_policy="shrink", hosts_file=hosts,
                                    ranks_per_node=4)
    assert sup.run() == supervise.EXIT_OK
    assert [a[:4] for a in procs.argvs] == [["mpiexec", "-n", "12", "-ppn"], ["mpiexec", "-n", "8", "-ppn"]]
    # the spec's fields changed, nothing else: the program (its attempt's directory filled in) through the recorder
    for k, argv in enumerate(procs.argvs, 1):
        assert argv[-6:] == ["--dir", phase.attempt(k).path, "--", "train", "--outdir", phase.attempt(k).path]
    assert [r["ranks"] for r in records(phase)] == [12, 8]
    assert open(phase.attempt(2).hosts).read() == "h0\nh1\n"


def test_too_few_healthy_nodes_fails_the_phase(tmp_path):
    hosts = layout.Expt(str(tmp_path / "expt")).hosts_attempt
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=3), FakeAttempt()], nodes=[2, None],
                                    node_check={}, node_policy="spares", hosts_file=hosts)
    assert sup.run() == supervise.EXIT_FAILED
    assert len(procs.launched) == 1


def test_config_comes_from_the_option_table():
    import argparse
    p = supervise.build_parser(argparse.ArgumentParser())
    a = p.parse_args(["--phase", "p", "--phase-dir", "d", "--tag", "t", "--hang-timeout", "5m", "--launch", LAUNCH,
                      "--", "x"])
    cfg = Config.from_args(a, ["x"])
    assert cfg.hang_timeout == 300 and cfg.max_attempts == 10 and cfg.argv == ["x"]
    assert cfg.inject is None and cfg.node_check is None
    assert cfg.launch_spec == LaunchSpec(python="python", program=("x",)) and cfg.launcher == "hydra"


@pytest.mark.parametrize("bad, why", [
    ("{", "--launch: not JSON"), ('{"launcher": "hydra"}', "'python' (the ranks' interpreter) is required"),
    ('{"python": "p", "nodes": 0}', "'nodes' must be at least 1"),
    ('{"python": "p", "ranks_per_node": "2"}', "'ranks_per_node' must be a JSON int"),
    ('{"python": "p", "hosts": "h"}', "unknown key(s) hosts"),
    ('{"python": "p", "launcher": "torchrun"}', "'launcher': 'torchrun' is not one of"),
    ('{"python": "p", "launcher": "srun", "env": {"A": "1,2"}}', "srun --export cannot carry a comma"),
])
def test_a_bad_launch_spec_is_refused_with_its_key(tmp_path, capsys, bad, why):
    import argparse
    p = supervise.build_parser(argparse.ArgumentParser())
    a = p.parse_args(["--phase", "p", "--phase-dir", str(tmp_path), "--tag", "t", "--launch", bad, "--", "x"])
    assert supervise.main(a) == supervise.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("restartlab supervise: error: --launch: ") and why in err and "Traceback" not in err, err
    assert not os.listdir(tmp_path)


def test_the_injector_and_node_check_flags_are_their_tools_own(tmp_path, capsys):
    """--inject-* and --node-check-* are the injector's and node-check's options under the supervisor's name.
    Their tables parse and check them when the supervisor starts. They are passed on as a list,
    never one string parsed again. The supervisor adds where the phase and its ranks are."""
    import argparse
    p = supervise.build_parser(argparse.ArgumentParser())
    a = p.parse_args(["--phase", "p", "--phase-dir", str(tmp_path), "--tag", "t", "--ckpt-dir", "c",
                      "--inject", "--inject-at-steps", "5,9:hang", "--inject-grace", "2m", "--inject-signal", "USR1",
                      "--node-check", "--node-check-timeout", "45s", "--node-check-need", "3", "--hosts-file", "h",
                      "--launch", LAUNCH, "--", "x"])
    cfg = Config.from_args(a, ["x"])
    assert cfg.node_check["timeout"] == 45 and cfg.node_check["need"] == 3 and "policy" not in cfg.node_check
    argv = supervise.inject_argv(cfg, layout.Phase(str(tmp_path)))
    inj = argparse.ArgumentParser()
    tool_options.add_inject_args(inj)
    i = inj.parse_args(argv)
    assert (i.at_steps, i.grace, i.signal, i.tag, i.ckpt_dir) == ([(5, None), (9, "hang")], 120, "USR1", "t", "c")
    assert i.until == layout.Phase(str(tmp_path)).done and i.phase_dir == str(tmp_path)
    for bad, why in ((["--inject-at-steps", "0"], "expected STEP"), (["--inject-grace", "0s"], "must be > 0"),
                     (["--node-check-timeout", "0s"], "must be > 0")):
        with pytest.raises(SystemExit):
            p.parse_args(["--phase", "p", "--phase-dir", "d", "--tag", "t", "--launch", LAUNCH, *bad, "--", "x"])
        assert why in capsys.readouterr().err, bad


def test_an_inject_without_a_schedule_is_refused_before_the_phase(tmp_path, capsys):
    import argparse
    p = supervise.build_parser(argparse.ArgumentParser())
    a = p.parse_args(["--phase", "p", "--phase-dir", str(tmp_path), "--tag", "t", "--inject", "--inject-grace", "5s",
                      "--launch", LAUNCH, "--", "x"])
    assert supervise.main(a) == supervise.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--inject: one of the arguments --every --at-steps --every-steps --mtbf --fuzz is required" in err, err
    assert not os.listdir(tmp_path)  # no attempt, no injector


def test_a_signal_mid_attempt_stops_it_records_it_and_stops_the_injector(tmp_path):
    """SIGTERM from the scheduler while an attempt runs (forced here from inside the watchdog's look).
    The launcher gets TERM, and the attempt is recorded with its exit status. The done marker is
    written and the injector stopped. The signal goes on up to the verb (exit 130)."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=None)], inject={"every": 5.0}, tick=1.0)
    real = procs.last_activity

    def interrupted(att):
        if clock.t > 1003:
            raise supervise.Interrupted(signal.SIGTERM)
        return real(att)
    procs.last_activity = interrupted
    with pytest.raises(supervise.Interrupted):
        sup.run()
    assert procs.launched[0].signals == [signal.SIGTERM]
    [r] = records(phase)
    assert r["exit_code"] == 143 and not r["completed"]
    assert procs.events[-1] == ("injector_stop", True) and not os.path.exists(phase.completed)


def test_the_walltime_margin_reached_while_the_pools_preload_launches_nothing(tmp_path):
    """A relaunch waits for the warm pools (up to relaunch.startup_timeout). When the walltime margin
    passes during that wait, nothing is launched: the phase stops with exit 5, attempt 2 neither
    launched nor left as an empty directory. Mutation: no check after the wait -> attempt 2 launches
    past the margin."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)], warm=True,
                                    stop_at=1000.0 + 60, walltime_margin=0)
    real = procs.launch_argv

    def slow_pools(launch, attempt_dir, wait=True):
        if wait:  # the relaunch: the pools take 120 s to serve
            clock.t += 120
        return real(launch, attempt_dir, wait)
    procs.launch_argv = slow_pools
    assert sup.run() == supervise.EXIT_WALLTIME
    assert len(procs.launched) == 1 and [a.index for a in phase.attempts()] == [1]
    end = attempts.phase_end(phase)
    assert end.how == attempts.PhaseEnd.WALLTIME and end.attempt == 1, end


def test_a_second_signal_does_not_cut_the_first_ones_stop_short(tmp_path):
    """PBS sends SIGTERM to every process of the job, and the job script's trap passes its own TERM
    on to the supervisor: two TERMs within milliseconds. Here the second comes while the first one's
    stop waits for the launcher, and a third while the injector is stopped. The attempt is still
    recorded, and the injector and the pool are still stopped. Mutation: every signal raises -> the
    second escapes the stop, and the attempt has no record."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(runs=None)], inject={"every": 5.0}, warm=True, tick=1.0)
    real_activity, real_stop = procs.last_activity, procs.stop_injector

    def activity(att):
        if clock.t > 1003:
            sup.interrupts.on_signal(signal.SIGTERM)
        return real_activity(att)

    def stop_injector(grace=5.0):
        sup.interrupts.on_signal(signal.SIGTERM)
        real_stop(grace)
    procs.last_activity, procs.stop_injector = activity, stop_injector
    attempt = procs.queue[0]
    real_signal = attempt.signal

    def signalled(sig):  # the second TERM arrives while the stop waits for the launcher
        real_signal(sig)
        sup.interrupts.on_signal(signal.SIGTERM)
    attempt.signal = signalled
    with pytest.raises(supervise.Interrupted):
        sup.run()
    [r] = records(phase)
    assert r["exit_code"] == 143 and not r["completed"]
    assert ("injector_stop", True) in procs.events and procs.events[-1] == ("stop_pool",), procs.events


def test_a_signal_while_a_failed_attempt_is_drained_raises_once_it_is_recorded(tmp_path):
    """A TERM comes while a failed attempt's output is drained (up to 5 s). It waits until the drain
    and the record are done, then stops the phase. So the report gets the attempt's own end (exit 1),
    not only "interrupted". The teardown before is not held: on a node that does not answer it can
    outlast PBS's kill_delay. Mutation: no held() section -> the raise leaves attempt 1 without its
    record."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=1, runs=5), FakeAttempt(rc=0, runs=5)])
    real = procs.finish

    def finish(att, rc):
        sup.interrupts.on_signal(signal.SIGTERM)
        return real(att, rc)
    procs.finish = finish
    with pytest.raises(supervise.Interrupted):
        sup.run()
    [r] = records(phase)
    assert r["exit_code"] == 1 and not r["completed"]
    assert ("teardown", 1, "KILL") in procs.events and ("finish", 1, 1) in procs.events
    assert len(procs.launched) == 1  # no relaunch after the signal


@pytest.mark.multirank
@pytest.mark.timeout(120)
def test_real_supervisor_sigterm_leaves_nothing_running(tmp_path):
    """The verb with real processes: Hydra's mpiexec with 2 tagged ranks and a real injector.
    On SIGTERM to the supervisor: exit 130, the attempt recorded, nothing it started still runs.
    (A second TERM inside the first one's stop: the fake-clock test above. Here Hydra ends the launch
    in about 0.1 s, and two TERMs sent together may arrive as one, so no timing forces it.)"""
    import subprocess
    import sys
    import time
    import uuid

    import psutil

    from restartlab.runtime import killer
    from tests.helpers import MPIEXEC, wait_for
    tag = f"test-sup-{uuid.uuid4().hex[:8]}"
    phase = layout.Phase(str(tmp_path / "p"))
    argv = [sys.executable, "-m", "restartlab.cli", "supervise", "--phase", "p", "--phase-dir", phase.path,
            "--tag", tag, "--inject", "--inject-every", "300s",
            "--launch", LaunchSpec(python=sys.executable, ranks_per_node=2, env={killer.TAG_VAR: tag},
                                   mpiexec=MPIEXEC).to_json(),
            "--", sys.executable, "-c", "import time; time.sleep(300)"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(killer.find_tagged(tag)) >= 2, 60, "the two ranks")
        started = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        assert len(started) >= 4  # injector, mpiexec, its proxy, the ranks
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
        killer.kill_ranks(tag)
    assert p.returncode == supervise.EXIT_INTERRUPTED, out
    assert time.time() - t0 < 30
    wait_for(lambda: not any(psutil.pid_exists(x) and not killer.is_gone(x) for x in started), 10,
             "every process the supervisor started to be gone")
    [r] = records(phase)
    assert r["exit_code"] != 0 and not r["completed"]
    assert os.path.exists(phase.done)


@pytest.mark.parametrize("first, launcher_rc, preempted", [
    (5, 143, True),      # srun: the first rank exited 5, --kill-on-bad-exit ended the other's task
    (5, 5, True),
    (None, 5, True),     # no records (a program run without the recorder): the launcher's word
    (1, 143, False),     # the first bad end was a crash, not the emergency stop
    (None, 143, False),
])
def test_preempted_by_the_launcher_or_by_the_first_rank_that_ended(tmp_path, first, launcher_rc, preempted):
    """The attempt record's `preempted` (the report's "detected by the trainer", lost steps 0).
    srun reported 143 for an emergency stop whose ranks both exited 5 (CI, 150f68e: the Slurm
    walltime and preemption tests). So the ranks' own records count too."""
    phase = layout.Phase(str(tmp_path / "sync"))
    att = phase.attempt(1)
    os.makedirs(att.path)
    if first is not None:
        RankExit("1", "rl2", 11, first, None, 10.0).write(att.rank_exit("1"))
        RankExit("0", "rl1", 10, 5, None, 10.02).write(att.rank_exit("0"))
    attempt.record(att, phase, 1, 0.0, 11.0, launcher_rc, ITERS, "srun", out=io.StringIO())
    assert json.load(open(att.record))["preempted"] is preempted


def test_a_node_the_stop_could_not_reach_holds_the_relaunch_on_the_same_nodes_until_it_answers(tmp_path):
    """on_node_loss same: the teardown of attempt 1 could not reach h1 (cut off).
    A launch onto it would fail at once and spend the budget. So the supervisor asks h1 every
    NODE_POLL_S until it answers, then relaunches. A node that never answers within
    relaunch.node_wait ends the phase with the reason, not a crash loop. node_wait 0 relaunches at
    once (the old behaviour). Another policy does not wait (its node check chooses the nodes)."""
    sup, procs, clock, phase = make(tmp_path, [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                    node_wait=60.0)
    procs.unreachable, procs.answers = [["h1"]], [[], [], ["h1"]]
    assert sup.run() == supervise.EXIT_OK
    asks = [e for e in procs.events if e[0] == "answering"]
    assert [a[1] for a in asks] == [("h1",)] * 3
    assert [round(a[2] - asks[0][2], 3) for a in asks] == [0.0, supervise.NODE_POLL_S, 2 * supervise.NODE_POLL_S]
    launches = [e for e in procs.events if e[0] == "launch"]
    assert launches[1][2] >= asks[-1][2] and len(launches) == 2
    # once it answers, the stop is made again (attempt 1's ranks there may still run), then the relaunch
    assert procs.teardowns == [(1, "KILL"), (1, "KILL")]

    # the node answers, but the stop made again cannot reach it once more: the wait goes on
    sup, procs, clock, phase = make(tmp_path / "again", [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                    node_wait=60.0)
    procs.unreachable, procs.answers = [["h1"], ["h1"]], [["h1"], [], ["h1"]]
    assert sup.run() == supervise.EXIT_OK and procs.teardowns == [(1, "KILL")] * 3
    assert len([e for e in procs.events if e[0] == "answering"]) == 3

    # the walltime margin ends the wait: no launch after it
    sup, procs, clock, phase = make(tmp_path / "late", [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                    node_wait=600.0, stop_at=1000.0 + 40, walltime_margin=0)
    procs.unreachable, procs.answers = [["h1"]], [[]] * 100
    assert sup.run() == supervise.EXIT_WALLTIME and len(procs.launched) == 1
    assert len([e for e in procs.events if e[0] == "answering"]) <= 5

    sup, procs, clock, phase = make(tmp_path / "never", [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                    node_wait=25.0)
    procs.unreachable, procs.answers = [["h1"]], [[]] * 100
    assert sup.run() == supervise.EXIT_FAILED
    assert len(procs.launched) == 1 and len([e for e in procs.events if e[0] == "answering"]) == 4  # 0, 10, 20, 25 s
    end = [json.loads(x) for x in open(phase.ended)][-1]
    assert end["how"] == "failed" and end["why"] == ("h1 did not answer for 25 s after attempt 1's stop could not reach it: relaunching on the "
                          "same nodes cannot help (relaunch.on_node_loss: spares or shrink go on without it)"), end

    for kw in ({"node_wait": 0.0}, {"node_wait": 60.0, "node_policy": "shrink"}):
        sup, procs, clock, phase = make(tmp_path / str(len(kw)), [FakeAttempt(rc=137, runs=5), FakeAttempt(rc=0, runs=5)],
                                        **kw)
        procs.unreachable, procs.answers = [["h1"]], [[]] * 100
        if "node_policy" in kw:
            procs.nodes, procs.hosts_file = [3, 2], str(tmp_path / "hosts")
            sup.cfg.node_check, sup.cfg.hosts_file = {}, procs.hosts_file
        assert sup.run() == supervise.EXIT_OK and not [e for e in procs.events if e[0] == "answering"], kw


def test_the_launchers_status_after_its_kill_is_waited_for():
    """Supervisor.stop waits for the launcher's end after its KILL (wait(None)). With a pidfd open
    (Linux), wait(None) once read None as a zero timeout: a launcher not yet gone the instant after
    the KILL gave the attempt no exit status (found by the type checker, #64.3). Forced: a process
    that is still running when wait(None) is called, and one killed and waited for at once."""
    import subprocess
    import sys
    import time
    from restartlab.runtime.attempt_launch import Launched
    run = Launched(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"]))
    t0 = time.monotonic()
    assert run.wait(None) == 0 and time.monotonic() - t0 > 0.2
    run = Launched(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    assert run.wait(0) is None
    run.signal(signal.SIGKILL)
    assert run.wait(None) == 128 + signal.SIGKILL
