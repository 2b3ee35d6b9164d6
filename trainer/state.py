"""The saved training state: named parts that each save and restore themselves (torch's
`Stateful` protocol). The checkpointer saves {name: part.state_dict()} and, after loading into
a state dict of the same shape, hands each part its own entry back; nothing is restored by hand
in the training loop. Data needs no part: batch N is a pure function of (seed, N, dp rank)."""
import torch
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict,
                                                     set_state_dict)
from torch.distributed.checkpoint.stateful import Stateful


class ModelAndOptimizer(Stateful):
    """Sharded model and optimizer state (DTensors), through DCP's state-dict helpers."""

    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def state_dict(self):
        msd, osd = get_state_dict(self.model, self.optim)
        return {"model": msd, "optim": osd}

    def load_state_dict(self, sd):
        set_state_dict(self.model, self.optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"],
                       options=StateDictOptions(strict=True))


class RNG(Stateful):
    """This rank's random generators (saved under a per-rank key: each rank resumes its own)."""

    def state_dict(self):
        sd = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            sd["cuda"] = torch.cuda.get_rng_state()
        return sd

    def load_state_dict(self, sd):
        torch.set_rng_state(sd["cpu"])
        if "cuda" in sd:
            torch.cuda.set_rng_state(sd["cuda"])


class Progress(Stateful):
    """Optimizer steps completed."""

    def __init__(self, step: int = 0):
        self.step = step

    def state_dict(self):
        return {"step": torch.tensor(self.step, dtype=torch.int64)}

    def load_state_dict(self, sd):
        self.step = int(sd["step"])


class TrainState(Stateful):
    def __init__(self, model, optim, rank: int, step: int = 0):
        self.progress = Progress(step)
        self.parts = {"app": ModelAndOptimizer(model, optim), f"rng_rank{rank}": RNG(),
                      "progress": self.progress}

    @property
    def step(self) -> int:
        return self.progress.step

    @step.setter
    def step(self, value: int):
        self.progress.step = value

    def state_dict(self):
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, sd):
        for name, part in self.parts.items():
            part.load_state_dict(sd[name])
