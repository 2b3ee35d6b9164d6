"""What a run will take before it runs: the checkpoint bytes each phase keeps at most (the bundled
trainer's from its model preset, a program of yours from trainer.program.checkpoint_bytes) and the
node-hours the job can be charged. Pure: the scenario in, numbers out."""
import dataclasses
import math
from dataclasses import dataclass
from typing import List, Optional

from ..contracts.models import PRESETS
from ..contracts.scenario_record import Scenario


@dataclass
class PhaseBytes:
    phase: str
    per_save: Optional[int]  # one checkpoint (all ranks); None: not known
    saves: Optional[int]     # checkpoints the phase writes; None: not known
    kept: Optional[int]      # checkpoints on disk at most at once
    why: str = ""            # how it was counted, for the finding's line

    @property
    def peak(self) -> Optional[int]:
        return None if self.per_save is None or self.kept is None else self.per_save * self.kept


def checkpoint_bytes(sc: Scenario) -> Optional[int]:
    """One checkpoint of the run: the bundled trainer's model (with trainer.vocab), or the user's estimate."""
    tr = sc.trainer
    if tr.program:
        return tr.program.checkpoint_bytes
    cfg = PRESETS[tr.model]
    if tr.vocab:
        cfg = dataclasses.replace(cfg, vocab=tr.vocab)
    return cfg.checkpoint_bytes()


def phase_bytes(sc: Scenario) -> List[PhaseBytes]:
    """Each checkpointing phase's checkpoints. The bundled trainer saves every save_interval steps
    and at the last step, and with keep K holds K complete checkpoints plus the one being written;
    a program of yours saves every save_every steps and keeps what it keeps (all, as far as we know)."""
    tr, out = sc.trainer, []
    per = checkpoint_bytes(sc)
    for ph in sc.phases:
        if ph.checkpoint == "none" or ph.torchft:
            continue
        if tr.program:
            every = tr.program.save_every
            saves = tr.train_iters // every if every else None
            why = (f"{saves} saves (steps {tr.train_iters} / save_every {every}), all kept as far as restartlab "
                   "knows" if every else "trainer.program.save_every is not set: the number of saves is not known")
            out.append(PhaseBytes(ph.name, per, saves, saves, why))
            continue
        saves = math.ceil(tr.train_iters / tr.save_interval) if tr.save_interval else 0
        kept = saves if not tr.keep else min(saves, tr.keep + 1)
        why = (f"{saves} saves (every {tr.save_interval} of {tr.train_iters} steps), "
               + (f"keep {tr.keep} (+1 being written)" if tr.keep else "keep 0: every one kept"))
        out.append(PhaseBytes(ph.name, per, saves, kept, why))
    return out


def node_hours(sc: Scenario) -> float:
    """The most the job can be charged.

    That is every node it asks for, spares too, for its whole walltime. It counts once per job:
    the first and each continuation of relaunch.chain."""
    j = sc.job
    return (j.nodes + j.spare_nodes) * j.walltime / 3600 * (1 + sc.relaunch.chain)
