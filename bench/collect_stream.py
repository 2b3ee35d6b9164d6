"""Collector streaming benchmark: `restartlab report --no-plots` over a synthetic experiment of
A attempts x R metric rows. The rows are trainer-shaped, with a save every 10 steps and an injection
per attempt. One run covers two sizes: the small one has the same attempts and 10x fewer rows each.
For each size it prints wall seconds, rows/s and peak RSS of the report process. It also prints the
ratio of peak RSS between the sizes; a streaming collector keeps it near 1. Then it runs the big
size again under the collector of --against, on the same files in the same run. --against is a git
revision. The default is the tree before the read model of issue 35, which read each file several
times. The speed-up is the result, because the machine is shared and noisy.

Target (issue 35): 1,000 attempts / 1M rows in <= 5 s, memory that does not grow with rows.
Usage: python bench/collect_stream.py [--attempts 1000] [--rows-per-attempt 1000] [--small 0.1]
                                      [--against REV | --against none]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from restartlab.contracts import layout
from restartlab.contracts.summary import Summary

TARGET_S = 5.0
BEFORE = "5e3857e"  # the last commit before the read model (issue 35)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_expt(root, attempts, rows_per_attempt):
    """An experiment dir with one phase `sync`.

    Each attempt resumes from the last multiple of 10 below where the previous one stopped.
    This exercises lost steps and recompute."""
    ph = os.path.join(root, "sync")
    t, it = 1.0e9, 0
    inj = []
    for k in range(1, attempts + 1):
        d = layout.Phase(ph).attempt(k).path
        os.makedirs(d)
        resumed = (it // 10) * 10
        it = resumed
        launch = t
        t += 1.0
        lines = []
        for j in range(rows_per_attempt):
            it += 1
            t += 0.01
            m = {"train/iter": it, "train/loss": 2.0 + 1.0 / it, "train/dt": 0.009}
            if j == 0:
                m.update({"startup/import_s": 0.5, "startup/launch_ts": launch,
                          "train/restart_seconds": t - launch})
                if resumed:
                    m["train/resumed_from"] = resumed
            if it % 10 == 0:
                m["train/ckpt_save_seconds"] = 0.05
            lines.append(json.dumps({"timestamp": t, "rank": 0, "metrics": m}))
        last = k == attempts
        if last:
            lines.append(json.dumps({"timestamp": t, "rank": 0,
                                     "metrics": {"train/iter": it, "train/params_crc": "0"}}))
        with open(layout.Attempt(d).metrics(0), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(layout.Attempt(d).record, "w") as f:
            json.dump({"launch_ts": launch, "end_ts": t + 0.005, "exit_code": 0 if last else 137,
                       "completed": last}, f)
        if not last:
            inj.append(json.dumps({"time": t + 0.005, "killed": 1}))
    with open(layout.Phase(ph).injections, "w") as f:
        f.write("\n".join(inj) + "\n")
    return attempts * rows_per_attempt


def measure(expt, code=ROOT):
    """Run the report of the restartlab in `code` (a directory holding its package) in a child;
    (wall s, peak RSS MiB) of that child alone."""
    cmd = [sys.executable, "-m", "restartlab.cli", "report", expt, "--no-plots", "--expect", "sync"]
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: the child never blocks on it
        t0 = time.perf_counter()
        # -m puts the working directory first on sys.path: `code`'s restartlab is the one imported
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=code)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        rc = p.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4, tell Popen
        if rc != 0:
            err.seek(0)
            raise SystemExit(f"report failed (rc {rc}): {err.read().decode()[-2000:]}")
    return wall, ru.ru_maxrss / 1024.0


def checkout(rev, into) -> bool:
    """The restartlab package of git revision `rev` under `into` (False: no git, or no such revision)."""
    try:
        tar = subprocess.run(["git", "-C", ROOT, "archive", rev, "restartlab"], capture_output=True, timeout=120)
    except OSError:
        return False
    if tar.returncode != 0:
        print(f"  --against {rev}: {tar.stderr.decode().strip()[:200]}: not measured", flush=True)
        return False
    subprocess.run(["tar", "-x", "-C", into], input=tar.stdout, check=True)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attempts", type=int, default=1000)
    ap.add_argument("--rows-per-attempt", type=int, default=1000)
    ap.add_argument("--small", type=float, default=0.1, help="rows per attempt of the small size, as a fraction of the big one")
    ap.add_argument("--against", default=BEFORE, help="a git revision whose collector reads the big size too "
                    f"(default {BEFORE}: the code before the read model); none: skip")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="rl-bench-collect-")
    out = {}
    try:
        # same attempts, rows per attempt scaled: the RSS ratio isolates growth with rows
        sizes = (("small", max(10, int(a.rows_per_attempt * a.small))), ("big", a.rows_per_attempt))
        att = a.attempts
        for name, per in sizes:
            d = os.path.join(root, name)
            t0 = time.perf_counter()
            n = make_expt(d, att, per)
            gen = time.perf_counter() - t0
            wall, rss = measure(d)
            summ = Summary.read(layout.Expt(d).summary).phases[0]
            assert summ.attempts == att and summ.kills == att - 1, summ
            out[name] = {"attempts": att, "rows": n, "wall_s": wall, "peak_rss_mib": rss,
                         "rows_per_s": n / wall}
            print(f"  {name:5s} {att:5d} attempts {n:9,d} rows  report {wall:6.2f} s "
                  f"({n / wall:,.0f} rows/s)  peak RSS {rss:6.1f} MiB   (generated in {gen:.1f} s)",
                  flush=True)
            old = os.path.join(root, "against")
            if name == "big" and a.against != "none" and os.makedirs(old) is None and checkout(a.against, old):
                wall_b, rss_b = measure(d, code=old)
                out["before"] = {"rev": a.against, "rows": n, "wall_s": wall_b, "peak_rss_mib": rss_b}
                out["speedup"] = wall_b / wall
                print(f"  big under {a.against}: report {wall_b:6.2f} s  peak RSS {rss_b:6.1f} MiB: "
                      f"{wall_b / wall:.2f}x the time of this tree's", flush=True)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    big, small = out["big"], out["small"]
    ratio = big["peak_rss_mib"] / small["peak_rss_mib"]
    print(f"  big: {big['rows']:,} rows in {big['wall_s']:.2f} s (target <= {TARGET_S:g} s: "
          f"{'met' if big['wall_s'] <= TARGET_S else 'MISSED'})")
    print(f"  peak RSS big/small: {ratio:.2f}x for {big['rows'] / small['rows']:.0f}x the rows "
          f"(streaming: near 1)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(out, rss_ratio=ratio), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
