"""Where the suite's CPU goes, by test and by kind of process.
On 2 cores the CPU bounds the suite's wall time (with the test time on its workers). Test time
(tests/durations.py) cannot say which of two tests sharing the cores spent it. This needs root and
the kernel's process accounting (Debian: `apt-get install acct`). It records every process that
exits, SIGKILLed ranks included.

    python -m tests.cpu_account run DIR -- make test      # accounting on around the command
    python -m tests.cpu_account report DIR                # CPU by kind, what no test started, by test, ranks

`run` turns accounting on into DIR/pacct and puts DIR/hook first on PYTHONPATH. Its
sitecustomize appends each Python process's pid, argv and PYTEST_CURRENT_TEST to DIR/pids.log.
Every process a test starts inherits PYTEST_CURRENT_TEST. `report` joins the two by pid and walks
each process up its parents to the test that started it. Processes that do not inherit the test's
environment count as "?" (a PBS job's, unless qsub -V). A process killed with threads of its own
is recorded under its last thread's name (pt_gloo_runloop, ...).

A pid is not a process. The suite starts about 50,000 processes and the kernel's pids wrap at
32,768. So about 20,000 pids were used twice in one run (2026-12-07). Each process is therefore
known by its pid and its start. Its parent is the process of that pid alive when it started. Its
line in pids.log is the one of its pid written while it ran. Joined by pid alone, a test's trainer
pool of one worker took 80 CPU-s of later tests' ranks.

One case is still wrong, and this says so. The ranks a standby pool forks
(tests/helpers.trainer_pool, relaunch.warm) count for the test that started the pool, since a fork
writes no line. In that run this was about 190 CPU-s of about 40 tests' ranks. They went under
test_trainer_resume's fsdp4 case, the first of its worker to use the pool."""
import calendar
import collections
import os
import shutil
import statistics
import subprocess
import sys
import time

HOOK = '''import os, sys, time
try:
    with open(os.path.join({d!r}, "pids.log"), "a") as f:
        f.write(f"{{os.getpid()}}\\t{{os.getppid()}}\\t{{' '.join(' '.join(sys.orig_argv[1:]).split())[:300]}}\\t"
                f"{{os.environ.get('PYTEST_CURRENT_TEST', '').split(' (')[0]}}\\t{{time.time():.2f}}\\n")
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
    """[(comm, cpu seconds, pid, ppid, start, end)] from dump-acct: its times are in 1/100 s, the
    start (btime) a local-time date to the second."""
    # in UTC: a local time is ambiguous in the hour a clock goes back
    out = subprocess.run(["dump-acct", os.path.join(d, "pacct")], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TZ="UTC")).stdout
    recs = []
    for line in out.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) > 14:
            start = calendar.timegm(time.strptime(f[14], "%a %b %d %H:%M:%S %Y"))
            recs.append((f[0], (float(f[2]) + float(f[3])) / 100, int(f[9]), int(f[10]), start,
                         start + float(f[4]) / 100))
    return recs


def python_lines(d):
    """pid -> [(time, ppid, argv, test)] from pids.log, each pid's lines in the order written.
    A line without its time, from an older hook, gets None."""
    py = collections.defaultdict(list)
    with open(os.path.join(d, "pids.log")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) in (4, 5):
                py[int(p[0])].append((float(p[4]) if len(p) == 5 else None, int(p[1]), p[2], p[3]))
    return py


SLACK = 1.5  # s: btime is to the second, and a line is written a little after its process starts


def link(recs, py):
    """For each record (by its index): its Python line (or None) and the index of its parent's record.
    The parent's index is None when the parent outlived the accounting or was never recorded."""
    by_pid = collections.defaultdict(list)
    for i, r in enumerate(recs):
        by_pid[r[2]].append(i)

    def alive(pid, t):  # the record of `pid` that was running at time t
        for i in by_pid.get(pid, ()):
            if recs[i][4] - SLACK <= t <= recs[i][5] + SLACK:
                return i
        return None
    line, parent = [], []
    for _, _, pid, ppid, start, end in recs:
        ls = [x for x in py.get(pid, ()) if x[0] is None or start - SLACK <= x[0] <= end + SLACK]
        line.append(ls[0] if ls else None)
        # the parent it started under: its line's (getppid() at its start), else the record's (the
        # kernel's at its exit: an orphan's reaper by then)
        parent.append(alive(ls[0][1] if ls else ppid, start))
    return line, parent


# The threads torch.distributed starts. A process killed is recorded under its last thread to end.
# A process recorded under one of these names was a rank that had joined a process group.
RANK_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop", "pt_tcpstore_uv")
FLAGS_WITH_VALUE = ("-X", "-W")


def kind(argv, comm=""):
    """What a process was, from its Python argv (the hook's line) or, without one, its name."""
    if not argv and comm in RANK_THREADS:
        return "training rank (killed: recorded under a torch.distributed thread)"
    if not argv and comm.startswith("python"):
        return f"{comm} without a line (a standby pool's fork, or outside the tests' environment: a PBS job's)"
    if not argv:
        return comm
    words = argv.split()
    while words and words[0].startswith("-") and words[0] not in ("-m", "-c"):  # python -u, -X dev, -B ...
        words = words[2:] if words[0] in FLAGS_WITH_VALUE else words[1:]
    if words[:2] == ["-m", "restartlab.cli"] or words[:2] == ["-m", "restartlab.runtime.warm"]:
        return "python -m " + " ".join(words[1:3])  # with its verb: the program's argv may follow
    if "--model " in argv or "--train-iters" in argv:
        return "training rank (the bundled trainer or a program)"
    if words[:2] == ["-m", "restartlab.runtime.rankenv"]:
        return "training rank (a program, through restartlab.runtime.rankenv)"  # it execs the program
    if words[:2] == ["-m", "pytest"] or words[:1] == ["-c"]:  # xdist starts its workers with -u -c
        return "pytest and its workers"
    if words[:1] == ["-m"] and len(words) > 1:
        return "python -m " + words[1]
    return "python " + (os.path.basename(words[0]) if words else "")


def report(d):
    recs = records(d)
    py = python_lines(d)
    line, parent = link(recs, py)

    def test_of(i):
        for _ in range(50):
            if line[i] is not None and line[i][3]:
                return line[i][3]
            if parent[i] is None:
                break
            i = parent[i]
        return "?"
    by_kind, by_test, ranks = collections.Counter(), collections.Counter(), collections.defaultdict(list)
    unbooked = collections.Counter()
    for i, (comm, cpu, *_) in enumerate(recs):
        k = kind(line[i][2] if line[i] is not None else "", comm)
        by_kind[k] += cpu
        t = test_of(i)
        by_test[t] += cpu
        if t == "?":
            unbooked[k] += cpu
        if k.startswith("training rank"):
            ranks[t].append(cpu)
    total = sum(by_kind.values())
    print(f"CPU in all: {total:.0f} s, {len(recs)} processes")
    print("\nby kind of process (CPU s):")
    for k, v in by_kind.most_common(15):
        print(f"{v:8.1f}  {k}")
    print('\nnot booked to a test ("?": the installs, the PBS jobs, the clusters\' daemons), by kind (CPU s):')
    for k, v in unbooked.most_common(10):
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
