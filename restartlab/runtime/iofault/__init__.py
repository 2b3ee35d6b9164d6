"""Storage faults below every writer.

A small LD_PRELOAD library (iofault.c, beside this file) makes them. A phase with a storage failure
kind (failures.StorageKind: stall_writes, slow_storage, write_errors, torn) puts it into its ranks.
It reaches each file a rank opens for writing under the phase's checkpoint directory, whoever writes
it: DCP's file writer, torch.save's C++ stream, safetensors, DeepSpeed's shards, a program's own open().

The injector strikes by writing the phase's control file (`arm`, whole, by rename). A rank's library
reads it when it next opens a checkpoint file for writing. The first write to that file takes the
strike. This happens once per rank and strike, across the rank's later processes. What each strike
did is one JSON line per event in the phase's iofaults.jsonl (contracts/iofaults.py reads it).

Why a preload of our own and not libfiu's POSIX preloader (Debian's fiu-utils)? Libfiu fails calls
by name and probability, for every file of the process. Its posix module does none of what a
checkpoint fault must do:
- hit only the checkpoint directory's files
- block rather than fail (stall, slow)
- cut a file at a byte and kill the rank there (torn)

The library is built from its source with the site's C compiler when the phase starts. It goes into
the phase's directory (nothing outside the experiment). A phase without a storage kind does not load
it at all. Its cost with nothing armed: bench/iofault_cost.py."""
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Dict, Mapping, Optional

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "iofault.c")
COMPILERS = ("cc", "gcc", "clang")
DIR_VAR, CTL_VAR, LOG_VAR = "RESTARTLAB_IOFAULT_DIR", "RESTARTLAB_IOFAULT_CTL", "RESTARTLAB_IOFAULT_LOG"
# failures.kind -> the library's word for it
SHIM_KIND = {"stall_writes": "stall", "slow_storage": "slow", "write_errors": "error", "torn": "torn"}
ERRNOS = {"EIO": 5, "ENOSPC": 28}


class BuildError(Exception):
    pass


def compiler() -> Optional[str]:
    return next((c for c in COMPILERS if shutil.which(c)), None)


def build(dest_dir: str) -> str:
    """The library, compiled into dest_dir (once: its name carries the source's hash); BuildError
    with the compiler's words when it cannot be."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    out = os.path.join(os.path.abspath(dest_dir), f"libiofault-{digest}.so")
    if os.path.exists(out):
        return out
    cc = compiler()
    if cc is None:
        raise BuildError(f"no C compiler on PATH ({', '.join(COMPILERS)}): the storage faults' preload "
                         f"({SOURCE}) is built with one when the phase starts")
    os.makedirs(dest_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libiofault-", suffix=".so", dir=dest_dir)
    os.close(fd)
    r = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", tmp, SOURCE, "-ldl", "-lpthread"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise BuildError(f"{cc} could not build {SOURCE}: " + " ".join(r.stderr.split())[-400:])
    os.replace(tmp, out)
    return out


def rank_env(lib: str, ckpt_dir: str, ctl: str, log: str, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """What a rank's environment gets.

    The library comes first in LD_PRELOAD, and a site's own preloads stay after it. The other
    variables say where the checkpoints, the control file and the log are."""
    env = os.environ if env is None else env
    pre = " ".join(x for x in [lib] + env.get("LD_PRELOAD", "").replace(":", " ").split() if x)
    return {"LD_PRELOAD": pre, DIR_VAR: os.path.abspath(ckpt_dir), CTL_VAR: os.path.abspath(ctl),
            LOG_VAR: os.path.abspath(log)}


def arm(ctl: str, strike_id: int, kind: str, rank: int, seconds: float = 0.0, rate: float = 0.0,
        errno_name: str = "EIO", after: int = 0, duration: float = 0.0) -> str:
    """The control file the ranks' libraries read, written whole (rename): the strike it holds
    replaces any earlier one. Returns its text."""
    text = (f"id={int(strike_id)} kind={SHIM_KIND[kind]} rank={int(rank)} seconds={float(seconds)!r} "
            f"rate={float(rate)!r} errno={ERRNOS[errno_name]} after={int(after)} duration={float(duration)!r}\n")
    d = os.path.dirname(os.path.abspath(ctl))
    fd, tmp = tempfile.mkstemp(prefix=".iofault-", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, ctl)
    return text


def disarm(ctl: str) -> None:
    """The phase is over: no later process of it takes a strike (the markers stay, as records)."""
    try:
        os.unlink(ctl)
    except FileNotFoundError:
        pass
