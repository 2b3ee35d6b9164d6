"""The async stage-dir race as a user met it, N times: 4 ranks, async checkpoints every 2 steps,
SIGKILL of all ranks after step 9, then the same command again. Before the fix about 1
relaunch in 7 died with FileExistsError in DCP's mkdir.

    python -m tests.race_repro --runs 30
"""
import argparse
import shutil
import sys
import tempfile

from tests.helpers import run_trainer, start_and_kill_at


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args(argv)
    bad = 0
    for i in range(a.runs):
        d = tempfile.mkdtemp(prefix="rl-race-")
        args = ["--model", "tiny", "--train-iters", "16", "--save-interval", "2", "--async-ckpt",
                "--ckpt-stage-dir", f"{d}/stage", "--ckpt-dir", f"{d}/ckpts", "--outdir", f"{d}/out",
                "--log-interval", "1000"]
        receipt, _, _ = start_and_kill_at(4, args, f"{d}/out/metrics-0.jsonl", 9)
        r = run_trainer(4, args)
        ok = r.returncode == 0 and "TRAINING DONE" in r.stdout and "Error" not in r.stdout
        bad += not ok
        print(f"run {i + 1}: {'ok' if ok else 'FAILED'} (killed {len(receipt['pids'])} ranks)"
              + ("" if ok else f"\n{r.stdout[-1500:]}"), flush=True)
        shutil.rmtree(d, ignore_errors=True)
    print(f"{a.runs - bad}/{a.runs} relaunches completed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
