"""What the job will find where it runs, asked on the login node as the job script would ask it.

A bash runs the scenario's setup lines (module load, venv). Then it asks the launcher's command
(`command -v`, `--version`) and the job's Python. The Python imports torch and says what device
support it was built with, without a GPU. All of it runs in one subprocess, whose lines are marked
and parsed here."""
import json
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .. import launchers
from ..contracts import typed_json

# run by the job's Python (and a program's own): never imports restartlab, which it may not have
PY_CODE = r"""
import importlib.util as u, json, sys
mods = sys.argv[1:]
out = {"exe": sys.executable, "version": sys.version.split()[0],
       "modules": {m: u.find_spec(m) is not None for m in mods}}
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = getattr(torch.version, "cuda", None)
    try:
        out["xpu"] = bool(torch.xpu._is_compiled())
    except Exception:
        out["xpu"] = False
except Exception as e:
    out["torch"] = None
    out["torch_error"] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:200]
print("RL-PY " + json.dumps(out), flush=True)
"""
MODULES = ("restartlab", "mpi4py", "torchft", "intel_extension_for_pytorch", "oneccl_bindings_for_pytorch")


@dataclass
class Python:
    asked: str
    found: bool
    exe: str = ""
    torch: Optional[str] = None
    torch_error: str = ""
    cuda: Optional[str] = None
    xpu: bool = False
    modules: Dict[str, bool] = field(default_factory=dict)  # each module asked: whether it imports

    def imports(self, module: str) -> bool:
        """Whether the module asked about imports (False: not asked, or it does not)."""
        return bool(self.modules.get(module))

    @classmethod
    def from_line(cls, asked: str, line: str) -> "Python":
        """The Python's answer: PY_CODE's JSON line, which this module alone writes.

        A line that does not read as one is reported in torch_error. A field of the wrong type is
        left absent."""
        try:
            got = typed_json.read(Answer, json.loads(line))
        except ValueError:
            got = None
        if got is None:
            return cls(asked, False, torch_error=f"an answer that does not read: {line[:120]!r}")
        return cls(asked, True, got.exe, got.torch, got.torch_error, got.cuda, got.xpu, got.modules)


@dataclass
class Answer:
    """PY_CODE's line, as the job's Python prints it (read by typed_json: exe is required)."""
    exe: str
    torch: Optional[str] = None
    torch_error: str = ""
    cuda: Optional[str] = None
    xpu: bool = False
    modules: Dict[str, bool] = field(default_factory=dict)


@dataclass
class Probe:
    ok: bool                    # the shell ran to its end
    error: str = ""             # why not (a setup line failed, a timeout)
    launcher_path: str = ""     # `command -v` of the launcher's command ('' : not found)
    launcher_version: str = ""  # its --version output, first lines
    pythons: Dict[str, Python] = field(default_factory=dict)
    commands: Dict[str, str] = field(default_factory=dict)  # `command -v` of each command asked ('': not found)


def script(setup: List[str], launcher: Optional[str], pythons: List[str], modules=MODULES,
           commands: Sequence[str] = ()) -> str:
    """The bash text: setup lines as the job runs them (each must succeed, as a job would need it
    to), then one marked block per thing asked. A command (a program of yours that is not a
    Python) is only looked up, never run."""
    lines = ["set -e"] + list(setup) + ["set +e", "echo RL-SETUP-DONE"]
    if launcher:
        q = shlex.quote(launcher)
        lines += [f"p=$(command -v {q}) && echo \"RL-LAUNCHER-PATH $p\" && "
                  f"{{ {q} --version </dev/null 2>&1 | head -n 20 | sed 's/^/RL-LAUNCHER /'; }}"]
    for py in pythons:
        lines += [f"echo {shlex.quote('RL-ASK ' + py)}",
                  f"{shlex.quote(py)} -c {shlex.quote(PY_CODE)} {' '.join(map(shlex.quote, modules))} 2>&1 | "
                  "sed 's/^/RL-OUT /' || true"]
    for c in commands:
        q = shlex.quote(c)
        lines += [f"echo \"RL-CMD {c.replace(' ', '_')} $(command -v {q} || true)\""]
    return "\n".join(lines) + "\n"


def parse(text: str, pythons: List[str], rc: int) -> Probe:
    out = Probe(ok="RL-SETUP-DONE" in text)
    if not out.ok:
        tail = " | ".join(text.strip().splitlines()[-3:])[-300:]
        out.error = f"the setup lines failed (exit {rc}){': ' + tail if tail else ''}"
    version = []
    asked = None
    for line in text.splitlines():
        if line.startswith("RL-CMD "):
            name, _, where = line[len("RL-CMD "):].partition(" ")
            out.commands[name] = where.strip()
        elif line.startswith("RL-LAUNCHER-PATH "):
            out.launcher_path = line.split(" ", 1)[1].strip()
        elif line.startswith("RL-LAUNCHER "):
            version.append(line[len("RL-LAUNCHER "):])
        elif line.startswith("RL-ASK "):
            asked = line[len("RL-ASK "):]
            out.pythons[asked] = Python(asked, False)
        elif line.startswith("RL-OUT RL-PY ") and asked:
            out.pythons[asked] = Python.from_line(asked, line[len("RL-OUT RL-PY "):])
        elif line.startswith("RL-OUT ") and asked and not out.pythons[asked].found:
            out.pythons[asked].torch_error = (out.pythons[asked].torch_error + " " + line[7:]).strip()[-300:]
    out.launcher_version = "\n".join(version)
    for py in pythons:
        out.pythons.setdefault(py, Python(py, False))
    return out


def run(setup: List[str], launcher: Optional[str], pythons: List[str], timeout: float = 300, env=None,
        commands: Sequence[str] = (), modules=MODULES) -> Probe:
    try:
        # cwd /: a Python's first path entry is where it starts, and the job's is no source tree
        r = subprocess.run(["bash", "-c", script(setup, launcher, pythons, modules, commands)], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, cwd="/", env=env)
    except subprocess.TimeoutExpired:
        return Probe(False, f"the setup lines and the Python did not answer in {timeout:.0f} s")
    return parse(r.stdout + r.stderr, pythons, r.returncode)


def launcher_kind(version_text: str) -> Optional[str]:
    """The launcher a --version output names (launchers.identify); None: PALS, or another."""
    return launchers.identify(version_text)
