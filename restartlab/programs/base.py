"""The adapter interface, and the rules every adapter is built from.

The rules are pure functions over a resolved program spec.
A `Spec` holds the scenario's `trainer.program` keys, with the adapter's defaults filled in.

  progress     A regex over a line of the program's output, with a `step` group and optionally `loss` and `dt`.
               ANSI codes and `[rank0]:`-style prefixes are stripped from the line first.
               Without it, and without progress_file, the steps are rank 0's torch optimizer steps.
               They come from the training-state probe's records, so collection.state_every must not be 0.
  checkpoints  A regex over paths under the checkpoint dir, with a `step` group. `{ckpt_dir}` stands for that dir.
               A checkpoint is a file or a directory.
               Where the group takes no part in a match, as for Lightning's last.ckpt,
               the step is read from the file (torchzip).
               A file whose step does not read is listed with step -1, not complete.
  complete     When a listed checkpoint is complete. One of:
               - exists
               - dcp: it holds DCP's .metadata.
               - torchzip: a torch.save file whose zip directory reads. The zip directory is written last.
               - torchzips: a folder holding torch.save files, *.pt and *.pth, every one of them whole.
                 These are each rank's shard and each rank's RNG state.
               - dsshards: DeepSpeed's ZeRO. A folder holding any zero_pp_rank_* file holds one optimizer shard
                 per data- and model-parallel rank. There are as many as its model states file says:
                 dp_world_size x mp_world_size.
               - hfrngs: the Hugging Face Trainer's. A folder holding any rng_state_<r>.pth holds one per process.
                 There are as many as its training_args.bin says: distributed_state.num_processes.
               - file:NAME[,NAME...]: all of these files are there.
                 They are inside the checkpoint dir, or beside a checkpoint file.
               - pointer:FILE: FILE in the checkpoint dir names the newest complete step.
                 It holds a number, or a tag ending in one.
               Several parts joined by + must all hold. Two examples:
               - DeepSpeed: pointer:latest+torchzips+dsshards
               - the Trainer: file:trainer_state.json+torchzips+hfrngs
  counts       What the number in a checkpoint's name counts: steps, or saves (Accelerate's checkpoint_<K>).
               With saves, step = (K + 1) x save_every.
  selects      Which checkpoint the program itself loads on a restart. One of:
               - newest_complete
               - highest: the highest step, complete or not.
               - newest_mtime
               - pointer
               - last: the newest last*.ckpt by mtime. This is Lightning's ckpt_path="last".
  resumed      Optional. A regex for the program's own resume line.
               It has a `step` group, or a `path` group.
               A `path` names a checkpoint, and its step is taken from the listing at the launch.
  loss_line    Optional, for when the steps come from the state probe (no progress).
               A regex for the program's own log line that gives a loss without a step, with a `loss` group.
               An example is the Trainer's {'loss': '5.399', ...}.
               Rank 0's probe reads the line where the program writes it: its sys.stdout and sys.stderr.
               So the loss is that of the step it was printed after.
               It is as rounded as the program prints it.
  saved        Optional. A regex for the program's line after a save, with a `seconds` group.
               The seconds are the time the training loop was blocked.
               It may also have `step` and `kind` groups. The kind is one of:
               - save: a sync save. This is the default.
               - stage: an async save's staging.
               - drain: an async save's drain.
               The line is booked as a save stall of that kind.
  saving       Optional, for a program that logs a save's start but not its length.
               The Hugging Face Trainer and DeepSpeed do this. The key is a regex for that start line.
               The save's stall is then estimated from the step times:
               - Take the interval between two progress lines that holds the line.
               - Subtract the median of the attempt's intervals without a save before it.
               - That median needs at least 3 such intervals (runtime/tap.py). Otherwise the stall is not booked.
               The stall is booked marked as estimated.
"""
import dataclasses
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from ..contracts import placeholders
from ..contracts.program_spec import KEYS, Spec
from ..contracts.scenario_record import Program
from ..contracts.registry import Registry
from . import torchzip

