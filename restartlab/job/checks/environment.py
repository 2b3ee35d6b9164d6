"""The job's setup lines, launcher and Pythons, asked in one shell as the job will ask them
(job/probe.py).

It asks for:
- torch and the device support the scenario asks for;
- restartlab;
- torchft, for torchft phases;
- the program's framework;
- the launcher's kind."""
import os
import sys

from ... import launchers, programs
from .. import probe as probe_mod, render
from . import ERROR, OK, WARNING, Check
from .program import Found


def lacks_framework(at: str, exe: str, gone, adapter, asked: str = "") -> str:
    """The line refusing a program whose Python (`exe`, asked so) cannot import its adapter's framework."""
    return (f"{at}: {exe}, the program's Python{asked}, cannot import {', '.join(gone)} (the {adapter.name} adapter's "
            f"framework): pip install 'restartlab[{adapter.extra}]' for it, which keeps the torch that is there")


class EnvironmentCheck(Check):
    def job_env(self):
        """The environment the job's shell starts from, as near as the login node knows it.

        It is this process's environment, though a PBS job's login shell may set PATH anew. For
        `restartlab run` (no queue), this Python's directory comes first on PATH."""
        env = dict(self.env)
        if not self.sched.has_queue:
            env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        return env

    def run(self, found: Found) -> None:
        """The job's setup lines, launcher and Pythons, asked in one shell (probe.py)."""
        sc, ln = self.sc, self.sc.launch
        job_py = ln.python or sys.executable
        launch_cmd = render.launch_spec(sc, 1, 1, {}, ()).launcher_argv()[0] if launchers.get(ln.launcher).launchable else None
        pythons, command = found.pythons, found.command
        asked = [job_py] + [p for p in pythons if p != job_py]
        prog = sc.trainer.program
        adapter = programs.ADAPTERS.get(prog.adapter) if prog else None
        needs = tuple(adapter.requires) if adapter else ()
        print(f"preflight: asking the job's environment (setup lines: {len(ln.setup)}, {launch_cmd}, "
              f"{', '.join(asked)}) ...", file=sys.stderr, flush=True)
        pr = self.pf.probe_fn(ln.setup, launch_cmd, asked, env=self.job_env(),
                              commands=[command] if command else [], modules=probe_mod.MODULES + ((found.module[1],) if found.module else ()) + needs)
        if not pr.ok:
            self.add(ERROR, "python", f"{self.key('launch', 'setup')}: {pr.error}")
            skipped = ["the job's Python (torch, restartlab)", f"the launcher ({launch_cmd})" if launch_cmd else "",
                       f"the program's command ({command})" if command else "",
                       f"the {adapter.name} adapter's framework" if adapter and needs else ""]
            self.add(WARNING, "skipped", f"{', '.join(x for x in skipped if x)}: not checked, because the setup lines "
                     "failed and they are asked after them: fix launch.setup and run preflight again")
            return
        self.python(pr.pythons[job_py], job_py, bundled=not sc.trainer.program)
        for py in pythons:
            if py != job_py:
                self.python(pr.pythons[py], py, bundled=False, program=True)
        if command and not pr.commands.get(command.replace(" ", "_")):
            self.add(ERROR, "program", f"{self.key('trainer', 'program', 'command')}: {command!r} is not on the "
                     "job's PATH (after launch.setup): give its path")
        if needs:
            # The program's Python when its command is one, else the job's. A launcher's command, say
            # bash -c 'exec deepspeed ...', runs the Python on the job's PATH.
            py = pr.pythons[pythons[0] if pythons else job_py]
            gone = [m for m in needs if not py.imports(m)]
            if py.found and gone:
                self.add(ERROR, "program", lacks_framework(self.key("trainer", "program", "command"), py.exe, gone,
                                                           adapter, " (after launch.setup)"))
        if found.module:
            py, module = found.module
            if pr.pythons[py].found and not pr.pythons[py].imports(module):
                self.add(ERROR, "program", f"{self.key('trainer', 'program', 'command')}: {py} -m {module}: no module "
                         f"{module!r} for that Python (after launch.setup)")
        self.launcher(pr, launch_cmd)

    def python(self, p, asked, bundled, program=False):
        sc, tr = self.sc, self.sc.trainer
        at = self.key("trainer", "program", "command") if program else self.key("launch", "python")
        who = "your program's Python" if program else "the job's Python"
        if not p.found:
            self.add(ERROR, "python", f"{at}: {who} {asked!r} cannot run: {p.torch_error or 'not found'}")
            return
        if not program and not p.imports("restartlab"):
            self.add(ERROR, "python", f"{at}: {who} {p.exe} cannot import restartlab (the job's supervisor runs "
                     "in it): install restartlab for it, or set launch.python")
        if not p.torch:
            level = ERROR if bundled else WARNING
            self.add(level, "python", f"{at}: {who} {p.exe} cannot import torch ({p.torch_error or 'not installed'})"
                     + (": the trainer needs it; load the site's PyTorch in launch.setup (module load frameworks)"
                        if bundled else ""))
            return
        device = tr.device if not tr.program else None
        dev_at = self.key("trainer", "device")
        if device == "cuda" and not p.cuda:
            self.add(ERROR, "python", f"{dev_at}: cuda, but {who}'s torch {p.torch} ({p.exe}) was built without CUDA: "
                     "a CPU build installed over the site's? (make install before module load)")
        elif device == "xpu" and not (p.xpu or p.imports("intel_extension_for_pytorch")):
            self.add(ERROR, "python", f"{dev_at}: xpu, but {who}'s torch {p.torch} ({p.exe}) has no XPU support "
                     "(torch.xpu not compiled, no intel_extension_for_pytorch): a CPU build installed over the "
                     "site's? (make install before module load frameworks)")
        else:
            built = ", ".join(x for x in ("CUDA " + p.cuda if p.cuda else "", "XPU" if p.xpu else "",
                                          "IPEX" if p.imports("intel_extension_for_pytorch") else "") if x)
            self.add(OK, "python", f"{p.exe}: torch {p.torch}" + (f" ({built})" if built else " (CPU only)"))
        if any(ph.torchft for ph in sc.phases) and not p.imports("torchft"):
            i = next(i for i, ph in enumerate(sc.phases) if ph.torchft)
            self.add(ERROR, "python", f"{self.key('phases', i, 'recovery', 'strategy')}: torchft is not installed for "
                     f"{p.exe} (pip install 'restartlab[torchft]', which keeps the torch that is there)")

    def launcher(self, pr, cmd):
        if not cmd:
            return
        name = self.sc.launch.launcher
        at = self.key("launch", "mpiexec") if cmd == self.sc.launch.mpiexec else self.key("launch", "launcher")
        if not pr.launcher_path:
            self.add(ERROR, "launcher", f"{at}: {cmd!r} is not found after launch.setup (the job's PATH): give its "
                     "path, or load its module in launch.setup")
            return
        kind = launchers.identify(pr.launcher_version)
        want = name if launchers.get(name).version_pattern else None
        first = (pr.launcher_version.strip().splitlines() or ["(no output)"])[0].strip()
        if kind != want:
            said = launchers.get(kind).title if kind else "neither MPICH Hydra, Open MPI nor srun"
            self.add(ERROR, "launcher", f"{at}: launch.launcher is {name}, but {pr.launcher_path} is {said} "
                     f"(--version: {first!r}): its flags differ; set launch.launcher or launch.mpiexec")
        else:
            self.add(OK, "launcher", f"{pr.launcher_path}: {name}" + (" (PALS is taken for any mpiexec that is not "
                                                                      "Hydra or Open MPI: unverified here)"
                                                                      if name == "pals" else ""))
