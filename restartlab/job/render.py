"""Scenario -> job script text, through Jinja with StrictUndefined.

One filter owns shell quoting: `sh` with a context: 'arg' (one word, single-quoted as needed),
'env' (the value of NAME=value), 'directive' (a #PBS/#SBATCH line: never a newline), and
`sh_argv` for a list of words; `comment` keeps a text on its `#` line. Templates never put quotes
around a filtered value."""
import dataclasses
import os
import shlex
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jinja2

from .. import programs, schedulers
from ..contracts import layout, options, trainer_options
from ..contracts.envvars import TAG_VAR
from ..contracts.exits import EXIT_BUDGET, EXIT_WALLTIME
from ..contracts import placeholders
from ..contracts.resources import resource_dir
from ..contracts.scenario_record import Failures, Phase, Scenario
from .script_context import PhasePlan, ScriptContext
from ..tools import options as tool_options, verbs
from ..tools.launch import LaunchSpec, SpecError
from ..scenario import ScenarioError, effective_failures, secret_names


class RenderError(ScenarioError):
    pass


def sh(value, ctx="arg"):
    if value is None:
        raise RenderError("internal: a None value reached the shell-quoting filter")
    s = str(value)
    if ctx == "directive":
        if any(c in s for c in "\n\r\0"):
            raise RenderError(f"directive value {s!r} contains a newline")
        return s
    if ctx in ("arg", "env"):
        if "\0" in s:
            raise RenderError(f"value {s!r} contains a NUL byte")
        q = shlex.quote(s)
        if q == s and "," in s:  # safe to bash, but quoted so shellcheck does not read an array typo
            q = f"'{s}'"
        return q
    raise RenderError(f"internal: unknown quoting context {ctx!r}")


def sh_argv(words):
    return " ".join(sh(w) for w in words)


def comment(text):
    """Text for a `#` line of the script.

    A quoted value may hold a newline or a carriage return. They are shown as \\n and \\r, so that
    no part of the text becomes a line of the script."""
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(resource_dir("templates")),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["sh"] = sh
    env.filters["sh_argv"] = sh_argv
    env.filters["comment"] = comment
    return env


def inject_settings(f: Failures) -> Dict[str, Any]:
    """`restartlab inject`'s values (the injector's option table) for one phase's failure settings;
    the supervisor adds where the phase, its ranks and its nodes are (supervise.inject_argv)."""
    s = f.schedule
    at = ",".join(str(x) if isinstance(x, int) else f"{x.step}:{x.kind}" for x in s.at_steps or [])
    sched = ({"every": s.every} if s.every is not None else {"at_steps": at} if at else
             {"every_steps": s.every_steps} if s.every_steps else
             {"fuzz": s.fuzz, "fuzz_window": f.fuzz_window, "fuzz_save_share": f.fuzz_save_share,
              "fuzz_save_jitter": f.fuzz_save_jitter, "fuzz_after_complete": f.fuzz_after_complete,
              "fuzz_kinds": f.fuzz_kinds}
             if s.fuzz else {"mtbf": s.mtbf})
    return dict(sched, kind=f.kind, grace=f.grace, seed=s.seed or 0, signal=f.signal,
                gate=f.gate, wait_first_complete=f.wait_first_complete, max_kills=f.max_kills,
                node=f.node, duration=f.duration, flaps=f.flaps, flap_up=f.flap_up,
                rate=f.rate, root_cmd=f.root_cmd, rank=f.rank, all_ranks=f.all_ranks,
                errno=f.errno,
                after_bytes=f.after_bytes)


def inject_plan(sc: Scenario, f: Failures, phase: layout.Phase, tag: str) -> List[str]:
    """The injector's whole command line as the phase's supervisor will run it (the script's
    comment; tests/test_tool_options.py holds the supervisor to it)."""
    return tool_options.injector_argv(inject_settings(f), phase.path, phase.ckpts, program_json(sc),
                                      sc.trainer.train_iters, tag, sc.scheduler, sc.launch.launcher)


def program_json(sc: Scenario) -> Optional[str]:
    """trainer.program's adapter spec for the supervisor and the injector (None: the bundled trainer)."""
    prog = sc.trainer.program
    if not prog:
        return None
    spec = programs.Spec.from_program(prog)  # as the scenario says it: each tool fills the adapter's defaults
    # what the program's ranks get besides the job's environment (the adapter's preflight reads it)
    env = {k: v for k, v in sc.launch.env.items() if k not in secret_names(sc)}
    # the supervisor fills the attempt's, the phase's and the checkpoint dir
    pf = spec.progress_file and placeholders.fill(spec.progress_file, {placeholders.SCENARIO_DIR: _scenario_dir(sc)})
    return dataclasses.replace(spec, env=env or None, progress_file=pf).to_json()


