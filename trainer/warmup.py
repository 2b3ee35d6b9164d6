"""What a warm standby pool (restartlab.warm) imports before it forks ranks of the bundled trainer:
every module the trainer imports, and nothing that runs a torch op, opens a device, starts a
thread or initialises a process group (a forked child could not use any of those). Importing this
module has no other effect."""
import torch  # noqa: F401
# FSDP2's fully_shard imports torch._dynamo on its first call (torch._compile's disable wrapper):
# ~1.3 s of a warm rank's model build here until it was preloaded too
import torch._dynamo  # noqa: F401
import torch.distributed  # noqa: F401
import torch.distributed.checkpoint  # noqa: F401
import torch.distributed.checkpoint.state_dict  # noqa: F401
import torch.distributed.fsdp  # noqa: F401
import torch.distributed.tensor  # noqa: F401
import torch.distributed.tensor.parallel  # noqa: F401
import torch.distributed.device_mesh  # noqa: F401

# (not restartlab.trainer.__main__ itself: the rank runs it as __main__)
from restartlab.trainer import checkpoint, ckpt_io, data, dist, metrics, model, parallel, state, testpoints  # noqa: F401
from restartlab import ckptdir, trainer_options  # noqa: F401
