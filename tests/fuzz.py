"""Kill anywhere: SIGKILL all ranks of a training run at random times, again and again, across
sync and async checkpointing, FSDP (4 ranks) and 2x2 FSDP+TP. Then check that every relaunch
resumed from the newest complete checkpoint and that `--keep` held. Also check that every step's
loss and the final parameters equal a failure-free run. There is one such run per layout. Sync and
async checkpointing train alike, so the async configurations are held to the sync one's run.

    python -m tests.fuzz --kills 100 [--seed 1]        (make fuzz N=100)

Kill times:
- 20% uniform over an attempt's start-up, right after a relaunch (imports, rendezvous, the
  checkpoint load).
- 40% uniform over its training part.
- 40% aimed into a save: a random save of the attempt, at a uniform delay within the save's length.

Where each kill landed comes from rank 0's trace of the save phases (RESTARTLAB_TRACE).

--warm forks every rank from a standby pool (restartlab.runtime.warm, tests/helpers.trainer_pool).
An attempt's start-up is then its rendezvous, model build and checkpoint load, without the ~2.5 s
of imports. A kill reaches a rank through its stub: the pool SIGKILLs the rank on the stub's death.
make test's short run is warm. The cold start-up's kills stay in the default."""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter

from restartlab.contracts import ckptdir, layout
from restartlab.runtime import killer
from tests.helpers import check_warm, final_crc, losses, rows, stop_trainer_pool, trainer_cmd, trainer_pool

RANKS, ITERS, SAVE_EVERY, KEEP = 4, 24, 3, 2
CONFIGS = [("sync", 1), ("async", 1), ("sync", 2), ("async", 2)]  # (checkpointing, tp)
# async with no stage dir (straight into the checkpoint dir): `--config direct:1` and the like;
# a -raw mode writes --ckpt-format raw
MORE_CONFIGS = [("direct", 1), ("direct", 2), ("sync-raw", 2), ("async-raw", 1), ("direct-raw", 2)]
MAX_ATTEMPTS = 60


def trainer_args(d, mode, tp):
    a = ["--model", "tiny", "--train-iters", str(ITERS), "--save-interval", str(SAVE_EVERY), "--keep", str(KEEP),
         "--tp", str(tp), "--ckpt-dir", os.path.join(d, "ckpts"), "--outdir", os.path.join(d, "out"),
         "--log-interval", "1000", "--pg-timeout", "60"]
    if mode.endswith("-raw"):
        mode, a = mode[:-len("-raw")], a + ["--ckpt-format", "raw"]
    stage = {"async": os.path.join(d, "stage"), "direct": "none"}.get(mode)
    return a + (["--async-ckpt", "--ckpt-stage-dir", stage] if stage else [])


def launch(d, mode, tp, tag, log, warm):
    env = {"RESTARTLAB_TRACE": os.path.join(d, "trace.txt")}
    return subprocess.Popen(trainer_cmd(RANKS, trainer_args(d, mode, tp), tag, env, warm_ranks=warm), stdout=log,
                            stderr=subprocess.STDOUT)


def where(trace_path, t_launch, t_kill, rows_before):
    """Where a kill landed.
    It is the phase of a save still open at t_kill, else between saves. It is the start-up when the
    attempt had not finished a step yet."""
    last = {}
    try:
        with open(trace_path) as f:
            for line in f:
                t, point, step = line.split()
                if t_launch <= float(t) <= t_kill and point != "loop-resumed":
                    last[int(step)] = point
    except OSError:
        pass
    open_saves = [p for s, p in sorted(last.items()) if p != "complete"]
    if open_saves:
        return f"in save: {open_saves[-1]}"
    return "between saves" if rows_before else "start-up (right after a launch)"


def _sleep_until(p, t):
    while p.poll() is None and time.time() < t:
        time.sleep(0.002)


def _wait_for_save(p, trace_path, t0, step):
    """Until rank 0's trace shows the save of `step` begun in this attempt (or the run ended)."""
    while p.poll() is None:
        try:
            with open(trace_path) as f:
                for line in f:
                    t, point, s = line.split()
                    if float(t) >= t0 and int(s) == step:
                        return
        except OSError:
            pass
        time.sleep(0.002)


def check_keep(ckpt):
    """--keep under kills: at most KEEP (+1 between a marker and its prune) complete; nothing
    incomplete older than the newest complete; the newest complete verifies."""
    complete = ckptdir.complete_steps(ckpt)
    if not complete:
        return None
    if len(complete) > KEEP + 1:
        return f"{len(complete)} complete checkpoints with --keep {KEEP}: {complete}"
    stale = [s for s in ckptdir.list_steps(ckpt) if s < complete[-1] and s not in complete]
    if stale:
        return f"incomplete directories older than the newest complete: {stale}"
    return ckptdir.verify_manifest(ckptdir.step_path(ckpt, complete[-1]), checksums=True)