COMPLETE_RULES = ("exists", "dcp", "torchzip", "torchzips", "dsshards", "hfrngs", "file:NAME[,NAME...]", "pointer:FILE")
KINDS = ("exists", "dcp", "torchzip", "torchzips", "dsshards", "hfrngs", "file", "pointer")
SELECT_RULES = ("newest_complete", "highest", "newest_mtime", "pointer", "last")
UNKNOWN_STEP = -1
PROGRESS_FORMATS = (".jsonl", ".csv")  # a progress file's format, by its name's ending
FIELDS = ("step", "loss", "dt")         # progress_fields: what a record's names may stand for
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# [rank0]: (torchrun --tee / DDP logging), [0] or [0]: (Hydra -prepend-rank), 0: (srun --label)
RANK_PREFIX = re.compile(r"^\s*(?:\[(?:rank\s*)?\d+\]:?|\d+:)\s?")


@dataclass(frozen=True)
class Ckpt:
    step: int
    path: str
    complete: bool
    mtime: float  # the newest modification time of the checkpoint or anything directly in it


@dataclass(frozen=True)
class OwnMetricsFile:
    """The metrics a program writes about itself (an adapter's own_metrics).

    It names the file each launch writes (a glob in the launch's directory). It also names the keys
    of the restart and save timers in it."""
    file: str
    restart: Optional[str] = None
    save: Optional[str] = None
    stage: Optional[str] = None
    drain: Optional[str] = None

    def key(self, kind: str) -> Optional[str]:
        """The timer's key for a save kind (SAVE_KINDS: save, stage, drain)."""
        got: Optional[str] = getattr(self, kind) if kind in SAVE_KINDS else None
        return got


class Adapter:
    """One program's conventions.

    They are its defaults for the spec's keys, and how its progress reaches restartlab. Either
    restartlab reads its output (tap), or it writes restartlab's metrics rows itself (the bundled
    trainer)."""
    name = ""
    doc = ""
    defaults: Dict[str, Optional[str]] = {}
    tap = True  # progress comes from the program's output (read by the supervisor).
    # What a warm standby pool imports before it forks this program's ranks (relaunch.warm).
    # relaunch.warm_preload overrides it. Only imports that start no thread and open no device.
    preload = "torch"
    # the metrics file each launch of the program writes about itself, and its keys (own_metrics)
    own_metrics: Optional[OwnMetricsFile] = None
    # the Python modules the program's Python must import (the framework): refused before anything
    # runs when missing (job/preflight.py), with the extra of restartlab that installs them
    requires: Tuple[str, ...] = ()
    extra = ""

    def preflight(self, argv: List[str], env: Dict[str, str]) -> Optional[str]:
        """Why this program cannot run with this command in this environment (one line), or None.

        The job checks it before a phase's first attempt, without starting the program."""
        return None


ADAPTERS: Registry[Adapter] = Registry("program adapter")


