"""One rank's training state as an optimizer step begins.

A record fingerprints each piece a checkpoint must carry for a resume to be exact.
restartlab.trainer.state_probe writes one line per optimizer step into <attempt>/state-<rank>.jsonl
(layout.Attempt.state). analysis/state_compare.py sets a resumed attempt's first steps beside the
baseline's same steps, piece by piece.

The probe takes the record in the optimizer's step pre-hook. So the record of step s holds the state
that step s updates. The parameters and the optimizer's state are as steps 1..s-1 left them. After a
resume at step r, they are as the checkpoint of step r restored them. The learning rate is the one
step s uses. The RNG streams are as the forward and backward of step s left them. The batch is the
latest one the program's data loader gave: step s's data. With gradient accumulation, it is its last
micro-batch. A loader that prefetches gives the next one, alike in every run.

A piece is None where it was not observed (no DataLoader, no GradScaler, no NumPy, a CPU run's
device RNG). None never compares as equal.

Standard library only: the collector reads these on a login node."""
import json
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Tuple

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
# The same pieces whole, so they compare across a change in the number of ranks
# (trainer/state_probe.py: whole, samples_part). Only the records that carry the parameters'
# fingerprint have them.
#   params_g, opt_g: [this rank's part of the DTensors' fingerprint, the plain tensors' digest].
#                    The part is hex. The ranks' parts summed modulo 2**32 are the whole tensors'.
#                    The digest covers each rank's whole copy.
#   batch_g:          [[fingerprint, samples] of each batch since the last step]. The fingerprint is
#                    hex, summed likewise.
WHOLE = ("params_g", "opt_g", "batch_g")
# Not compared as pieces, but read for the verdict's words.
# `batch_pos` is [the batch's number in its epoch (1: the first), the batches in the epoch], where a
# DataLoader's iterator says. `threads` is torch's intra-op threads in the rank
# (torch.get_num_threads()). Another count adds the same sums in another order, and the numbers
# leave another run's in their last bits.
AUX = ("batch_pos", "threads")
# pieces every rank holds the same of (a data-parallel program), and pieces each rank has its own of
SAME_ON_ALL = ("opt_step", "lr", "scale")
PER_RANK = ("rng_python", "rng_numpy", "rng_torch", "rng_device")
WORDS = {p[0]: p[1] for p in PIECES}
PLURAL = {p[0]: p[2] for p in PIECES}
MEANING = {p[0]: p[3] for p in PIECES}


class StateRecord(NamedTuple):
    step: int                 # this attempt's optimizer steps so far, this one included (1: its first)
    opt: int                  # which optimizer of the program (numbered by their first step)
    time: float
    pieces: Dict[str, object]  # KEYS -> fingerprint (an int or hex digest, a float, a list), None: not observed
    load: Optional[str] = None  # A load's record: what the program called (LOADS), taken right after it.
    #                             Then `step` is the steps taken before it (0: before the attempt's first).

    # The pieces that are not compared one by one (WHOLE, AUX), by name. None where not recorded.
    @property
    def params_g(self) -> object:
        return self.pieces.get("params_g")

    @property
    def opt_g(self) -> object:
        return self.pieces.get("opt_g")

    @property
    def batch_g(self) -> Optional[List[Any]]:
        """[[fingerprint, samples, ...] of each batch since the last step]; None: not a list."""
        v = self.pieces.get("batch_g")
        return v if isinstance(v, list) else None

    @property
    def batch_pos(self) -> Optional[List[Any]]:
        """[the batch's number in its epoch, the batches in the epoch]; None: not such a pair."""
        v = self.pieces.get("batch_pos")
        return v if isinstance(v, list) and len(v) == 2 else None

    @property
    def threads(self) -> object:
        return self.pieces.get("threads")

    def to_json(self) -> str:
        d: Dict[str, object] = {"step": self.step, "opt": self.opt, "time": self.time}
        if self.load:
            d["load"] = self.load
        d.update({k: self.pieces.get(k) for k in KEYS})
        d.update({k: self.pieces[k] for k in WHOLE + AUX if self.pieces.get(k) is not None})
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "StateRecord":
        return cls(int(d["step"]), int(d.get("opt", 0)), float(d.get("time", 0.0)),
                   {k: d.get(k) for k in KEYS + WHOLE + AUX}, d.get("load") or None)