def _scenario_dir(sc: Scenario) -> str:
    return os.path.dirname(os.path.abspath(sc.source))


def program_argv(sc: Scenario, ph: Phase, phase: layout.Phase) -> List[str]:
    """The program's command and the phase's args, with {ckpt_dir}, {phase_dir} and {scenario_dir}
    filled in ({attempt_dir}: the supervisor's, per attempt); it starts through rankenv (the spec's)."""
    prog = sc.trainer.program
    assert prog is not None, "program_argv: the scenario runs the bundled trainer"
    where = {placeholders.CKPT_DIR: phase.ckpts, placeholders.PHASE_DIR: phase.path,
             placeholders.SCENARIO_DIR: _scenario_dir(sc)}
    return [placeholders.fill(w, where) for w in prog.command + ph.args]


def node_check_settings(sc: Scenario, expt: layout.Expt) -> Dict[str, Any]:
    """`restartlab node-check`'s values from the scenario (the supervisor adds its own and the
    per-attempt ones)."""
    rl, tr = sc.relaunch, sc.trainer
    vals = options.from_scenario(tool_options.NODE_CHECK, sc)
    stage = next((p.stage_dir for p in sc.phases if p.checkpoint == "async" and p.stage_dir
                  and p.stage_dir != "none"), None)
    vals.update(need=sc.job.nodes, min_free=rl.node_check_min_free_mb * 2**20, bad_file=expt.bad_nodes,
                stage_dir=stage, device=tr.device if rl.node_check_gpus else None)
    return vals


def supervise_args(sc: Scenario, tag: str, policy: str, node_check: bool, expt: layout.Expt) -> List[str]:
    """The supervisor's flags that are the same for every phase.

    The job script adds --stop-at, --job and --nodefile at run time. Each phase adds its own."""
    vals = options.from_scenario(tool_options.SUPERVISE, sc)
    vals.update(tag=tag, node_policy=policy, program=program_json(sc), warm=False)  # warm: per phase
    if not node_check:
        return options.to_argv(tool_options.SUPERVISE, vals)
    vals.update(node_check=True, hosts_file=expt.hosts_attempt)
    return (options.to_argv(tool_options.SUPERVISE, vals) +
            tool_options.SUPERVISE_NODE_CHECK.argv(node_check_settings(sc, expt)))


def launch_spec(sc: Scenario, nodes: int, ppn: int, rank_env: Dict[str, str], secrets: Sequence[str],
                hostfile: Optional[str] = None, program: Sequence[str] = (), rankenv: bool = False) -> LaunchSpec:
    """How the ranks of `nodes` x `ppn` start, running `program`.

    They start by launch.launcher, with launch.mpiexec and launch.launcher_args for an MPI
    launcher. RenderError when the launcher cannot carry them, as with srun and a comma in a value."""
    ln = sc.launch
    spec = LaunchSpec(python=sc.launch.python or sys.executable, program=tuple(program), launcher=ln.launcher,
                      nodes=nodes, ranks_per_node=ppn, env=rank_env, forward=tuple(secrets), cpu_bind=ln.cpu_bind,
                      depth=ln.depth, hostfile=hostfile, mpiexec=ln.mpiexec,
                      launcher_args=tuple(ln.launcher_args), rankenv=rankenv)
    try:
        spec.launcher_argv()
    except SpecError as e:
        raise RenderError(f"{sc.source}: {e}")
    return spec


def torchft_flags(ph: Phase) -> List[str]:
    """The supervisor's --ft-* flags of a torchft phase."""
    rc = ph.recovery
    return ["--ft-groups", str(rc.groups), "--ft-min-replicas", str(rc.min_replicas),
            "--ft-heartbeat-timeout", f"{rc.heartbeat_timeout:g}s", "--ft-join-timeout", f"{rc.join_timeout:g}s"]


def torchft_trainer_argv(sc: Scenario, ph: Phase) -> List[str]:
    """python -m restartlab.trainer.ft's arguments: the scenario's model, steps and batch; the
    group's number and attempt dir are the supervisor's ({group}, {attempt_dir})."""
    tr = sc.trainer
    return ["--model", tr.model, "--train-iters", str(tr.train_iters), "--batch-size", str(tr.batch_size),
            "--seq-len", str(tr.seq_len), "--lr", repr(tr.lr), "--seed", str(tr.seed),
            "--log-interval", str(tr.log_interval), "--min-replicas", str(ph.recovery.min_replicas),
            "--outdir", placeholders.ATTEMPT_DIR, "--replica-group", placeholders.GROUP]