def spec_errors(spec: Spec) -> List[tuple]:
    """[(key, message)] of every problem in a resolved spec; [] when it is usable."""
    out: List[Tuple[str, str]] = []
    regexes = {"progress": spec.progress, "checkpoints": spec.checkpoints, "resumed": spec.resumed,
               "saved": spec.saved, "saving": spec.saving, "loss_line": spec.loss_line}
    for key, rx in regexes.items():
        if rx is None:
            if key == "checkpoints":
                out.append((key, f"required for adapter {spec.adapter!r} (a regex with a (?P<step>...) group)"))
            continue  # no progress: the steps are rank 0's torch optimizer steps (the state probe's records)
        try:
            c = re.compile(rx)
        except re.error as e:
            out.append((key, f"{rx!r} is not a valid regular expression ({e})"))
            continue
        if key == "saving":
            continue  # any regex: the line's arrival is what counts
        if key == "loss_line":
            if "loss" not in c.groupindex:
                out.append((key, f"{rx!r} has no (?P<loss>...) group: restartlab reads the loss from it"))
            continue
        if key == "saved":
            if "seconds" not in c.groupindex:
                out.append((key, f"{rx!r} has no (?P<seconds>...) group: the save's blocking time"))
        elif "step" not in c.groupindex and not (key == "resumed" and "path" in c.groupindex):
            out.append((key, f"{rx!r} has no (?P<step>...) group: restartlab reads the step number from it"
                        + (" (or a (?P<path>...) group: the checkpoint loaded)" if key == "resumed" else "")))
    pf = spec.progress_file
    if pf is not None and not str(pf).endswith(PROGRESS_FORMATS):
        out.append(("progress_file", f"{pf!r}: its name must end with {' or '.join(PROGRESS_FORMATS)} (a JSON "
                    "object per line, or a header row then a row per step)"))
    fields = spec.progress_fields or {}
    bad = sorted(set(fields) - set(FIELDS))
    if bad:
        out.append(("progress_fields", f"{', '.join(bad)}: not one of {', '.join(FIELDS)} (each names the record's "
                    "key or column that holds it)"))
    elif fields and not pf:
        out.append(("progress_fields", "only with progress_file"))
    rule = spec.complete or ""
    for part in rule.split("+"):
        kind, _, arg = part.partition(":")
        if kind not in KINDS or (kind in ("file", "pointer")) != bool(arg) \
                or (arg and ("/" in arg or arg in (".", ".."))):
            out.append(("complete", f"{rule!r} is not one of {', '.join(COMPLETE_RULES)}, or several joined by + "
                        "(NAME and FILE: a plain file name)"))
            break
    kind = "pointer" if _pointer_file(rule) else rule.partition(":")[0]
    if (spec.counts or "steps") not in ("steps", "saves"):
        out.append(("counts", f"{spec.counts!r} is not one of steps, saves"))
    elif spec.counts == "saves" and not spec.save_every:
        out.append(("save_every", "required with counts: saves (the steps between two saves: the step of "
                    "checkpoint K is (K + 1) x save_every)"))
    sel = spec.selects or ""
    if sel not in SELECT_RULES:
        out.append(("selects", f"{sel!r} is not one of {', '.join(SELECT_RULES)}"))
    elif sel == "pointer" and kind != "pointer":
        out.append(("selects", "pointer needs complete: pointer:FILE (the file that names the step)"))
    return out


def from_argv(text: Optional[str]) -> Spec:
    """The resolved spec as supervise and inject get it on their command lines (--program: the
    scenario's trainer.program as JSON, written into the job script); the bundled trainer's without
    it. ValueError: not a JSON object; KeyError (RegistryError): an adapter restartlab does not have."""
    return resolve(Spec.from_json(text) if text else Spec(adapter="restartlab"))


def resolve(program: "Spec | Program | Mapping[str, object]") -> Spec:
    """The spec of a scenario's `trainer.program` (or a spec) with the adapter's defaults filled in
    (keys left unset). KeyError: an adapter restartlab does not have."""
    spec = (program if isinstance(program, Spec) else Spec.from_program(program) if isinstance(program, Program)
            else Spec.from_mapping(program))
    ad = ADAPTERS.get(spec.adapter)
    return dataclasses.replace(spec, adapter=ad.name).with_defaults(ad.defaults)


def taps(spec: Spec) -> bool:
    """Whether the program's progress comes from its output (read by the supervisor), not from
    restartlab's own metrics rows (the bundled trainer)."""
    return ADAPTERS.get(spec.adapter).tap


def preflight(spec: Spec, program: List[str]) -> Optional[str]:
    """The adapter's preflight on the program's own argv (the launch spec's) and its environment (the
    job's, with the scenario's launch.env over it)."""
    env = dict(os.environ, **(spec.env or {}))
    return ADAPTERS.get(spec.adapter).preflight(list(program), env)