def one_run(cfg, ref, rng, kills_left, stats, workdir, say, warm):
    mode, tp = cfg
    d = tempfile.mkdtemp(prefix=f"fuzz-{mode}-tp{tp}-", dir=workdir)
    metrics = os.path.join(d, "out", layout.metrics_name(0))
    trace, seen = os.path.join(d, "trace.txt"), []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        expect = ckptdir.newest_complete_step(os.path.join(d, "ckpts"))
        tag = f"fuzz-{uuid.uuid4().hex[:8]}"
        logpath = os.path.join(d, f"attempt-{attempt}.log")
        n_rows = len(rows(metrics))
        with open(logpath, "w") as log:
            t0 = time.time()
            p = launch(d, mode, tp, tag, log, warm)
            killed = None
            if kills_left > 0:
                u = rng.random()
                # saves still to come (none when the last step's checkpoint is already complete:
                # a kill after it landed leaves a relaunch with nothing to save)
                saves = [s for s in range(SAVE_EVERY, ITERS + 1, SAVE_EVERY) if s > (expect or 0)]
                if u < 0.2:
                    _sleep_until(p, t0 + rng.uniform(0, ref["startup"]))
                elif u < 0.6 or not saves:
                    _sleep_until(p, t0 + ref["startup"] + rng.uniform(0, ref["train"]))
                else:
                    _wait_for_save(p, trace, t0, rng.choice(saves))
                    _sleep_until(p, time.time() + rng.uniform(0, 1.2 * save_length(ref, trace, t0, seen)))
                if p.poll() is None:
                    t_kill = time.time()
                    receipt = killer.kill_ranks(tag)
                    killed = where(trace, t0, t_kill, len(rows(metrics)) > n_rows)
                    if not receipt.pids:
                        killed = None
            try:
                p.wait(timeout=600)
            finally:
                killer.kill_ranks(tag)
            seen += save_spans(trace, t0)
        out = open(logpath).read()
        check_warm(out, warm)
        resumed = [int(line.split("step=")[1]) for line in out.splitlines() if "RESUMED from step=" in line]
        if resumed and resumed[0] != expect or not resumed and expect is not None and "TRAINING DONE" in out:
            stats["bad_resume"].append(f"{d} attempt {attempt}: resumed {resumed} but newest complete was {expect}")
        if resumed:
            stats["resumes"] += 1
        if killed:
            stats["kills"] += 1
            stats["where"][killed] += 1
            kills_left -= 1
            problem = check_keep(os.path.join(d, "ckpts"))
            if problem:
                stats["keep"].append(f"{d} after kill {stats['kills']}: {problem}")
            continue
        if p.returncode == 0 and "TRAINING DONE" in out:
            break
        stats["crashes"].append(f"{logpath}: rc {p.returncode} without an injected kill:\n{out[-1500:]}")
        break
    got = losses(metrics)
    wrong = [(it, loss, ref["losses"].get(it)) for it, loss in got if loss != ref["losses"].get(it)]
    missing = sorted(set(ref["losses"]) - {it for it, _ in got})
    exact = bool(got) and not wrong and not missing and final_crc(metrics) == ref["crc"]
    stats["runs"].append({"config": f"{mode} tp{tp}", "attempts": attempt, "bit_exact": exact})
    say(f"  {mode:5s} tp{tp}: {attempt} attempt(s), bit-exact {'yes' if exact else 'NO'}")
    if exact:
        shutil.rmtree(d, ignore_errors=True)
    else:  # kept for a look: which steps differ, and the run's own files
        keep = shutil.copytree(d, os.path.join(tempfile.gettempdir(), "rl-fuzz-kept-" + os.path.basename(d)))
        say(f"    kept {keep}: {len(wrong)} step(s) differ {wrong[:3]}, missing {missing[:5]}, "
            f"final crc {final_crc(metrics)} vs {ref['crc']}")
        stats["not_exact"].append(keep)
        shutil.rmtree(d, ignore_errors=True)
    return kills_left


def save_spans(trace_path, since=0.0):
    """The length of each save a trace shows complete from `since` on (first to last point of
    its step)."""
    points, complete = {}, set()
    try:
        with open(trace_path) as f:
            for line in f:
                t, point, step = line.split()
                if float(t) >= since:
                    points.setdefault(int(step), []).append(float(t))
                    if point == "complete":
                        complete.add(int(step))
    except OSError:
        pass
    return [max(points[s]) - min(points[s]) for s in complete]


def save_length(ref, trace_path, t0, seen):
    """How long a save of this configuration takes: its reference's median.
    A configuration whose reference is shared (async beside sync) takes the median of the saves
    its own run has completed so far. These are `seen` (earlier attempts) and this attempt's from
    t0 on. Before its run has any, it takes its twin's."""
    if ref["save"] is not None:
        return ref["save"]
    own = seen + save_spans(trace_path, t0)
    return statistics.median_high(own) if own else ref["twin_save"]


