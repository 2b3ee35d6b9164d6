"""python -m restartlab.runtime.rankenv -- PROGRAM [ARGS]: become PROGRAM, as this rank.

PROGRAM gets torchrun-style variables mapped from the launcher's: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, TORCHELASTIC_RUN_ID, and TORCHELASTIC_RESTART_COUNT = the attempt - 1.
MASTER_ADDR and MASTER_PORT come from the supervisor through the launcher. So a program written for
torchrun runs under mpiexec, PALS or srun unchanged.

It execs PROGRAM in its own process. The job tag, the PID the killer finds and the signals the
launcher sends are the program's. Variables already set are kept: a launcher that sets them knows best."""
import os
import sys
from typing import Dict, List, Mapping, Optional

from .. import launchers
from ..contracts.envvars import ATTEMPT_VAR, TAG_VAR
from . import pystdio


def torchrun_env(env: Mapping[str, str]) -> Dict[str, str]:
    """The torchrun-style variables for this rank ({} when no launcher started us)."""
    found = launchers.discover(env, exclude=("torchrun",))  # the variables we set are not a launcher's
    if found is None:
        return {}
    rank, size, local_rank, _ = found
    local = launchers.local_size(env) or size
    attempt = env.get(ATTEMPT_VAR, "1")
    # torchrun's own: frameworks take TORCHELASTIC_RUN_ID as "launched by torchrun" (Lightning then
    # uses its TorchElastic environment: it starts no processes and never initializes MPI)
    return {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local), "GROUP_RANK": str(rank // local),
            "TORCHELASTIC_RUN_ID": env.get(TAG_VAR) or "restartlab",
            "TORCHELASTIC_RESTART_COUNT": str(max(0, int(attempt) - 1) if attempt.isdigit() else 0)}


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("restartlab.runtime.rankenv: error: no program given (python -m restartlab.runtime.rankenv -- PROGRAM ...)",
              file=sys.stderr)
        return 2
    try:
        add = torchrun_env(os.environ)
    except ValueError as e:
        print(f"restartlab.runtime.rankenv: error: {e}", file=sys.stderr)
        return 2
    for k, v in add.items():
        os.environ.setdefault(k, v)
    pystdio.line_buffered(os.environ)  # its output as it happens, each line whole
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"restartlab.runtime.rankenv: error: cannot run {argv[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
