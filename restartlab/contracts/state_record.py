"""One rank's training state as an optimizer step begins: a fingerprint of each piece a checkpoint
must carry for a resume to be exact. restartlab.trainer.state_probe writes one line per optimizer
step into <attempt>/state-<rank>.jsonl (layout.Attempt.state); analysis/state_compare.py sets a
resumed attempt's first steps beside the baseline's same steps, piece by piece.

Taken in the optimizer's step pre-hook, so the record of step s holds the state that step s
updates: the parameters and the optimizer's state as steps 1..s-1 left them (after a resume at
step r, as the checkpoint of step r restored them), the learning rate step s uses, the RNG streams
as the forward and backward of step s left them, and the latest batch the program's data loader
gave (step s's data; with gradient accumulation its last micro-batch; a loader that prefetches
gives the next one, alike in every run). A piece is None where it was not observed (no DataLoader,
no GradScaler, no NumPy, a CPU run's device RNG); never compared as equal.

Standard library only: the collector reads these on a login node."""
import json
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

# (key, what it is in a verdict's words, whether those words are plural, what it means when a
# resume did not restore it)
PIECES: Tuple[Tuple[str, str, bool, str], ...] = (
    ("params", "parameters", True, "the weights were not loaded"),
    ("opt_state", "optimizer moments", True, "the optimizer's state was not loaded"),
    ("opt_step", "optimizer step count", False,
     "the optimizer's step count was not restored (Adam's bias correction restarts)"),
    ("lr", "learning rate", False, "the scheduler was not restored"),
    ("rng_python", "Python's RNG", False, "Python's random state was not restored"),
    ("rng_numpy", "NumPy's RNG", False, "NumPy's random state was not restored"),
    ("rng_torch", "torch's CPU RNG", False, "torch's random state was not restored"),
    ("rng_device", "the device's RNG", False, "the accelerator's random state was not restored"),
    ("batch", "the batch", False, "the data position was not restored"),
    ("scale", "the grad scaler's scale", False, "the gradient scaler's state was not restored"),
)
KEYS = tuple(p[0] for p in PIECES)
WORDS = {p[0]: p[1] for p in PIECES}
PLURAL = {p[0]: p[2] for p in PIECES}
MEANING = {p[0]: p[3] for p in PIECES}


class StateRecord(NamedTuple):
    step: int                 # this attempt's optimizer steps so far, this one included (1: its first)
    opt: int                  # which optimizer of the program (numbered by their first step)
    time: float
    pieces: Dict[str, object]  # KEYS -> fingerprint (an int or hex digest, a float, a list), None: not observed

    def to_json(self) -> str:
        return json.dumps({"step": self.step, "opt": self.opt, "time": self.time,
                           **{k: self.pieces.get(k) for k in KEYS}}, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> "StateRecord":
        return cls(int(d["step"]), int(d.get("opt", 0)), float(d.get("time", 0.0)), {k: d.get(k) for k in KEYS})


def read(path: str) -> List[StateRecord]:
    """The records of one rank's file; a torn last line (the rank killed while writing) is skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(StateRecord.from_dict(json.loads(line)))
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        return []
    return out


def by_step(records: Iterable[StateRecord], offset: int = 0, opt: int = 0) -> Dict[int, StateRecord]:
    """{global step: record} of one optimizer's records, the attempt's step k numbered offset + k
    (offset: the step the attempt resumed from; 0 for a run from the start)."""
    return {offset + r.step: r for r in records if r.opt == opt}


def describe(key: str, value) -> Optional[str]:
    """A value as a verdict shows it: a learning rate or a scale as a number, a fingerprint as is."""
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(describe(key, v) or "-" for v in value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
