"""Scenarios: load YAML (with `extends:` and `--set`), validate against the schema, resolve.

Every error names the file, the line and the key path, suggests the nearest valid key for a
misspelling, and the CLI exits 2 (ScenarioError.exit_code)."""
import copy
import difflib
import math
import os
import re
from typing import Dict, List, Optional

import yaml

from . import failures, launchers, programs, schedulers
from .runtime import tool_options
from .contracts import options, trainer_options
from .runtime.killer import parse_signal
from .contracts.resources import resource_dir
from .contracts.units import parse_duration  # noqa: F401  (re-exported: scenario.parse_duration)

class ScenarioError(Exception):
    exit_code = 2


# ---------------------------------------------------------------- schema
# A field: (type check, default, doc). Mappings are dicts of fields; lists use ListOf.
class F:
    def __init__(self, kind, default=None, doc="", choices=None, required=False, min=None, positive=False):
        self.kind, self.default, self.doc, self.choices, self.required = kind, default, doc, choices, required
        self.min, self.positive = min, positive


class ListOf:
    def __init__(self, item, default=None, doc=""):
        self.item, self.default, self.doc = item, default if default is not None else [], doc


SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

PROGRAM = {
    "command": ListOf(F("str"), doc="the program's argv on every rank (the launcher line runs it); "
                      "{ckpt_dir}, {phase_dir}, {attempt_dir} and {scenario_dir} are replaced"),
    "adapter": F("str", "generic", "the program's conventions (restartlab.programs registry): "
                 + "; ".join(f"{a.name}: {a.doc}" for a in programs.ADAPTERS.all()), choices=programs.names),
    "progress": F("str", None, "regex over a line of rank 0's output with a (?P<step>...) group, "
                  "optionally (?P<loss>...) and (?P<dt>...) (ANSI codes and [rankN]: prefixes stripped); "
                  "not used when progress_file is given"),
    "progress_file": F("str", None, "instead of progress: a file rank 0 appends a record to per step, "
                       "ending .jsonl (a JSON object per line) or .csv (a header row, then a row per step); "
                       "{ckpt_dir}, {phase_dir}, {attempt_dir} and {scenario_dir} are replaced. What it holds "
                       "at a launch is skipped (read from the start again if it shrinks); a path with "
                       "{attempt_dir} is exact"),
    "progress_fields": F("strmap", {}, "progress_file: the record's key (or column) of step, loss and dt "
                         "(default: step, loss, dt)"),
    "checkpoints": F("str", None, "regex over checkpoint paths ({ckpt_dir} stands for the checkpoint dir) "
                     "with a (?P<step>...) group: a file or a directory"),
    "complete": F("str", None, "when a checkpoint is complete: " + ", ".join(programs.COMPLETE_RULES)
                  + " (default: the adapter's; generic: exists)"),
    "selects": F("str", None, "which checkpoint the program itself loads on a restart: "
                 + ", ".join(programs.SELECT_RULES) + " (default: the adapter's; generic: newest_complete)"),
    "resumed": F("str", None, "regex for the program's own resume line, with a (?P<step>...) group "
                 "(without it: the highest checkpoint below the first step logged)"),
    "saved": F("str", None, "regex for the program's line after a save, with a (?P<seconds>...) group (the time "
               "the training loop was blocked) and optionally (?P<step>...): booked as a save stall"),
    "counts": F("str", None, "what the number in a checkpoint's name counts: steps, or saves (with "
                "save_every: step = (K + 1) x save_every; default: the adapter's, generic: steps)"),
    "save_every": F("int", None, "counts: saves: the steps between two saves", positive=True),
    "steps": F("int", None, "the last step: a phase is completed when the program logged it and exited 0",
               required=True, positive=True),
    "tolerance": F("float", 0.0, "the survival verdict: the loss after a resume may differ from the "
                   "baseline's at the same step by this relative amount (0: identical)", min=0),
}


