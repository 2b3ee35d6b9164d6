"""Where the suite's CPU goes, by test and by kind of process: on 2 cores the CPU bounds the
suite's wall time (with the test time on its workers), and test time (tests/durations.py) cannot
say which of two tests sharing the cores spent it. Needs root and the kernel's process accounting (Debian: `apt-get
install acct`), which records every process that exits, SIGKILLed ranks included.

    python -m tests.cpu_account run DIR -- make test      # accounting on around the command
    python -m tests.cpu_account report DIR                # CPU by kind, by test, rank start-ups

`run` turns accounting on into DIR/pacct and puts DIR/hook first on PYTHONPATH: its
sitecustomize appends each Python process's pid, argv and PYTEST_CURRENT_TEST (which every
process a test starts inherits) to DIR/pids.log. `report` joins the two by pid and walks each
process up its parents to the test that started it. Processes that do not inherit the test's
environment (a PBS job's, unless qsub -V) count as "?"; a process killed with threads of its own
is recorded under its last thread's name (pt_gloo_runloop, ...)."""
import collections
import os
import shutil
import statistics
import subprocess
import sys

HOOK = '''import os, sys
try:
    with open(os.path.join({d!r}, "pids.log"), "a") as f:
        f.write(f"{{os.getpid()}}\\t{{os.getppid()}}\\t{{' '.join(sys.orig_argv[1:])[:300]}}\\t"
                f"{{os.environ.get('PYTEST_CURRENT_TEST', '').split(' (')[0]}}\\n")
except OSError:
    pass
'''


def run(d, cmd):
    if not shutil.which("accton"):
        print("tests.cpu_account: no accton on PATH (Debian: apt-get install acct)", file=sys.stderr)
        return 2
    d = os.path.abspath(d)
    os.makedirs(os.path.join(d, "hook"), exist_ok=True)
    with open(os.path.join(d, "hook", "sitecustomize.py"), "w") as f:
        f.write(HOOK.format(d=d))
    for name in ("pacct", "pids.log"):
        open(os.path.join(d, name), "w").close()
    r = subprocess.run(["accton", os.path.join(d, "pacct")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode:
        print(f"tests.cpu_account: accton: {r.stderr.strip()} (process accounting needs root)", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(d, "hook"),
                                                                   os.environ.get("PYTHONPATH")])))
    try:
        return subprocess.run(cmd, env=env).returncode
    finally:
        subprocess.run(["accton", "off"], stdout=subprocess.DEVNULL)


def records(d):
    """[(comm, cpu seconds, pid, ppid)] from dump-acct (its times are in 1/100 s)."""
    out = subprocess.run(["dump-acct", os.path.join(d, "pacct")], capture_output=True, text=True, check=True).stdout
    recs = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 10:
            recs.append((f[0], (float(f[2]) + float(f[3])) / 100, int(f[9]), int(f[10])))
    return recs


def kind(argv):
    words = argv.split()
    if words[:2] == ["-m", "restartlab.cli"] or words[:2] == ["-m", "restartlab.runtime.warm"]:
        return "python -m " + " ".join(words[1:3])  # with its verb: the program's argv may follow
    if "--model " in argv or "--train-iters" in argv:
        return "training rank (the bundled trainer or a program)"
    if words[:2] == ["-m", "pytest"] or words[:1] == ["-c"]:  # xdist starts its workers with -c
        return "pytest and its workers"
    if words[:1] == ["-m"] and len(words) > 1:
        return "python -m " + words[1]
    return "python " + (os.path.basename(words[0]) if words else "")


def report(d):
    recs = records(d)
    py = {}
    with open(os.path.join(d, "pids.log")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) == 4:
                py[int(p[0])] = (int(p[1]), p[2], p[3])
    parent = {pid: ppid for _, _, pid, ppid in recs}
    parent.update({pid: v[0] for pid, v in py.items() if pid not in parent})

    def test_of(pid):
        for _ in range(50):
            if pid in py and py[pid][2]:
                return py[pid][2]
            pid = parent.get(pid)
            if not pid:
                break
        return "?"
    by_kind, by_test, ranks = collections.Counter(), collections.Counter(), collections.defaultdict(list)
    for comm, cpu, pid, _ in recs:
        k = kind(py[pid][1]) if pid in py else comm
        by_kind[k] += cpu
        t = test_of(pid)
        by_test[t] += cpu
        if k.startswith("training rank"):
            ranks[t].append(cpu)
    total = sum(by_kind.values())
    print(f"CPU in all: {total:.0f} s, {len(recs)} processes")
    print("\nby kind of process (CPU s):")
    for k, v in by_kind.most_common(15):
        print(f"{v:8.1f}  {k}")
    print("\nby test (CPU s, training ranks started, their CPU s):")
    for t, v in by_test.most_common(30):
        print(f"{v:8.1f} {len(ranks[t]):4d} {sum(ranks[t]):7.1f}  {t}")
    all_ranks = [c for cs in ranks.values() for c in cs]
    if all_ranks:
        print(f"\ntraining ranks: {len(all_ranks)} started, {sum(all_ranks):.0f} CPU s "
              f"({sum(all_ranks) / total:.0%} of all), median {statistics.median(all_ranks):.2f} s a rank")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "run" and argv[2] == "--":
        return run(argv[1], argv[3:])
    if len(argv) == 2 and argv[0] == "report":
        return report(argv[1])
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