# The loads the probe sees (trainer/state_probe.py), by the name a record gives them. Right after the
# call returns, each one's record fingerprints the pieces it sets, as an optimizer step's record would.
LOADS = {"torch.set_rng_state": ("rng_torch",), "random.setstate": ("rng_python",),
         "numpy.random.set_state": ("rng_numpy",),
         "Optimizer.load_state_dict": ("opt_state", "opt_step", "lr"), "LRScheduler.load_state_dict": ("lr",)}


class ProbeLine(NamedTuple):
    """What the tap takes from a line of rank 0's probe file as the program runs.

    The line is an optimizer step (its number and time), or the program's own loss line printed
    after step `step` (logged_loss)."""
    step: int
    time: float
    opt: int = 0
    load: bool = False            # a load's record: not a step
    logged_loss: Optional[float] = None
    loss_line: bool = False       # the line is the program's loss line (its loss None if it is not a number)


def probe_line(d: object) -> Optional[ProbeLine]:
    """A line of the probe file as the tap reads it; None without a step and a time."""
    if not isinstance(d, dict):
        return None
    try:
        step, ts = int(d["step"]), float(d["time"])
    except (KeyError, TypeError, ValueError):
        return None
    opt = d.get("opt", 0)
    loss_line = "logged_loss" in d
    try:
        loss = float(d["logged_loss"]) if loss_line else None
    except (TypeError, ValueError):
        loss = None
    return ProbeLine(step, ts, opt if isinstance(opt, int) and not isinstance(opt, bool) else -1,
                     bool(d.get("load")), loss, loss_line)


def read(path: str) -> List[StateRecord]:
    """The records of one rank's file; a torn last line (the rank killed while writing) is skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                    if "logged_loss" not in d:  # the program's loss line, booked by the tap: not a state record
                        out.append(StateRecord.from_dict(d))
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        return []
    return out


def by_step(records: Iterable[StateRecord], offset: int = 0, opt: int = 0) -> Dict[int, StateRecord]:
    """{global step: record} of one optimizer's step records, the attempt's step k numbered offset + k
    (offset: the step the attempt resumed from; 0 for a run from the start). Loads are not steps."""
    return {offset + r.step: r for r in records if r.opt == opt and not r.load}


def loaded(records: Iterable[StateRecord], opt: int = 0) -> Dict[str, Tuple[object, str]]:
    """{piece: (its fingerprint right after the last load that set it, that load's name)}.

    Only the loads made before the attempt's first optimizer step count. That is where a resume
    loads its checkpoint."""
    out: Dict[str, Tuple[object, str]] = {}
    for r in records:
        if r.load and r.step == 0 and (r.opt == opt or r.load not in OPT_LOADS):
            for k in LOADS.get(r.load, ()):
                if r.pieces.get(k) is not None:
                    out[k] = (r.pieces[k], r.load)
    return out


OPT_LOADS = ("Optimizer.load_state_dict", "LRScheduler.load_state_dict")


def describe(key: str, value: object) -> Optional[str]:
    """A value as a verdict shows it: a learning rate or a scale as a number, a fingerprint as is."""
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(describe(key, v) or "-" for v in value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def add32(parts: Iterable[str]) -> str:
    """Fingerprint parts (hex) summed modulo 2**32: the whole of what the ranks' parts cover."""
    return f"{sum(int(p, 16) for p in parts) & 0xFFFFFFFF:08x}"


def whole_tensors(parts: List[Any]) -> Optional[object]:
    """The ranks' params_g (or opt_g) at one step, as one value.

    The DTensors' parts are summed. The plain tensors' digest is kept where every rank has the same
    one. Where they differ, it is "per rank": each rank holds its own plain tensors, which do not
    compare across a change. None where a rank has no record."""
    if not parts or any(not isinstance(p, list) or len(p) != 2 for p in parts):
        return None
    sharded = add32(p[0] for p in parts if p[0]) if any(p[0] for p in parts) else None
    plain = {p[1] for p in parts}
    return [sharded, plain.pop() if len(plain) == 1 else "per rank"]
