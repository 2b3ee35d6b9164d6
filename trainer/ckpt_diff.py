"""python -m restartlab.trainer.ckpt_diff A B (`restartlab diff`): two checkpoints compared key by key.

A checkpoint is one of:

- a DCP directory, one holding `.metadata`. It is read whole into host memory through
  torch.distributed.checkpoint.format_utils.dcp_to_torch_save, with no process group.
- a torch.save file.
- a directory of torch.save files and safetensors: a framework's folder. Examples are Lightning's
  .ckpt, Accelerate's checkpoint_<K>/ with model.safetensors, optimizer.bin,
  random_states_<rank>.pkl, and the Hugging Face Trainer's checkpoint-N/. Its files are matched by
  name, and each file's keys are prefixed with it.

Nested dicts and lists are flattened ("optimizer.state.0.exp_avg"). Tensors are equal when their
dtype, shape and every element are. NaNs in the same places count as equal. Anything else is
compared by ==.

It prints what differs (max absolute difference, dtype or shape), what exists on one side only, and
how many keys are equal. It exits 0 when identical, 1 when they differ, 2 when one cannot be
read."""
import io
import json
import os
import pickle
import sys
import tempfile

from restartlab.contracts.diff_args import build_parser

TORCH_FILES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle")


class Unreadable(Exception):
    pass


def _flatten(obj, prefix, out):
    import torch
    if isinstance(obj, dict):
        if not obj and prefix:
            out[prefix] = {}
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, (dict, list, tuple, torch.Tensor)) for v in obj):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out[prefix] = obj
    return out


def _load_file(path):
    import torch
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        return load_file(path, device="cpu")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        if path.endswith((".pkl", ".pickle")):  # Accelerate's random states: a plain pickle
            with open(path, "rb") as f:
                return pickle.load(f)
        raise Unreadable(f"{path}: {type(e).__name__}: {e}")


def load(path: str) -> dict:
    """{flat key: value} of a checkpoint (a DCP directory, a torch.save file, or a directory of them)."""
    if os.path.isdir(path) and os.path.exists(os.path.join(path, ".metadata")):
        import torch
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        with tempfile.TemporaryDirectory(prefix="rl-diff-") as tmp:
            dest = os.path.join(tmp, "whole.pt")
            try:
                dcp_to_torch_save(path, dest)
            except Exception as e:
                raise Unreadable(f"{path}: a DCP checkpoint that does not load: {type(e).__name__}: {e}")
            return _flatten(torch.load(dest, map_location="cpu", weights_only=False), "", {})
    if os.path.isdir(path):
        out = {}
        names = sorted(n for n in os.listdir(path) if n.endswith(TORCH_FILES + (".safetensors",)))
        if not names:
            raise Unreadable(f"{path}: no .metadata (not a DCP checkpoint) and no torch.save or safetensors file in it")
        for n in names:
            _flatten(_load_file(os.path.join(path, n)), n, out)
        return out
    if os.path.isfile(path):
        return _flatten(_load_file(path), "", {})
    raise Unreadable(f"{path}: no such file or directory")


def _tensor_diff(a, b):
    """None when equal; else what differs, in words."""
    import torch
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if torch.equal(a, b):
        return None
    if a.is_floating_point() or a.is_complex():
        both_nan = torch.isnan(a) & torch.isnan(b)
        if torch.equal(torch.where(both_nan, torch.zeros_like(a), a), torch.where(both_nan, torch.zeros_like(b), b)):
            return None
        d = (a.double() - b.double()).abs()
        d = torch.where(both_nan, torch.zeros_like(d), d)
        n = int((d != 0).sum())
        return f"max |a-b| {float(d.nan_to_num(float('inf')).max()):.3g} at {n} of {a.numel()} elements"
    n = int((a != b).sum())
    return f"{n} of {a.numel()} elements differ"


def compare(a: dict, b: dict) -> dict:
    import torch
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    differ, equal = {}, 0
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            why = _tensor_diff(x.detach().cpu(), y.detach().cpu())
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            why = f"a tensor on one side only ({type(x).__name__} vs {type(y).__name__})"
        else:
            try:
                same = bool(x == y)
            except Exception:  # arrays and the like: compared by their bytes
                same = _bytes(x) == _bytes(y)
            why = None if same else f"{_short(x)} vs {_short(y)}"
        if why:
            differ[k] = why
        else:
            equal += 1
    return {"only_a": only_a, "only_b": only_b, "differ": differ, "equal": equal}


def _bytes(x):
    buf = io.BytesIO()
    pickle.dump(x, buf)
    return buf.getvalue()


def _short(x) -> str:
    s = repr(x)
    return s if len(s) <= 60 else s[:57] + "..."


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        left, right = load(a.a), load(a.b)
    except Unreadable as e:
        print(f"restartlab diff: error: {e}", file=sys.stderr)
        return 2
    res = compare(left, right)
    n = len(res["differ"])
    print(f"restartlab diff: {a.a} vs {a.b}: {res['equal']} key(s) equal, {n} differ, "
          f"{len(res['only_a'])} only in the first, {len(res['only_b'])} only in the second")
    for k, why in list(res["differ"].items())[:a.show]:
        print(f"  differs   {k}: {why}")
    if n > a.show:
        print(f"  ... and {n - a.show} more (--show {n})")
    for side, keys in (("first", res["only_a"]), ("second", res["only_b"])):
        for k in keys[:a.show]:
            print(f"  only in the {side}: {k}")
        if len(keys) > a.show:
            print(f"  ... and {len(keys) - a.show} more only in the {side}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(res, a=a.a, b=a.b), f, indent=1)
    return 1 if (n or res["only_a"] or res["only_b"]) else 0


if __name__ == "__main__":
    sys.exit(main())
