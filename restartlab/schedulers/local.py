"""Local shell: no scheduler, this host only (restartlab run)."""
from .base import SchedulerError

PREFIX = None
NODEFILE_SH = ('RL_NODEFILE="${PBS_NODEFILE:-$RL_EXPT_DIR/nodefile}"\n'
               '[ -s "$RL_NODEFILE" ] || hostname > "$RL_NODEFILE"')


def directives(sc):
    return []


def submit_cmd(script):
    raise SchedulerError("the local scheduler has no queue: use `restartlab run SCENARIO`")


parse_submit = status_cmd = parse_status = cancel_cmd = cancel_error = submit_cmd


def fanout_cmd(node_index, hosts, argv, slots=None):
    return list(argv)
