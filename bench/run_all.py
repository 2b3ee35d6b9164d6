"""`make bench`: every benchmark in bench/, one after another, each printing its own figures.
Ratios measured within one run are the results; absolute seconds depend on the machine's load."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = [
    ("async checkpoint: sync save vs async stall vs floor vs vanilla dcp.async_save",
     ["async_ckpt.py", "--ranks", "4", "--repeats", "5"]),
    ("collector streaming: 1,000 attempts / 1M rows", ["collect_stream.py"]),
    ("cold restart: launch -> first step after resume", ["cold_restart.py", "--ranks", "4"]),
    ("load with checksums verified vs plain dcp.load", ["load_verify.py", "--ranks", "4", "--repeats", "5"]),
    ("restartlab simulate: 100,000 failures; 16k GPUs x 20 intervals", ["simulate_speed.py"]),
]


def main():
    failed = []
    for title, argv in BENCHES:
        print(f"== {title}\n   python bench/{' '.join(argv)}", flush=True)
        r = subprocess.run([sys.executable, os.path.join(HERE, argv[0])] + argv[1:])
        if r.returncode != 0:
            failed.append(argv[0])
        print(flush=True)
    if failed:
        print(f"bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
