"""restartlab preflight: on the login node, before anything is queued, whether the job a scenario
describes can work where it is going. Each finding is one line: what is wrong, where (file:line:
key where a key is at fault) and what to do. `submit` runs it first and submits nothing on an
error (exit 2); `--no-preflight` skips it, and the experiment records that it was skipped.

Checks: the account a site requires; the queue's own limits as its server reports them; the
checkpoint bytes the run keeps against the free space and quota where it writes; where it writes
(a site's project space, not $HOME); the program (found as the ranks will look for it, in their
attempt directory); the job's Python (torch, the device support the scenario asks for, restartlab,
torchft for torchft phases) and the launcher, both after the scenario's setup lines; the fan-out
tool. It prints the most node-hours the job can be charged."""
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

from .. import launchers, programs, schedulers
from ..contracts import placeholders, pycmd
from ..contracts.units import hms, human_bytes
from ..scenario import is_torchft
from ..scenario.source import fmt_path
from ..schedulers.base import SchedulerError, ToolMissing, run_tool
from . import probe as probe_mod, queues, render, sizing, storage

ERROR, WARNING, OK = "error", "warning", "ok"
WARN_SHARE = 0.5  # a run that would take more than this share of what is free is a warning
PLACEHOLDER = re.compile(r"/path/to/")


@dataclass
class Finding:
    level: str
    check: str
    text: str

    def line(self) -> str:
        return f"{self.level}: {self.check}: {self.text}"


