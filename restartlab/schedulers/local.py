"""Local shell: no scheduler, this host only (restartlab run)."""
from .base import Scheduler, register


@register
class Local(Scheduler):
    name = "local"
    title = "a local shell (restartlab run)"
    nodefile_sh = ('RL_NODEFILE="${PBS_NODEFILE:-$RL_EXPT_DIR/nodefile}"\n'
                   '[ -s "$RL_NODEFILE" ] || hostname > "$RL_NODEFILE"')