def clean_line(text: str) -> str:
    """A line of output as a person reads it: ANSI escapes and a rank prefix removed."""
    return RANK_PREFIX.sub("", ANSI.sub("", text), count=1).strip()


def _num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


class Progress(NamedTuple):
    """A step of the program's progress: from a line of its output, or a record of its progress file."""
    step: int
    loss: Optional[float] = None
    dt: Optional[float] = None


def parse_progress(spec: Spec, line: str) -> Optional[Progress]:
    """The step (its loss and time where the pattern has them) when `line` (already cleaned) is a
    progress line."""
    m = _compiled(spec.progress).search(line) if spec.progress else None
    if not m:
        return None
    try:
        step = int(m.group("step"))
    except (TypeError, ValueError):
        return None
    gi = m.re.groupindex
    loss, dt = (_num(m.group(k)) if k in gi else None for k in ("loss", "dt"))
    return Progress(step, loss, dt)


def parse_record(spec: Spec, rec: object) -> Optional[Progress]:
    """The step, its loss and its time from one record of the progress file.

    The record is a JSON object, or a CSV row by its header: the program's own. The fields are read
    through progress_fields (default: step, loss and dt)."""
    if not isinstance(rec, dict):
        return None
    step_key, loss_key, dt_key = ((spec.progress_fields or {}).get(f, f) for f in FIELDS)
    try:
        step = int(float(rec.get(step_key)))  # type: ignore[arg-type]  # None or a word: refused below
    except (TypeError, ValueError, OverflowError):
        return None
    return Progress(step, _num(rec.get(loss_key)), _num(rec.get(dt_key)))


SAVE_KINDS = ("save", "stage", "drain")


class Saved(NamedTuple):
    """The program's line after a save: how long the training loop was blocked, by what, at which step."""
    seconds: float
    kind: str = "save"          # one of SAVE_KINDS
    step: Optional[int] = None


def parse_saved(spec: Spec, line: str) -> Optional[Saved]:
    """The save's seconds, kind and step when `line` is the program's line after a save."""
    m = _compiled(spec.saved).search(line) if spec.saved else None
    seconds = _num(m.group("seconds")) if m else None
    if not m or seconds is None:
        return None
    kind: Any = m.group("kind") if "kind" in m.re.groupindex else None
    kind = {"saving": "save", "staging": "stage"}.get(kind, kind)  # as torchtitan 0.3.0 words it
    digits: str = (m.group("step") if "step" in m.re.groupindex else None) or ""
    return Saved(seconds, kind if kind in SAVE_KINDS else "save", int(digits) if digits.isdigit() else None)


def parse_saving(spec: Spec, line: str) -> bool:
    """Whether `line` is the program's line as a save starts (the adapter's `saving`)."""
    if not spec.saving:
        return False
    return _compiled(spec.saving).search(line) is not None


def parse_resumed(spec: Spec, line: str, ckpts: Sequence[Ckpt] = ()) -> Optional[int]:
    """The step a resume line names.

    That is its `step` group, or the step of the checkpoint its `path` group names among `ckpts`.
    UNKNOWN_STEP when that checkpoint is not among them."""
    m = _compiled(spec.resumed).search(line) if spec.resumed else None
    if not m:
        return None
    if "path" in m.re.groupindex and m.group("path") is not None:  # a regex may have both groups
        p = os.path.normpath(m.group("path"))
        return next((c.step for c in ckpts if os.path.normpath(c.path) == p), UNKNOWN_STEP)
    try:
        return int(m.group("step"))
    except (TypeError, ValueError):
        return None


_CACHE: Dict[str, "re.Pattern"] = {}


def _compiled(rx: str):
    if rx not in _CACHE:
        _CACHE[rx] = re.compile(rx)
    return _CACHE[rx]


