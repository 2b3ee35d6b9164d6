"""Checkpoint I/O by size: the per-byte cost and the fixed cost of each path, against its floor,
and the per-tensor cost apart from them.

One point says little. At ~300 MB a large share of a save is fixed cost (planning, metadata,
barriers), and that tells nothing of 23 GB. So this runs bench/save_efficiency.py's measurement on
two sweeps of the `small` model with its AdamW state. That measurement uses 4 ranks. It runs the dd
floors and every variant in the same job, interleaved, and takes the slowest rank and the median of
the repeats.

- width: 1, 2, 3, 4 x its width and FFN width (~0.3, 0.8, 1.6, 2.6 GB). These are the same 57
  tensors, each larger. Each series is fitted with least squares, seconds = fixed + bytes /
  bandwidth. The report gives its fixed cost, its per-byte bandwidth and the largest residual.
  It also gives that bandwidth's ratio to its floor's. The floor is dd conv=fdatasync for the
  saves, and dd reads, warm and cold, for the loads. A second ratio is to the memory floor's.
  The memory floor writes the same tensors from the model's memory and reads them back into
  memory, with plain writes and reads. It is what a save or load cannot do without.
- layers: 1, 4, 8, 17 x its layers (~0.3, 0.6, 1.1, 2.1 GB; 57 to 921 tensors, each the same size).
  Each point is reported as what it costs beyond the width fit (fixed + bytes / bandwidth), per
  model tensor. Each model tensor comes with its AdamW state. This is the per-tensor cost.

Plain dcp.save (defaults) stands beside restartlab's save in both.

Usage: python bench/ckpt_sizes.py [--repeats 2] [--json F]
       python bench/ckpt_sizes.py --width small small:width=2 ... --layers small small:layers=4 ...
"""
import argparse
import json
import os
import sys

import mpibench

HERE = os.path.dirname(os.path.abspath(__file__))
WIDTH = ("small", "small:width=2", "small:width=3", "small:width=4")
LAYERS = ("small", "small:layers=4", "small:layers=8", "small:layers=17")
# Each entry is (label, the series' medians key, its bytes key, the floor's key).
# The floor is measured with its own bytes (dd_bytes: each rank's share rounded to 4 MiB blocks).
SERIES = [
    ("restartlab sync save", "restartlab", "bytes", "dd"),
    ("restartlab sync save, raw", "raw", "raw_bytes", "dd"),
    ("plain dcp.save (defaults)", "dcp", "bytes", "dd"),
    ("restartlab load, warm", "load", "bytes", "read"),
    ("restartlab load, raw, warm", "rawload", "raw_bytes", "read"),
    ("restartlab load, cold", "load_cold", "bytes", "read_cold"),
    ("restartlab load, raw, cold", "rawload_cold", "raw_bytes", "read_cold"),
]
FLOORS = {"dd": "write floor (dd conv=fdatasync)", "read": "read floor, warm (dd)",
          "read_cold": "read floor, cold (dd)",
          "mem": "write floor from memory (the tensors, fsync)", "readmem": "read floor into memory, warm",
          "readmem_cold": "read floor into memory, cold"}
FLOOR_BYTES = {"dd": "dd_bytes", "read": "dd_bytes", "read_cold": "dd_bytes",
               "mem": "mem_bytes", "readmem": "mem_bytes", "readmem_cold": "mem_bytes"}
MEMORY_FLOOR = {"dd": "mem", "read": "readmem", "read_cold": "readmem_cold"}  # a series' second floor


