"""One option table per tool (supervise, node-check, teardown, inject; report and chain as the job
script runs them): the argparse, the argv the job script passes and the scenario schema all come
from it. Round trips and one default each."""
import argparse
import dataclasses
import os
import shlex

import pytest

from restartlab.contracts import layout, options
from restartlab.job import render
from restartlab import scenario
from restartlab.tools import options as tool_options
from restartlab.tools.launch import LaunchSpec
from restartlab.contracts.envvars import TAG_VAR

SCEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios")
TABLES = {"supervise": tool_options.SUPERVISE, "node-check": tool_options.NODE_CHECK,
          "teardown": tool_options.TEARDOWN, "report": tool_options.REPORT, "chain": tool_options.CHAIN}


def _parser(table):
    p = argparse.ArgumentParser()
    options.add_to_parser(p, table)
    return p


@pytest.mark.parametrize("name", sorted(TABLES))
def test_argparse_defaults_are_the_tables(name):
    table = TABLES[name]
    req = [w for o in table if o.required
           for w in (o.flag, (o.choices() if callable(o.choices) else o.choices or ["1"])[0])]
    a = _parser(table).parse_args(req)
    for o in table:
        if not o.required:
            assert getattr(a, o.key) == (False if o.type == "flag" else o.default), o.flag


def test_scenario_defaults_are_the_tables():
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["relaunch={}", "collection={}"])
    for table, prefix in ((tool_options.SUPERVISE, "relaunch"), (tool_options.NODE_CHECK, "relaunch"),
                          (tool_options.REPORT, "collection")):
        for key, o in tool_options.schema_fields(table, prefix).items():
            assert options.scenario_value(sc, f"{prefix}.{key}") == o.default, key
    assert tool_options.schema_fields(tool_options.REPORT, "collection")  # collection.mtbf: from the table


def _configs():
    """Each tool's settings class, written out, with its table and what the table does not say."""
    from typing import Any, Dict, List, Optional, Tuple
    from restartlab.runtime import inject, nodes, supervise
    return {
        "supervise": (supervise.Config, tool_options.SUPERVISE, dict(
            head=[("argv", List[str])], values={"node_check": Dict[str, Any], "inject": Dict[str, Any]})),
        "inject": (inject.Config, tool_options.INJECT, dict(
            values={"at_steps": List[Tuple[int, Optional[str]]]}, tail=[("python", Optional[str], None)])),
        "node-check": (nodes.Config, tool_options.NODE_CHECK, {}),
    }


@pytest.mark.parametrize("tool", ["supervise", "inject", "node-check"])
def test_each_tools_settings_class_is_its_table(tool):
    """#64.2: supervise.Config, inject.Config and nodes.Config are written out.

    A reader, an editor and a type checker see their fields. Each is kept equal to its option table,
    the one definition of each flag, help and default:
    - its fields are in the table's order: the required ones first, then the head and tail the
      table does not hold;
    - each default is the table's;
    - each type is the option's."""
    from restartlab.contracts.options import config_problems
    cls, table, extra = _configs()[tool]
    assert config_problems(cls, table, **extra) == []


def test_a_table_and_its_class_that_disagree_are_named():
    """The check itself: an option added to the table with no field, a default changed, a type
    changed, a field the table lacks: each named."""
    import dataclasses
    from restartlab.contracts.options import Opt, config_problems
    cls, table, extra = _configs()["node-check"]
    added = table + [Opt("--speed", "duration", 2.0, "how fast")]
    assert config_problems(cls, added) == ["Config's fields are not the table's: no field for: speed"]
    moved = [dataclasses.replace(o, default=99) if o.key == "timeout" else o for o in table]
    assert config_problems(cls, moved) == ["timeout: default 60.0, the table's 99"]
    equal_but_int = [dataclasses.replace(o, default=60) if o.key == "timeout" else o for o in table]  # 60 == 60.0
    assert config_problems(cls, equal_but_int) == ["timeout: default 60.0, the table's 60"]
    typed = [dataclasses.replace(o, type="str") if o.key == "attempt" else o for o in table]
    assert config_problems(cls, typed) == ["attempt: type <class 'int'>, the table's <class 'str'>"]
    fewer = [o for o in table if o.key != "log"]
    assert config_problems(cls, fewer) == ["Config's fields are not the table's: not in the table: log"]
    required = [dataclasses.replace(o, required=True, default=None) if o.key == "log" else o for o in table]
    assert config_problems(cls, required)[0] == "Config's fields are not the table's: another order"


def test_report_and_chain_round_trip_through_the_verbs_own_parsers():
    """scenario -> the job script's report and chain lines -> `restartlab report` / `restartlab
    chain`'s argparse -> the scenario's values.

    The template types no flag of its own."""
    from restartlab import cli
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), [
        "collection.mtbf=2h", "collection.plots=false", "relaunch.chain=3", "launch.env.MY_TOKEN=${MY_TOKEN}"])
    ctx = render.context(sc, "pbs", "/expt/x")
    p = cli.build_parser()
    r = p.parse_args(["report", "/expt/x", *ctx.report_args])
    assert (r.mtbf, r.no_plots) == (7200, True)
    c = p.parse_args(["chain", "/expt/x", *ctx.chain_args, "--job", "1.pbs"])
    assert (c.scheduler, c.max, c.pass_env, c.job) == ("pbs", 3, "MY_TOKEN", "1.pbs")
    text, _ = render.render(sc, "pbs", "/expt/x")
    assert "--mtbf 7200s --no-plots" in text and "--scheduler pbs --max 3 --pass-env MY_TOKEN --job" in text
    plain = render.context(scenario.load(os.path.join(SCEN, "local.yaml")), "local", "/expt/y")
    assert plain.report_args == [] and plain.chain_args == []  # the defaults: nothing to pass


