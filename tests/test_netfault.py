"""The network fault kinds' node-side part (runtime/netfault.py), for real, and the kinds' validation.

The test makes two network namespaces: a veth pair, 10.251.<n>.0/30, with no address outside them.
Root makes the fault in one of them. The test reads back its link's state, its traffic and its
undoing."""
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

from restartlab.contracts.typed_json import to_dict  # the account as the summary writes it
from restartlab.contracts.faultlog import FaultLog
from restartlab.contracts.receipts import NodeCheck
from restartlab.runtime import netfault

from .helpers import wait_for

def _can() -> bool:
    ok = os.geteuid() == 0 and bool(shutil.which("ip")) and bool(shutil.which("tc"))
    if not ok and os.environ.get("RESTARTLAB_REQUIRE_ALL") == "1":  # CI: a missing part fails, it does not skip
        raise AssertionError("the network fault tests need root, ip and tc (iproute2)")
    return ok

SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((sys.argv[1], 7777)); s.listen()
print("up", flush=True)
while True:
    c, _ = s.accept()
    while c.recv(1 << 16):
        pass
    c.sendall(b"k"); c.close()
"""

SEND = r"""
import socket, sys, time
t = time.time(); c = socket.create_connection((sys.argv[1], 7777), timeout=float(sys.argv[3]))
c.sendall(b"x" * int(sys.argv[2])); c.shutdown(socket.SHUT_WR); c.recv(1); print(time.time() - t)
"""


class Pair:
    def __init__(self):
        n = uuid.uuid4().hex[:6]
        self.a, self.b, self.dev = f"rlt-{n}a", f"rlt-{n}b", f"rlt{n}"
        octet = int(n[:2], 16)
        self.addr_a, self.addr_b = f"10.251.{octet}.1", f"10.251.{octet}.2"
        for cmd in (["netns", "add", self.a], ["netns", "add", self.b],
                    ["link", "add", self.dev, "netns", self.a, "type", "veth", "peer", "name", self.dev + "p",
                     "netns", self.b],
                    ["-n", self.a, "addr", "add", self.addr_a + "/30", "dev", self.dev],
                    ["-n", self.b, "addr", "add", self.addr_b + "/30", "dev", self.dev + "p"],
                    ["-n", self.a, "link", "set", self.dev, "up"], ["-n", self.b, "link", "set", self.dev + "p", "up"],
                    ["-n", self.a, "link", "set", "lo", "up"], ["-n", self.b, "link", "set", "lo", "up"]):
            subprocess.run(["ip", *cmd], check=True, capture_output=True)
        self.server = subprocess.Popen(["ip", "netns", "exec", self.b, sys.executable, "-c", SERVER, self.addr_b],
                                       stdout=subprocess.PIPE, text=True)
        assert self.server.stdout.readline().strip() == "up"

    def run_a(self, *argv, user=None, **kw):
        pre = ["ip", "netns", "exec", self.a] + (["runuser", "-u", user, "--"] if user else [])
        return subprocess.run(pre + list(argv), capture_output=True, text=True, timeout=60, **kw)

    def link_up(self) -> bool:
        out = subprocess.run(["ip", "-n", self.a, "-j", "link", "show", self.dev], capture_output=True, text=True)
        return "UP" in json.loads(out.stdout)[0]["flags"]

    def qdisc(self) -> str:
        return subprocess.run(["tc", "-n", self.a, "qdisc", "show", "dev", self.dev], capture_output=True,
                              text=True).stdout

    def send(self, nbytes, timeout=5.0):
        """(seconds to send nbytes to the other namespace and hear back, or None: it could not)."""
        r = self.run_a(sys.executable, "-c", SEND, self.addr_b, str(nbytes), str(timeout))
        return float(r.stdout) if r.returncode == 0 else None

    def close(self):
        self.server.kill()
        self.server.wait()
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def pair():
    if not _can():
        pytest.skip("needs root, ip and tc (iproute2)")
    p = Pair()
    try:
        yield p
    finally:
        p.close()


def fault(pair, tmp_path, *args, user=None, env=None):
    """The node-side command as the injector's fan-out runs it; (exit status, receipt, log path)."""
    log = str(tmp_path / "faults.jsonl")
    r = pair.run_a(sys.executable, "-m", "restartlab.runtime.netfault", "--peer", pair.addr_b, "--delay", "0.2",
                   "--log", log, "--tag", "t-net", *args, user=user, env=env)
    return r.returncode, json.loads(r.stdout), log