def _fields(tables, prefix):
    """Schema fields of the scenario keys under `prefix` that an option table owns (a key with
    more dots is a field of a nested mapping: failures.schedule.every, trainer.wandb.project):
    the option's type (a flag is true/false), default, help and bounds."""
    out = {}
    for table in tables:
        for o in table:
            if not (o.scenario and o.scenario.startswith(prefix + ".")):
                continue
            *heads, sub = o.scenario[len(prefix) + 1:].split(".")
            where = out
            for h in heads:
                where = where.setdefault(h, {})
            where[sub] = F("bool" if o.type == "flag" else o.type,
                           o.default if o.scenario_default is None else o.scenario_default, o.help,
                           choices=o.choices, min=o.min, positive=o.positive)
    return out


def _trainer_schema():
    """`trainer:` keys from the trainer's option table (grouped options as sub-mappings)."""
    out = _fields([trainer_options.OPTIONS], "trainer")
    out["extra_args"] = ListOf(F("str"), doc="more trainer flags, passed as arguments")
    out["program"] = F("program", None, "your own training program instead of the bundled trainer: "
                       "its command and how to read its progress and checkpoints (keys: "
                       + ", ".join(PROGRAM) + ")")
    return out


def _from_tool_tables(prefix):
    return _fields([tool_options.SUPERVISE, tool_options.NODE_CHECK, tool_options.REPORT, tool_options.INJECT], prefix)


# failures: the injector's table (tool_options.INJECT), but for at_steps, a list here and a string there
FAILURES = _from_tool_tables("failures")
FAILURES["schedule"] = {"at_steps": F("intlist", None, "kills aimed at these steps; an item may be {step: N, kind: K} "
                                      "to mix failure kinds in one schedule"), **FAILURES["schedule"]}


SCHEMA = {
    "name": F("name", "restartlab", "experiment name (job name, directory prefix)"),
    "scheduler": F("str", "local", "the batch system (restartlab.schedulers registry)", choices=schedulers.names),
    "expt_root": F("path", "expt", "experiments are created under this directory"),
    "job": {
        "nodes": F("int", 1, "number of nodes the training runs on"),
        "spare_nodes": F("int", 0, "extra nodes requested and kept idle; relaunch.on_node_loss: spares swaps "
                         "one in for each bad node (same world size)", min=0),
        "walltime": F("duration", "01:00:00", "wall-clock limit"),
        "queue": F("directive", None, "queue / partition"),
        "account": F("directive", None, "project / account"),
        "filesystems": F("directive", None, "PBS -l filesystems=..."),
        "place": F("directive", "scatter", "PBS -l place=..."),
        "ncpus": F("int", None, "CPUs per node (PBS select ncpus)"),
        "directives": ListOf(F("directive"), doc="extra scheduler directives, verbatim after the prefix"),
    },
    "launch": {
        "ranks_per_node": F("int", 4, "training ranks per node"),
        "launcher": F("str", "hydra", "the MPI launcher (restartlab.launchers registry)", choices=launchers.names),
        "mpiexec": F("str", "mpiexec", "the launcher's command, found on the job's PATH unless it is a path; "
                     "a PBS job's login shell resets PATH (and /opt/pbs/bin/mpiexec is PBS's own MPT "
                     "wrapper): give MPICH's by its path there"),
        "launcher_args": ListOf(F("str"), doc="flags right after the launcher's command, verbatim (e.g. Hydra's "
                                "-launcher rsh -launcher-exec WRAPPER on a PBS cluster without ssh)"),
        "cpu_bind": F("str", None, "CPU binding (launcher syntax)"),
        "depth": F("int", None, "PALS --depth"),
        "env": F("strmap", {}, "environment for the training ranks"),
        "python": F("path", None, "python for the trainer and restartlab (default: the one rendering)"),
        "setup": ListOf(F("str"), doc="shell lines run before the phases (module loads, venv activation)"),
    },
    "trainer": _trainer_schema(),
    "relaunch": {
        # the supervisor's and the node check's options (their option tables: one default each)
        **_from_tool_tables("relaunch"),
        "node_check": F("bool", None, "run `restartlab node-check` on every node at job start and before "
                        "each relaunch (default: on for spares and shrink)"),
        "node_check_min_free_mb": F("int", 0, "MiB the stage dir must have free on each node", min=0),
        "chain": F("int", 0, "when the walltime or max_attempts runs out before the last step, submit up to "
                   "N continuation jobs (each starts after the previous one ends) that resume this "
                   "experiment", min=0),
    },
    "failures": FAILURES,
    "phases": ListOf({
        "name": F("name", None, "phase name (directory name)", required=True),
        "checkpoint": F("str", "sync", "none, sync or async", choices=["none", "sync", "async"]),
        "stage_dir": F("path", None, "async: node-local stage dir, private to the job's user (0700, never "
                       "through a symlink) or refused (default: a fresh private dir /tmp/restartlab-"
                       "<jobid>-<node>-<random>, or none when /tmp is on the checkpoint dir's file "
                       "system); none: the background "
                       "save writes straight to the checkpoint dir"),
        "failures": F("failures", None, "false/none: no injector; a mapping overrides the top-level failures"),
        "args": ListOf(F("str"), doc="trainer.program: arguments appended to its command in this phase "
                       "(its own checkpoint switches live here)"),
        "warm": F("bool", None, "warm standby restart in this phase (default: relaunch.warm); a cold and a "
                  "warm phase side by side compare the two in one report"),
    }),
    "collection": {
        "report": F("bool", True, "run `restartlab report` at the end of the job"),
        "plots": F("bool", True, "write PNG plots"),
        **_from_tool_tables("collection"),
    },
}
TOP_ONLY = {"extends"}


