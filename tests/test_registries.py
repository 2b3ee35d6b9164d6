"""The plug-in registries and the one table of trainer options.

- A toy scheduler, launcher and failure kind registered from this file work end to end: scenario
  validation, CLI choices, rendering, rank discovery, the injector's node choice.
- Duplicates are refused.
- Every trainer option is reachable from a scenario, and every scenario option reaches the
  trainer."""
import io
import os
import pathlib
import random
import subprocess
import sys
from contextlib import redirect_stdout

import pytest

from restartlab import cli, failures, launchers, scenario, schedulers
from restartlab.contracts import layout, trainer_options
from restartlab.job import render
from restartlab.contracts.registry import RegistryError
from restartlab.schedulers.base import Scheduler
from restartlab.contracts.injections import Injection

HERE = os.path.dirname(os.path.abspath(__file__))
SCEN = os.path.join(os.path.dirname(HERE), "scenarios")


@pytest.fixture
def toy_scheduler():
    @schedulers.register
    class ToyFlux(Scheduler):
        name = "toyflux"
        prefix = "#FLUX:"
        title = "Flux (toy)"
        jobid_var = "TOYFLUX_JOB_ID"

        def directives(self, sc):
            return [f"--nodes={sc.job.nodes}", f"--time-limit={int(sc.job.walltime)}s"]

        def submit_cmd(self, script):
            return ["flux", "batch", script]

    yield schedulers.get("toyflux")
    schedulers.SCHEDULERS.unregister("toyflux")


def test_toy_scheduler_is_one_class(tmp_path, toy_scheduler):
    # the scenario schema, the CLI choices, the job-id detection and the renderer all see it
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["scheduler=toyflux", "job.nodes=2"])
    assert sc.scheduler == "toyflux"
    text, _ = render.render(sc, None, str(tmp_path / "expt"))
    lines = text.splitlines()
    assert lines[:3] == ["#!/bin/bash", "#FLUX: --nodes=2", "#FLUX: --time-limit=1800s"]
    assert "# restartlab job script for Flux (toy)" in text
    assert "${TOYFLUX_JOB_ID:-local}" in text and "--fanout toyflux" in text
    script = pathlib.Path(layout.Expt(tmp_path).job_script)
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["render", os.path.join(SCEN, "local.yaml"), "--scheduler", "toyflux"]) == 0
    assert out.getvalue().startswith("#!/bin/bash\n#FLUX: --nodes=1\n")
    assert "toyflux" in schedulers.names(queued_only=True)
    assert schedulers.job_id({"TOYFLUX_JOB_ID": "f123"}) == "f123"


def test_unknown_scheduler_lists_the_registered_ones(tmp_path):
    with pytest.raises(scenario.ScenarioError) as e:
        scenario.load(os.path.join(SCEN, "local.yaml"), ["scheduler=flux"])
    assert "'flux' is not one of local, pbs, slurm" in str(e.value)


def test_duplicates_are_refused():
    with pytest.raises(RegistryError, match="scheduler 'pbs' is already registered"):
        @schedulers.register
        class Again(Scheduler):
            name = "pbs"

    with pytest.raises(RegistryError, match="launcher 'hydra' is already registered"):
        @launchers.register
        class Again2(launchers.Launcher):
            name = "hydra"

    with pytest.raises(RegistryError, match="failure kind .node. is already registered"):
        @failures.register
        class Again3(failures.FailureKind):
            name = "node"
    assert failures.get("node").__class__.__name__ == "Node"  # a refused class replaces nothing


def test_toy_launcher_argv_and_rank_discovery():
    from restartlab.trainer.dist import discover_ranks, intra_op_threads

    @launchers.register
    class Toy(launchers.Launcher):
        name = "toyrun"
        rank_var, size_var, local_rank_var = "TOY_RANK", "TOY_SIZE", "TOY_LOCAL"
        local_size_vars = ("TOY_LOCAL_SIZE",)

        def argv(self, nodes, ppn, rank_env, cpu_bind=None, depth=None, hostfile=None, forward=()):
            return ["toyrun", f"-n{nodes * ppn}"] + [f"--env={k}={v}" for k, v in rank_env.items()] + \
                [f"--pass={k}" for k in forward]

    try:
        env = {"TOY_RANK": "3", "TOY_SIZE": "8", "TOY_LOCAL": "1"}
        i = discover_ranks(env)
        assert (i.rank, i.world_size, i.local_rank, i.launcher) == (3, 8, 1, "toyrun")
        assert intra_op_threads({"TOY_LOCAL_SIZE": "4"}, 8) == 2
        sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["launch.launcher=toyrun"])
        text, ctx = render.render(sc, "local", "/expt/x")
        assert ctx.phases[0].argv[:2] == ["toyrun", "-n2"]
        assert "--launcher toyrun" in text
    finally:
        launchers.LAUNCHERS.unregister("toyrun")


def test_signal_reporting_is_the_launchers():
    assert launchers.get("hydra").signal_of(9) == 9        # Hydra exits with the signal number
    assert launchers.get("srun").signal_of(137) == 9       # 128 + N
    assert launchers.get("srun").signal_of(9) == 0


