"""Validating a scenario against the schema and across keys.

Every problem is collected with its file, line and key path. A misspelled key gets the nearest
valid key as a suggestion. Each value gets the same bounds check as the tool or trainer option it
feeds (contracts.options.problem)."""
import copy
import dataclasses
import difflib
import math
import os
import re
from typing import Any, Dict, Optional, Union

from .. import failures, programs
from ..contracts import options, pycmd
from ..contracts.units import parse_bytes, parse_duration
from ..tools import options as tool_options
from ..contracts.scenario_record import AtStep, Failures, Phase, Scenario, step_of
from ..contracts.signals import parse_signal
from .schema import FAILURES, MAX_INT, PROGRAM, SAFE_NAME, TOP_ONLY, ListOf
from .source import fmt_path


class Validator:
    def __init__(self, lines, fname, files=(), own=None):
        self.lines, self.fname, self.errors = lines, fname, []
        self.files = list(files)  # the files read, each before the files that extend it
        self.own = own or {}      # the key paths of the file named itself (not its site profile's)

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
        """'file:line' of the value at `path`.

        That is where the value was written, which is a site profile's line for a value the profile
        gave. A key written nowhere is a default, or missing. Its place is where it belongs in the
        file named: its nearest mapping there, else the file's first line."""
        p = tuple(path)
        if p not in self.lines:
            while p and p not in self.own:
                p = p[:-1]
            return f"{self.fname}:{self.own[p][1] if p else 1}"
        f, line = self.lines[p]
        return f"{f}:{line}" if f != "--set" else f"--set {fmt_path(path)}"

    def err(self, path, msg):
        self.errors.append(f"{self.where(path)}: {fmt_path(path)}: {msg}")

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
            elif k == "bytes":
                v = parse_bytes(v)
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


def resolve_kind(f: Union[Failures, bool, None]) -> None:
    """failures.kind: the injector's default (kill) when given as null."""
    if isinstance(f, Failures):
        f.kind = f.kind or Failures.kind  # the record's default: the schema's (tests/test_scenario_record.py)


def scheduled(f: Failures) -> Dict[str, Any]:
    """{name: value} of the schedule's kinds that are set (every, at_steps, ...; not its seed)."""
    return {fd.name: getattr(f.schedule, fd.name) for fd in dataclasses.fields(f.schedule)
            if fd.name != "seed" and getattr(f.schedule, fd.name) is not None}


def _program_checks(sc: Scenario, v: Validator) -> None:
    """trainer.program: a command, patterns that compile with a step group, known rules; its
    `steps` is the phase's last step (trainer.train_iters for everything that reads it)."""
    prog = sc.trainer.program
    for i, ph in enumerate(sc.phases):
        if ph.args and not prog:
            v.err(("phases", i, "args"), "only for trainer.program (the bundled trainer takes trainer.extra_args)")
    if not prog:
        return
    if not prog.command:
        v.err(("trainer", "program", "command"), "required: the program's argv, e.g. [python, train.py]")
    spec = programs.resolve(prog)
    for key, msg in programs.spec_errors(spec):
        v.err(("trainer", "program", key), msg)
    if programs.taps(spec) and not spec.progress and not spec.progress_file and \
            not sc.collection.state_every:
        v.err(("trainer", "program", "progress"), "required when collection.state_every is 0: without it the steps "
              "are rank 0's torch optimizer steps, which the training-state probe records")
    sc.trainer.train_iters = prog.steps


