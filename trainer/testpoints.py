"""Test-only hooks inside a save, all off unless their variable is set: RESTARTLAB_FAULT
(SIGKILL at a point), RESTARTLAB_DELAY (sleep at a point), RESTARTLAB_TRACE (rank 0 logs each
phase). The tests and the kill-anywhere fuzzer use them to reach exact places deterministically."""
import os
import signal
import time


def fault(point: str, step: int, rank: int):
    """Test-only fault points: RESTARTLAB_FAULT=point:step[:rank] SIGKILLs this process there
    (stage, write, copy, mark: before .complete; complete: right after it). Used by the tests to
    kill at exact places inside a save."""
    spec = os.environ.get("RESTARTLAB_FAULT")
    if not spec:
        return
    parts = spec.split(":")
    want_rank = int(parts[2]) if len(parts) > 2 else 0
    if parts[0] == point and int(parts[1]) == step and want_rank == rank:
        print(f"FAULT {point} at step={step} rank={rank}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def delay(point: str, step: int, rank: int):
    """Test-only delay points: RESTARTLAB_DELAY="point:step:rank:seconds[,...]" sleeps there.

    The tests use them to force an interleaving of ranks that is otherwise rare. The points are:

    - save: before a save begins.
    - stage-clean: before the stage directory is cleaned.
    - stage-open (step 0): before a node's owner opens its stage dir at start-up.
    - staged: after the write into the stage dir, before the copy to the checkpoint dir.
    - mkdir: before a rank creates a checkpoint directory.
    - mkdir-exists: after it found the directory already there, before it checks it again.
    - saved: at the end of an async save's background thread, its result ready.
    - prune-delete: before the trees a save's prune put out of sight are deleted, behind the save.
    - step: every training step, e.g. step:*:*:0.2 for a slower model.

    `*` matches any step or rank."""
    for spec in filter(None, os.environ.get("RESTARTLAB_DELAY", "").split(",")):
        p, s, r, secs = spec.split(":")
        if p == point and s in ("*", str(step)) and r in ("*", str(rank)):
            if "*" not in (s, r):  # a wildcard (step:*:*:0.2, a slower model) is not logged
                print(f"DELAY {point} at step={step} rank={rank}: {secs}s", flush=True)
            time.sleep(float(secs))


def trace(point: str, step: int, rank: int):
    """Test-only: with RESTARTLAB_TRACE=FILE, rank 0 appends "<time> <point> <step>" at each
    phase of a save (the kill-anywhere fuzzer tells from it where each kill landed). Read at each
    call, like the others: a warm rank (forked from a pool that imported this module) has its
    attempt's environment only in os.environ."""
    path = os.environ.get("RESTARTLAB_TRACE")
    if path and rank == 0:
        with open(path, "a") as f:
            f.write(f"{time.time():.6f} {point} {step}\n")
