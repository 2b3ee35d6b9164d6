"""Warm standby restart: a preloaded fork server on the node, and the stub the launcher starts.

A relaunch normally pays, on every rank, a Python start and the imports of torch and the program.
That is ~1.7 s of the demo's ~2.5 s restart here, and tens of seconds from a shared file system at
scale. With `relaunch.warm` the supervisor keeps one standby process per node (the *pool*). The
pool has imported the program's modules once and waits. Each attempt's launcher starts a tiny stub
per rank instead of the program:

    mpiexec ... python -m restartlab.runtime.warm stub --socket S -- python -m restartlab.trainer ...

The stub connects to the pool's Unix socket. The socket is in a private 0700 directory, and the
peer's uid is checked. The stub hands over its argv, environment, working directory and standard
streams (the fds themselves, SCM_RIGHTS). The pool forks, and the child becomes the rank. The child
has the stub's environment in os.environ and its fds as 0-2. It runs the program as __main__ (runpy)
from the already imported modules. The launcher still sees and tears down its own processes, the
stubs:

- The stub forwards the signals it can catch (TERM, INT, HUP, USR1, USR2, QUIT) to its rank. It
  mirrors the rank's exit status: when the rank dies by signal N, the stub dies of N.
- The stub's death (a SIGKILL, a launcher teardown) closes the socket, and the pool SIGKILLs that
  rank at once. The pool's death kills every rank it forked (PR_SET_PDEATHSIG).
- The pool never gives away itself. It forks per request, so it is ready for the next attempt as
  soon as the last one ended.

Finding ranks by tag: a forked rank's /proc environment is the pool's, not the stub's. Linux keeps
a process's initial environment block. The pool carries the job tag and
RESTARTLAB_WARM_SERVER=<its own pid>. It re-execs itself once to know that pid. So the killer finds
every active rank by the tag, as before. It also tells the idle pool apart: the one process whose
RESTARTLAB_WARM_SERVER is its own pid. The idle pool is never a rank. Only `restartlab teardown`
stops it.

What must not happen in the pool before a fork:
- No CUDA/XPU context. A forked child cannot use it.
- No process group or MPI init. Sockets and rendezvous state would be shared.
- No threads the child needs. A fork copies only the forking thread. The pool refuses to serve when
  its preload left more than one thread. OPENBLAS_NUM_THREADS=1 keeps numpy's OpenBLAS pool from
  starting.

The preload therefore only imports. The intra-op thread pool of torch starts lazily in each rank.

The package's modules, by the process each runs in:

- `stub`: the stub under the launcher. It imports the standard library and `wire` only (tested), so
  its start is a bare Python start.
- `wire`: the socket protocol both ends speak (length-prefixed JSON, fds by SCM_RIGHTS).
- `pool`: the standby pool (`serve`) and the rank it forks.
- `standby`: the supervisor's side. It starts, waits for and stops the pools, and gives the launch
  argv through stubs.

`python -m restartlab.runtime.warm serve|stub` runs the pool or the stub (`__main__`). Nothing here
imports torch: the pool imports what its preload names."""