def logged(log, n=1):
    wait_for(lambda: os.path.exists(log) and len(open(log).read().splitlines()) >= n, 30, f"{n} line(s) in {log}")
    return [json.loads(x) for x in open(log)]


def test_a_partition_cuts_the_link_for_its_duration_and_puts_it_back(pair, tmp_path):
    assert pair.send(1000) is not None
    rc, rec, log = fault(pair, tmp_path, "--kind", "partition", "--duration", "1.5")
    assert rc == 0 and rec["dev"] == pair.dev and rec["until"] - rec["at"] == pytest.approx(1.5), rec
    wait_for(lambda: not pair.link_up(), 5, "the link down")
    assert pair.send(1000, timeout=0.5) is None  # no route to the other namespace while it is down
    line, = logged(log)
    assert pair.link_up() and pair.send(1000) is not None
    (down, up), = line["windows"]
    assert line["restored"] and line["ended_by"] == "duration" and line["errors"] == [], line
    assert up - down == pytest.approx(1.5, abs=0.3) and down >= rec["at"] - 0.01, line


def test_a_flap_goes_down_its_count_of_times(pair, tmp_path):
    rc, rec, log = fault(pair, tmp_path, "--kind", "flap", "--flaps", "3", "--duration", "0.4", "--flap-up", "0.3")
    assert rc == 0 and rec["until"] - rec["at"] == pytest.approx(3 * 0.4 + 2 * 0.3), rec
    line, = logged(log)
    w = line["windows"]
    assert len(w) == 3 and all(b - a == pytest.approx(0.4, abs=0.2) for a, b in w), w
    assert all(w[i + 1][0] - w[i][1] == pytest.approx(0.3, abs=0.2) for i in range(2)), w
    assert pair.link_up()


def test_a_slow_link_is_capped_then_freed(pair, tmp_path):
    """1mbit: 256 KiB takes about 2 s through the cap (tbf), well under 0.5 s without it. Run with a
    batch job's PATH, which lacks /usr/sbin (where tc alone lives)."""
    free = pair.send(256 << 10)
    rc, rec, log = fault(pair, tmp_path, "--kind", "slow_link", "--rate", "1mbit", "--duration", "6",
                         env=dict(os.environ, PATH="/usr/bin:/bin"))
    assert rc == 0, rec
    wait_for(lambda: "tbf" in pair.qdisc(), 5, "the tbf qdisc")
    capped = pair.send(256 << 10, timeout=20)
    line, = logged(log)
    assert "tbf" not in pair.qdisc() and line["restored"], (pair.qdisc(), line)
    assert free < 0.5 and capped > 1.5 and capped > 4 * free, (free, capped)


def test_a_partition_that_never_heals_is_undone_when_the_phase_is_done(pair, tmp_path):
    done = tmp_path / "done"
    rc, rec, log = fault(pair, tmp_path, "--kind", "partition", "--duration", "0", "--until", str(done))
    assert rc == 0 and rec["until"] is None, rec
    wait_for(lambda: not pair.link_up(), 5, "the link down")
    time.sleep(1.0)
    assert not pair.link_up()
    done.touch()
    line, = logged(log)
    assert pair.link_up() and line["ended_by"] == f"{done} exists" and line["restored"], line


