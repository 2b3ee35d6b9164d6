"""A phase's storage faults (failures.kind stall_writes, slow_storage, write_errors, torn): the
ranks' preload and its settings, built for the phase (runtime/iofault), and whether a fault the
phase makes heals by itself."""
from typing import Any, Callable, Dict, List, Optional

from . import iofault
from .. import failures
from ..contracts import layout
from ..tools import options as tool_options


class PhaseStorageFaults:
    def __init__(self, inject: Optional[Dict[str, Any]], phase: layout.Phase, ckpt_dir: Optional[str],
                 say: Callable[..., None]) -> None:
        self.inject, self.phase, self.ckpt_dir, self.say = inject, phase, ckpt_dir, say
        self.kinds: List[str] = []   # the phase's storage kinds, once rank_env has looked

    def rank_env(self) -> Dict[str, str]:
        """The ranks' preload and its settings where the phase's failures have a storage kind
        (runtime/iofault, built into the phase's directory now); {} otherwise."""
        inj = self.inject
        if not inj:
            return {}
        steps = tool_options.parse_at_steps(inj["at_steps"]) if inj.get("at_steps") else []
        kinds = failures.kinds_of(inj.get("kind"), [k for _, k in steps], inj.get("fuzz_kinds"))
        io = [k for k in kinds if failures.get(k).storage_fault]
        if not io:
            return {}
        self.kinds = io
        lib = iofault.build(self.phase.iofault_dir)
        self.say(f"storage faults: {', '.join(io)} through {lib} in the ranks")
        return iofault.rank_env(lib, self.ckpt_dir or self.phase.ckpts, self.phase.iofault_ctl,
                                self.phase.iofaults)

    def heals_space(self) -> bool:
        """This phase's own storage fault makes writes fail for a while only (write_errors with a
        duration): a 'no space' it causes is no reason to stop relaunching."""
        inj = self.inject or {}
        return "write_errors" in self.kinds and (inj.get("duration") or 0) > 0