class Preflight:
    """The checks over one loaded scenario. `where(path)`: 'file:line' of a key (scenario.load_located);
    `run`: how scheduler tools are asked; `probe`: how the job's setup, launcher and Python are."""

    def __init__(self, sc: dict, where: Callable, scheduler: Optional[str] = None, run=run_tool,
                 probe=probe_mod.run, environ=os.environ, ignore_jobs=()):
        self.sc, self.where, self.run, self.probe_fn, self.env = sc, where, run, probe, environ
        self.sched = schedulers.get(scheduler or sc["scheduler"])
        self.site = sc["site"]["name"] or f"this {self.sched.title or self.sched.name} site"
        self.findings: List[Finding] = []
        self.root = render.expt_root(sc)
        self.command: Optional[str] = None  # a program's command that is not a Python: found on the job's PATH?
        self.module = None                  # (python, module) of a program run as python -m MODULE
        self.chosen_queue: Optional[str] = None  # job.queue: auto's choice, once queue() has run
        # jobs not counted against a queue's per-user limit (submit --after: the ones it waits for)
        self.ignore_jobs = {j.split(".")[0] for j in ignore_jobs}

    def add(self, level, check, text):
        self.findings.append(Finding(level, check, text))

    def key(self, *path) -> str:
        """'file:line: a.b.c' of a key, as validation errors name it ('--set a.b.c' for a value given so)."""
        w, k = self.where(path), fmt_path(path)
        return w if w == f"--set {k}" else f"{w}: {k}"

    # ------------------------------------------------------------------ the checks
    def account(self):
        j, site = self.sc["job"], self.sc["site"]
        if site["account_required"] and not j["account"]:
            self.add(ERROR, "account", f"{self.key('job', 'account')}: {self.site} charges every job to a project "
                     "and rejects one without it: set job.account (or --set job.account=PROJECT; make: ACCOUNT=PROJECT)"
                     + (f"; {site['docs']}" if site["docs"] else ""))
        elif "{account}" in self.sc["expt_root"] and not j["account"]:
            self.add(ERROR, "account", f"{self.key('expt_root')}: names {{account}}, but job.account is not set")
        elif j["account"]:
            self.add(OK, "account", f"job.account {j['account']}")

    def shape(self) -> queues.Shape:
        j = self.sc["job"]
        nodes = j["nodes"] + j["spare_nodes"]
        asked = f"{nodes} node(s)" + (f" ({j['nodes']} + {j['spare_nodes']} spare)" if j["spare_nodes"] else "")
        return queues.Shape(nodes, j["walltime"], asked, at_once=2 if self.sc["relaunch"]["chain"] else 1,
                            user=queues.user_name(self.env), wall_at=self.where(("job", "walltime")))

    def queue(self):
        """The job's shape against every queue the server has: the scenario's queue (or the server's
        default), or, for job.queue: auto, the one that takes it (self.chosen_queue)."""
        if not self.sched.has_queue:
            return
        j, at, s = self.sc["job"], self.key("job", "queue"), self.shape()
        auto = j["queue"] == queues.AUTO
        try:
            qs = self.sched.server_queues(self.run, s.user)
        except ToolMissing as e:
            if auto:
                self.add(ERROR, "queue", f"{at}: auto needs the server's queues, and {e} (not a {self.sched.name} "
                         "login node?): name a queue")
            else:
                self.add(WARNING, "queue", f"{e}: the queue's limits were not checked (not a {self.sched.name} "
                         "login node?)")
            return
        except SchedulerError as e:
            self.add(ERROR, "queue", f"{at}: the server cannot be asked about its queues: {' '.join(str(e).split())}")
            return
        if qs is None:
            self.add(WARNING, "queue", f"the {self.sched.name} scheduler cannot list its queues: the queue was not "
                     "checked")
            return
        if self.ignore_jobs:
            qs.mine = {q: [x for x in ids if x.split(".")[0] not in self.ignore_jobs] for q, ids in qs.mine.items()}
        for note in qs.source.split("; ")[1:]:
            self.add(WARNING, "queue", f"{note}: not checked")
        avoid = j["queue_avoid"]
        if auto:
            name = queues.pick(qs, s, avoid)
            if name is None:
                self.add(ERROR, "queue", f"{at}: auto: {queues.summary(qs, s, avoid)}")
                return
            self.chosen_queue = name
            others = [n for n in queues.takers(qs, s, avoid) if n != name]
            self.add(OK, "queue", f"job.queue auto: {name}, the first of the queues here that take {s.text()}"
                     + (f" (also: {', '.join(others)})" if others else "") + " (the choice goes into the job script)")
        else:
            name = j["queue"] or qs.default
            if not name:
                self.add(WARNING, "queue", f"{at}: no queue given and the server names no default queue")
                return
            if name not in qs.queues:
                self.add(ERROR, "queue", f"{at}: queue {name!r} does not exist on this server ({qs.source.split(';')[0]}: "
                         f"{', '.join(sorted(qs.queues)) or 'no queues'}): name one of its queues, or job.queue: "
                         f"{queues.AUTO}")
                return
            bad = queues.refusals(qs, name, s)
            for b in bad:
                self.add(ERROR, "queue", f"{at}: queue {name}: {b} ({qs.queues[name].source})")
            if bad:
                self.add(ERROR, "queue", f"{at}: {queues.summary(qs, s, avoid)}")
                return
        for w in queues.waits(qs, name, s):
            self.add(WARNING, "queue", f"{at}: queue {name}: {w} ({qs.queues[name].source})")
        q = qs.queues[name]
        lim = ", ".join(x for x in (
            f"nodes {q.min_nodes or 1}-{q.max_nodes}" if q.max_nodes else
            (f"nodes from {q.min_nodes}" if q.min_nodes else ""),
            f"walltime up to {hms(q.max_walltime)}" if q.max_walltime else "",
            f"{q.user_queued} job(s) per user" if q.user_queued is not None else "",
            f"routes to {', '.join(q.route_to)}" if q.route_to else "") if x)
        self.add(OK, "queue", f"queue {name} takes {s.asked} for {hms(s.walltime)}" + (f" ({lim})" if lim else ""))

    def bytes_and_place(self):
        phases = sizing.phase_bytes(self.sc)
        root = self.root
        home = os.path.realpath(self.env.get("HOME", "~"))
        in_home = os.path.realpath(storage.existing_ancestor(root)).startswith(home.rstrip("/") + "/")
        unknown = [p.phase for p in phases if p.peak is None]
        if unknown:
            self.add(WARNING, "bytes", f"{self.key('trainer', 'program', 'checkpoint_bytes')}: the checkpoints of "
                     f"phase(s) {', '.join(unknown)} cannot be sized: set trainer.program.checkpoint_bytes (one "
                     f"checkpoint, e.g. 24GB) and save_every, and preflight checks they fit")
        total = sum(p.peak or 0 for p in phases)
        account = self.sc["job"]["account"]
        try:
            r = storage.room(root, project=account)
        except storage.NotMounted as e:
            whose = f"{self.sc['site']['name']}'s" if self.sc["site"]["name"] else "this site's"
            self.add(ERROR, "where", f"{self.key('expt_root')}: {root}: {e.strerror}: its file system is not mounted "
                     f"here (not {whose} login node?): neither the space nor the quota could be measured")
            return
        except OSError as e:
            self.add(ERROR, "where", f"{self.key('expt_root')}: cannot look at {root}: {e.strerror}")
            return
        if not r.writable:
            self.add(ERROR, "where", f"{self.key('expt_root')}: {root} cannot be created: {r.path} is not writable "
                     "by you")
        if in_home and self.sc["site"]["project_root"]:
            proj = self.sc["site"]["project_root"]
            self.add(WARNING, "where", f"{self.key('expt_root')}: {root} is under $HOME ({home}); the run keeps up "
                     f"to {human_bytes(total)} of checkpoints there. {self.site}'s project space is "
                     f"{proj}: set expt_root: {proj}/restartlab")
        proj = self.sc["site"]["project_root"]
        if proj and account and "{account}" in proj:
            mine = proj.replace("{account}", account)
            under = os.path.abspath(root).startswith(os.path.abspath(mine).rstrip("/") + "/")
            if under and not os.path.isdir(mine) and os.path.isdir(os.path.dirname(mine.rstrip("/"))):
                self.add(ERROR, "where", f"{self.key('job', 'account')}: {mine} does not exist: is {account} your "
                         f"project's short name (as `myprojectquotas` lists it)?")
        for said in r.not_read:
            self.add(WARNING, "bytes", f"{said}: no quota could be read from it: that quota was not checked")
        if not r.quotas and not r.not_read and proj:
            self.add(WARNING, "bytes", f"no quota tool here (myprojectquotas, lfs): {self.site}'s project quota was "
                     "not checked, only the free space")
        if total == 0:
            return
        detail = "; ".join(f"{p.phase}: {p.kept} x {human_bytes(p.per_save)} ({p.why})" for p in phases
                           if p.peak is not None)
        left = r.usable
        what = f"{human_bytes(left)} free at {r.path}" + (f" (quota: {r.quota_text})" if r.quota_left is not None
                                                          else "")
        keep_at = self.key("trainer", "program", "checkpoint_bytes") if self.sc["trainer"]["program"] \
            else self.key("trainer", "keep")
        if total > left:
            self.add(ERROR, "bytes", f"{keep_at}: the run keeps up to {human_bytes(total)} of checkpoints "
                     f"({detail}) but {what}: free space, keep fewer (trainer.keep), or write elsewhere (expt_root)")
        elif total > WARN_SHARE * left:
            self.add(WARNING, "bytes", f"{keep_at}: the run keeps up to {human_bytes(total)} of checkpoints "
                     f"({detail}): more than {WARN_SHARE:.0%} of the {what}")
        else:
            self.add(OK, "bytes", f"up to {human_bytes(total)} of checkpoints ({detail}); {what}")

    def program_words(self):
        """The program's argv as the ranks will run it, with the placeholders the renderer fills
        ({scenario_dir}); a word with a per-phase or per-attempt placeholder is left as it is."""
        prog = self.sc["trainer"]["program"]
        sdir = os.path.dirname(os.path.abspath(self.sc["source"]))
        return [placeholders.fill(w, {placeholders.SCENARIO_DIR: sdir}) for w in prog["command"]]

    def program(self, pythons):
        """The program's command (and its script or module) found as the ranks look for them: in
        <expt>/<phase>/attempts/<k>, their working directory, which holds nothing of yours."""
        prog = self.sc["trainer"]["program"]
        if not prog:
            return
        words = self.program_words()
        at = self.key("trainer", "program", "command")
        for w in words:
            if PLACEHOLDER.search(w):
                self.add(ERROR, "program", f"{at}: {w!r} is the shipped example's placeholder: put the real path")
                return
        sdir = os.path.dirname(os.path.abspath(self.sc["source"]))
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
            pythons.append(cmd)
            py = pycmd.parse(words)
            if py.run == "module":
                self.module = (cmd, py.target or "")
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
            self.command = cmd

    def job_env(self):
        """The environment the job's shell starts from, as near as the login node knows it: this one
        (a PBS job's login shell may set PATH anew), with `restartlab run`'s Python directory first."""
        env = dict(self.env)
        if not self.sched.has_queue:
            env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        return env

    def environment(self, pythons):
        """The job's setup lines, launcher and Pythons, asked in one shell (probe.py)."""
        sc, ln = self.sc, self.sc["launch"]
        job_py = ln["python"] or sys.executable
        launch_cmd = render.launch_spec(sc, 1, 1, {}, ()).launcher_argv()[0] if launchers.get(ln["launcher"]).launchable else None
        asked = [job_py] + [p for p in pythons if p != job_py]
        command = self.command
        prog = sc["trainer"]["program"]
        adapter = programs.ADAPTERS.get(prog["adapter"]) if prog else None
        needs = tuple(adapter.requires) if adapter else ()
        print(f"preflight: asking the job's environment (setup lines: {len(ln['setup'])}, {launch_cmd}, "
              f"{', '.join(asked)}) ...", file=sys.stderr, flush=True)
        pr = self.probe_fn(ln["setup"], launch_cmd, asked, env=self.job_env(), commands=[command] if command else [],
                           modules=probe_mod.MODULES + ((self.module[1],) if self.module else ()) + needs)
        if not pr.ok:
            self.add(ERROR, "python", f"{self.key('launch', 'setup')}: {pr.error}")
            skipped = ["the job's Python (torch, restartlab)", f"the launcher ({launch_cmd})" if launch_cmd else "",
                       f"the program's command ({command})" if command else "",
                       f"the {adapter.name} adapter's framework" if needs else ""]
            self.add(WARNING, "skipped", f"{', '.join(x for x in skipped if x)}: not checked, because the setup lines "
                     "failed and they are asked after them: fix launch.setup and run preflight again")
            return
        self.python(pr.pythons[job_py], job_py, bundled=not sc["trainer"]["program"])
        for py in pythons:
            if py != job_py:
                self.python(pr.pythons[py], py, bundled=False, program=True)
        if command and not pr.commands.get(command.replace(" ", "_")):
            self.add(ERROR, "program", f"{self.key('trainer', 'program', 'command')}: {command!r} is not on the "
                     "job's PATH (after launch.setup): give its path")
        if needs:
            # the program's Python when its command is one, else the job's (a launcher's, say: bash -c
            # 'exec deepspeed ...' runs the Python on the job's PATH)
            py = pr.pythons[pythons[0] if pythons else job_py]
            gone = [m for m in needs if not py.modules.get(m)]
            if py.found and gone:
                self.add(ERROR, "program", lacks_framework(self.key("trainer", "program", "command"), py.exe, gone,
                                                           adapter, " (after launch.setup)"))
        if self.module:
            py, module = self.module
            if pr.pythons[py].found and not pr.pythons[py].modules.get(module):
                self.add(ERROR, "program", f"{self.key('trainer', 'program', 'command')}: {py} -m {module}: no module "
                         f"{module!r} for that Python (after launch.setup)")
        self.launcher(pr, launch_cmd)

    def python(self, p, asked, bundled, program=False):
        sc, tr = self.sc, self.sc["trainer"]
        at = self.key("trainer", "program", "command") if program else self.key("launch", "python")
        who = "your program's Python" if program else "the job's Python"
        if not p.found:
            self.add(ERROR, "python", f"{at}: {who} {asked!r} cannot run: {p.torch_error or 'not found'}")
            return
        if not program and not p.modules.get("restartlab"):
            self.add(ERROR, "python", f"{at}: {who} {p.exe} cannot import restartlab (the job's supervisor runs "
                     "in it): install restartlab for it, or set launch.python")
        if not p.torch:
            level = ERROR if bundled else WARNING
            self.add(level, "python", f"{at}: {who} {p.exe} cannot import torch ({p.torch_error or 'not installed'})"
                     + (": the trainer needs it; load the site's PyTorch in launch.setup (module load frameworks)"
                        if bundled else ""))
            return
        device = tr["device"] if not tr["program"] else None
        dev_at = self.key("trainer", "device")
        if device == "cuda" and not p.cuda:
            self.add(ERROR, "python", f"{dev_at}: cuda, but {who}'s torch {p.torch} ({p.exe}) was built without CUDA: "
                     "a CPU build installed over the site's? (make install before module load)")
        elif device == "xpu" and not (p.xpu or p.modules.get("intel_extension_for_pytorch")):
            self.add(ERROR, "python", f"{dev_at}: xpu, but {who}'s torch {p.torch} ({p.exe}) has no XPU support "
                     "(torch.xpu not compiled, no intel_extension_for_pytorch): a CPU build installed over the "
                     "site's? (make install before module load frameworks)")
        else:
            built = ", ".join(x for x in ("CUDA " + p.cuda if p.cuda else "", "XPU" if p.xpu else "",
                                          "IPEX" if p.modules.get("intel_extension_for_pytorch") else "") if x)
            self.add(OK, "python", f"{p.exe}: torch {p.torch}" + (f" ({built})" if built else " (CPU only)"))
        if any(is_torchft(ph) for ph in sc["phases"]) and not p.modules.get("torchft"):
            i = next(i for i, ph in enumerate(sc["phases"]) if is_torchft(ph))
            self.add(ERROR, "python", f"{self.key('phases', i, 'recovery', 'strategy')}: torchft is not installed for "
                     f"{p.exe} (pip install 'restartlab[torchft]', which keeps the torch that is there)")

    def launcher(self, pr, cmd):
        if not cmd:
            return
        name = self.sc["launch"]["launcher"]
        at = self.key("launch", "mpiexec") if cmd == self.sc["launch"]["mpiexec"] else self.key("launch", "launcher")
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

    def fanout(self):
        """The tool the injector and the killers reach every node with."""
        if not self.sched.fanout_tool:
            return  # a scheduler without one (local): nothing to check
        path = self.sched.fanout_path(self.env)
        if path:
            self.add(OK, "fanout", path)
        else:
            self.add(ERROR, "fanout", f"{self.sched.fanout_tool} is not found ({self.sched.fanout_where}): the injector "
                     "cannot reach the job's nodes")

    def cost(self):
        j = self.sc["job"]
        if not self.sched.has_queue:
            return
        jobs = 1 + self.sc["relaunch"]["chain"]
        self.add(OK, "cost", f"at most {sizing.node_hours(self.sc):.1f} node-hours: {j['nodes'] + j['spare_nodes']} "
                 f"node(s) x {hms(j['walltime'])} walltime x {jobs} job(s) (phases "
                 f"{', '.join(p['name'] for p in self.sc['phases'])} run one after another in each)")

    def check(self, environment=True) -> List[Finding]:
        self.account()
        self.queue()
        self.bytes_and_place()
        pythons: List[str] = []
        self.program(pythons)
        if environment:
            self.environment(pythons)
        self.fanout()
        self.cost()
        return self.findings