# ---------------------------------------------------------------- YAML with line numbers
MAX_INT = 2 ** 62    # every count and step fits torch's int64
MAX_VALUES = 100_000  # values a scenario may expand to (aliases included): no "billion laughs"
MAX_FILE_BYTES = 1 << 20


def _compose(text, fname):
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioError(f"{fname}:{line}: invalid YAML: {getattr(e, 'problem', None) or e}")
    except RecursionError:
        raise ScenarioError(f"{fname}:1: invalid YAML: nested too deeply")


class _Budget:
    def __init__(self):
        self.left = MAX_VALUES


def _to_data(node, path, lines, fname, budget=None, active=()):
    """YAML node -> plain data, recording (file, line) for every key path. Keys must be plain
    scalars; an alias may not contain itself; the whole may not expand past MAX_VALUES."""
    budget = budget or _Budget()
    budget.left -= 1
    where = f"{fname}:{node.start_mark.line + 1}: {_fmt(path)}"
    if budget.left < 0:
        raise ScenarioError(f"{where}: the file expands to more than {MAX_VALUES:,} values "
                            f"(aliases repeated inside aliases?)")
    if id(node) in active:
        raise ScenarioError(f"{where}: an alias refers to a node that contains it (recursive alias)")
    if len(active) > 100:
        raise ScenarioError(f"{where}: nested more than 100 levels deep")
    active = active + (id(node),)
    lines[path] = (fname, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise ScenarioError(f"{fname}:{k.start_mark.line + 1}: {_fmt(path)}: a key must be a plain "
                                    f"name, not a {'list' if isinstance(k, yaml.SequenceNode) else 'mapping'}")
            key = k.value
            if key in out:
                raise ScenarioError(f"{fname}:{k.start_mark.line + 1}: {_fmt(path + (key,))}: duplicate key")
            lines[path + (key,)] = (fname, k.start_mark.line + 1)
            out[key] = _to_data(v, path + (key,), lines, fname, budget, active)
            lines[path + (key,)] = (fname, k.start_mark.line + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(v, path + (i,), lines, fname, budget, active) for i, v in enumerate(node.value)]
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{where}: {getattr(e, 'problem', None) or e}")


def _fmt(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top)"


def _merge(base, over, path, lines, over_lines):
    """Deep merge: mappings merge, everything else (lists included) is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v, path + (k,), lines, over_lines)
        return out
    for p, where in over_lines.items():
        if p[: len(path)] == path:
            lines[p] = where
    return copy.deepcopy(over)


def _resolve_extends(ref, fname, where=None):
    cands = [os.path.join(os.path.dirname(os.path.abspath(fname)), ref),
             os.path.join(resource_dir("scenarios"), ref)]
    for c in cands:
        if os.path.isfile(c):
            return c
    looked = ", ".join(dict.fromkeys(cands))
    raise ScenarioError(f"{where or f'{fname}:1'}: extends: {ref!r} not found (looked in {looked})")


def _load_file(fname, lines, seen=(), files=None, swap=None):
    """The data of `fname` merged over what it extends (`swap`: over that file instead, as
    `--set extends=FILE` asks); `lines` gets (file, line) per key path, `files` each file read, a
    base before the file that extends it."""
    files = [] if files is None else files
    try:
        with open(fname, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ScenarioError(f"{fname}: cannot read: {e.strerror}")
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(f"{fname}:1: larger than {MAX_FILE_BYTES >> 20} MiB: not a scenario")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ScenarioError(f"{fname}:{line}: not a UTF-8 text file (byte 0x{raw[e.start]:02x} at offset {e.start})")
    if "\0" in text:
        raise ScenarioError(f"{fname}:{text[:text.index(chr(0))].count(chr(10)) + 1}: not a text file (NUL byte)")
    node = _compose(text, fname)
    my_lines = {}
    data = _to_data(node, (), my_lines, fname) if node is not None else {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{fname}:1: a scenario is a mapping of keys (job, launch, trainer, phases, ...)")
    parent = data.pop("extends", None)
    where = f"{fname}:{my_lines[('extends',)][1]}" if ("extends",) in my_lines else f"{fname}:1"
    if swap is not None:
        parent, where = swap, f"{fname}: --set"
        my_lines.pop(("extends",), None)
    if parent is None:
        lines.update(my_lines)
        files.append(fname)
        return data
    if not isinstance(parent, str):
        raise ScenarioError(f"{where}: extends: expected a file name")
    pfile = _resolve_extends(parent, fname, where)
    if os.path.abspath(pfile) in seen:
        raise ScenarioError(f"{where}: extends: cycle through {pfile}")
    base = _load_file(pfile, lines, seen + (os.path.abspath(fname),), files)
    files.append(fname)
    return _merge(base, data, (), lines, my_lines)


def _apply_set(data, assignment, lines):
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected key.path=value")
    key, raw = assignment.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    parts = [int(p) if p.isdigit() else p for p in key.split(".")]
    cur = data
    for i, p in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(cur, list):
            if not isinstance(p, int) or p >= len(cur):
                raise ScenarioError(f"--set {key}: {_fmt(tuple(parts[:i + 1]))}: no such list item")
            cur = cur[p]
        else:
            if cur.get(p) is None:
                cur[p] = [] if isinstance(nxt, int) else {}
            cur = cur[p]
    last = parts[-1]
    if isinstance(cur, list):
        if not isinstance(last, int) or last >= len(cur):
            raise ScenarioError(f"--set {key}: no such list item")
    cur[last] = value
    for p in list(lines):
        if p[: len(parts)] == tuple(parts):
            del lines[p]
    lines[tuple(parts)] = ("--set", 0)


# ---------------------------------------------------------------- validation
class _V:
    def __init__(self, lines, fname, files=()):
        self.lines, self.fname, self.errors = lines, fname, []
        self.files = list(files)  # the files read, each before the files that extend it

    def line(self, path) -> int:
        return self.lines.get(tuple(path), (self.fname, 0))[1]

    def order(self, path) -> int:
        """How late the value at `path` came: its file's place in the extends chain (--set last)."""
        p = tuple(path)
        while p and p not in self.lines:
            p = p[:-1]
        f = self.lines.get(p, (self.fname, 1))[0]
        return len(self.files) if f == "--set" else (self.files.index(f) if f in self.files else -1)

    def where(self, path):
        p = tuple(path)
        while p and p not in self.lines:
            p = p[:-1]
        f, line = self.lines.get(p, (self.fname, 1))
        return f"{f}:{line}" if f != "--set" else f"--set {_fmt(path)}"

    def err(self, path, msg):
        self.errors.append(f"{self.where(path)}: {_fmt(path)}: {msg}")

    def mapping(self, spec, data, path):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            self.err(path, f"expected a mapping, got {type(data).__name__}")
            return {}
        out = {}
        for k in data:
            if k not in spec and not (path == () and k in TOP_ONLY):
                close = difflib.get_close_matches(str(k), list(spec), n=1, cutoff=0.6)
                hint = f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(spec)})"
                self.err(path + (k,), f"unknown key{hint}")
        for k, sub in spec.items():
            out[k] = self.value(sub, data.get(k), path + (k,), present=k in data)
        return out

    def value(self, spec, v, path, present=True):
        if isinstance(spec, dict):
            return self.mapping(spec, v, path)
        if isinstance(spec, ListOf):
            if v is None:
                return copy.deepcopy(spec.default)
            if not isinstance(v, list):
                self.err(path, f"expected a list, got {type(v).__name__}")
                return []
            return [self.value(spec.item, x, path + (i,)) for i, x in enumerate(v)]
        if v is None:
            if spec.required:
                self.err(path, "required key is missing")
            if spec.kind == "duration" and spec.default is not None:
                return parse_duration(spec.default)
            return copy.deepcopy(spec.default)
        return self.scalar(spec, v, path)

    def scalar(self, spec, v, path):
        k = spec.kind
        try:
            if k == "int":
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"expected an integer, got {v!r}")
                if v < 0:
                    raise ValueError(f"must be >= 0, got {v}")
                if v > MAX_INT:
                    raise ValueError(f"{v} is too large (at most {MAX_INT})")
            elif k == "float":
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"expected a finite number, got {v!r}")
                v = float(v)
            elif k == "bool":
                if not isinstance(v, bool):
                    raise ValueError(f"expected true or false, got {v!r}")
            elif k == "duration":
                v = parse_duration(v)
            elif k == "intlist":
                if not isinstance(v, list) or not all(_step_item(x) for x in v):
                    raise ValueError(f"expected a list of positive step numbers (or {{step: N, kind: K}}), got {v!r}")
                v = [x if isinstance(x, int) else {"step": x["step"], "kind": failures.get(x["kind"]).name} for x in v]
                if not v:
                    raise ValueError("an empty list would make no kill: give at least one step")
            elif k == "path":
                if isinstance(v, (dict, list, bool)) or str(v).strip() == "" or "\0" in str(v):
                    raise ValueError(f"expected a non-empty path, got {v!r}")
                v = str(v)
            elif k == "strmap":
                if not isinstance(v, dict) or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(x)) for x in v):
                    raise ValueError("expected a mapping of VARIABLE_NAME: value")
                v = {str(a): str(b) for a, b in v.items()}
            elif k == "name":
                v = str(v)
                if not SAFE_NAME.match(v):
                    raise ValueError(f"{v!r}: use letters, digits, '_', '.', '-' only (it names directories and jobs)")
            elif k == "directive":
                v = str(v)
                if "\n" in v or "\r" in v:
                    raise ValueError("a scheduler directive value cannot contain a newline")
            elif k == "failures":
                if v is False or v == "none":
                    return False
                return self.mapping(FAILURES, v, path)
            elif k == "program":
                if not isinstance(v, dict):
                    raise ValueError(f"expected a mapping (command, adapter, progress, ...), got {type(v).__name__}")
                return self.mapping(PROGRAM, v, path)
            elif k == "str":
                if isinstance(v, (dict, list)):
                    raise ValueError(f"expected a string, got a {type(v).__name__}")
                if isinstance(v, bool):  # YAML 1.1 reads unquoted on/off/yes/no as booleans
                    choices = spec.choices() if callable(spec.choices) else (spec.choices or ())
                    if "on" not in choices:
                        raise ValueError(f"expected a string, got {str(v).lower()} (quote the value)")
                    v = "on" if v else "off"
                v = str(v)
            why = options.problem(spec, v)  # the tools' and the trainer's own check
            choices = spec.choices() if callable(spec.choices) else spec.choices
            if why and choices and v not in choices:
                close = difflib.get_close_matches(str(v), choices, n=1)
                raise ValueError(why + (f" (did you mean '{close[0]}'?)" if close else ""))
            if why:
                raise ValueError(f"{why}, got {v}")
        except ValueError as e:
            self.err(path, str(e))
        return v