def torchft_program_argv(sc: Scenario, ph: Phase, phase: layout.Phase) -> List[str]:
    """A torchft program of yours as one replica group: its Python running
    restartlab.trainer.ft_hook, which runs the program ({group}, {attempt_dir}: the supervisor's)."""
    python, *rest = program_argv(sc, ph, phase)  # the program's own Python, then what it runs
    return [python, *verbs.module_argv("ft-hook"), "--outdir", placeholders.ATTEMPT_DIR,
            "--replica-group", placeholders.GROUP, "--train-iters", str(sc.trainer.train_iters),
            "--log-interval", str(sc.trainer.log_interval), "--", *rest]


def expt_root(sc: Scenario) -> str:
    """The scenario's expt_root as an absolute path, with {account} filled in.

    A site profile's project space holds one, as in /lus/flare/projects/{account}/... Without an
    account, it is left as it is, and preflight says so."""
    root = os.path.expanduser(sc.expt_root)
    if sc.job.account:
        root = root.replace("{account}", sc.job.account)
    return os.path.abspath(root)


def context(sc: Scenario, scheduler: Optional[str] = None, expt_dir: Optional[str] = None) -> ScriptContext:
    sched_name = scheduler or sc.scheduler
    sc = dataclasses.replace(sc, scheduler=sched_name)
    if expt_dir is None:
        expt_dir = os.path.join(expt_root(sc), f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    sc.expt_dir = expt_dir
    sched = schedulers.get(sched_name)
    tag = f"rl-{sc.name}-{uuid.uuid4().hex[:10]}"
    python = sc.launch.python or sys.executable
    ln = sc.launch
    secrets = secret_names(sc)  # by name from the job's environment: never written here
    rank_env = {k: v for k, v in ln.env.items() if k not in secrets}
    rank_env[TAG_VAR] = tag
    rl = sc.relaunch
    if rl.chain and not sched.can_chain:
        raise RenderError(f"{sc.source}: relaunch.chain: the {sched_name} scheduler cannot submit a "
                          f"continuation job (no queue)")
    policy = rl.on_node_loss
    node_check = rl.node_check if rl.node_check is not None else policy != "same"
    expt = layout.Expt(expt_dir)
    hosts_file = expt.hosts_attempt if policy != "same" else None
    # recovering from node loss: the supervisor decides the node count and the hosts before each attempt
    launch = launch_spec(sc, sc.job.nodes, ln.ranks_per_node, rank_env, secrets, hostfile=hosts_file)
    phases: List[PhasePlan] = []
    for ph in sc.phases:
        phase = expt.phase(ph.name)
        f = effective_failures(sc, ph)
        inject = ["--inject"] + tool_options.SUPERVISE_INJECT.argv(inject_settings(f)) if f else None
        own = bool(sc.trainer.program)
        if ph.torchft:  # replica groups, each its own launch under its own relaunch loop
            program = (torchft_program_argv(sc, ph, phase) if own else
                       verbs.argv(python, "ft-trainer", *torchft_trainer_argv(sc, ph)))
            # a group has launch.ranks_per_node / recovery.groups ranks on the job's one node
            spec = launch_spec(sc, 1, ln.ranks_per_node // ph.recovery.groups, rank_env, secrets,
                               program=program, rankenv=own)
            ft, strategy, warm_on = torchft_flags(ph), "torchft", False
        else:
            # the supervisor starts each rank's program through its exit recorder (cold) or the standby
            # pool's stub (warm standby restart: the phase's, else relaunch.warm)
            program = program_argv(sc, ph, phase) if own else verbs.argv(python, "trainer") + trainer_options.trainer_argv(
                sc.trainer, ph.checkpoint, phase.ckpts, ph.stage_dir,
                dp_global=sc.ranks // sc.trainer.tp if policy == "shrink" else 0)
            spec = dataclasses.replace(launch, program=tuple(program), rankenv=own)
            ft, strategy, warm_on = None, "restart", rl.warm if ph.warm is None else ph.warm
        phases.append(PhasePlan(
            name=ph.name, dir=phase.path, checkpoint=ph.checkpoint, ckpts=phase.ckpts,
            spec=spec, launch=spec.to_json(), program=list(spec.program), argv=spec.argv(),
            warm=warm_on, ft=ft, strategy=strategy,
            inject=inject, inject_plan=shlex.join(inject_plan(sc, f, phase, tag)) if f else ""))
    return ScriptContext(
        sc=sc, scheduler=sched_name, prefix=sched.prefix, scheduler_title=sched.title,
        header_template=sched.header_template, launcher=ln.launcher,
        directives=sched.directives(sc), nodefile_sh=sched.nodefile_sh.format(nodefile=sh(expt.nodefile)),
        jobid_sh=_jobid_sh(schedulers.jobid_vars()), files={"jobs": expt.jobs, "bad_nodes": expt.bad_nodes},
        expt_dir=expt_dir, python=python, tag=tag, phases=phases, secrets=secrets, launch=launch,
        train_iters=sc.trainer.train_iters, setup=ln.setup,
        supervise_args=supervise_args(sc, tag, policy, node_check, expt),
        stop_after=int(sc.job.walltime) - int(rl.walltime_margin) if rl.walltime_margin else 0,
        chain=rl.chain, exit_walltime=EXIT_WALLTIME, exit_budget=EXIT_BUDGET,
        report=sc.collection.report, source=sc.source, unfilled=unfilled(sc),
        report_args=options.to_argv(tool_options.REPORT, {"mtbf": sc.collection.mtbf,
                                                          "no_plots": not sc.collection.plots}),
        chain_args=options.to_argv(tool_options.CHAIN, {"scheduler": sched_name, "max": rl.chain,
                                                        "pass_env": ",".join(secrets)}) if rl.chain else [])


def unfilled(sc: Scenario) -> str:
    """What the script's paths hold unfilled, or '' when nothing is missing.

    That is a literal {account} where job.account was not set. The script then stops at once
    instead of writing there."""
    if sc.job.account or "{account}" not in (sc.expt_dir or ""):
        return ""
    return "job.account (its paths hold a literal {account})"


def _jobid_sh(names):
    """${PBS_JOBID:-${SLURM_JOB_ID:-local}} from every registered scheduler's job-id variable."""
    out = "local"
    for n in reversed(names):
        out = f"${{{n}:-{out}}}"
    return out


SMOKE_WALLTIME_S = 15 * 60  # a smoke job asks for this much at most (its checks take a few minutes)


def smoke_scenario(sc: Scenario) -> Scenario:
    """The scenario as the smoke job runs it: a walltime of minutes, no chain, its own name."""
    job = dataclasses.replace(sc.job, walltime=min(sc.job.walltime, SMOKE_WALLTIME_S))
    return dataclasses.replace(sc, job=job, name=f"{sc.name}-smoke",
                               relaunch=dataclasses.replace(sc.relaunch, on_node_loss="same", chain=0))


def smoke_context(sc: Scenario, scheduler: Optional[str] = None, expt_dir: Optional[str] = None) -> ScriptContext:
    """The smoke job's context.

    It is the experiment's own context (header, nodes, launcher line, environment, setup lines,
    Python), with a walltime of minutes. The smoke rank program runs where the training would:
    restartlab.trainer.smoke, with the scenario's device and backend, doing one all-reduce."""
    sc = smoke_scenario(sc)
    ctx = context(sc, scheduler, expt_dir)  # on_node_loss same: its launch line has the nodes and no host file
    ln = sc.launch
    smoke = verbs.argv(ctx.python, "trainer-smoke", "--outdir", placeholders.ATTEMPT_DIR, "--device", sc.trainer.device,
                        "--device-order", sc.trainer.device_order)
    ctx.smoke_argv = dataclasses.replace(ctx.launch, program=tuple(smoke)).argv()
    stage = next((p.stage_dir for p in sc.phases if p.stage_dir and p.stage_dir != "none"), None)
    ctx.smoke_args = ["--fanout", ctx.scheduler, "--launcher", ln.launcher, "--tag", ctx.tag,
                         "--ranks", str(sc.ranks)] + \
        (["--stage-root", os.path.dirname(stage.rstrip("/")) or "/"] if stage else []) + \
        (["--master-suffix", ln.master_addr_suffix] if ln.master_addr_suffix else [])
    return ctx


def render_smoke(sc: Scenario, scheduler: Optional[str] = None,
                 expt_dir: Optional[str] = None) -> Tuple[str, ScriptContext]:
    """-> (the smoke job's script text, context)."""
    ctx = smoke_context(sc, scheduler, expt_dir)
    env = _env()
    vals = ctx.template_values()
    return env.get_template(ctx.header_template).render(**vals) + env.get_template("smoke.j2").render(**vals), ctx


def render(sc: Scenario, scheduler: Optional[str] = None, expt_dir: Optional[str] = None) -> Tuple[str, ScriptContext]:
    """-> (script text, context). Deterministic for a given context except the tag and time."""
    ctx = context(sc, scheduler, expt_dir)
    env = _env()
    vals = ctx.template_values()
    text = env.get_template(ctx.header_template).render(**vals) + env.get_template("body.j2").render(**vals)
    return text, ctx