def _torchft_checks(sc: Scenario, v: Validator) -> None:
    """Check a phase whose recovery is torchft, and refuse each problem with its key.

    This version runs the bundled trainer, FSDP inside a group, or a torchft program of yours. It
    runs it on one node, with no checkpoints. torchft must be installed."""
    tr, ln = sc.trainer, sc.launch
    prog = tr.program
    if prog and prog.adapter == "torchft":
        restarts = [ph.name for ph in sc.phases if not ph.torchft]
        if restarts:
            v.err(("trainer", "program", "adapter"), f"torchft: a torchft program runs only in torchft phases "
                  f"(recovery.strategy: torchft); phase(s) {', '.join(restarts)} restart")
        if prog.command and not pycmd.IS_PYTHON.match(os.path.basename(prog.command[0])):
            v.err(("trainer", "program", "command"), f"{prog.command[0]!r}: a torchft program's command starts "
                  "with its Python (python PROGRAM.py ... or python -m MODULE ...): restartlab's hook on its "
                  "Manager runs in that interpreter")
    for i, ph in enumerate(sc.phases):
        if not ph.torchft:
            continue
        rc, at = ph.recovery, ("phases", i, "recovery")
        if tr.program and tr.program.adapter != "torchft":
            v.err(at + ("strategy",), f"a program of yours in a torchft phase is a torchft program: "
                  f"trainer.program.adapter: torchft (restartlab's hook on its Manager), not "
                  f"{tr.program.adapter!r}")
        if ph.checkpoint != "none":
            v.err(("phases", i, "checkpoint"), f"{ph.checkpoint}: a torchft phase recovers from its "
                  "surviving groups and keeps no checkpoints in this version: checkpoint: none")
        if ph.warm:
            v.err(("phases", i, "warm"), "a torchft phase relaunches a group cold (warm standby restart is "
                  "the restart strategy's)")
        if sc.job.nodes != 1:
            v.err(at + ("strategy",), f"torchft phases run on one node in this version (job.nodes is "
                  f"{sc.job.nodes})")
        if tr.tp != 1 or tr.dp_replicate != 1:
            v.err(at + ("strategy",), f"the torchft trainer shards with FSDP inside a group and replicates "
                  f"across groups itself: trainer.tp ({tr.tp}) and trainer.dp_replicate "
                  f"({tr.dp_replicate}) must be 1")
        if rc.groups < 1 or ln.ranks_per_node % rc.groups:
            v.err(at + ("groups",), f"{rc.groups} replica groups do not divide launch.ranks_per_node "
                  f"({ln.ranks_per_node})")
        if rc.min_replicas > rc.groups:
            v.err(at + ("min_replicas",), f"{rc.min_replicas} is more than the {rc.groups} groups: "
                  "no step would ever commit")


