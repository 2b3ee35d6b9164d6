"""Restart, launch -> first productive step after a resume (train/restart_seconds, measured from
RESTARTLAB_LAUNCH_TS set just before mpiexec), three ways side by side in one run, same ranks,
same checkpoint:

- the floor: a bare `import torch` under the same launcher and ranks (launch -> every rank has
  imported) + one training step: what a cold restart cannot get under;
- cold: today's relaunch (every rank starts Python and imports torch and the trainer);
- warm: through restartlab.runtime.warm's standby pool (relaunch.warm): the launcher starts stubs, the
  pool forks each rank from its preloaded imports.

For the `tiny` preset (~1 MB checkpoint: the restart is all start-up) and the `small` one
(~300 MB with its optimizer state: the load is in it). Usage:
python bench/cold_restart.py [--ranks 4] [--repeats 3] [--models tiny,small]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from restartlab import launchers, programs
from restartlab.contracts import layout
from restartlab.runtime.warm import standby
from restartlab.tools.launch import LaunchSpec

KEYS = ["train/restart_seconds", "startup/import_s", "startup/dist_init_s", "startup/build_s",
        "startup/load_s", "startup/first_step_s"]


def measure(model: str, ranks: int, repeats: int, d: str) -> dict:
    ck = os.path.join(d, f"ck-{model}")
    trainer = [sys.executable, "-m", "restartlab.trainer", "--model", model, "--save-interval", "5",
               "--ckpt-dir", ck, "--log-interval", "1000"]

    def launch(extra, out, pool=None):  # a fresh rendezvous port per attempt, as the relaunch loop does
        spec = LaunchSpec(python=sys.executable, program=(*trainer, *extra, "--outdir", out), launcher="hydra",
                          ranks_per_node=ranks, env=launchers.local_rendezvous_env())
        argv = spec.stub_argv(pool.dir) if pool else spec.argv()
        env = dict(os.environ, RESTARTLAB_LAUNCH_TS=f"{time.time():.6f}")
        subprocess.run(argv, check=True, capture_output=True, env=env)
        shutil.rmtree(os.path.join(ck, "step-00000006"), ignore_errors=True)  # the next one resumes from 5 again
        if extra[-1] == "6":
            with open(layout.Attempt(out).metrics(0)) as f:
                return json.loads(f.readline())["metrics"]

    launch(["--train-iters", "5"], os.path.join(d, f"o-{model}-0"))
    ckpt_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(ck) for f in fs)
    cold, warm_rows = [], []
    pool = standby.Standby(sys.executable, f"rl-bench-{os.getpid()}", os.path.join(d, "pool.log"),
                           programs.ADAPTERS.get("restartlab").preload)  # the bundled trainer's warm-up module
    try:
        t0 = time.time()
        pool.wait_ready(600)
        preload_s = time.time() - t0
        for i in range(repeats):  # interleaved: the machine's load drifts alike for both
            cold.append(launch(["--train-iters", "6"], os.path.join(d, f"c-{model}-{i}")))
            row = launch(["--train-iters", "6"], os.path.join(d, f"w-{model}-{i}"), pool)
            if row.get("startup/warm") != 1:
                raise SystemExit(f"bench: the warm attempt {i} did not start from the pool (see {pool.log_path})")
            warm_rows.append(row)
    finally:
        pool.stop()
    bare = []
    for _ in range(repeats):
        argv = launchers.build("hydra", nodes=1, ppn=ranks, rank_env=launchers.local_rendezvous_env())
        t0 = time.time()
        subprocess.run(argv + [sys.executable, "-c", "import torch"], check=True, capture_output=True)
        bare.append(time.time() - t0)
    med = {k: statistics.median(r[k] for r in cold) for k in KEYS}
    wmed = {k: statistics.median(r[k] for r in warm_rows) for k in KEYS}
    floor = statistics.median(bare) + med["startup/first_step_s"]
    return dict(med, floor_s=floor, bare_import_s=statistics.median(bare),
                ratio_to_floor=med["train/restart_seconds"] / floor,
                warm_restart_s=wmed["train/restart_seconds"], warm_startup=wmed,
                warm_ratio_to_floor=wmed["train/restart_seconds"] / floor,
                warm_ratio_to_cold=wmed["train/restart_seconds"] / med["train/restart_seconds"],
                pool_preload_s=preload_s, ckpt_bytes=ckpt_bytes, ranks=ranks, repeats=repeats)


def show(model: str, r: dict) -> None:
    print(f"restart, {model} preset ({r['ckpt_bytes'] / 1e6:.1f} MB checkpoint), {r['ranks']} ranks, CPU/gloo, "
          f"median of {r['repeats']}:")
    print(f"  {'':24s} {'cold':>8s} {'warm':>8s}")
    for k in KEYS:
        print(f"  {k:24s} {r[k]:8.3f} {r['warm_startup'][k]:8.3f}")
    print(f"  floor: bare `import torch` under the launcher {r['bare_import_s']:.3f} s + one step "
          f"{r['startup/first_step_s']:.3f} s = {r['floor_s']:.3f} s")
    print(f"  cold restart / floor {r['ratio_to_floor']:.2f}x (target <= 1.5x: "
          f"{'met' if r['ratio_to_floor'] <= 1.5 else 'MISSED'})")
    print(f"  warm restart / floor {r['warm_ratio_to_floor']:.2f}x (target < 1.0x: "
          f"{'met' if r['warm_ratio_to_floor'] < 1.0 else 'MISSED'}); warm / cold {r['warm_ratio_to_cold']:.2f}x "
          f"(target <= 0.5x: {'met' if r['warm_ratio_to_cold'] <= 0.5 else 'MISSED'}); the pool's preload took "
          f"{r['pool_preload_s']:.2f} s alone, once per phase (beside its first attempt)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", default="tiny,small")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="rl-cold-")
    try:
        by_model = {}
        for m in a.models.split(","):
            by_model[m] = measure(m, a.ranks, a.repeats, d)
            show(m, by_model[m])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if a.json:
        first = by_model[a.models.split(",")[0]]  # the headline figures: the first model's (tiny)
        with open(a.json, "w") as f:
            json.dump(dict(first, target_ratio=1.5, warm_target_ratio=1.0, models=by_model), f, indent=1)


if __name__ == "__main__":
    main()
