"""Reading a scenario's files.

It reads YAML with the (file, line) of every key path. It merges `extends:` chains and applies
`--set key.path=value`. It refuses a file that is not a scenario (too large, not text, recursive
aliases, too many values), with its file and line."""
import copy
import os

import yaml

from ..contracts.resources import resource_dir


class ScenarioError(Exception):
    exit_code = 2


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
    where = f"{fname}:{node.start_mark.line + 1}: {fmt_path(path)}"
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
                raise ScenarioError(f"{fname}:{k.start_mark.line + 1}: {fmt_path(path)}: a key must be a plain "
                                    f"name, not a {'list' if isinstance(k, yaml.SequenceNode) else 'mapping'}")
            key = k.value
            if key in out:
                raise ScenarioError(f"{fname}:{k.start_mark.line + 1}: {fmt_path(path + (key,))}: duplicate key")
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


def fmt_path(path) -> str:
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


def load_file(fname, lines, seen=(), files=None, swap=None, own=None):
    """The data of `fname`, merged over what it extends.

    With `swap`, it is merged over that file instead, as `--set extends=FILE` asks. `lines` gets the
    (file, line) of each key path. `files` gets each file read, a base before the file that extends
    it. `own` gets the key paths of `fname` itself, not of its bases."""
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
    if own is not None:
        own.update(my_lines)
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
    base = load_file(pfile, lines, seen + (os.path.abspath(fname),), files)
    files.append(fname)
    return _merge(base, data, (), lines, my_lines)


def apply_set(data, assignment, lines):
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
                raise ScenarioError(f"--set {key}: {fmt_path(tuple(parts[:i + 1]))}: no such list item")
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
