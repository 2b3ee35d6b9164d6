"""Cold restart of the `tiny` preset on N ranks: launch -> first productive step after a resume
(train/restart_seconds, measured from RESTARTLAB_LAUNCH_TS set just before mpiexec), with the
startup breakdown. Usage: python bench/cold_restart.py [--ranks 4] [--repeats 3]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from restartlab import launchers, layout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="rl-cold-")
    trainer = [sys.executable, "-m", "restartlab.trainer", "--model", "tiny", "--save-interval", "5",
               "--ckpt-dir", os.path.join(d, "ck"), "--log-interval", "1000"]

    def attempt(extra, env=None):  # a fresh rendezvous port per attempt, as the relaunch loop does
        argv = launchers.build("hydra", nodes=1, ppn=a.ranks, rank_env=launchers.local_rendezvous_env())
        subprocess.run(argv + trainer + extra, check=True, capture_output=True, env=env)

    attempt(["--train-iters", "5", "--outdir", os.path.join(d, "o0")])
    results = []
    for i in range(a.repeats):
        out = os.path.join(d, f"o{i + 1}")
        attempt(["--train-iters", "6", "--outdir", out], env=dict(os.environ, RESTARTLAB_LAUNCH_TS=f"{time.time():.6f}"))
        first = json.loads(open(layout.Attempt(out).metrics(0)).readline())["metrics"]
        results.append(first)
        shutil.rmtree(os.path.join(d, "ck", "step-00000006"), ignore_errors=True)
    keys = ["train/restart_seconds", "startup/import_s", "startup/dist_init_s", "startup/build_s",
            "startup/load_s", "startup/first_step_s"]
    # the floor, measured in the same run: a bare `import torch` under the same launcher and
    # ranks (launch -> every rank has imported), + the checkpoint's bytes at the page cache's read
    # speed (warm; the tiny checkpoint is ~2 MB: negligible), + one training step
    bare = []
    for _ in range(a.repeats):
        argv = launchers.build("hydra", nodes=1, ppn=a.ranks, rank_env=launchers.local_rendezvous_env())
        t0 = time.time()
        subprocess.run(argv + [sys.executable, "-c", "import torch"], check=True, capture_output=True)
        bare.append(time.time() - t0)
    med = {k: statistics.median(r[k] for r in results) for k in keys}
    floor = statistics.median(bare) + med["startup/first_step_s"]
    ratio = med["train/restart_seconds"] / floor
    print(f"cold restart, tiny preset, {a.ranks} ranks, CPU/gloo, median of {a.repeats}:")
    for k in keys:
        print(f"  {k:24s} {med[k]:7.3f} s")
    print(f"  floor: bare `import torch` under the launcher {statistics.median(bare):.3f} s + one step "
          f"{med['startup/first_step_s']:.3f} s = {floor:.3f} s; restart / floor {ratio:.2f}x "
          f"(target <= 1.5x: {'met' if ratio <= 1.5 else 'MISSED'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(med, floor_s=floor, bare_import_s=statistics.median(bare), ratio_to_floor=ratio,
                           target_ratio=1.5), f, indent=1)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
