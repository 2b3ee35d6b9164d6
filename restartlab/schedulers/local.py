"""Local shell: no scheduler, this host only (restartlab run). A local run has its own job id
and node file variables, never a batch system's: inside it, the registry answers "local"."""
from .base import Scheduler, register


@register
class Local(Scheduler):
    name = "local"
    title = "a local shell (restartlab run)"
    jobid_var = "RESTARTLAB_LOCAL_JOBID"
    nodefile_var = "RESTARTLAB_LOCAL_NODEFILE"
    nodefile_sh = ('RL_NODEFILE=${{RESTARTLAB_LOCAL_NODEFILE:-}}\n'
                   '[ -n "$RL_NODEFILE" ] || RL_NODEFILE={nodefile}\n'
                   '[ -s "$RL_NODEFILE" ] || hostname > "$RL_NODEFILE"')