def test_the_fault_is_undone_after_the_one_who_asked_is_sigkilled_or_its_restorer_terminated(pair, tmp_path):
    """The process that asked (the injector, the supervisor) is SIGKILLed as soon as the receipt is out.

    The node's restorer runs in its own session and still puts the link back. A SIGTERM to the
    restorer puts it back at once."""
    log = str(tmp_path / "faults.jsonl")
    asker = subprocess.Popen(["ip", "netns", "exec", pair.a, sys.executable, "-c",
                              "import subprocess, sys, time; subprocess.run(sys.argv[1:]); time.sleep(60)",
                              sys.executable, "-m", "restartlab.runtime.netfault", "--peer", pair.addr_b, "--delay",
                              "0.2", "--log", log, "--kind", "partition", "--duration", "1.5"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    rec = json.loads(asker.stdout.readline())
    os.killpg(asker.pid, signal.SIGKILL)
    asker.wait()
    wait_for(lambda: not pair.link_up(), 5, "the link down")
    line, = logged(log)
    assert pair.link_up() and line["ended_by"] == "duration", line
    rc, rec, log2 = fault(pair, tmp_path, "--kind", "partition", "--duration", "60")
    wait_for(lambda: not pair.link_up(), 5, "the link down")
    os.kill(rec["restorer"], signal.SIGTERM)
    line = logged(log2, 2)[-1]
    assert pair.link_up() and line["ended_by"] == "SIGTERM", line


def test_without_the_right_to_change_the_link_it_says_so_and_changes_nothing(pair, tmp_path):
    rc, rec, log = fault(pair, tmp_path, "--kind", "partition", "--duration", "5", user="nobody")
    assert rc == 1 and "needs CAP_NET_ADMIN" in rec["error"] and "Operation not permitted" in rec["error"], rec
    assert pair.link_up() and not os.path.exists(log) and "restorer" not in rec
    rc, rec, _ = fault(pair, tmp_path, "--kind", "partition", "--duration", "5", "--peer", "127.0.0.1")
    assert rc == 1 and "is this node" in rec["error"], rec


def test_a_node_without_tc_says_so(monkeypatch):
    monkeypatch.setattr(netfault, "SBIN", ("/nowhere",))
    monkeypatch.setenv("PATH", "/nowhere/either")
    a = netfault.parser().parse_args(["--kind", "slow_link", "--duration", "5", "--dev", "eth9"])
    rec = netfault.start(a)
    assert rec.error == "ip (iproute2) is not on this node (PATH, /nowhere)", rec


def test_the_restorers_plan():
    p = netfault.parser()
    assert netfault.plan(p.parse_args(["--kind", "partition", "--duration", "40"])) == [("down", 40.0)]
    assert netfault.plan(p.parse_args(["--kind", "partition", "--duration", "0", "--max", "9"])) == [("down", 9.0)]
    assert netfault.plan(p.parse_args(["--kind", "flap", "--duration", "2", "--flaps", "2", "--flap-up", "1"])) == \
        [("down", 2.0), ("up", 1.0), ("down", 2.0)]
    assert netfault.plan(p.parse_args(["--kind", "slow_link", "--duration", "3"])) == [("cap", 3.0)]


# ---------------------------------------------------------------- validation: refused with the reason
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _validate(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    r = subprocess.run([sys.executable, "-m", "restartlab.cli", "validate", str(p)], capture_output=True, text=True,
                       cwd=ROOT)
    return r, str(p)


def test_the_network_kinds_are_refused_where_they_cannot_be_made(tmp_path):
    r, p = _validate(tmp_path, "phases: [{name: s, checkpoint: sync}]\n"
                     "failures: {kind: partition, schedule: {every: 60s}}\n")
    assert r.returncode == 2 and f"{p}:2: failures.kind: partition strikes one node's link" in r.stderr \
        and "scheduler: local" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r, p = _validate(tmp_path, f"extends: {ROOT}/scenarios/systems/aurora.yaml\njob: {{nodes: 2, account: x}}\n"
                     "phases: [{name: s, checkpoint: sync}]\n"
                     "failures: {schedule: {at_steps: [{step: 5, kind: flap}]}}\n")
    assert r.returncode == 2 and "failures.schedule.at_steps: flap needs CAP_NET_ADMIN" in r.stderr \
        and "site.root: false, " in r.stderr and "aurora.yaml:" in r.stderr, r.stderr
    r, p = _validate(tmp_path, "scheduler: pbs\njob: {nodes: 2, account: x}\nphases: [{name: s, checkpoint: sync}]\n"
                     "failures: {kind: slow_link, rate: quick, duration: 0, schedule: {every: 60s}}\n")
    assert r.returncode == 2 and f"{p}:4: failures.rate: 'quick' is not a tc rate" in r.stderr \
        and "failures.duration: 0 (never heals) is for partition only" in r.stderr, r.stderr
    r, p = _validate(tmp_path, "scheduler: pbs\njob: {nodes: 2, account: x}\nphases: [{name: s, checkpoint: sync}]\n"
                     "failures: {kind: partition, duration: 0, root_cmd: sudo -n, schedule: {every: 60s}}\n")
    assert r.returncode == 0, r.stderr
    r, p = _validate(tmp_path, "scheduler: slurm\njob: {nodes: 2, account: x}\nphases: [{name: s, checkpoint: sync}]\n"
                     "failures: {kind: flap, node: 0, schedule: {every: 60s}}\n")
    assert r.returncode == 2 and "on slurm it is not tested" in r.stderr and f"{p}:4: failures.node: node 0 runs the " \
        "relaunch loop and the injector" in r.stderr, r.stderr


# ---------------------------------------------------------------- the accounting, from synthetic records
from restartlab.analysis import collect, netfaults, survival  # noqa: E402
from restartlab.contracts.attempts import AttemptRecord  # noqa: E402
from restartlab.contracts.injections import Injection  # noqa: E402


def _attempt(k, launch, end, steps, resumed=0, **kw):
    """An attempt that logged `steps` [(ts, step)], as collect.load_phase leaves it."""
    a = collect.AttemptData(k, f"rank0-of-{k}.jsonl", number=k, recorded=True, launch_ts=launch, end_ts=end,
                            resumed_from=resumed, hosts=["h0", "h1", "h2"])
    a.record = AttemptRecord(attempt=k, launch_ts=launch, end_ts=end, completed=kw.get("completed", False),
                             hang=kw.get("hang", False), hosts=a.hosts)
    a.completed, a.hang, a.hang_ts = a.record.completed, a.record.hang, kw.get("hang_ts")
    a.unreached = kw.get("unreached", [])
    a.first_row = {"train/iter": steps[0][1], "train/loss": 1.0, "train/resumed_from": resumed}
    a.first_ts, a.first_iter = steps[0]
    a.last_ts, a.last_iter = steps[-1]
    a.trace = list(steps)
    a.gaps = sorted(((t1 - t0, t0, t1, s0) for (t0, s0), (t1, _) in zip(steps, steps[1:])), reverse=True)
    return a


def _phase(attempts, start=110.0, until=120.0, windows=((110.0, 120.0),), ended_by="duration"):
    ph = collect.PhaseData("sync", attempts=attempts)
    ph.injections = [Injection(time=start, kind="partition", hosts=("h2",), extra={"faulted": 1, "fault": {
        "duration": (until - start) if until else 0, "until": until}})]
    ph.faults = [FaultLog(host="h2", planned_at=start, windows=tuple(windows), restored=True, ended_by=ended_by)]
    return ph


def _steps(t0, t1, s0, dt=1.0):
    return [(t0 + i * dt, s0 + i) for i in range(int((t1 - t0) / dt) + 1)]


def test_a_partition_healed_in_place_stood_still_and_resumed_by_itself():
    steps = _steps(100, 109, 1) + _steps(124, 140, 11)  # the step after 109 s came at 124 s: 15 s, a step's 1 s
    ph = _phase([_attempt(1, 99, 141, steps, completed=True)])
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert f["outcome"] == "resumed by itself" and f["stood_still_s"] == 14.0 and f["lost_steps"] == 0, f
    assert f["down_s"] == 10.0 and f["layers"] == {}, f
    assert f["text"] == "a partition of h2 (10 s): training stood still 14 s; resumed by itself; 0 step(s) lost"


def test_a_watchdog_stop_that_never_happened_is_a_finding_and_said_with_the_node_it_could_not_reach():
    """The issue's report: a watchdog stop that never happened is not a clean "survived".

    The watchdog decided 30 s in. Its stop reached no rank on the cut-off node and none elsewhere in
    time. Training went on after the link came back, and finished."""
    steps = _steps(100, 109, 1) + _steps(164, 180, 11)
    a = _attempt(1, 99, 181, steps, completed=True, hang=True, hang_ts=140.0, unreached=["h2"])
    ph = _phase([a], until=150.0, windows=((110.0, 150.0),))
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert f["layers"]["watchdog_s"] == 30.0 and f["stood_still_s"] == 54.0, f
    assert f["layers"]["stop"] == "its stop did not take effect: the attempt finished by itself; the stop could " \
        "not reach h2", f
    v = survival.judge(ph)
    assert not v.as_dict()["survived"] and v.restarts[0].outcome == "unstopped", v
    assert "the stop did not take effect: it finished by itself (the stop could not reach h2)" in v.findings[0], v


def test_a_partition_that_never_healed_relaunched_on_a_spare_counts_its_lost_steps():
    a = _attempt(1, 99, 125, _steps(100, 109, 1), hang=True, hang_ts=119.0, unreached=["h2"])
    b = _attempt(2, 126, 160, _steps(135, 160, 6), resumed=5, completed=True)
    b.hosts = b.record.hosts = ["h0", "h1", "h3"]
    ph = _phase([a, b], until=None, windows=((110.0, 161.0),), ended_by="/x/sync/done exists")
    ph.node_checks = [NodeCheck("h2", False, time=131.0, attempt=2)]
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert f["outcome"] == "relaunched on a spare (h3 for h2)" and f["lost_steps"] == 5, f
    assert f["layers"] == {"watchdog_s": 9.0, "stop": "stopped; the stop could not reach h2", "attempt_end_s": 15.0,
                           "node_check_s": 21.0}, f
    assert f["stood_still_s"] == 25.0 and f["text"].startswith(
        "a partition of h2 (51 s, never healed: undone when the phase was done): "), f
    v = survival.judge(ph)
    assert v.restarts[0].outcome != "unstopped" and "then the watchdog stopped it" in v.restarts[0].text, v


def test_an_attempt_that_logged_a_step_inside_the_fault_and_was_relaunched_is_no_resume_in_place():
    """Rank 0 logged a step 0.3 s into the partition, then every rank blocked.

    The watchdog stopped the attempt and the relaunch carried on. So the outcome is relaunched, with
    its steps lost, not "resumed by itself"."""
    a = _attempt(1, 99, 125, _steps(100, 109, 1) + [(110.3, 11)], hang=True, hang_ts=119.0)
    b = _attempt(2, 126, 160, _steps(135, 160, 6), resumed=5, completed=True)
    f, = to_dict(netfaults.accounts(_phase([a, b]), 1.0))
    assert f["outcome"] == "relaunched on the same nodes" and f["lost_steps"] == 6 and f["stood_still_s"] == 23.7, f


def test_a_fault_whose_node_could_not_make_it_and_one_with_no_record_are_said_so():
    a = _attempt(1, 99, 141, _steps(100, 140, 1), completed=True)
    ph = _phase([a])
    ph.faults[0] = dataclasses.replace(ph.faults[0], windows=(), errors=("link set dev eth0 down: Operation not permitted",))
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert f["outcome"] == "never began: link set dev eth0 down: Operation not permitted", f
    ph.faults = []
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert "(no record from its node)" in f["text"] and "the times are the injector's plan" in f["text"], f
    ph.injections[0] = Injection(time=50.0, kind="partition", hosts=("h2",), extra={"faulted": 1})
    f, = to_dict(netfaults.accounts(ph, 1.0))
    assert f["outcome"] == "struck no attempt" and f["text"], f
