"""Training data whose batch is a pure function of (seed, step, data-parallel rank).

Resuming at step N needs no replay of consumed batches: batch N is recomputed from its
coordinates. There are two sources:

- `Synthetic`: each sequence is a copy task. Its second half repeats the first exactly, so the
  loss visibly falls.
- `TokenFile` (`--data PATH`): a flat binary file of token ids, memory-mapped. The ids are uint16
  or uint32, with no header. It is the layout that nanoGPT-style pipelines and
  `python -m restartlab.trainer.prepare_data` write. Each sequence is a window at an offset drawn
  from the same generator."""
import json
import os

import numpy as np

DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


def _generator(seed: int, step: int, dp_rank: int):
    import torch
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 10_007 + dp_rank)


class DataError(ValueError):
    """A token file that cannot be trained on (one line, names the file)."""


class Synthetic:
    def __init__(self, vocab: int):
        self.vocab = vocab

    def batch(self, seed: int, step: int, dp_rank: int, batch_size: int, seq_len: int):
        import torch
        g = _generator(seed, step, dp_rank)
        half = seq_len // 2 + 1
        first = torch.randint(0, self.vocab, (batch_size, half), generator=g)
        seq = torch.cat([first, first], dim=1)[:, : seq_len + 1]
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def sidecar(path: str) -> str:
    """`<path>.json`: what prepare_data writes beside a token file (dtype, tokens, vocab)."""
    return path + ".json"


def _sidecar_meta(path: str) -> dict:
    try:
        with open(sidecar(path)) as f:
            meta = json.load(f)
        if not isinstance(meta, dict):
            raise ValueError("not a mapping")
        return meta
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise DataError(f"{sidecar(path)}: unreadable ({e})") from None


def check_file(path: str, dtype: str, vocab: int, seq_len: int):
    """Torch-free checks before any training starts: (dtype, tokens), or DataError. The
    vocabulary is checked from the sidecar when there is one (a full scan of a large file at
    every restart would cost seconds), and every batch is checked as it is read."""
    meta = _sidecar_meta(path)
    if dtype == "auto":
        dtype = meta.get("dtype", "uint16")
    if dtype not in DTYPES:
        raise DataError(f"{sidecar(path)}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    item = np.dtype(DTYPES[dtype]).itemsize
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise DataError(f"--data {path}: {e.strerror}") from None
    if size % item:
        raise DataError(f"--data {path}: {size} bytes is not a whole number of {dtype} tokens "
                        f"(wrong --data-dtype?)")
    if size // item < seq_len + 2:
        raise DataError(f"--data {path}: {size // item} tokens, fewer than one sequence "
                        f"(--seq-len {seq_len}) and its target")
    if isinstance(meta.get("vocab"), int) and meta["vocab"] > vocab:
        raise DataError(f"--data {path}: its tokenizer's vocabulary ({meta['vocab']}, {sidecar(path)}) "
                        f"is larger than the model's ({vocab}): choose a larger --model")
    return dtype, size // item


class TokenFile:
    def __init__(self, path: str, dtype: str, vocab: int, seq_len: int):
        self.dtype, _ = check_file(path, dtype, vocab, seq_len)
        self.path, self.vocab = path, vocab
        self.tokens = np.memmap(path, dtype=DTYPES[self.dtype], mode="r")

    def __len__(self):
        return len(self.tokens)

    def batch(self, seed: int, step: int, dp_rank: int, batch_size: int, seq_len: int):
        import torch
        g = _generator(seed, step, dp_rank)
        starts = torch.randint(0, len(self.tokens) - seq_len - 1, (batch_size,), generator=g).tolist()
        seq = np.stack([self.tokens[s:s + seq_len + 1] for s in starts]).astype(np.int64)
        top = int(seq.max())
        if top >= self.vocab:
            where = starts[int(np.argmax(seq.max(axis=1)))]
            raise DataError(f"--data {self.path}: token id {top} near token {where} is outside the "
                            f"model's vocabulary ({self.vocab}; wrong --data-dtype, or a larger --model?)")
        seq = torch.from_numpy(seq)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def source(path, dtype: str, vocab: int, seq_len: int):
    return TokenFile(path, dtype, vocab, seq_len) if path else Synthetic(vocab)