def _step_item(x) -> bool:
    if isinstance(x, dict):
        return set(x) == {"step", "kind"} and _step_item(x["step"]) and isinstance(x["kind"], str) \
            and x["kind"] in failures.KINDS
    return isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_INT


def step_of(x) -> int:
    return x["step"] if isinstance(x, dict) else x


def _resolve_kind(f):
    """failures.kind: the injector's default (kill) when given as null."""
    if isinstance(f, dict):
        f["kind"] = f.get("kind") or FAILURES["kind"].default


def _program_checks(sc, v: _V) -> None:
    """trainer.program: a command, patterns that compile with a step group, known rules; its
    `steps` is the phase's last step (trainer.train_iters for everything that reads it)."""
    prog = sc["trainer"]["program"]
    for i, ph in enumerate(sc["phases"]):
        if ph["args"] and not prog:
            v.err(("phases", i, "args"), "only for trainer.program (the bundled trainer takes trainer.extra_args)")
    if not prog:
        return
    if not prog["command"]:
        v.err(("trainer", "program", "command"), "required: the program's argv, e.g. [python, train.py]")
    for key, msg in programs.spec_errors(programs.resolve(prog)):
        v.err(("trainer", "program", key), msg)
    sc["trainer"]["train_iters"] = prog["steps"]


