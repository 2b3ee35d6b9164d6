"""The program, found as the ranks will look for it: in their attempt directory, which holds
nothing of yours."""
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ...contracts import placeholders, pycmd
from . import ERROR, OK, WARNING, Check

PLACEHOLDER = re.compile(r"/path/to/")


@dataclass
class Found:
    """What the program check found, for the environment check to ask the job's shell about."""
    pythons: List[str] = field(default_factory=list)   # the program's own Python, where its command is one
    command: Optional[str] = None                      # a command that is not a Python: on the job's PATH?
    module: Optional[Tuple[str, str]] = None           # (python, module) of a program run as python -m MODULE


class ProgramCheck(Check):
    def program_words(self):
        """The program's argv as the ranks will run it.

        The placeholders the renderer fills ({scenario_dir}) are filled. A word with a per-phase
        or per-attempt placeholder is left as it is."""
        prog = self.sc.trainer.program
        sdir = os.path.dirname(os.path.abspath(self.sc.source))
        return [placeholders.fill(w, {placeholders.SCENARIO_DIR: sdir}) for w in prog.command]

    def run(self, found: Found) -> None:
        """The program's command (and its script or module) found as the ranks look for them: in
        <expt>/<phase>/attempts/<k>, their working directory, which holds nothing of yours."""
        prog = self.sc.trainer.program
        if not prog:
            return
        words = self.program_words()
        at = self.key("trainer", "program", "command")
        for w in words:
            if PLACEHOLDER.search(w):
                self.add(ERROR, "program", f"{at}: {w!r} is the shipped example's placeholder: put the real path")
                return
        sdir = os.path.dirname(os.path.abspath(self.sc.source))
        cmd = words[0]
        if "/" in cmd and not os.path.isabs(cmd):
            self.add(ERROR, "program", f"{at}: {cmd!r} is relative, and ranks run in their attempt directory "
                     f"(<expt>/<phase>/attempts/<k>): write {{scenario_dir}}/{os.path.normpath(cmd)} (the "
                     "scenario file's directory) or an absolute path")
            return
        if os.path.isabs(cmd) and not os.access(cmd, os.X_OK):
            self.add(ERROR, "program", f"{at}: {cmd} does not exist or is not executable")
            return
        if pycmd.IS_PYTHON.match(os.path.basename(cmd)):
            found.pythons.append(cmd)
            py = pycmd.parse(words)
            if py.run == "module":
                found.module = (cmd, py.target or "")
            elif py.run == "script":  # (-c CODE was once taken for a script's path)
                script = py.target or ""
                if any(t in script for t in (placeholders.CKPT_DIR, placeholders.PHASE_DIR, placeholders.ATTEMPT_DIR)):
                    self.add(WARNING, "skipped", f"{at}: {script}: not checked: its path is known only per phase or "
                             "attempt")
                    return
                if not os.path.isabs(script):
                    hint = os.path.join("{scenario_dir}", os.path.relpath(os.path.join(sdir, script), sdir)) \
                        if os.path.exists(os.path.join(sdir, script)) else "an absolute path"
                    self.add(ERROR, "program", f"{at}: {script!r} is relative, and ranks run in their attempt "
                             f"directory (<expt>/<phase>/attempts/<k>), where it is not: write {hint}")
                elif not os.path.isfile(script):
                    self.add(ERROR, "program", f"{at}: {script}: no such file")
                else:
                    self.add(OK, "program", f"{script}")
            elif py.run == "code":
                self.add(OK, "program", f"{cmd} -c: the program is inline code (no file to check)")
        else:
            found.command = cmd
