"""Synthetic data that is a pure function of (seed, step, data-parallel rank).

Resuming at step N needs no replay of consumed batches: batch N is recomputed from its
coordinates. Each sequence is a copy task (its second half repeats the first exactly), so the
loss visibly falls."""
import torch


def batch(seed: int, step: int, dp_rank: int, batch_size: int, seq_len: int, vocab: int):
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 10_007 + dp_rank)
    half = seq_len // 2 + 1
    first = torch.randint(0, vocab, (batch_size, half), generator=g)
    seq = torch.cat([first, first], dim=1)[:, : seq_len + 1]
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
