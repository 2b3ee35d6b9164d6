"""A phase's storage faults (failures.kind stall_writes, slow_storage, write_errors, torn).

This builds the ranks' preload and its settings for the phase (runtime/iofault). It also tells
whether a fault the phase makes heals by itself."""
from typing import Callable, Dict, List, Optional

from . import iofault
from .. import failures
from ..contracts import layout
from .inject_api import Config as InjectConfig


class PhaseStorageFaults:
    def __init__(self, inject: Optional[InjectConfig], phase: layout.Phase, ckpt_dir: Optional[str],
                 say: Callable[..., None]) -> None:
        self.inject, self.phase, self.ckpt_dir, self.say = inject, phase, ckpt_dir, say
        self.kinds: List[str] = []   # the phase's storage kinds, once rank_env has looked

    def rank_env(self) -> Dict[str, str]:
        """The ranks' preload and its settings where the phase's failures have a storage kind
        (runtime/iofault, built into the phase's directory now); {} otherwise."""
        inj = self.inject
        if not inj:
            return {}
        kinds = failures.kinds_of(inj.kind, [k for _, k in inj.at_steps or []], inj.fuzz_kinds)
        io = [k for k in kinds if failures.get(k).storage_fault]
        if not io:
            return {}
        self.kinds = io
        lib = iofault.build(self.phase.iofault_dir)
        self.say(f"storage faults: {', '.join(io)} through {lib} in the ranks")
        return iofault.rank_env(lib, self.ckpt_dir or self.phase.ckpts, self.phase.iofault_ctl,
                                self.phase.iofaults)

    def heals_space(self) -> bool:
        """Whether this phase's own storage fault makes writes fail for a while only.

        That is write_errors with a duration. A 'no space' it causes is then no reason to stop relaunching."""
        return "write_errors" in self.kinds and self.inject is not None and self.inject.duration > 0
