"""The scenario record (contracts/scenario_record) against the schema it is built from.

- It has the same keys in the same order, with the same defaults.
- Each scenario in the repository is built and written back unchanged.
- The tolerant reader reads an experiment's own copy back."""
import dataclasses
import glob
import os
import typing

import pytest
import yaml

from restartlab import scenario
from restartlab.contracts import scenario_record, typed_json
from restartlab.contracts.scenario_record import Scenario
from restartlab.contracts.units import parse_duration
from restartlab.scenario.schema import PROGRAM, SCHEMA, F, ListOf
from restartlab.scenario.source import load_file
from restartlab.scenario.validate import Validator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = sorted(p for p in glob.glob(os.path.join(REPO, "scenarios", "**", "*.yaml"), recursive=True))

# a schema kind -> the field types that hold it (Optional[...] where its default is None)
KIND = {"int": int, "float": float, "bool": bool, "duration": float, "str": str, "path": str, "directive": str,
        "name": str, "bytes": int, "strmap": typing.Dict[str, str]}


def _problems(cls, spec, where):
    """What differs between a record class and the schema mapping it stands for."""
    names = [f.name for f in dataclasses.fields(cls) if not (cls is Scenario and f.name in scenario_record.NOT_KEYS)]
    if names != list(spec):
        return [f"{where}: fields {names} != schema keys {list(spec)}"]
    out, hints = [], typed_json.hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in spec:
            continue
        sub, tp, at = spec[f.name], hints[f.name], f"{where}.{f.name}"
        if isinstance(sub, dict):
            out += _problems(typed_json.record_class(tp), sub, at)
        elif isinstance(sub, ListOf) and isinstance(sub.item, dict):
            out += _problems(typed_json.record_class(typed_json.item_type(tp)), sub.item, at)
        elif isinstance(sub, ListOf):
            if tp != typing.List[str] or f.default_factory is not list:
                out.append(f"{at}: a list of strings, {tp}")
        elif sub.kind == "program":
            out += _problems(typed_json.record_class(tp), PROGRAM, at)
        elif sub.kind == "failures":
            out += [] if typed_json.record_class(tp) is scenario_record.Failures else [f"{at}: {tp}"]
        elif sub.kind == "intlist":
            if tp != typing.Optional[typing.List[typing.Union[int, scenario_record.AtStep]]]:
                out.append(f"{at}: {tp}")
        else:
            want = sub.default if sub.kind != "duration" or sub.default is None else parse_duration(sub.default)
            got = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if sub.required:
                got, want = None, None  # the validator refuses it missing; the class holds a placeholder
            kind = KIND[sub.kind]
            if (want is None and sub.required is False and tp != typing.Optional[kind]) or \
                    (want is not None and tp not in (kind, typing.Optional[kind])):
                out.append(f"{at}: {tp} holds no {sub.kind} (default {want!r})")
            if got != want:
                out.append(f"{at}: default {got!r} != the schema's {want!r}")
    return out


def test_the_classes_are_the_schema():
    assert _problems(Scenario, SCHEMA, "scenario") == []


def test_a_class_out_of_step_with_the_schema_is_named():
    """The check itself fails where it must: a renamed, a reordered, a wrongly defaulted field."""
    @dataclasses.dataclass
    class Site2:
        name: typing.Optional[str] = None
        root: typing.Optional[bool] = None
        account_required: bool = True
        project_root: typing.Optional[str] = None
        doc: typing.Optional[str] = None
    assert _problems(Site2, SCHEMA["site"], "site")
    site = dict(SCHEMA["site"], account_required=F("bool", True))
    assert _problems(scenario_record.Site, site, "site") == \
        ["site.account_required: default False != the schema's True"]


def _checked(path):
    lines: dict = {}
    v = Validator(lines, path, [path], {})
    checked = v.mapping(SCHEMA, load_file(path, lines, files=[]), ())
    assert not v.errors, v.errors
    return checked


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: os.path.relpath(p, REPO))
def test_each_scenario_is_written_back_as_it_was_checked(path):
    checked = _checked(path)
    back = scenario_record.to_mapping(scenario_record.from_checked(checked))
    assert back.pop("source") == "" and "expt_dir" not in back
    assert yaml.safe_dump(back, sort_keys=False) == yaml.safe_dump(checked, sort_keys=False)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: os.path.relpath(p, REPO))
def test_each_experiment_copy_reads_back_as_the_record(path, tmp_path):
    # a site profile has no phases of its own
    sc = scenario.load(path, ["job.account=P"] + (["phases=[{name: a}]"] if "/systems/" in path else []))
    sc.expt_dir = str(tmp_path)
    copy = tmp_path / "resolved.yaml"
    copy.write_text(scenario.dump_resolved(sc))
    assert scenario.read_resolved(str(copy)) == sc


def test_the_reader_takes_a_wrong_value_as_its_default_and_refuses_a_phase_without_a_name(tmp_path):
    sc = scenario.load(os.path.join(REPO, "scenarios", "local.yaml"))
    data = scenario_record.to_mapping(sc)
    data["trainer"]["train_iters"] = "many"
    data["phases"][1]["failures"] = True
    data["failures"]["schedule"]["at_steps"] = [12, {"step": 24, "kind": "kill"}, "x"]
    p = tmp_path / "resolved.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    got = scenario.read_resolved(str(p))
    assert got.trainer.train_iters == 100 and got.phases[1].failures is None
    assert got.failures.schedule.at_steps == [12, scenario_record.AtStep(24, "kill")]
    del data["phases"][0]["name"]
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(scenario.ScenarioError, match="malformed"):
        scenario.read_resolved(str(p))


def test_a_phase_without_failures_keeps_false():
    sc = scenario.load(os.path.join(REPO, "scenarios", "local.yaml"), ["phases.1.failures=false"])
    assert sc.phases[1].failures is False
    assert scenario_record.to_mapping(sc)["phases"][1]["failures"] is False
