"""Warm standby restart: a preloaded fork server on the node, and the stub the launcher starts.

A relaunch normally pays, on every rank, a Python start and the imports of torch and the program
(~1.7 s of the demo's ~2.5 s restart here; tens of seconds from a shared file system at scale).
With `relaunch.warm` the supervisor keeps one standby process per node (the *pool*) that has
imported the program's modules once and waits. Each attempt's launcher starts a tiny stub per rank
instead of the program:

    mpiexec ... python -m restartlab.runtime.warm stub --socket S -- python -m restartlab.trainer ...

The stub connects to the pool's Unix socket (in a private 0700 directory; the peer's uid is
checked), hands over its argv, environment, working directory and standard streams (the fds
themselves, SCM_RIGHTS), and the pool forks: the child becomes the rank, with the stub's
environment in os.environ, its fds as 0-2, and the program run as __main__ (runpy) from the
already imported modules. The launcher still sees and tears down its own processes, the stubs:

- the stub forwards the signals it can catch (TERM, INT, HUP, USR1, USR2, QUIT) to its rank and
  mirrors the rank's exit status (death by signal N: the stub dies of N);
- the stub's death (a SIGKILL, a launcher teardown) closes the socket: the pool SIGKILLs that rank
  at once; the pool's death kills every rank it forked (PR_SET_PDEATHSIG);
- the pool never gives away itself: it forks per request, so it is ready for the next attempt
  as soon as the last one ended.

Finding ranks by tag: a forked rank's /proc environment is the pool's, not the stub's (Linux
keeps a process's initial environment block). The pool carries the job tag and
RESTARTLAB_WARM_SERVER=<its own pid> (it re-execs itself once to know it), so the killer finds
every active rank by the tag, as before, and tells the idle pool (the one process whose
RESTARTLAB_WARM_SERVER is its own pid) apart: never a rank, only `restartlab teardown` stops it.

What must not happen in the pool before a fork: no CUDA/XPU context (a forked child cannot use
it), no process group or MPI init (sockets and rendezvous state would be shared), no threads the
child needs (a fork copies only the forking thread: the pool refuses to serve when its preload
left more than one thread; OPENBLAS_NUM_THREADS=1 keeps numpy's OpenBLAS pool from starting). The
preload therefore only imports; torch's intra-op thread pool starts lazily in each rank.

The package's modules, by the process each runs in:

- `stub`: the stub under the launcher; it imports the standard library and `wire` only (tested),
  so its start is a bare Python start;
- `wire`: the socket protocol both ends speak (length-prefixed JSON, fds by SCM_RIGHTS);
- `pool`: the standby pool (`serve`) and the rank it forks;
- `standby`: the supervisor's side: start, wait for, stop the pools; the launch argv through stubs.

`python -m restartlab.runtime.warm serve|stub` runs the pool or the stub (`__main__`). Nothing here
imports torch: the pool imports what its preload names."""
