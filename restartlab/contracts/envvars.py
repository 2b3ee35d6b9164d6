"""The environment variables by which the sides find each other: the job tag every rank carries
(the killer finds ranks by it, never by command line), the mark of restartlab's own tools (never
ranks), a warm pool's pid and a warm rank's mark; and this node's name as the scheduler spells it."""
import os
import socket

TAG_VAR = "RESTARTLAB_JOB_TAG"         # the job tag the killer finds ranks by
TOOL_VAR = "RESTARTLAB_TOOL"           # in the injector's environment (and its children's): never ranks
SERVER_VAR = "RESTARTLAB_WARM_SERVER"  # a warm standby pool's own pid, in the pool's (and its ranks') environment
WARM_VAR = "RESTARTLAB_WARM"           # "1" in a warm rank's os.environ (its startup row records it)


def node_name() -> str:
    """The scheduler's name for this node (several Slurm nodes can share one host in tests)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()