def fit(points):
    """Least squares of seconds = fixed + bytes * per_byte over [(bytes, seconds)]: (fixed s,
    bandwidth B/s, largest residual as a share of its point)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    worst = max(abs(y - (a + b * x)) / y for x, y in points)
    return a, (1 / b if b > 0 else float("inf")), worst


def _tensors(spec: str) -> int:
    """The model's tensors (parameters; each has its AdamW state beside it in the checkpoint)."""
    return 9 * mpibench.model_config(spec).n_layers + 3  # 7 linear + 2 norms a block; embeddings, output, norm


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--width", nargs="+", default=list(WIDTH), help="the per-byte sweep's models (3 or more)")
    p.add_argument("--layers", nargs="*", default=list(LAYERS), help="the per-tensor sweep's models")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args(argv)
    if len(a.width) < 3:
        p.error("--width: three or more models, for a fit")
    points = {}
    for spec in dict.fromkeys(a.width + a.layers):
        run = argparse.Namespace(ranks=a.ranks, repeats=a.repeats, model=spec, dir=None, timeout=a.timeout)
        res = mpibench.run_workers(run, os.path.join(HERE, "save_efficiency.py"), f"checkpoint I/O at {spec}")
        if res is None:
            return 1
        m = res["medians"]
        keep = {"bytes", "raw_bytes", "dd_bytes", "mem_bytes"} | {k for _, k, _, _ in SERIES} | set(FLOORS)
        points[spec] = dict({k: v for k, v in m.items() if k in keep}, tensors=_tensors(spec))
        print(f"  {spec}: {m['bytes'] / 1e9:.2f} GB, {points[spec]['tensors']} tensors: save {m['restartlab']:.2f} s, "
              f"dcp.save {m['dcp']:.2f} s, dd {m['dd']:.2f} s; load warm {m['load']:.2f} s, cold {m['load_cold']:.2f} s",
              flush=True)
    width = [points[s] for s in a.width]
    fits = {}
    for key, what in FLOORS.items():
        f0, bw, worst = fit([(pt[FLOOR_BYTES[key]], pt[key]) for pt in width])
        fits[key] = {"label": what, "fixed_s": f0, "MB_per_s": bw / 1e6, "worst_residual": worst}
    for label, key, nbytes, floor in SERIES:
        f0, bw, worst = fit([(pt[nbytes], pt[key]) for pt in width])
        fits[key] = {"label": label, "fixed_s": f0, "MB_per_s": bw / 1e6, "worst_residual": worst,
                     "floor": floor, "per_byte_ratio": (bw / 1e6) / fits[floor]["MB_per_s"],
                     "per_byte_vs_memory": (bw / 1e6) / fits[MEMORY_FLOOR[floor]]["MB_per_s"]}
    gb = ", ".join(f"{pt['bytes'] / 1e9:.2f}" for pt in width)
    print(f"\nwidth sweep ({gb} GB, {width[0]['tensors']} tensors), "
          f"{a.ranks} ranks, slowest rank, median of {a.repeats}: seconds = fixed + bytes / bandwidth")
    print(f"  {'series':44s} {'fixed':>8s} {'bandwidth':>12s} {'per byte vs dd':>15s} {'vs memory':>10s} "
          f"{'worst residual':>15s}")
    for key, f in fits.items():
        ratio = f"{f['per_byte_ratio']:5.2f}" if "per_byte_ratio" in f else "floor"
        vs_mem = f"{f['per_byte_vs_memory']:5.2f}" if "per_byte_vs_memory" in f else "floor"
        print(f"  {f['label']:44s} {f['fixed_s']:7.3f}s {f['MB_per_s']:8.0f} MB/s {ratio:>15s} {vs_mem:>10s} "
              f"{f['worst_residual']:14.1%}")
    per_tensor = {}
    if a.layers:
        print("\nlayers sweep: seconds beyond the width fit (fixed + bytes / bandwidth), per model tensor")
        for label, key, nbytes, _ in SERIES:
            f = fits[key]
            row = []
            for spec in a.layers:
                pt = points[spec]
                excess = pt[key] - (f["fixed_s"] + pt[nbytes] / (f["MB_per_s"] * 1e6))
                row.append({"model": spec, "tensors": pt["tensors"], "seconds": pt[key], "excess_s": excess,
                            "ms_per_tensor": 1e3 * excess / pt["tensors"]})
            per_tensor[key] = row
            print(f"  {label:34s} " + "  ".join(f"{r['tensors']:4d}: {r['seconds']:6.2f}s ({r['ms_per_tensor']:+5.2f} ms)"
                                                 for r in row))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"ranks": a.ranks, "repeats": a.repeats, "points": points, "fits": fits,
                       "per_tensor": per_tensor}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