def _cross_checks(sc, v: _V):
    _program_checks(sc, v)
    tr, ln = sc["trainer"], sc["launch"]
    nranks = sc["job"]["nodes"] * ln["ranks_per_node"]
    if sc["job"]["nodes"] < 1:
        v.err(("job", "nodes"), "must be >= 1")
    if ln["ranks_per_node"] < 1:
        v.err(("launch", "ranks_per_node"), "must be >= 1")
    elif tr["tp"] < 1 or nranks % tr["tp"]:
        v.err(("trainer", "tp"), f"{tr['tp']} does not divide the {nranks} ranks "
              f"({sc['job']['nodes']} nodes x {ln['ranks_per_node']})")
    elif tr["dp_replicate"] >= 1 and (nranks // tr["tp"]) % tr["dp_replicate"]:
        v.err(("trainer", "dp_replicate"), f"{tr['dp_replicate']} does not divide the "
              f"{nranks // tr['tp']} data-parallel ranks ({nranks} ranks / tp {tr['tp']})")
    if tr["train_iters"] < 1:
        v.err(("trainer", "train_iters"), "must be >= 1")
    if sc["relaunch"]["max_attempts"] < 1:
        v.err(("relaunch", "max_attempts"), "must be >= 1")
    rl = sc["relaunch"]
    if rl["on_node_loss"] == "spares" and sc["job"]["spare_nodes"] < 1:
        v.err(("relaunch", "on_node_loss"), "spares needs job.spare_nodes >= 1")
    if rl["on_node_loss"] == "shrink":
        if rl["min_nodes"] > sc["job"]["nodes"]:
            v.err(("relaunch", "min_nodes"), f"{rl['min_nodes']} is more than job.nodes ({sc['job']['nodes']})")
        if ln["ranks_per_node"] % max(1, tr["tp"]):
            v.err(("relaunch", "on_node_loss"), f"shrink drops whole nodes: trainer.tp ({tr['tp']}) must "
                  f"divide launch.ranks_per_node ({ln['ranks_per_node']})")
        else:
            n = sc["job"]["nodes"]
            bad = [d for d in range(max(1, rl["min_nodes"]), n + 1) if not n % d
                   and (d * ln["ranks_per_node"] // max(1, tr["tp"])) % max(1, tr["dp_replicate"])]
            if bad:
                v.err(("trainer", "dp_replicate"), f"{tr['dp_replicate']} replicas do not divide the "
                      f"data-parallel ranks of a job shrunk to {bad[0]} node(s) (relaunch.on_node_loss: "
                      f"shrink); raise relaunch.min_nodes or use a replica count that divides them")
    if sc["relaunch"]["walltime_margin"] >= sc["job"]["walltime"]:
        v.err(("relaunch", "walltime_margin"), f"must be shorter than job.walltime "
              f"({sc['relaunch']['walltime_margin']:g}s >= {sc['job']['walltime']:g}s): nothing would train")
    if not sc["phases"]:
        v.err(("phases",), "at least one phase is needed")
    saving = [p for p in sc["phases"] if p["checkpoint"] != "none"]
    if saving and tr["save_interval"] < 1 and not tr["program"]:
        v.err(("trainer", "save_interval"), f"{tr['save_interval']} saves no checkpoint, but phase "
              f"{saving[0]['name']!r} checkpoints ({saving[0]['checkpoint']}): every kill would restart "
              "it from step 0; give an interval >= 1, or checkpoint: none")
    names = [p["name"] for p in sc["phases"]]
    for i, n in enumerate(names):
        if n in names[:i]:
            v.err(("phases", i, "name"), f"duplicate phase name {n!r}")
    for i, ph in enumerate(sc["phases"]):
        f = effective_failures(sc, ph)
        if not f:
            continue
        sched = {k: x for k, x in f["schedule"].items() if x is not None and k != "seed"}
        base = ("phases", i, "failures") if ph["failures"] else ("failures",)
        if len(sched) != 1:
            # the key that came last (a file that extends another, or --set) made the conflict
            keys = sorted(sched, key=lambda k: (v.order(base + ("schedule", k)), v.line(base + ("schedule", k))))
            got = ", ".join(f"{k} from {v.where(base + ('schedule', k))}" for k in keys) or "none"
            v.err(base + ("schedule",) + tuple(keys[-1:]),
                  f"give exactly one of every, at_steps, every_steps, mtbf, fuzz (got {got})")
        step_schedule = "at_steps" in sched or "every_steps" in sched
        gated = tool_options.gate_of(f.get("gate"), step_schedule) == "complete" or f.get("wait_first_complete")
        if gated and ph["checkpoint"] == "none":
            v.err(base + ("gate",), f"phase {ph['name']!r} saves no checkpoints, so a kill gated on .complete "
                  "would never fire: set gate: none (and no wait_first_complete), or save checkpoints")
        try:
            if f["signal"] is not None:
                parse_signal(f["signal"])
        except ValueError as e:
            v.err(base + ("signal",), str(e))
        for s in map(step_of, sched.get("at_steps") or []):
            if s > tr["train_iters"]:
                v.err(base + ("schedule", "at_steps"), f"step {s} is beyond trainer.train_iters={tr['train_iters']}")
        if f["node"] is not None and f["node"] >= sc["job"]["nodes"]:
            v.err(base + ("node",), f"node {f['node']} is out of range for {sc['job']['nodes']} nodes")


def effective_failures(sc, phase) -> Optional[dict]:
    """The failure settings of a phase (False/None: no injector). Phases without a `failures`
    key inherit the top-level one, except checkpoint-less phases (the baseline)."""
    f = phase.get("failures")
    if f is False:
        return None
    if f is None:
        if phase["checkpoint"] == "none":
            return None
        f = sc["failures"]
    sched = {k: x for k, x in f["schedule"].items() if x is not None and k != "seed"}
    if not sched:
        return None
    return f


def _resolve_data(sc, path, v: "_V"):
    """trainer.data: relative to the scenario file; it must exist where the job is submitted
    (a missing token file found before the job is queued, not after it started)."""
    tr = sc["trainer"]
    if not tr.get("data"):
        return
    tr["data"] = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(tr["data"]))
    if not os.path.isfile(tr["data"]):
        v.err(("trainer", "data"), f"{tr['data']}: no such file (a token file: python -m "
              f"restartlab.trainer.prepare_data writes one)")


def load(path: str, overrides: List[str] = (), resolved: bool = False) -> dict:
    """Load, extend, override and validate a scenario. Raises ScenarioError with every problem.
    resolved: an experiment's own copy of its scenario (layout.Expt.scenario), which also names its expt_dir
    and the file it was made from (its `source`: where {scenario_dir} points)."""
    lines: Dict = {}
    files: List[str] = []
    # --set extends=FILE: the scenario's own `extends` (its site profile) is replaced by FILE
    swaps = [a.split("=", 1)[1] for a in overrides if a.startswith("extends=")]
    data = _load_file(path, lines, files=files, swap=swaps[-1] if swaps else None)
    source = path
    if resolved and isinstance(data, dict):
        data.pop("expt_dir", None)
        made_from = data.pop("source", None)  # the file it was made from: its {scenario_dir}
        source = made_from if isinstance(made_from, str) and made_from else path
    for a in overrides:
        if not a.startswith("extends="):
            _apply_set(data, a, lines)
    v = _V(lines, path, files)
    sc = v.mapping(SCHEMA, data, ())
    if not v.errors:
        _resolve_kind(sc["failures"])
        for ph in sc["phases"]:
            _resolve_kind(ph["failures"])
    if not v.errors:
        _cross_checks(sc, v)
        _resolve_data(sc, path, v)
    if v.errors:
        raise ScenarioError("\n".join(dict.fromkeys(v.errors)))  # each problem once
    sc["source"] = os.path.abspath(source)
    return sc


SECRET_NAME = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD)$")  # WANDB_API_KEY, HF_TOKEN, ...


def is_secret(name: str) -> bool:
    """A launch.env variable whose value is a credential: passed to the ranks through the job's
    environment by name, never written into a file restartlab makes (job script, scenario copy,
    report)."""
    return bool(SECRET_NAME.search(name.upper()))


def secret_names(sc: dict) -> List[str]:
    return sorted(k for k in sc["launch"]["env"] if is_secret(k))


def reference(name: str) -> str:
    """What a file says instead of a secret's value: `${NAME}` (also how a scenario asks for the
    value from the environment restartlab runs in)."""
    return "${" + name + "}"


def secret_values(sc: dict, environ=None) -> Dict[str, str]:
    """{name: value} of the scenario's secrets for the job's environment: a value written as
    `${NAME}` is taken from `environ` (default: ours); ScenarioError when it is not set there."""
    environ = os.environ if environ is None else environ
    out = {}
    for k in secret_names(sc):
        v = str(sc["launch"]["env"][k])
        if v == reference(k):
            if k not in environ:
                raise ScenarioError(f"{sc.get('source', 'scenario')}: launch.env.{k}: {v} asks for the value "
                                    f"from the environment, and {k} is not set here")
            v = environ[k]
        out[k] = v
    return out


def dump_resolved(sc: dict) -> str:
    """The resolved scenario as YAML, each secret of launch.env as a reference, never its value;
    `source` names the file it was loaded from (load(resolved=True) takes {scenario_dir} from it)."""
    out = {k: v for k, v in sc.items() if k != "source"}
    if sc.get("source"):
        out["source"] = sc["source"]
    out["launch"] = dict(out["launch"], env={k: reference(k) if is_secret(k) else v
                                            for k, v in out["launch"]["env"].items()})
    return yaml.safe_dump(out, sort_keys=False)
