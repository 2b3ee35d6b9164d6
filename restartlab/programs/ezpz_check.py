"""Whether ezpz's example can start here, decided without starting it.

Starting it takes seconds of imports, and a misconfigured start hangs rather than fails. So the
check reads instead. ezpz must be importable by the program's Python, with the example module there.
Every flag of the command must be one its argparse declares. The scheduler must be one ezpz will
not mistake.

How ezpz picks the scheduler is read from ezpz 0.26.1 (saforem2/ezpz at 1229a17).
ezpz/configs.py get_scheduler takes EZPZ_SCHEDULER, then PBS_JOBID / SLURM_JOB_ID, then whichever
of qsub, sbatch is on PATH. Under a mistaken Slurm, rank 0 raises `SLURM_NODELIST not set` in a
rank-0-only call while rank 1 waits in a barrier. The job never exits."""
import os
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Tuple

from ..contracts import pycmd

# the package's folder, found without importing it (ezpz's __init__ imports torch: seconds)
FIND = ("import importlib.util as u; s = u.find_spec('ezpz'); "
        "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')")
JOB_IDS = ("PBS_JOBID", "SLURM_JOB_ID", "SLURM_JOBID")
FLAG = re.compile(r"--[A-Za-z0-9][\w-]*")


def _module(argv: List[str]) -> Tuple[Optional[str], Optional[str], List[str]]:
    """(the python of `python [options] -m ezpz.examples.X ...`, X's dotted name, the arguments after it).

    contracts/pycmd reads the command. The python was once read as the word before -m, and
    `python -u -m ...` gave "-u". (None, None, []) for any other command."""
    _, cmd = pycmd.find(argv)
    if cmd.run == "module" and cmd.target and cmd.target.startswith("ezpz."):
        return cmd.python, cmd.target, list(cmd.args)
    return None, None, []


def package_dir(python: str, env: Dict[str, str]) -> Optional[str]:
    try:
        r = subprocess.run([python, "-c", FIND], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def problem(argv: List[str], env: Dict[str, str]) -> Optional[str]:
    python, module, args = _module(argv)
    if not module:
        return None
    exe = shutil.which(python or "python", path=env.get("PATH"))
    if not exe:
        return f"{python!r} (the Python of `-m {module}`) is not on PATH in the job"
    pkg = package_dir(exe, env)
    if not pkg:
        return (f"ezpz is not installed for {exe}: `-m {module}` cannot start (ezpz 0.26.1 is not on the package "
                "index: pip install --no-deps its source, see docs/your-trainer.md)")
    src = os.path.join(os.path.dirname(pkg), *module.split(".")) + ".py"
    try:
        with open(src, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return f"ezpz at {pkg} has no {module} ({src} is not there)"
    for a in args:
        m = FLAG.fullmatch(a.split("=", 1)[0])
        if m and f'"{m.group(0)}"' not in text and f"'{m.group(0)}'" not in text:
            return f"{module} ({src}) takes no flag {m.group(0)}"
    if not env.get("EZPZ_SCHEDULER") and not any(env.get(k) for k in JOB_IDS):
        tool = next((t for t in ("qsub", "sbatch") if shutil.which(t, path=env.get("PATH"))), None)
        if tool:
            return (f"ezpz would take this for a {'PBS' if tool == 'qsub' else 'Slurm'} job ({tool} is on PATH, and "
                    "no job id is in the environment) and never start: set launch.env.EZPZ_SCHEDULER: LOCAL")
    return None