def torchft_missing(sc, where) -> List[Finding]:
    """`restartlab run`'s own check (its job runs this Python): a torchft phase without torchft
    installed, refused before anything runs (validation leaves what is installed to preflight)."""
    import importlib.util
    for i, ph in enumerate(sc["phases"]):
        if is_torchft(ph) and importlib.util.find_spec("torchft") is None:
            return [Finding(ERROR, "python", f"{where(('phases', i, 'recovery', 'strategy'))}: "
                            f"{fmt_path(('phases', i, 'recovery', 'strategy'))}: torchft is not installed for {sys.executable} "
                            "(pip install 'restartlab[torchft]', which keeps the torch that is there)")]
    return []


def framework_missing(sc, where) -> List[Finding]:
    """A scenario whose program adapter names a framework (transformers, deepspeed) that the
    program's Python cannot import, or a torchft phase without torchft: refused before anything
    runs (`restartlab run` and `fuzz` run the job here, with these Pythons)."""
    out = torchft_missing(sc, where)
    prog = sc["trainer"]["program"]
    adapter = programs.ADAPTERS.get(prog["adapter"]) if prog else None
    if not adapter or not adapter.requires:
        return out
    sdir = os.path.dirname(os.path.abspath(sc["source"]))
    cmd = placeholders.fill(prog["command"][0], {placeholders.SCENARIO_DIR: sdir})
    # the ranks find a bare `python` on the job's PATH, which `restartlab run` starts with its own
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    exe = shutil.which(cmd, path=path) if pycmd.IS_PYTHON.match(os.path.basename(cmd)) else sys.executable
    if not exe:
        return out  # the program check (preflight) names a command that is not there
    code = ("import importlib.util, sys; "
            "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")
    try:
        r = subprocess.run([exe, "-c", code, *adapter.requires], capture_output=True, text=True, timeout=120)
        gone = r.stdout.split() if r.returncode == 0 else list(adapter.requires)
    except (OSError, subprocess.SubprocessError):
        gone = list(adapter.requires)
    if gone:
        key = ("trainer", "program", "command")
        out.append(Finding(ERROR, "python", lacks_framework(f"{where(key)}: {fmt_path(key)}", exe, gone, adapter)))
    return out


