"""What the training-state fingerprints cost a step (#52, trainer/state_probe.py).

The `small` model (25 M parameters, AdamW: ~300 MB of state) trains on CPU in one process. Blocks
of steps alternate with the probe off and on. The probe's own time inside each step is measured
directly: the hook is wrapped with a clock. It runs with collection.state_every 1 (the parameters'
and optimizer's crcs every step) and 10 (the default).
Target: the probe's time is <= 2% of a step at the default, by its own clock. The A/B ratio of
whole steps is printed beside it; it is noisier on a shared machine. A second target covers the
parameters as DTensors, which is what an FSDP rank takes for a resume across a change in the number
of ranks. Their whole fingerprint must be within 4x the crc of their bytes, measured in the same run.

Usage: python bench/state_probe.py [--model small] [--steps 4] [--repeats 3] [--json F]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

TARGET = 0.02
WHOLE_TARGET = 4.0  # the whole fingerprint of a sharded tensor against the crc of its bytes


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="small")
    p.add_argument("--steps", type=int, default=4, help="steps per block")
    p.add_argument("--repeats", type=int, default=3, help="off/on block pairs per setting")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from restartlab.contracts.models import PRESETS
    from restartlab.trainer import state_probe
    from restartlab.trainer.model import Transformer
    torch.manual_seed(0)
    cfg = PRESETS[a.model]
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, cfg.vocab, (a.batch_size, a.seq_len))
    state_mb = (sum(p.numel() * p.element_size() for p in model.parameters()) * 3) / 1e6

    def step():
        loss = torch.nn.functional.cross_entropy(model(x).float().reshape(-1, cfg.vocab), x.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(2):  # the optimizer's state made, the allocator warm
        step()
    out = {"model": a.model, "state_mb": round(state_mb, 1), "settings": {}}
    tmp = tempfile.mkdtemp(prefix="rl-bench-probe-")
    for every in (1, 10):
        probe = state_probe.Probe(os.path.join(tmp, f"state-{every}.jsonl"), every)
        spent = []

        def timed(o, args, kwargs, probe=probe, spent=spent):
            t = time.perf_counter()
            probe.pre_step(o, args, kwargs)
            spent.append(time.perf_counter() - t)
        off, on = [], []
        for rep in range(a.repeats):
            off += durations(step, a.steps)
            h = register_optimizer_step_pre_hook(timed)
            on += durations(step, a.steps)
            h.remove()
        step_s = statistics.median(off)
        share = sum(spent) / (len(spent) * step_s)
        ratio = statistics.median(on) / step_s
        out["settings"][str(every)] = {"step_s": round(step_s, 4), "probe_s_per_step": round(sum(spent) / len(spent), 5),
                                       "probe_share": round(share, 4), "ab_ratio": round(ratio, 3),
                                       "note": "steady state: the crcs at steps 1, %d+1, ... (an attempt's first 2 too)" % every}
        print(f"state_every {every:>2}: step {step_s:.3f} s (median, probe off), probe {sum(spent) / len(spent) * 1e3:.1f} ms "
              f"a step = {share:.1%} of a step (target <= {TARGET:.0%} at every 10, the default); whole steps on/off {ratio:.3f}")
    out["whole"] = whole_ratio(model, tmp)
    print(f"whole fingerprint of the parameters as DTensors (#63.3, a resume across a change in the number of "
          f"ranks) against the crc of the same bytes: {out['whole']['ratio']:.2f}x "
          f"({out['whole']['whole_s'] * 1e3:.1f} ms / {out['whole']['crc_s'] * 1e3:.1f} ms; target <= {WHOLE_TARGET:.0f}x)")
    out["target"] = TARGET
    out["ok"] = out["settings"]["10"]["probe_share"] <= TARGET and out["whole"]["ratio"] <= WHOLE_TARGET
    print(f"{a.model}: {state_mb:.0f} MB of parameters and AdamW state; {'OK' if out['ok'] else 'OVER TARGET'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def durations(f, n) -> list:
    """Seconds each of n calls of f() took."""
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return ts


def whole_ratio(model, tmp, repeats=5) -> dict:
    """Time the whole fingerprint of the model's parameters against the crc32 of their bytes.

    The parameters are DTensors sharded on a 1-rank mesh: a gloo group through a file store, no
    network. The result compares state_probe.fingerprint's time (the whole fingerprint, #63.3) with
    digest's (the crc32 of the same bytes). Both are medians of `repeats`."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from restartlab.trainer import state_probe
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        plain = [p.detach() for p in model.parameters()]
        sharded = [distribute_tensor(p, mesh, [Shard(0)]) for p in plain]

        crc_s = statistics.median(durations(lambda: state_probe.digest(plain), repeats))
        whole_s = statistics.median(durations(lambda: state_probe.fingerprint(sharded), repeats))
    finally:
        dist.destroy_process_group()
    return {"crc_s": round(crc_s, 5), "whole_s": round(whole_s, 5), "ratio": round(whole_s / crc_s, 2),
            "target": WHOLE_TARGET}


if __name__ == "__main__":
    sys.exit(main())
