"""Scenarios: load YAML (with `extends:` and `--set`), validate against the schema, resolve.

Every error names the file, the line and the key path, suggests the nearest valid key for a
misspelling, and the CLI exits 2 (ScenarioError.exit_code). The package: `source` (the files, their
lines, extends and --set), `schema` (the keys, generated from the option tables where a tool owns
them), `validate` (types, bounds, cross-key checks), `secrets` (credentials in launch.env)."""
import dataclasses
import os
from typing import Callable, Dict, List, Sequence, Tuple

import yaml

from ..contracts import scenario_record
from ..contracts.scenario_record import Scenario
from ..contracts.units import parse_duration  # noqa: F401  (re-exported: scenario.parse_duration)
from .schema import F, ListOf, PROGRAM, SCHEMA  # noqa: F401  (the reference pages and tests read them)
from .secrets import is_secret, reference, secret_names, secret_values  # noqa: F401
from .source import ScenarioError, apply_set, load_file
from .validate import Validator, cross_checks, resolve_data, resolve_kind, effective_failures  # noqa: F401


def load(path: str, overrides: Sequence[str] = (), resolved: bool = False) -> Scenario:
    """Load, extend, override and validate a scenario. Raises ScenarioError with every problem.
    resolved: an experiment's own copy of its scenario (layout.Expt.scenario), which also names its expt_dir
    and the file it was made from (its `source`: where {scenario_dir} points)."""
    return load_located(path, overrides, resolved)[0]


def load_located(path: str, overrides: Sequence[str] = (), resolved: bool = False) -> Tuple[Scenario, Callable[..., str]]:
    """(the scenario as load() gives it, where(key path) -> 'file:line' of the value that came last:
    what a finding about that key quotes)."""
    lines: Dict = {}
    files: List[str] = []
    # --set extends=FILE: the scenario's own `extends` (its site profile) is replaced by FILE
    swaps = [a.split("=", 1)[1] for a in overrides if a.startswith("extends=")]
    own: Dict = {}  # the key paths of the file named (not of its site profile)
    data = load_file(path, lines, files=files, swap=swaps[-1] if swaps else None, own=own)
    source = path
    if resolved and isinstance(data, dict):
        data.pop("expt_dir", None)
        made_from = data.pop("source", None)  # the file it was made from: its {scenario_dir}
        source = made_from if isinstance(made_from, str) and made_from else path
    for a in overrides:
        if not a.startswith("extends="):
            apply_set(data, a, lines)
    v = Validator(lines, path, files, own)
    checked = v.mapping(SCHEMA, data, ())
    if not v.errors:  # each value has its type: the record, then the checks across keys
        sc = scenario_record.from_checked(checked)
        resolve_kind(sc.failures)
        for ph in sc.phases:
            resolve_kind(ph.failures)
        cross_checks(sc, v)
        resolve_data(sc, path, v)
    if v.errors:
        raise ScenarioError("\n".join(dict.fromkeys(v.errors)))  # each problem once
    sc.source = os.path.abspath(source)
    return sc, v.where


def dump_resolved(sc: Scenario) -> str:
    """The resolved scenario as YAML, with each secret of launch.env as a reference, never its value.

    `source` names the file it was loaded from. load(resolved=True) takes {scenario_dir} from it."""
    out = scenario_record.to_mapping(dataclasses.replace(sc, launch=dataclasses.replace(
        sc.launch, env={k: reference(k) if is_secret(k) else v for k, v in sc.launch.env.items()})))
    if not sc.source:
        del out["source"]
    return yaml.safe_dump(out, sort_keys=False)


def read_resolved(path: str) -> Scenario:
    """An experiment's own copy of its scenario (layout.Expt.scenario), for the analysis.

    It is not validated again, since the experiment may have moved to a machine without its files.
    The record's tolerant reader reads it: a value of the wrong type reads as its default.
    ScenarioError when it is absent, not YAML, or not a mapping with a list of named phases."""
    try:
        with open(path, errors="replace") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise ScenarioError(f"{path}: malformed {os.path.basename(path)} ({type(e).__name__}: "
                            f"{(str(e).splitlines() or [''])[0][:100]})") from None
    sc = scenario_record.read(data)
    if sc is None:
        raise ScenarioError(f"{path}: malformed {os.path.basename(path)} (not a mapping with a list of "
                            "phases, each with its name)")
    return sc