def _path_regex(spec: Spec, ckpt_dir: str):
    return re.compile(placeholders.fill(spec.checkpoints or "", {placeholders.CKPT_DIR: re.escape(ckpt_dir.rstrip("/"))}))


def _mtime(path: str) -> float:
    try:
        t = os.stat(path).st_mtime
        if os.path.isdir(path):
            with os.scandir(path) as it:
                for e in it:
                    try:
                        t = max(t, e.stat(follow_symlinks=False).st_mtime)
                    except OSError:
                        pass
        return t
    except OSError:
        return 0.0


def _pointer(ckpt_dir: str, name: str) -> Optional[int]:
    """The step the pointer file names: its number, or the number its tag ends in.

    DeepSpeed's `latest` holds the tag, global_step<N>. None when it has none (Megatron's
    "release")."""
    try:
        with open(os.path.join(ckpt_dir, name)) as f:
            text = f.read(256).strip()
    except OSError:
        return None
    m = re.search(r"(\d+)$", text)
    return int(m.group(1)) if m else None


def _pointer_file(rule: str) -> Optional[str]:
    """The FILE of a rule's pointer:FILE part (None: the rule has none)."""
    return next((p.partition(":")[2] for p in rule.split("+") if p.startswith("pointer:")), None)


def _listing(path: str) -> Optional[set]:
    """The names in a checkpoint folder; None when it is not one (a file, or gone)."""
    try:
        return set(os.listdir(path))
    except OSError:
        return None


def _torn_zips(path: str, names: Optional[set]) -> Optional[List[str]]:
    """The torch.save files (*.pt, *.pth) in a folder whose zip directory does not read (cut short).

    `names` is the folder's listing. [] when all read. None when the folder holds none (nothing
    written yet) or is not a folder."""
    zips = sorted(n for n in names or () if n.endswith((".pt", ".pth")))
    return [n for n in zips if not torchzip.whole(os.path.join(path, n))] if zips else None


DS_MODEL_STATES = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")  # ZeRO-1/2, ZeRO-3


