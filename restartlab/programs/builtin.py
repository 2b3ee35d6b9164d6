"""The built-in adapters. `restartlab`: the bundled trainer (it writes restartlab's metrics rows
itself; its checkpoints follow ckptdir's contract). `generic`: any program, configured entirely by
the scenario's `trainer.program` keys."""
from .. import ckptdir
from .base import ADAPTERS, Adapter


@ADAPTERS.register
class Restartlab(Adapter):
    name = "restartlab"
    doc = "the bundled DCP trainer (restartlab.trainer): step-N/.complete, its own metrics rows"
    tap = False
    defaults = {"checkpoints": r"{ckpt_dir}/step-(?P<step>\d+)", "complete": "file:" + ckptdir.COMPLETE,
                "selects": "newest_complete", "progress": None, "resumed": r"RESUMED from step=(?P<step>\d+)"}


@ADAPTERS.register
class Generic(Adapter):
    name = "generic"
    doc = "any program: progress and checkpoint patterns from trainer.program"
    defaults = {"complete": "exists", "selects": "newest_complete"}
