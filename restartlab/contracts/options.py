"""Option tables for restartlab's own tools (supervise, inject, node-check, teardown), as
trainer_options.py is for the trainer: one table per tool feeds its argparse, the argv the job
script passes (`to_argv`) and, where an option comes from a scenario key, the value read from the
scenario (`from_scenario`). One default per option; a round-trip test keeps them in step."""
import argparse
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
    required: bool = False
    positive: bool = False            # > 0 (a duration of 0 would make no sense)
    min: Optional[float] = None       # smallest accepted value (scenario validation)
    hidden: bool = False              # passed by restartlab itself, not shown in --help

    @property
    def key(self) -> str:
        return self.flag[2:].replace("-", "_")


def _positive(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def check(v):
        try:
            x = parse(v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
        if not x > 0:
            raise argparse.ArgumentTypeError(f"{v!r}: must be > 0")
        return x
    return check


def _at_least(parse: Callable[[str], Any], low: float) -> Callable[[str], Any]:
    def check(v):
        x = parse(v)
        if not x >= low:
            raise argparse.ArgumentTypeError(f"{v!r}: must be >= {low:g}")
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
        conv = _positive(conv) if o.positive else conv
        conv = _at_least(conv, o.min) if o.min is not None else conv
        choices = list(o.choices() if callable(o.choices) else o.choices) if o.choices else None
        parser.add_argument(o.flag, type=conv, default=o.default, choices=choices, required=o.required, help=hlp)


def _word(o: Opt, v) -> str:
    if o.type == "duration":
        return f"{v:g}s" if isinstance(v, (int, float)) else str(v)
    return str(v)


def to_argv(table: List[Opt], values: Dict[str, Any]) -> List[str]:
    """The flags for `values` (by key), in table order; a value equal to the default is left out
    (the tool's argparse gives it back), so a script shows only what a scenario decided."""
    known = {o.key for o in table}
    unknown = set(values) - known
    if unknown:
        raise KeyError(f"not in the option table: {', '.join(sorted(unknown))}")
    argv: List[str] = []
    for o in table:
        v = values.get(o.key)
        if o.type == "flag":
            argv += [o.flag] if v else []
        elif v is not None and (o.required or v != o.default):
            argv += [o.flag, _word(o, v)]
    return argv


def scenario_value(sc: dict, dotted: str):
    cur = sc
    for part in dotted.split("."):
        cur = cur[part]
    return cur


def from_scenario(table: List[Opt], sc: dict) -> Dict[str, Any]:
    """{key: value} of every option that comes from a scenario key."""
    return {o.key: scenario_value(sc, o.scenario) for o in table if o.scenario}
