"""The bundled trainer's model presets as plain numbers (no torch).

The trainer builds its model from them. The login node sizes a run's checkpoints from the same
table."""
from dataclasses import dataclass

# What one parameter costs in a checkpoint of the bundled trainer: the fp32 parameter and AdamW's
# two fp32 moments (exp_avg, exp_avg_sq). The optimizer's step counts and the train state are noise.
CKPT_BYTES_PER_PARAM = 4 * 3


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab: int

    def n_params(self) -> int:
        hd = self.dim // self.n_heads
        attn = self.dim * hd * (2 * self.n_heads + 2 * self.n_kv_heads)
        ffn = 3 * self.dim * self.ffn_dim
        return self.n_layers * (attn + ffn + 2 * self.dim) + 2 * self.vocab * self.dim + self.dim

    def checkpoint_bytes(self) -> int:
        """What one complete checkpoint of the bundled trainer holds (all ranks together)."""
        return self.n_params() * CKPT_BYTES_PER_PARAM


PRESETS = {
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128, vocab=512),
    # ~24.8M parameters: a ~300 MB checkpoint with AdamW state (the async benchmark's size)
    "small": ModelConfig(dim=384, n_layers=6, n_heads=6, n_kv_heads=2, ffn_dim=1024, vocab=20000),
    "debug": ModelConfig(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=344, vocab=32000),
    "agpt-2b": ModelConfig(dim=2048, n_layers=12, n_heads=16, n_kv_heads=4, ffn_dim=11008, vocab=256128),
    "agpt-20b": ModelConfig(dim=5120, n_layers=64, n_heads=40, n_kv_heads=8, ffn_dim=14336, vocab=256128),
}
