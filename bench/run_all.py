"""`make bench`: run every benchmark in bench/, one after another.

Each benchmark prints its own figures. A results.json then holds every benchmark's figures, with the
date and the machine. The results are the ratios measured within one run. Absolute seconds depend on
the machine's load.

A run writes build/bench/results.json and leaves the tree alone. `make bench PUBLISH=1` (--publish)
writes the committed bench/results.json. It also regenerates the page of figures made from it
(docs/reference/benchmarks.md). `--only NAME...` runs only those benchmarks. When published, their
entries replace the committed ones and the rest stay as their run left them. Each replaced entry is
stamped with the date it was re-run, and the page says so."""
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = [
    ("async checkpoint: sync save vs async stall vs floor vs vanilla dcp.async_save",
     ["async_ckpt.py", "--ranks", "4", "--repeats", "9"]),
    ("sync save and load against the file system's own bandwidth (dd floors)",
     ["save_efficiency.py", "--ranks", "4", "--repeats", "3"]),
    ("injector latencies (a real restartlab run, gated kills)", ["injector_latency.py"]),
    ("scaling: sync save and verified load against checkpoint size and 1, 2, 4 ranks",
     ["scaling.py", "--repeats", "3"]),
    ("checkpoint I/O by size: per-byte and fixed cost against the floors (width sweep), per-tensor cost "
     "(layers sweep), up to 2.6 GB", ["ckpt_sizes.py", "--repeats", "2"]),
    ("async save's whole cost: stall + background interference, thread vs process",
     ["interference.py", "--ranks", "4", "--repeats", "3"]),
    ("collector streaming: 1,000 attempts / 1M rows", ["collect_stream.py"]),
    ("cold restart: launch -> first step after resume", ["cold_restart.py", "--ranks", "4"]),
    ("load with checksums verified vs plain dcp.load", ["load_verify.py", "--ranks", "4", "--repeats", "5"]),
    ("restartlab simulate: 100,000 failures; 16k GPUs x 20 intervals", ["simulate_speed.py"]),
    ("training-state fingerprints: the probe's share of a step (small model, CPU)",
     ["state_probe.py", "--steps", "6", "--repeats", "3"]),
    ("storage faults' preload, nothing armed: a dcp.save and 4 KiB writes against the plain ones (A/A noise)",
     ["iofault_cost.py"]),
]


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="bench/run_all.py")
    p.add_argument("--publish", action="store_true", help="write bench/results.json and its docs page")
    p.add_argument("--only", nargs="+", metavar="NAME", choices=[b[1][0][:-3] for b in BENCHES],
                   help="run only these benchmarks (file names without .py); their entries replace those of "
                        "the results file, dated, the rest are kept")
    a = p.parse_args(argv)
    root = os.path.dirname(HERE)
    dest = os.path.join(HERE, "results.json") if a.publish else os.path.join(root, "build", "bench", "results.json")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    failed, results = [], {}
    tmp = tempfile.mkdtemp(prefix="rl-bench-json-")
    for title, argv in [b for b in BENCHES if not a.only or b[1][0][:-3] in a.only]:
        print(f"== {title}\n   python bench/{' '.join(argv)}", flush=True)
        out = os.path.join(tmp, argv[0] + ".json")
        r = subprocess.run([sys.executable, os.path.join(HERE, argv[0])] + argv[1:] + ["--json", out])
        if r.returncode != 0:
            failed.append(argv[0])
        elif os.path.exists(out):
            with open(out) as f:
                results[argv[0][:-3]] = dict(json.load(f), command="python bench/" + " ".join(argv))
        print(flush=True)
    now = datetime.datetime.now().isoformat(timespec="seconds")
    run = {"date": now, "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                    "python": platform.python_version()},
           "failed": failed, "benchmarks": results}
    if a.only and os.path.exists(dest):
        with open(dest) as f:
            kept = json.load(f)
        for name, b in results.items():
            kept["benchmarks"][name] = dict(b, date=now)
        run = kept
    with open(dest, "w") as f:
        json.dump(run, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"bench: figures in {dest}")
    if a.publish:
        subprocess.run([sys.executable, "-m", "restartlab.reference", os.path.join(root, "docs", "reference")],
                       cwd=root, check=False)
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
