"""What restartlab installs in a rank of your program once torch is imported.

It installs only what the scenario asked for:

- the training-state probe (state_probe), with RESTARTLAB_STATE_DIR set and RESTARTLAB_STATE_EVERY
  not 0;
- a slowed checkpoint writer (slow_writes), with RESTARTLAB_SLOW_WRITES.

This is one entry point for both ways a rank starts:

- a cold rank's sitecustomize (runtime/linebuf), after the program's `import torch`;
- a warm rank, forked from a pool that imported torch already (runtime/warm/pool.py).

Neither is ever the program's failure. When one cannot be installed, the rank's stderr says so."""
import os
import sys

from restartlab.contracts.envvars import SLOW_WRITES_VAR, STATE_DIR_VAR, STATE_EVERY_VAR


def install_from_env(env=os.environ) -> None:
    if env.get(STATE_DIR_VAR) and env.get(STATE_EVERY_VAR) != "0":
        try:
            from restartlab.trainer import state_probe
            state_probe.install_from_env(env)
        except Exception as e:  # the verdict then says the state was not observed
            sys.stderr.write(f"restartlab: training-state fingerprints off: {type(e).__name__}: {e}\n")
    if env.get(SLOW_WRITES_VAR):
        try:
            from restartlab.trainer import slow_writes
            slow_writes.install_from_env(env)
        except Exception as e:
            sys.stderr.write(f"restartlab: slow writes off: {type(e).__name__}: {e}\n")
