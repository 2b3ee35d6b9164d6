"""What the multi-rank benchmarks share: their flags, and running their own file as a worker.

The worker runs under `mpiexec`. Rank 0 prints one JSON `BENCH` line, which comes back as a dict."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--model", default="small")
    p.add_argument("--dir", default=None, help="where the checkpoints go (default: a temp dir, removed)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def model_config(name: str):
    """A model preset by name, or a preset grown for the size sweep.

    - `small:layers=K` has K x its layers: more tensors, each the same size.
    - `small:width=K` has K x its width and FFN width: the same tensors, each larger.
      This measures the per-byte cost apart from the per-tensor one."""
    import dataclasses

    from restartlab.trainer.model import PRESETS
    base, _, grow = name.partition(":")
    cfg = PRESETS[base]
    if not grow:
        return cfg
    how, _, k = grow.partition("=")
    k = int(k)
    if how == "layers":
        return dataclasses.replace(cfg, n_layers=cfg.n_layers * k)
    if how == "width":
        return dataclasses.replace(cfg, dim=cfg.dim * k, ffn_dim=cfg.ffn_dim * k)
    raise ValueError(f"{name}: grow by layers=K or width=K")


def emit(result: dict) -> None:
    """Rank 0 of a worker: hand the figures back to the driver."""
    print("BENCH " + json.dumps(result), flush=True)


def run_workers(a, script: str, title: str):
    """Run `script --worker` on a.ranks local ranks.

    Returns its BENCH dict, with the median of each result list added as "medians".
    Returns None when the worker fails; its output then goes to stderr."""
    from restartlab import launchers
    d = a.dir or tempfile.mkdtemp(prefix="rl-bench-")
    # one rank needs no launcher (a GPU machine without MPI): the trainer's code runs as world 1
    argv = [] if a.ranks == 1 else launchers.build("hydra", nodes=1, ppn=a.ranks,
                                                   rank_env=launchers.local_rendezvous_env())
    argv += [sys.executable, os.path.abspath(script), "--worker", "--dir", d, "--model", a.model,
             "--repeats", str(a.repeats)]
    print(f"{title}: {a.ranks} ranks, model {a.model}, {a.repeats} repeats (+1 warm-up) ...", flush=True)
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
    finally:
        if not a.dir:
            shutil.rmtree(d, ignore_errors=True)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("BENCH ")]
    if not lines:
        sys.stderr.write(r.stdout[-4000:] + f"\n{os.path.basename(script)}: worker failed (rc {r.returncode})\n")
        return None
    res = json.loads(lines[-1][len("BENCH "):])
    res["medians"] = {k: statistics.median(v) for k, v in res["results"].items()}
    return res


def write_json(a, result: dict) -> None:
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


def main(doc: str, repeats: int, title: str, script: str, worker, report) -> int:
    """A benchmark's entry point: as a worker, `worker(a)`; as the driver, run the workers and
    `report(a, result)` (result: rank 0's BENCH dict plus "medians")."""
    a = parser(doc, repeats).parse_args()
    if a.worker:
        return worker(a)
    res = run_workers(a, script, title)
    return 1 if res is None else report(a, res)