def reference(cfg, workdir, warm):
    mode, tp = cfg
    d = tempfile.mkdtemp(prefix=f"ref-{mode}-tp{tp}-", dir=workdir)
    tag = f"fuzz-ref-{uuid.uuid4().hex[:6]}"
    t0 = time.time()
    with open(os.path.join(d, "ref.log"), "w") as log:
        p = launch(d, mode, tp, tag, log, warm)
        p.wait(timeout=600)
    killer.kill_ranks(tag)
    wall = time.time() - t0
    raw = [json.loads(line) for line in open(os.path.join(d, "out", layout.metrics_name(0)))]
    first = min(r["timestamp"] for r in raw if "train/loss" in r["metrics"])
    last = max(r["timestamp"] for r in raw)
    ref = {"save": statistics.median_high(save_spans(os.path.join(d, "trace.txt"))),
           "losses": dict(losses(os.path.join(d, "out", layout.metrics_name(0)))),
           "crc": final_crc(os.path.join(d, "out", layout.metrics_name(0))),
           "startup": first - t0, "train": max(0.2, last - first), "wall": wall}
    out = open(os.path.join(d, "ref.log")).read()
    check_warm(out, warm)
    assert p.returncode == 0 and ref["crc"], out[-2000:]
    shutil.rmtree(d, ignore_errors=True)
    return ref


def run(kills: int, seed: int = 1, configs=CONFIGS, say=print, warm=False) -> dict:
    rng = random.Random(seed)
    stats = {"kills": 0, "resumes": 0, "where": Counter(), "crashes": [], "bad_resume": [], "keep": [],
             "runs": [], "not_exact": []}
    workdir = tempfile.mkdtemp(prefix="rl-fuzz-")
    if warm:
        trainer_pool()  # ready before the first reference's clock starts (its start-up sets the kill windows)
    try:
        refs = {}
        for cfg in configs:
            # Sync and async checkpointing of one layout train alike, so one reference serves both.
            # It gives the losses, parameters and timings. The save's length comes from the run
            # itself (save_length).
            twin = next((c for c in refs if c[1] == cfg[1] and refs[c]["save"] is not None), None)
            if twin:
                refs[cfg] = dict(refs[twin], save=None, twin_save=refs[twin]["save"])
                say(f"reference {cfg[0]} tp{cfg[1]}: {twin[0]} tp{twin[1]}'s (the same training)")
                continue
            refs[cfg] = reference(cfg, workdir, warm)
            say(f"reference {cfg[0]} tp{cfg[1]}: start-up {refs[cfg]['startup']:.1f} s, training "
                f"{refs[cfg]['train']:.1f} s, a save {refs[cfg]['save']:.2f} s")
        i = 0
        # Every configuration runs at least once, however the kills fall. A kill that lands in a
        # start-up makes a run longer, so the count of runs for N kills depends on the load.
        while stats["kills"] < kills or i < len(configs):
            cfg = configs[i % len(configs)]
            i += 1
            per_run = rng.randint(1, 4)  # kills in this run before it may finish
            one_run(cfg, refs[cfg], rng, max(1, min(per_run, kills - stats["kills"])), stats, workdir, say, warm)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    stats["bit_exact"] = all(r["bit_exact"] for r in stats["runs"])
    return stats


def summary(stats) -> str:
    inside = sum(n for w, n in stats["where"].items() if w.startswith("in save"))
    lines = [f"kills: {stats['kills']} (inside a save: {inside})"]
    for w, n in sorted(stats["where"].items()):
        lines.append(f"  {w:32s} {n}")
    lines += [f"resumes: {stats['resumes']}", f"runs: {len(stats['runs'])}, bit-exact: "
              f"{'yes' if stats['bit_exact'] else 'NO'}",
              f"crashes that were not injected: {len(stats['crashes'])}",
              f"resumes not from the newest complete checkpoint: {len(stats['bad_resume'])}",
              f"--keep violations: {len(stats['keep'])}"]
    for k in ("crashes", "bad_resume", "keep", "not_exact"):
        lines += [f"  {k}: {x}" for x in stats[k][:5]]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", action="append", choices=[f"{m}:{t}" for m, t in CONFIGS + MORE_CONFIGS],
                   help="only these (checkpointing:tp), e.g. sync:1; default: all four")
    p.add_argument("--warm", action="store_true", help="fork the ranks from a standby pool (no imports)")
    a = p.parse_args(argv)
    t0 = time.time()
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in a.config] if a.config else CONFIGS
    try:
        stats = run(a.kills, a.seed, configs, warm=a.warm)
    finally:
        stop_trainer_pool()
    print(summary(stats))
    print(f"({time.time() - t0:.0f} s, {RANKS} ranks, seed {a.seed})")
    ok = stats["bit_exact"] and not (stats["crashes"] or stats["bad_resume"] or stats["keep"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