def test_toy_failure_kind_selects_nodes():
    @failures.register
    class EveryOther(failures.FailureKind):
        name = "every-other-node"
        doc = "toy"

        def nodes(self, n_hosts, node, rng):
            return list(range(0, n_hosts, 2))

    try:
        sc = scenario.load(os.path.join(SCEN, "local.yaml"), ["failures.kind=every-other-node"])
        assert sc.failures.kind == "every-other-node"
        _, ctx = render.render(sc, "local", "/expt/x")
        assert "every-other-node" in ctx.phases[1].inject
        assert failures.get("every-other-node").nodes(5, None, random.Random(0)) == [0, 2, 4]
        assert Injection.from_json({"kind": "every-other-node"}).booked_kind == "every-other-node"
    finally:
        failures.KINDS.unregister("every-other-node")


def test_the_older_name_target_is_gone():
    base = os.path.join(SCEN, "local.yaml")
    assert scenario.load(base, ["failures.kind=rank"]).failures.kind == "rank"
    assert scenario.load(base, ["failures.kind=null"]).failures.kind == "kill"
    with pytest.raises(scenario.ScenarioError, match="failures.target"):
        scenario.load(base, ["failures.target=one-node"])
    with pytest.raises(scenario.ScenarioError, match="one-node"):
        scenario.load(base, ["failures.kind=one-node"])
    assert Injection.from_json({}).booked_kind == "kill"


def _trainer_parser_actions():
    from restartlab.trainer.__main__ import _Parser
    p = _Parser()
    trainer_options.add_to_parser(p)
    return {a.option_strings[0]: a for a in p._actions if a.option_strings and a.dest != "help"}


def test_every_trainer_option_reachable_from_a_scenario_and_back():
    from restartlab.trainer.__main__ import parse_args
    from restartlab.trainer.model import PRESETS
    assert set(trainer_options.MODELS) == set(PRESETS)
    actions = _trainer_parser_actions()
    assert set(actions) == {o.flag for o in trainer_options.OPTIONS}
    schema = scenario.SCHEMA["trainer"]
    scen_keys = {k for k in schema if k not in ("extra_args", "program") and not isinstance(schema[k], dict)}
    scen_keys |= {f"{g}_{k}" for g in schema if isinstance(schema[g], dict) for k in schema[g]}
    assert scen_keys == {o.key for o in trainer_options.scenario_options()}
    # non-default values for every scenario option; render each phase; the trainer parses it back
    sets = ["trainer.model=small", "trainer.vocab=20001", "trainer.train_iters=177", "trainer.save_interval=7", "trainer.keep=2",
            "trainer.tp=2", "trainer.seq_len=9", "trainer.batch_size=3", "trainer.lr=0.5",
            "trainer.seed=99", "trainer.meta_init=on", "trainer.device=cpu", "trainer.log_interval=3",
            "trainer.allow_fresh_start=true", "trainer.deterministic=true", "trainer.pg_timeout=77", "trainer.on_save_error=abort", "trainer.preempt_signal=USR2",
            "trainer.ckpt_format=raw", "trainer.device_order=reverse",
            "trainer.dp_replicate=2", "launch.ranks_per_node=4", f"trainer.data={os.path.abspath(__file__)}",
            "trainer.data_dtype=uint32", "trainer.wandb.project=p", "trainer.wandb.entity=e",
            "trainer.wandb.mode=offline", "phases.2.stage_dir=/st", "relaunch.on_node_loss=shrink"]
    assert {"_".join(s.split("=")[0].split(".")[1:]) for s in sets if s.startswith("trainer.")} == scen_keys
    sc = scenario.load(os.path.join(SCEN, "local.yaml"), sets)
    _, ctx = render.render(sc, "local", "/expt/x")
    seen_flags = set()
    for ph in ctx.phases:
        argv = ph.program
        a = parse_args(argv[argv.index("restartlab.trainer") + 1:])
        for o in trainer_options.scenario_options():
            want = trainer_options.scenario_value(sc.trainer, o)
            want = 0 if (o.key == "save_interval" and ph.checkpoint == "none") else want
            assert getattr(a, o.key) == want, (ph.name, o.key)
        assert a.ckpt_dir == f"{ph.dir}/ckpts" and a.outdir == "."
        assert a.no_resume == (ph.checkpoint == "none")
        assert a.async_ckpt == (ph.checkpoint == "async")
        assert a.ckpt_stage_dir == ("/st" if ph.checkpoint == "async" else None)
        assert a.dp_global == 2  # shrink: the global batch of 1 node x 4 ranks / tp 2
        seen_flags |= {t for t in argv if t.startswith("--")}
    assert {o.flag for o in trainer_options.OPTIONS} <= seen_flags


def test_orchestration_never_imports_torch():
    mods = ["restartlab." + m[:-3] for m in os.listdir(os.path.join(os.path.dirname(HERE), "restartlab"))
            if m.endswith(".py") and m != "__init__.py"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
