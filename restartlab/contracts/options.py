"""The one option model: an `Opt` per flag, in one table per tool.

The table of restartlab's own tools is in tools/options.py. The bundled trainer's is in
trainer_options.py. A table feeds the tool's argparse (`add_to_parser`) and the argv a job script
passes (`to_argv`). Where an option comes from a scenario key, it also feeds the value read from the
scenario (`from_scenario`) and the schema's field (scenario/schema.py). Every side checks a value
with the same `problem`. There is one default per option. Round-trip tests keep them in step."""
import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

from .units import parse_duration


@dataclass(frozen=True)
class Opt:
    flag: str                         # --max-attempts
    type: str                         # int | float | str | duration | flag
    default: Any
    help: str
    choices: Union[Sequence[str], Callable[[], Sequence[str]], None] = None  # a function: the registry's names
    scenario: Optional[str] = None    # the scenario key it comes from (relaunch.max_attempts)
    scenario_default: Any = None      # the schema's default when it differs from the tool's
    required: bool = False
    positive: bool = False            # > 0 (a duration of 0 would make no sense)
    min: Optional[float] = None       # smallest accepted value (scenario validation)
    hidden: bool = False              # passed by restartlab itself, not shown in --help

    @property
    def key(self) -> str:
        return self.flag[2:].replace("-", "_")


def problem(o: Any, v: Any) -> Optional[str]:
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
    def check(v: str) -> Any:
        try:
            x = parse(v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
        why = problem(dataclasses.replace(o, choices=None), x)  # argparse words a bad choice itself
        if why:
            raise argparse.ArgumentTypeError(f"{v!r}: {why}")
        return x
    return check


PARSE: Dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "duration": parse_duration}


def add_to_parser(parser: argparse._ActionsContainer, table: List[Opt],
                  parsers: Optional[Dict[str, Callable[[str], Any]]] = None) -> None:
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


def _word(o: Opt, v: Any) -> str:
    if o.type == "duration":
        return f"{v:g}s" if isinstance(v, (int, float)) else str(v)
    return str(v)


def to_argv(table: List[Opt], values: Dict[str, Any], defaults: bool = False) -> List[str]:
    """The flags for `values` (by key), in table order.

    A value equal to the default is left out, since the tool's argparse gives it back. So a script
    shows only what a scenario decided. With `defaults`, such values stay: the trainer's line shows
    every setting it trains with."""
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


def scenario_value(sc: Any, dotted: str) -> Any:
    """The value at `dotted` in a loaded scenario (contracts/scenario_record), or in one of its
    sections with the section's name left out: field by field."""
    cur: Any = sc
    for part in dotted.split("."):
        cur = getattr(cur, part)
    return cur


def from_scenario(table: List[Opt], sc: Any) -> Dict[str, Any]:
    """{key: value} of every option that comes from a scenario key."""
    return {o.key: scenario_value(sc, o.scenario) for o in table if o.scenario}


_TYPES = {"int": int, "float": float, "duration": float, "str": str, "flag": bool}


def config_problems(cls: Type[Any], table: List[Opt], head: Sequence[Tuple[str, Any]] = (),
                    tail: Sequence[Tuple[str, Any, Any]] = (), values: Optional[Dict[str, Any]] = None) -> List[str]:
    """What differs between a tool's settings class and its option table: [] when they agree.

    The settings class is a dataclass written out, for a reader and a type checker. The option table
    is the one definition of each flag, help and default. The class has these fields, in order:
    - the `head` fields (name, type);
    - one field per option. The required ones come first, without a default, of the option's type.
      The others have the table's default, and are Optional where it is None.
    - the `tail` fields (name, type, default).

    `values` is {key: type} of options whose value is not the flag's own. The supervisor's --inject,
    for one, holds the injector's values: Optional, None when off."""
    import typing
    values = values or {}
    missing = dataclasses.MISSING

    def want(o: Opt) -> Tuple[str, Any, Any]:
        base = values.get(o.key) or _TYPES[o.type]
        if o.required:
            return o.key, base, missing
        if o.key in values:
            return o.key, Optional[base], None
        return o.key, Optional[base] if o.default is None else base, o.default

    wanted = [(n, t, missing) for n, t in head] + [want(o) for o in sorted(table, key=lambda o: not o.required)] \
        + list(tail)
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    if names != [w[0] for w in wanted]:
        extra, lacking = set(names) - {w[0] for w in wanted}, [w[0] for w in wanted if w[0] not in names]
        return [f"{cls.__name__}'s fields are not the table's: " + "; ".join(
            p for p in (f"not in the table: {', '.join(sorted(extra))}" if extra else "",
                        f"no field for: {', '.join(lacking)}" if lacking else "",
                        "another order" if not extra and not lacking else "") if p)]
    hints = typing.get_type_hints(cls)
    out = []
    for f, (name, typ, default) in zip(fields, wanted):
        # (type() too: False == 0 and 1 == 1.0, but a flag's default is a bool and a duration's a float)
        both_required = f.default is missing and default is missing
        if (f.default != default or type(f.default) is not type(default)) and not both_required:
            out.append(f"{name}: default {f.default!r}, the table's {'(required)' if default is missing else repr(default)}")
        if hints.get(name) != typ:
            out.append(f"{name}: type {hints.get(name)}, the table's {typ}")
    return out