def _ds_shards_missing(path: str, names: Optional[set]) -> Optional[str]:
    """Which of DeepSpeed's ZeRO optimizer shards a checkpoint folder lacks, said.

    None when it has them all, or holds no ZeRO shard at all. No ZeRO shard means not ZeRO, or
    nothing written yet: the other parts of the rule judge that. Rank 0 writes the model states and
    its own shard before `latest`. The other ranks' may not be begun yet when `latest` lands (seen:
    within 4 ms of it)."""
    shards = [n for n in names or () if n.endswith("_optim_states.pt") and "zero_pp_rank_" in n]
    if not shards:
        return None
    assert names is not None  # shards came from it
    meta = next((n for n in DS_MODEL_STATES if n in names), None)
    size = torchzip.read_ints(os.path.join(path, meta), ("dp_world_size", "mp_world_size")) if meta else {}
    if "dp_world_size" not in size:
        return f"{meta or DS_MODEL_STATES[0]} does not say how many ranks wrote it (not there, or cut short)"
    dp, mp = size["dp_world_size"], size.get("mp_world_size", 1)
    prefix = "bf16_" if all(n.startswith("bf16_") for n in shards) else ""
    gone = [f"{prefix}zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for m in range(mp) for d in range(dp)]
    gone = [n for n in gone if n not in names]
    return f"{', '.join(gone)} not there ({dp} x {mp} ranks' shards)" if gone else None


HF_ARGS = "training_args.bin"
HF_RNG = re.compile(r"rng_state_(\d+)\.pth")


def _hf_rngs_missing(path: str, names: Optional[set]) -> Optional[str]:
    """Say which of the Trainer's per-process RNG states (rng_state_<r>.pth) a checkpoint folder lacks.

    Return None when the folder has them all.
    Also return None, and leave the folder not judged, in these cases:
    - It holds none. One process writes rng_state.pth, and a save_only_model save writes none.
    - Its training_args.bin is not there yet. Rank 0 writes it with the weights, before trainer_state.json.
      The rule's other parts judge such a folder.
    - Its training_args.bin is whole but does not say how many processes wrote it.
      That happens with a transformers or accelerate that pickles no distributed_state.

    Why this check exists: every process writes its own RNG state file.
    There is no barrier before rank 0 writes trainer_state.json.
    This was read from transformers 5.25.0: Trainer._save_checkpoint, _save_rng_state.
    So a rank late to begin its file leaves a folder that looks finished.
    A resume from it leaves that rank's RNG where its seed put it.
    _load_rng_state says so only in an info line: "Didn't find an RNG file for process <r>"."""
    if not any(HF_RNG.fullmatch(n) for n in names or ()):
        return None
    assert names is not None  # a name in it matched
    args = os.path.join(path, HF_ARGS)
    n = torchzip.read_attr_int(args, "PartialState", "num_processes")
    if n is None:  # not there yet (rank 0 writes it with the weights; other parts of the rule say so), or cut short
        return None if not os.path.exists(args) or torchzip.whole(args) else \
            f"{HF_ARGS} cut short: it does not say how many processes wrote their RNG states"
    gone = [f"rng_state_{r}.pth" for r in range(n) if f"rng_state_{r}.pth" not in names]
    return f"{', '.join(gone)} not there ({n} processes' RNG states)" if gone else None


# the parts that count the files in a folder against what one of them says
COUNTED = {"dsshards": _ds_shards_missing, "hfrngs": _hf_rngs_missing}


def why_not_complete(rule: str, path: str, step: int, ckpt_dir: str) -> Optional[str]:
    """Why the checkpoint at `path` is not complete by `rule` (each part that fails, said), or None
    when it is. The folder is listed once, for all the parts that look inside it."""
    out: List[str] = []
    listed: List[Optional[set]] = []

    def names() -> Optional[set]:
        if not listed:
            listed.append(_listing(path))
        return listed[0]
    for part in rule.split("+"):
        kind, _, arg = part.partition(":")
        if kind == "exists" and not os.path.exists(path):
            out.append("it is not there")
        elif kind == "dcp" and not os.path.isfile(os.path.join(path, ".metadata")):
            out.append("no .metadata")
        elif kind == "torchzip" and not (step >= 0 and torchzip.read_step(path) is not None):
            out.append("its zip directory does not read")
        elif kind == "torchzips":
            torn = _torn_zips(path, names())
            if torn is None:
                out.append("no .pt or .pth file in it")
            elif torn:
                out.append(f"{', '.join(torn)} cut short (its zip directory does not read)")
        elif kind in COUNTED:
            missing = COUNTED[kind](path, names())
            if missing:
                out.append(missing)
        elif kind == "file":
            gone = [n for n in arg.split(",") if not os.path.exists(os.path.join(path, n) if os.path.isdir(path)
                                                                   else path + n)]
            if gone:
                out.append(f"no {', '.join(gone)}")
        elif kind == "pointer":
            newest = _pointer(ckpt_dir, arg)
            if newest is None or step > newest:
                out.append(f"{arg} names {'no step' if newest is None else f'step {newest}'}")
    ptr = _pointer_file(rule)
    if out and ptr and _pointer(ckpt_dir, ptr) == step:  # the program's own mark says done: say so
        return f"{ptr} names it, but " + "; ".join(out)
    return "; ".join(out) or None


def _is_complete(rule: str, path: str, step: int, ckpt_dir: str) -> bool:
    return why_not_complete(rule, path, step, ckpt_dir) is None


def _entries(root: str, descend) -> Iterator[tuple]:
    """(entry, looked into) for each entry of `root`, and of the subdirectories `descend(entry)` picks.

    It goes one level down, so two levels deep at most."""
    todo = [(root, 0)]
    while todo:
        d, depth = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            inside = depth < 1 and e.is_dir(follow_symlinks=False) and descend(e)
            if inside:
                todo.append((e.path, depth + 1))
            yield e, inside


def list_ckpts(spec: Spec, ckpt_dir: str) -> List[Ckpt]:
    """Every checkpoint under `ckpt_dir` (two levels deep at most) the spec's pattern matches,
    complete or not, in step order. Reads only: nothing of the program's is changed."""
    rx = _path_regex(spec, ckpt_dir)
    root = ckpt_dir.rstrip("/")
    found: Dict[str, int] = {}
    for e, _ in _entries(root, lambda e: not rx.fullmatch(e.path)):
        m = rx.fullmatch(e.path)
        if not m:
            continue
        if m.group("step") is None and e.is_file():
            step = torchzip.read_step(e.path)
            found.setdefault(e.path, UNKNOWN_STEP if step is None else step)
            continue
        try:
            step = int(m.group("step"))
        except (TypeError, ValueError):
            continue
        if spec.counts == "saves" and spec.save_every:
            step = (step + 1) * spec.save_every
        found.setdefault(e.path, step)
    out = [Ckpt(step, p, _is_complete(spec.complete or "", p, step, root), _mtime(p)) for p, step in found.items()]
    return sorted(out, key=lambda c: (c.step, c.mtime))


def newest_complete(ckpts: List[Ckpt]) -> Optional[Ckpt]:
    """The checkpoint a correct resume loads: the highest complete step."""
    good = [c for c in ckpts if c.complete]
    return max(good, key=lambda c: c.step) if good else None


def will_load(spec: Spec, ckpts: List[Ckpt], ckpt_dir: str) -> Optional[Ckpt]:
    """The checkpoint the program itself will load, by its own rule (spec `selects`)."""
    rule = spec.selects
    if rule == "newest_complete":
        return newest_complete(ckpts)
    if not ckpts:
        return None
    if rule == "highest":
        return max(ckpts, key=lambda c: c.step)
    if rule == "newest_mtime":
        return max(ckpts, key=lambda c: c.mtime)
    if rule == "last":
        last = [c for c in ckpts if os.path.basename(c.path).startswith("last")]
        return max(last, key=lambda c: c.mtime) if last else None
    step = _pointer(ckpt_dir, _pointer_file(spec.complete or "") or "")
    return next((c for c in ckpts if c.step == step), None)


def save_interval(ckpts: List[Ckpt]) -> Optional[int]:
    """The steps between a program's saves, as its checkpoints show it.

    It is the greatest common divisor of their steps. Saves every N steps leave multiples of N,
    whichever a program keeps. None without a checkpoint whose step is known."""
    steps = {c.step for c in ckpts if c.step > 0}
    return math.gcd(*steps) if steps else None


def in_flight(spec: Spec, ckpt_dir: str, since: float) -> List[str]:
    """What is being written in the checkpoint dir: the paths (relative to it) of entries written
    to at or after `since` that are not complete checkpoints: a checkpoint not complete yet, a temp
    dir or file a save renames later. A folder that holds checkpoints is looked into (two levels,
    as list_ckpts). An entry older than `since` is what an earlier kill left."""
    root = ckpt_dir.rstrip("/")
    ckpts = list_ckpts(spec, root)
    done = [c.path for c in ckpts if c.complete]
    holds = lambda e: any(c.path.startswith(e.path + os.sep) for c in ckpts)  # noqa: E731
    out = [e.path for e, inside in _entries(root, holds) if not inside
           and not any(e.path == p or e.path.startswith(p + os.sep) for p in done) and _mtime(e.path) >= since]
    # a checkpoint renamed into place between the two listings is complete, not in flight
    now = {c.path for c in list_ckpts(spec, root) if c.complete} if out else set()
    return sorted(os.path.relpath(p, root) for p in out if p not in now)
