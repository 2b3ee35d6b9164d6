"""What a warm standby pool (restartlab.runtime.warm) imports before it forks ranks of the bundled trainer.

That is every module the trainer imports. It is nothing that runs a torch op, opens a device,
starts a thread or initialises a process group, since a forked child could not use any of those.
Importing this module has no other effect."""
import importlib

MODULES = (
    "torch",
    # FSDP2's fully_shard imports torch._dynamo on its first call (torch._compile's disable
    # wrapper). Until it was preloaded too, that took ~1.3 s of a warm rank's model build here (cProfile).
    "torch._dynamo",
    "torch.distributed",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.tensor.parallel",
    "torch.distributed.device_mesh",
    # the trainer's own modules (not restartlab.trainer.__main__: the rank runs it as __main__)
    "restartlab.trainer.checkpoint", "restartlab.trainer.ckpt_io", "restartlab.trainer.data",
    "restartlab.trainer.dist", "restartlab.trainer.metrics", "restartlab.trainer.model",
    "restartlab.trainer.parallel", "restartlab.trainer.state", "restartlab.trainer.testpoints",
    "restartlab.contracts.ckptdir", "restartlab.contracts.trainer_options",
)

for _name in MODULES:
    importlib.import_module(_name)
