"""make soak: the suite's multi-rank and end-to-end tiers run RUNS times beside a load, to find the
races a CI run finds by chance (#49). Each run does this:

  - LOAD busy processes take the cores as CI's neighbours do. Each is a Python spin loop, started
    here and stopped here by PID.
  - pytest runs the tiers on --workers xdist workers. The tiers are
    -m "(multirank or slurm or pbs or slow) and not alone", or --mark. PYTHONHASHSEED is set to
    the run's seed. Every test's tmp_path is kept under build/soak/run-<i>/tmp. It holds the test's
    experiment directories, their outputs, the stacks a hung attempt's ranks dumped into its output,
    and the cold stubs' lines.
  - The run's JUnit report is read. Each failure goes to build/soak/failures.jsonl with the run, its
    seed, the test, the first lines of its message and the test's tmp directory. It also lists the
    experiment directories under it (its scenario copy marks one) and the attempt outputs holding
    dumped stacks.
  - The PBS tier's jobs run as another user in the cluster's own work directories. The run keeps
    them under build/soak/run-<i>/pbs-work (tests/pbs_cluster.KEEP_VAR) and names them for a PBS
    test. Before the cluster's purge, its own logs are copied to pbs-work/pbs-logs: server,
    scheduler, comm, each MoM, and the recipe's start and stop.

At the end a table of failures by test says how many of the runs each failed in. Exit 0 when no
run failed, 1 otherwise. Example: `make soak RUNS=5 LOAD=2 SOAK_K=warm_restart_a_pool` hunts one
test."""
import argparse
import collections
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from restartlab.contracts import layout
from tests import pbs_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIERS = "(multirank or slurm or pbs or slow) and not alone"
SCENARIO = os.path.basename(layout.Expt("e").scenario)    # marks an experiment directory
OUTPUT = os.path.basename(layout.Attempt("1").output)      # an attempt's output
STACK_MARKS = ("Most recent call first", "Current thread 0x", "Thread 0x")  # faulthandler's dumps


def spin_loads(n: int):
    """n busy processes (ours: stopped by PID in stop_loads)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_loads(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()


def stop_pytest(p, grace: float = 120.0) -> None:
    """A run cut short (the soak was stopped): SIGINT first, pytest's KeyboardInterrupt, so that its
    session fixtures stop the test clusters; SIGKILL after `grace` seconds."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _terminated(signum, frame):
    """SIGTERM (kill PID) ends the soak as Ctrl-C does: the finally blocks stop its run and its loads.
    Without it the busy loads outlived a stopped soak (session 18: two of them, 85 minutes)."""
    raise SystemExit(128 + signum)


def failures_of(xml_path: str):
    """[(test id, message)] of the failed and errored test cases in a JUnit report."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError) as e:
        return [("<the run's JUnit report>", f"unreadable: {e}")]
    out = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            el = case.find(kind)
            if el is not None:
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                text = (el.get("message") or el.text or "").strip()
                out.append((name, "\n".join(text.splitlines()[:6])))
    return out


def tmp_dirs_of(basetemp: str, test_name: str):
    """The tmp_path directories pytest made for a test (named after it, truncated to 30 chars, a
    number appended), under any worker's basetemp."""
    stem = test_name.split("[")[0][:30]
    return sorted(d for d in glob.glob(os.path.join(basetemp, "**", stem + "*"), recursive=True)
                  if os.path.isdir(d) and not os.path.islink(d))  # (pytest's <name>current links)


def evidence(dirs):
    """The experiment directories and the attempt outputs with dumped stacks under `dirs`."""
    expts, stacks = set(), set()
    for d in dirs:
        for path in glob.glob(os.path.join(d, "**", SCENARIO), recursive=True):
            expts.add(os.path.dirname(path))
        for path in glob.glob(os.path.join(d, "**", OUTPUT), recursive=True):
            try:
                with open(path, errors="replace") as f:
                    if any(m in f.read() for m in STACK_MARKS):
                        stacks.add(path)
            except OSError:
                pass
    return sorted(expts), sorted(stacks)