def lacks_framework(at: str, exe: str, gone, adapter, asked: str = "") -> str:
    """The line refusing a program whose Python (`exe`, asked so) cannot import its adapter's framework."""
    return (f"{at}: {exe}, the program's Python{asked}, cannot import {', '.join(gone)} (the {adapter.name} adapter's "
            f"framework): pip install 'restartlab[{adapter.extra}]' for it, which keeps the torch that is there")


def errors(findings: List[Finding]) -> List[Finding]:
    return [f for f in findings if f.level == ERROR]


def report(findings: List[Finding], out=None, quiet_ok=False, refused="nothing submitted") -> str:
    """Print each finding (errors first) and a last line; returns the text (the experiment keeps it)."""
    order = {ERROR: 0, WARNING: 1, OK: 2}
    lines = [f"preflight: {f.line()}" for f in sorted(findings, key=lambda f: order[f.level])
             if not (quiet_ok and f.level == OK)]
    n_err, n_warn = len(errors(findings)), sum(f.level == WARNING for f in findings)
    lines.append(f"preflight: {n_err} error(s), {n_warn} warning(s)" + (f": {refused}" if n_err else ""))
    text = "\n".join(lines) + "\n"
    (out or sys.stderr).write(text)
    return text


def main(a) -> int:
    from .. import scenario
    sc, where = scenario.load_located(a.scenario, a.set)
    findings = Preflight(sc, where, a.scheduler).check()
    report(findings, out=sys.stdout)
    return 2 if errors(findings) else 0
