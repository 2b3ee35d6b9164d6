"""The environment variables by which the sides find each other.

Every rank carries the job tag. The killer finds ranks by it, never by command line. Each of
restartlab's own tools carries a mark, and is never a rank. A warm pool has its pid, and a warm
rank its mark. The module also gives this node's name as the scheduler spells it."""
import os
import socket
from typing import Optional, Tuple

LAUNCH_TS_VAR = "RESTARTLAB_LAUNCH_TS"  # when the supervisor launched the attempt (time.time(), repr): its ranks' clock zero
ATTEMPT_VAR = "RESTARTLAB_ATTEMPT"      # the attempt's number (1: the phase's first)
PHASE_VAR = "RESTARTLAB_PHASE"          # the phase's name
EXPT_VAR = "RESTARTLAB_EXPT"            # the experiment directory's name
TAG_VAR = "RESTARTLAB_JOB_TAG"         # the job tag the killer finds ranks by
TOOL_VAR = "RESTARTLAB_TOOL"           # in the injector's environment (and its children's): never ranks
SERVER_VAR = "RESTARTLAB_WARM_SERVER"  # a warm standby pool's own pid, in the pool's (and its ranks') environment
WARM_VAR = "RESTARTLAB_WARM"           # "1" in a warm rank's os.environ (its startup row records it)
STATE_DIR_VAR = "RESTARTLAB_STATE_DIR"   # where a rank writes its training-state fingerprints (its attempt's directory)
LOSS_LINE_VAR = "RESTARTLAB_LOSS_LINE"      # where steps come from the probe: the program's loss line (a regex); rank 0's probe books it
STATE_EVERY_VAR = "RESTARTLAB_STATE_EVERY"  # the parameters' and optimizer state's crcs every Nth step (collection.state_every)
SLOW_WRITES_VAR = "RESTARTLAB_SLOW_WRITES"  # RANK:SECONDS[:before]: that rank's torch.save files held half-written, or before they begin (failures.slow_writes).
# The job script's own variables (templates/body.j2 sets them in bash) that its tools read.
JOB_START_VAR = "RL_JOB_START"          # when this run of the batch job started (epoch s)
EXPT_DIR_VAR = "RL_EXPT_DIR"            # the experiment directory
NODEFILE_VAR = "RL_NODEFILE"            # the job's node file, one line per host or per slot
FANOUT_DIR_VAR = "RESTARTLAB_FANOUT_DIR"  # where a fan-out's receipts go, over the experiment directory
GROUP_TAG_SEP = ".g"                   # a torchft phase's replica group k carries the tag <tag>.g<k>


def group_tag(tag: str, g: int) -> str:
    """The tag of replica group `g`'s ranks in a torchft phase.

    The group's own loop tears down only them. The phase's injector, looking for <tag>, finds every
    group's."""
    return f"{tag}{GROUP_TAG_SEP}{g}"


def tag_matches(value: str, tag: str) -> bool:
    """A rank's tag `value` is of the job tag `tag`: the tag itself or one of its groups'."""
    prefix = tag + GROUP_TAG_SEP
    return value == tag or (value.startswith(prefix) and value[len(prefix):].isdigit())


def node_name() -> str:
    """The scheduler's name for this node (several Slurm nodes can share one host in tests)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


SLOW_WRITES_HOLDS = ("inside", "before")  # failures.slow_writes.hold: the file half-written, or not begun


def slow_writes_value(rank: int, seconds: float, hold: str = "inside") -> str:
    """RESTARTLAB_SLOW_WRITES for failures.slow_writes ('' when off): RANK:SECONDS[:before]."""
    if not seconds:
        return ""
    return f"{rank}:{seconds:g}" + (f":{hold}" if hold != SLOW_WRITES_HOLDS[0] else "")


def parse_slow_writes(value: str) -> Optional[Tuple[int, float, str]]:
    """slow_writes_value's reader: 'R:S[:HOLD]' -> (rank, seconds, hold); None when off ('' or
    S = 0); ValueError when malformed."""
    if not value:
        return None
    rank, seconds, *rest = value.split(":")
    r, s = int(rank), float(seconds)
    hold = rest[0] if rest else SLOW_WRITES_HOLDS[0]
    if r < 0 or s < 0 or len(rest) > 1 or hold not in SLOW_WRITES_HOLDS:
        raise ValueError(f"{SLOW_WRITES_VAR}={value!r}: rank and seconds must be >= 0, the hold one of "
                         f"{', '.join(SLOW_WRITES_HOLDS)}")
    return (r, s, hold) if s > 0 else None