def run_once(i: int, a, out: str):
    seed = a.seed + i
    rundir = os.path.join(out, f"run-{i}")
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    basetemp, xml = os.path.join(rundir, "tmp"), os.path.join(rundir, "junit.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", a.mark, "--basetemp", basetemp,
           "--junitxml", xml]
    if a.workers:
        cmd += ["-n", str(a.workers), "--dist", "loadgroup"]
    if a.k:
        cmd += ["-k", a.k]
    cmd += a.pytest_args + ["tests"]
    pbs_work = os.path.join(rundir, "pbs-work")  # the PBS tier's work dirs (its jobs run as another user)
    os.makedirs(pbs_work)
    env = dict(os.environ, PYTHONHASHSEED=str(seed), **{pbs_cluster.KEEP_VAR: pbs_work})
    loads = spin_loads(a.load)
    t0 = time.time()
    try:
        with open(os.path.join(rundir, "pytest.log"), "w") as log:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                rc = p.wait()
            except BaseException:
                stop_pytest(p)
                raise
    finally:
        stop_loads(loads)
    took = time.time() - t0
    found = failures_of(xml) if rc not in (0, 5) or os.path.exists(xml) else []
    if rc not in (0, 5) and not found:
        found = [("<pytest>", f"exit {rc} with no failed test in its report (see {rundir}/pytest.log)")]
    records = []
    for test, msg in found:
        dirs = tmp_dirs_of(basetemp, test.rsplit("::", 1)[-1])
        if test.endswith("@pbs"):  # the PBS tests' experiments live in the cluster's work dirs
            dirs.append(pbs_work)
        expts, stacks = evidence(dirs)
        records.append({"run": i, "seed": seed, "test": test, "message": msg, "experiments": expts,
                        "stacks": stacks, "log": os.path.join(rundir, "pytest.log")})
    print(f"soak run {i + 1}/{a.runs} (seed {seed}, load {a.load}): {len(found)} failure(s) in {took / 60:.1f} min",
          flush=True)
    for r in records:
        print(f"  FAILED {r['test']}: {r['message'].splitlines()[0] if r['message'] else ''}", flush=True)
    return records, took


def table(records, runs: int) -> str:
    by = collections.defaultdict(set)
    for r in records:
        by[r["test"]].add(r["run"])
    if not by:
        return f"no failures in {runs} run(s)"
    lines = [f"{'runs failed':>11}  test"]
    for test, rs in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"{len(rs):>5} of {runs:<3}  {test}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2, help="how many times the tiers run (default 2)")
    p.add_argument("--load", type=int, default=2, help="busy processes beside each run (default 2: the cores)")
    p.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: one process)")
    p.add_argument("--mark", default=TIERS, help=f"the tiers, a pytest -m expression (default: {TIERS})")
    p.add_argument("-k", default=None, help="only the tests matching this pytest -k expression")
    p.add_argument("--seed", type=int, default=0, help="run i's PYTHONHASHSEED is SEED + i")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "soak"))
    p.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    if a.runs < 1 or a.load < 0 or a.workers < 0:
        p.error("--runs must be at least 1, --load and --workers not negative")
    os.makedirs(a.out, exist_ok=True)
    failures_path = os.path.join(a.out, "failures.jsonl")
    open(failures_path, "w").close()
    records, times = [], []
    for i in range(a.runs):
        got, took = run_once(i, a, a.out)
        times.append(took)
        records += got
        with open(failures_path, "a") as f:
            for r in got:
                f.write(json.dumps(r) + "\n")
    print(f"\nsoak: {a.runs} run(s) of -m '{a.mark}'" + (f" -k '{a.k}'" if a.k else "")
          + f", load {a.load}, {a.workers} worker(s); minutes per run: {', '.join(f'{t / 60:.1f}' for t in times)}")
    print(table(records, a.runs))
    print(f"(each failure's test, seed, experiment directories and stacks: {failures_path})")
    return 1 if records else 0


if __name__ == "__main__":
    sys.exit(main())
