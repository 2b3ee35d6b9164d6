"""The one option model: an `Opt` per flag, in one table per tool (restartlab's own tools in
tools/options.py, the bundled trainer in trainer_options.py). A table feeds the tool's
argparse (`add_to_parser`), the argv a job script passes (`to_argv`), where an option comes from a
scenario key the value read from the scenario (`from_scenario`) and the schema's field
(scenario/schema.py), and every side checks a value with the same `problem`. One default per option; round
-trip tests keep them in step."""
import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .units import parse_duration


@dataclass(frozen=True)
class Opt:
    flag: str                         # --max-attempts
    type: str                         # int | float | str | duration | flag
    default: Any
    help: str
    choices: Optional[Sequence[str]] = None
    scenario: Optional[str] = None    # the scenario key it comes from (relaunch.max_attempts)
    scenario_default: Any = None      # the schema's default when it differs from the tool's
    required: bool = False
    positive: bool = False            # > 0 (a duration of 0 would make no sense)
    min: Optional[float] = None       # smallest accepted value (scenario validation)
    hidden: bool = False              # passed by restartlab itself, not shown in --help

    @property
    def key(self) -> str:
        return self.flag[2:].replace("-", "_")


def problem(o, v) -> Optional[str]:
    """What is wrong with the value `v` of option (or schema field) `o` against its bounds: its
    minimum, > 0, its choices; None: nothing. The one check of the tools' argparse, the trainer and
    the scenario's validation."""
    if o.min is not None and not v >= o.min:  # `not >=` also catches NaN
        return f"must be >= {o.min:g}"
    if o.positive and not v > 0:
        return "must be > 0"
    choices = o.choices() if callable(o.choices) else o.choices
    if choices and v not in choices:
        return f"{v!r} is not one of {', '.join(choices)}"
    return None


def _checked(parse: Callable[[str], Any], o: Opt) -> Callable[[str], Any]:
    def check(v):
        try:
            x = parse(v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
        why = problem(dataclasses.replace(o, choices=None), x)  # argparse words a bad choice itself
        if why:
            raise argparse.ArgumentTypeError(f"{v!r}: {why}")
        return x
    return check


PARSE = {"int": int, "float": float, "str": str, "duration": parse_duration}


def add_to_parser(parser, table: List[Opt], parsers: Optional[Dict[str, Callable]] = None) -> None:
    """argparse arguments from `table` (`parsers`: a flag's own parser instead of its type's)."""
    for o in table:
        hlp = argparse.SUPPRESS if o.hidden else o.help
        if o.type == "flag":
            parser.add_argument(o.flag, action="store_true", help=hlp)
            continue
        conv = (parsers or {}).get(o.flag) or PARSE[o.type]
        conv = _checked(conv, o) if o.positive or o.min is not None else conv
        choices = list(o.choices() if callable(o.choices) else o.choices) if o.choices else None
        parser.add_argument(o.flag, type=conv, default=o.default, choices=choices, required=o.required, help=hlp)


def _word(o: Opt, v) -> str:
    if o.type == "duration":
        return f"{v:g}s" if isinstance(v, (int, float)) else str(v)
    return str(v)


def to_argv(table: List[Opt], values: Dict[str, Any], defaults: bool = False) -> List[str]:
    """The flags for `values` (by key), in table order; a value equal to the default is left out
    (the tool's argparse gives it back), so a script shows only what a scenario decided, unless
    `defaults` (the trainer's line shows every setting it trains with)."""
    known = {o.key for o in table}
    unknown = set(values) - known
    if unknown:
        raise KeyError(f"not in the option table: {', '.join(sorted(unknown))}")
    argv: List[str] = []
    for o in table:
        v = values.get(o.key)
        if o.type == "flag":
            argv += [o.flag] if v else []
        elif v is not None and (defaults or o.required or v != o.default):
            argv += [o.flag, _word(o, v)]
    return argv


def scenario_value(sc: dict, dotted: str):
    """The value at `dotted` in a loaded scenario (None where a mapping on the way is absent)."""
    cur = sc
    for part in dotted.split("."):
        cur = (cur or {}).get(part)
    return cur


def from_scenario(table: List[Opt], sc: dict) -> Dict[str, Any]:
    """{key: value} of every option that comes from a scenario key."""
    return {o.key: scenario_value(sc, o.scenario) for o in table if o.scenario}


_TYPES = {"int": int, "float": float, "duration": float, "str": str, "flag": bool}


def config_class(name: str, table: List[Opt], doc: str, module: str, head=(), tail=(),
                 values: Optional[Dict[str, Any]] = None, bases=()):
    """A tool's settings as a dataclass made from its option table, so that the table is the one
    definition of each setting and its default: `head` fields (name, type), then one field per
    option (the required ones first, without a default; the others with the table's default),
    then `tail` fields (name, type, default). `values`: {key: type} of options whose value is not
    the flag's own (supervise's --inject holds the injector's values, None when off); `bases`
    carry the class's methods."""
    values = values or {}

    def field(o: Opt):
        typ = values.get(o.key) or _TYPES[o.type]
        typ = Optional[typ] if o.default is None or o.key in values else typ
        if o.required:
            return o.key, typ
        return o.key, typ, dataclasses.field(default=None if o.key in values else o.default)

    fields = [*head, *(field(o) for o in sorted(table, key=lambda o: not o.required)),
              *((n, t, dataclasses.field(default=d)) for n, t, d in tail)]
    cls = dataclasses.make_dataclass(name, fields, bases=tuple(bases), namespace={"__doc__": doc})
    cls.__module__ = module
    return cls