def cross_checks(sc: Scenario, v: Validator) -> None:
    _program_checks(sc, v)
    _torchft_checks(sc, v)
    tr, ln = sc.trainer, sc.launch
    nranks = sc.ranks
    if sc.job.nodes < 1:
        v.err(("job", "nodes"), "must be >= 1")
    if ln.ranks_per_node < 1:
        v.err(("launch", "ranks_per_node"), "must be >= 1")
    elif tr.tp < 1 or nranks % tr.tp:
        v.err(("trainer", "tp"), f"{tr.tp} does not divide the {nranks} ranks "
              f"({sc.job.nodes} nodes x {ln.ranks_per_node})")
    elif tr.dp_replicate >= 1 and (nranks // tr.tp) % tr.dp_replicate:
        v.err(("trainer", "dp_replicate"), f"{tr.dp_replicate} does not divide the "
              f"{nranks // tr.tp} data-parallel ranks ({nranks} ranks / tp {tr.tp})")
    if tr.train_iters < 1:
        v.err(("trainer", "train_iters"), "must be >= 1")
    if sc.relaunch.max_attempts < 1:
        v.err(("relaunch", "max_attempts"), "must be >= 1")
    rl = sc.relaunch
    if rl.on_node_loss == "spares" and sc.job.spare_nodes < 1:
        v.err(("relaunch", "on_node_loss"), "spares needs job.spare_nodes >= 1")
    if rl.on_node_loss == "shrink":
        if rl.min_nodes > sc.job.nodes:
            v.err(("relaunch", "min_nodes"), f"{rl.min_nodes} is more than job.nodes ({sc.job.nodes})")
        if ln.ranks_per_node % max(1, tr.tp):
            v.err(("relaunch", "on_node_loss"), f"shrink drops whole nodes: trainer.tp ({tr.tp}) must "
                  f"divide launch.ranks_per_node ({ln.ranks_per_node})")
        else:
            n = sc.job.nodes
            bad = [d for d in range(max(1, rl.min_nodes), n + 1) if not n % d
                   and (d * ln.ranks_per_node // max(1, tr.tp)) % max(1, tr.dp_replicate)]
            if bad:
                v.err(("trainer", "dp_replicate"), f"{tr.dp_replicate} replicas do not divide the "
                      f"data-parallel ranks of a job shrunk to {bad[0]} node(s) (relaunch.on_node_loss: "
                      f"shrink); raise relaunch.min_nodes or use a replica count that divides them")
    if sc.relaunch.walltime_margin >= sc.job.walltime:
        v.err(("relaunch", "walltime_margin"), f"must be shorter than job.walltime "
              f"({sc.relaunch.walltime_margin:g}s >= {sc.job.walltime:g}s): nothing would train")
    if not sc.phases:
        v.err(("phases",), "at least one phase is needed")
    saving = [p for p in sc.phases if p.checkpoint != "none"]
    if saving and tr.save_interval < 1 and not tr.program:
        v.err(("trainer", "save_interval"), f"{tr.save_interval} saves no checkpoint, but phase "
              f"{saving[0].name!r} checkpoints ({saving[0].checkpoint}): every kill would restart "
              "it from step 0; give an interval >= 1, or checkpoint: none")
    names = [p.name for p in sc.phases]
    for i, name in enumerate(names):
        if name in names[:i]:
            v.err(("phases", i, "name"), f"duplicate phase name {name!r}")
    for i, ph in enumerate(sc.phases):
        f = effective_failures(sc, ph)
        if not f:
            continue
        sched = scheduled(f)
        base = ("phases", i, "failures") if ph.failures else ("failures",)
        if len(sched) != 1:
            # the key that came last (a file that extends another, or --set) made the conflict
            keys = sorted(sched, key=lambda k: (v.order(base + ("schedule", k)), v.line(base + ("schedule", k))))
            got = ", ".join(f"{k} from {v.where(base + ('schedule', k))}" for k in keys) or "none"
            v.err(base + ("schedule",) + tuple(keys[-1:]),
                  f"give exactly one of every, at_steps, every_steps, mtbf, fuzz (got {got})")
        step_schedule = "at_steps" in sched or "every_steps" in sched
        gated = tool_options.gate_of(f.gate, step_schedule) == "complete" or f.wait_first_complete
        if gated and ph.checkpoint == "none":
            v.err(base + ("gate",), f"phase {ph.name!r} saves no checkpoints, so a kill gated on .complete "
                  "would never fire: set gate: none (and no wait_first_complete), or save checkpoints")
        try:
            if f.signal is not None:
                parse_signal(f.signal)
        except ValueError as e:
            v.err(base + ("signal",), str(e))
        last = "trainer.program.steps" if tr.program else "trainer.train_iters"  # the key the user wrote
        for step in map(step_of, f.schedule.at_steps or []):
            if step > tr.train_iters:
                v.err(base + ("schedule", "at_steps"), f"step {step} is beyond the last step ({last}: "
                      f"{tr.train_iters}, {v.where(tuple(last.split('.')))})")
        if f.node is not None and f.node >= sc.job.nodes:
            v.err(base + ("node",), f"node {f.node} is out of range for {sc.job.nodes} nodes")
        _network_checks(sc, f, sched, base, v)
        _storage_checks(sc, ph, f, sched, base, v)


def _network_checks(sc: Scenario, f: Failures, sched: Dict[str, Any], base: tuple, v: Validator) -> None:
    """Check what the network kinds (failures.NetworkKind) need that a signal does not.

    They need another node to be cut off from, and the right to change a node's link. Without them,
    the kind is refused here with the reason. It is never run as a fault that silently does nothing."""
    kinds = {f.kind} | {x.kind for x in f.schedule.at_steps or [] if isinstance(x, AtStep)}
    net = sorted(k for k in kinds if failures.get(k).host_fault)
    if not net:
        return
    key = base + ("kind",) if f.kind in net else base + ("schedule", "at_steps")
    what = ", ".join(net)
    if sc.scheduler == "local":
        v.err(key, f"{what} strikes one node's link to the others: it needs a job of 2 or more nodes on a batch scheduler "
              f"(scheduler: local runs every rank on this host)")
    elif sc.scheduler != "pbs":
        v.err(key, f"{what} is made and undone on the node by a process of its own, which outlives the fan-out "
              f"that started it on PBS (tested: tests/test_pbs_network.py); on {sc.scheduler} it is not tested "
              f"(Slurm may end it with its step, leaving a link down): refused")
    elif sc.job.nodes < 2:
        v.err(key, f"{what} strikes one node's link to the others: it needs job.nodes >= 2 (got {sc.job.nodes})")
    if f.node == 0:
        v.err(base + ("node",), f"node 0 runs the relaunch loop and the injector: {what} there would cut them off "
              f"too; pick another node (or none: one is drawn from the seed among the others)")
    if sc.site.root is False:
        v.err(key, f"{what} needs {failures.NetworkKind.needs}; {sc.site.name or 'this site'}'s jobs run "
              f"without root (site.root: false, {v.where(('site', 'root'))}). Set site.root: true only where your "
              f"allocation grants it")
    if "slow_link" in net and not failures.RATE.fullmatch(str(f.rate)):
        v.err(base + ("rate",), f"{f.rate!r} is not a tc rate (a number and one of bit, kbit, mbit, gbit, bps, "
              f"kbps, mbps, gbps: 500kbit, 1mbit)")
    if f.duration == 0 and any(k != "partition" for k in net):
        v.err(base + ("duration",), f"0 (never heals) is for partition only; {', '.join(k for k in net if k != 'partition')} "
              f"needs a duration > 0")


def _storage_checks(sc: Scenario, ph: Phase, f: Failures, sched: Dict[str, Any], base: tuple,
                    v: Validator) -> None:
    """Check that the storage kinds (failures.StorageKind) can reach the ranks.

    They reach the ranks through a preload built when the phase starts. They are refused here where
    that preload cannot be built or cannot reach the ranks."""
    drawn = [k.strip() for k in (f.fuzz_kinds or "").split(",") if k.strip()]
    bad = [k for k in drawn if k not in failures.FUZZ_KINDS]
    if bad:
        v.err(base + ("fuzz_kinds",), f"{', '.join(bad)}: a fuzz draws among {', '.join(failures.FUZZ_KINDS)} (each "
              f"ends the attempt it strikes; one per attempt)")
        return
    kinds = failures.kinds_of(f.kind, [x.kind for x in f.schedule.at_steps or [] if isinstance(x, AtStep)],
                              f.fuzz_kinds)
    io = sorted(k for k in kinds if failures.get(k).storage_fault)
    if not io:
        return
    key = (base + ("kind",) if f.kind in io else base + ("fuzz_kinds",) if set(io) & set(drawn)
           else base + ("schedule", "at_steps"))
    what = ", ".join(io)
    import shutil
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        v.err(key, f"{what} needs {failures.StorageKind.needs}: none found on PATH here")
    if ph.checkpoint == "none":
        v.err(key, f"{what} strikes checkpoint writes, and phase {ph.name!r} saves none")
    warm = ph.warm if ph.warm is not None else sc.relaunch.warm
    if warm:
        v.err(key, f"{what} is put into a rank by its environment at launch; a warm phase forks its ranks from a "
              f"pool started before (not built yet): run it in a cold phase")
    if ph.torchft:
        v.err(key, f"{what} in a torchft phase is not built yet: run it in a restart phase")
    if "fuzz" in sched and any(k not in failures.FUZZ_KINDS for k in io):
        v.err(key, f"{', '.join(k for k in io if k not in failures.FUZZ_KINDS)} with failures.schedule.fuzz: a fuzz "
              f"strikes once per attempt and waits for the next, and this kind may not end its attempt; of the storage "
              f"kinds a fuzz draws torn (failures.fuzz_kinds)")
    if f.duration == 0 and any(k in ("stall_writes", "slow_storage") for k in io):
        v.err(base + ("duration",), "0 is for partition and write_errors (for good); stall_writes and slow_storage "
              "need a duration > 0")
    if "slow_storage" in io:
        try:
            failures.rate_bytes(f.rate)
        except ValueError as e:
            v.err(base + ("rate",), str(e))
    ranks = sc.ranks
    if f.rank >= ranks and not f.all_ranks:
        v.err(base + ("rank",), f"rank {f.rank} is out of range for {ranks} rank(s) (job.nodes x "
              f"launch.ranks_per_node); all_ranks: true strikes every rank")


def effective_failures(sc: Scenario, phase: Phase) -> Optional[Failures]:
    """The failure settings of a phase (False/None: no injector). Phases without a `failures`
    key inherit the top-level one, except checkpoint-less phases (the baseline)."""
    f = phase.failures
    if f is False:
        return None
    if f is None:
        if phase.checkpoint == "none" and not phase.torchft:  # a torchft phase is no baseline
            return None
        f = sc.failures
    return f if scheduled(f) else None


def resolve_data(sc: Scenario, path: str, v: Validator) -> None:
    """Resolve trainer.data relative to the scenario file.

    It must exist where the job is submitted. So a missing token file is found before the job is
    queued, not after it started."""
    tr = sc.trainer
    if not tr.data:
        return
    tr.data = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.expanduser(tr.data))
    if not os.path.isfile(tr.data):
        v.err(("trainer", "data"), f"{tr.data}: no such file (a token file: python -m "
              f"restartlab.trainer.prepare_data writes one)")