@pytest.mark.parametrize("name", ["local", "agpt2b", "debug"])
def test_supervise_round_trip_from_a_scenario(name):
    """scenario -> the job script's flags -> supervise's argparse -> the scenario's values."""
    sc = scenario.load(os.path.join(SCEN, f"{name}.yaml"), ["relaunch.max_attempts=7", "relaunch.hang_timeout=5m",
                                                         "relaunch.on_node_loss=same"])
    ctx = render.context(sc, "pbs", "/expt/x")
    ph = ctx.phases[-1]
    argv = ctx.supervise_args + ["--phase", "p", "--phase-dir", "d", "--launch", ph.launch]
    a = _parser(tool_options.SUPERVISE).parse_args(argv)
    want = options.from_scenario(tool_options.SUPERVISE, dataclasses.replace(sc, scheduler="pbs"))
    for key, v in want.items():
        assert getattr(a, key) == v, key
    assert a.max_attempts == 7 and a.hang_timeout == 300 and a.tag == ctx.tag
    # the launch: the scenario's launcher, nodes, ranks and environment, as the spec the supervisor reads
    spec = LaunchSpec.from_json(a.launch, ph.program)
    ln = sc.launch
    assert (spec.launcher, spec.nodes, spec.ranks_per_node) == (ln.launcher, sc.job.nodes, ln.ranks_per_node)
    assert spec == dataclasses.replace(ctx.launch, program=tuple(ph.program), rankenv=spec.rankenv)
    assert spec.argv() == ph.argv and spec.env[TAG_VAR] == ctx.tag


def test_node_check_and_inject_round_trip():
    """scenario -> the job script's supervise flags (--node-check-*, and each phase's --inject-*)
    -> the supervisor's argparse and Config -> the node check's values and the injector's argv.

    The injector's own parser takes that argv. It is the injection plan the script shows."""
    from restartlab.runtime import supervise
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), [
        "relaunch.on_node_loss=shrink", "relaunch.node_check_timeout=45s", "relaunch.min_nodes=1",
        "failures.kind=node", "failures.node=0", "failures.grace=20s", "failures.schedule={every: 30s}"])
    ctx = render.context(sc, "slurm", "/expt/x")
    sync = next(p for p in ctx.phases if p.inject)
    p = supervise.build_parser(argparse.ArgumentParser())
    a = p.parse_args(ctx.supervise_args + ["--phase", "p", "--phase-dir", sync.dir, "--ckpt-dir", sync.ckpts,
                                              *sync.inject, "--launch", sync.launch, "--", "train"])
    cfg = supervise.Config.from_args(a, ["train"])
    nc = cfg.node_check
    assert cfg.node_policy == "shrink" and nc["timeout"] == 45 and nc["need"] == 1 and nc["bad_file"].startswith("/expt/x/")
    assert a.hosts_file.startswith("/expt/x/")
    argv = supervise.inject_argv(dataclasses.replace(cfg, nodefile=None), layout.Phase(sync.dir))
    assert shlex.join(argv) == sync.inject_plan  # the plan the script shows is what the injector runs
    inj_p = argparse.ArgumentParser()
    tool_options.add_inject_args(inj_p)
    i = inj_p.parse_args(argv)
    assert (i.every, i.kind, i.node, i.grace, i.fanout) == (30, "node", 0, 20, "slurm")
    assert i.until == os.path.join(sync.dir, os.path.basename(i.until)) and i.tag == ctx.tag


def test_no_tool_flag_travels_as_one_string():
    """Every value a rendered script passes the supervisor is one word of its own.

    A flag's value never holds another tool's flags to be split again."""
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["relaunch.on_node_loss=spares", "job.spare_nodes=1"])
    ctx = render.context(sc, "pbs", "/expt/x")
    words = ctx.supervise_args + [w for p in ctx.phases for w in (p.inject or [])]
    assert not [w for w in words if not w.startswith("--") and " --" in w], words


def test_one_launcher_default_for_every_tool():
    defaults = {o.default for t in (tool_options.SUPERVISE, tool_options.NODE_CHECK, tool_options.TEARDOWN,
                                    tool_options.INJECT) for o in t if o.flag == "--launcher"}
    assert defaults == {tool_options.LAUNCHER_DEFAULT} == {scenario.SCHEMA["launch"]["launcher"].default}


def test_to_argv_refuses_an_unknown_key():
    with pytest.raises(KeyError, match="nope"):
        options.to_argv(tool_options.TEARDOWN, {"nope": 1})


def test_gate_is_decided_once():
    assert tool_options.gate_of(None, True) == "complete" and tool_options.gate_of(None, False) == "none"
    assert tool_options.gate_of("none", True) == "none"
