"""Each decision of the supervisor, broken on purpose: the fake-clock tests must catch every one.

    python -m tests.mutate_supervise        # prints one line per mutation; exit 1 if one survives

It edits restartlab/runtime/supervise.py, or the module a decision moved to (runtime/watch.py: the
watchdog and the stop; runtime/interrupts.py: the signals). It edits in place, one mutation at a
time, always restored. So run it alone, never beside the test suite."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIME = os.path.join(ROOT, "restartlab", "runtime")
WATCH = "watch.py"
INTERRUPTS = "interrupts.py"

# (decision, the code as written, the code broken[, the module: supervise.py by default])
MUTATIONS = [
    ("budget: max_attempts launches", "while tries < cfg.max_attempts:", "while tries <= cfg.max_attempts:"),
    ("backoff between attempts only", "            if tries < cfg.max_attempts:\n                still = ",
     "            if True:\n                still = "),
    ("backoff is slept", "self.clock.sleep(cfg.backoff)", "self.clock.sleep(0)"),
    ("exit_no_checkpoint stops relaunching", "if rc == EXIT_NO_CHECKPOINT:", "if rc == -999:"),
    ("startup_timeout before the first step, hang_timeout after",
     "limit = cfg.hang_timeout if self.procs.has_stepped(att) else cfg.startup_timeout",
     "limit = cfg.startup_timeout if self.procs.has_stepped(att) else cfg.hang_timeout", WATCH),
    ("the watchdog fires", "if last is not None and self.clock.time() - last > limit:",
     "if last is not None and self.clock.time() - last > 10 * limit:", WATCH),
    ("TERM, then KILL for a deaf launcher", "            run.signal(signal.SIGKILL)\n", "            pass\n", WATCH),
    ("walltime warning during an attempt", "if not os.path.exists(att.walltime) and self.past_stop():", "if False:", WATCH),
    ("no launch past the walltime margin", "            if self.watchdog.past_stop():\n                self.say(f\"walltime margin",
     "            if False:\n                self.say(f\"walltime margin"),
    ("no phase starts past the walltime margin", "        if self.watchdog.past_stop():\n            self.say(\"not started",
     "        if False:\n            self.say(\"not started"),
    ("a walltime-stopped attempt is not relaunched", "            if os.path.exists(att.walltime):\n",
     "            if False:\n"),
    ("teardown after a failed attempt", "if rc != 0:  # nothing of a failed attempt outlives it", "if False:"),
    ("a completed phase is not run again", "if os.path.exists(phase.completed):", "if False:"),
    ("a chained job numbers on", "k = done[-1].index if done else 0", "k = 0"),
    ("too few healthy nodes fails the phase", "            if n is None:\n", "            if False:\n"),
    ("the launch on the nodes chosen", "launch = launch.with_nodes(n)", "launch = launch"),
    ("a fresh rendezvous port per attempt", '"MASTER_PORT": str(self.procs.free_port())', '"MASTER_PORT": "29500"'),
    ("the launcher must be on PATH", "if not self.procs.which(launcher):", "if False:"),
    ("done marker before the injector is stopped", "            _touch(phase.done)\n            self.procs.stop_injector()",
     "            self.procs.stop_injector()\n            _touch(phase.done)"),
    ("completed -> exit 0 and the marker", "            _touch(phase.completed)\n", "\n"),
    ("budget used up -> EXIT_BUDGET", "return EXIT_BUDGET if verdict == PhaseEnd.BUDGET else EXIT_FAILED",
     "return EXIT_FAILED"),
    ("an interrupted attempt is recorded", "                self._record(att, k, launch_ts, rc, ranks)\n                raise",
     "                raise"),
    ("no launch when the margin passes while the pools preload", "if self.watchdog.past_stop():  # reached while",
     "if False:  # reached while"),
    ("a failed attempt is recorded before a signal stops the phase", "with self.interrupts.held():",
     "with contextlib.nullcontext():"),
    ("a second signal does not cut the first one's stop short", "        if self.got is not None:  # already stopping\n"
     "            return\n", "", INTERRUPTS),
]


def main() -> int:
    survived = 0
    for name, good, bad, *where in MUTATIONS:
        target = os.path.join(RUNTIME, where[0] if where else "supervise.py")
        with open(target) as f:
            original = f.read()
        if original.count(good) != 1:
            print(f"?? {name}: the code to break is not found once in {os.path.basename(target)} (update the mutation)")
            survived += 1
            continue
        try:
            with open(target, "w") as f:
                f.write(original.replace(good, bad))
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--timeout", "60",
                                "-m", "not multirank", os.path.join(ROOT, "tests", "test_supervise.py")],
                               capture_output=True, text=True, cwd=ROOT, timeout=600)
            caught = r.returncode != 0
            failed = next((l for l in r.stdout.splitlines() if l.startswith("FAILED")), "")
            print(f"{'caught ' if caught else 'SURVIVED'} {name}" + (f"  <- {failed.split('::')[-1][:70]}" if failed else ""))
            survived += not caught
        finally:
            with open(target, "w") as f:
                f.write(original)
    print(f"{len(MUTATIONS) - survived}/{len(MUTATIONS)} broken decisions caught by tests/test_supervise.py")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
