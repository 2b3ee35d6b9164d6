"""Scenario -> job script text, through Jinja with StrictUndefined.

One filter owns shell quoting: `sh` with a context: 'arg' (one word, single-quoted as needed),
'env' (the value of NAME=value), 'directive' (a #PBS/#SBATCH line: never a newline), and
`sh_argv` for a list of words. Templates never put quotes around a filtered value."""
import json
import os
import shlex
import sys
import time
import uuid
from typing import Any, Dict, List, Optional

import jinja2

from .. import launchers, programs, schedulers
from ..contracts import layout, options, trainer_options
from ..contracts.envvars import TAG_VAR
from ..contracts.exits import EXIT_BUDGET, EXIT_WALLTIME
from ..contracts import placeholders
from ..contracts.placeholders import PROGRAM_TOKEN
from ..contracts.resources import resource_dir
from ..tools import options as tool_options, verbs
from ..scenario import ScenarioError, effective_failures, is_torchft, secret_names


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


def _env():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(resource_dir("templates")),
                             undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["sh"] = sh
    env.filters["sh_argv"] = sh_argv
    return env


def inject_settings(sc, f) -> Dict[str, Any]:
    """`restartlab inject`'s values (the injector's option table) for one phase's failure settings;
    the supervisor adds where the phase, its ranks and its nodes are (supervise.inject_argv)."""
    s = f["schedule"]
    at = ",".join(str(x) if isinstance(x, int) else f"{x['step']}:{x['kind']}" for x in s.get("at_steps") or [])
    sched = ({"every": s["every"]} if s.get("every") is not None else {"at_steps": at} if at else
             {"every_steps": s["every_steps"]} if s.get("every_steps") else
             {"fuzz": s["fuzz"], "fuzz_window": f["fuzz_window"], "fuzz_save_share": f["fuzz_save_share"],
              "fuzz_after_complete": f["fuzz_after_complete"]} if s.get("fuzz") else {"mtbf": s.get("mtbf")})
    return dict(sched, kind=f["kind"], grace=f["grace"], seed=s.get("seed") or 0, signal=f.get("signal"),
                gate=f.get("gate"), wait_first_complete=f.get("wait_first_complete"), max_kills=f.get("max_kills"),
                node=f.get("node"))


def inject_plan(sc, f, phase: layout.Phase, tag) -> List[str]:
    """The injector's whole command line as the phase's supervisor will run it (the script's
    comment; tests/test_tool_options.py holds the supervisor to it)."""
    return tool_options.injector_argv(inject_settings(sc, f), phase.path, phase.ckpts, program_json(sc),
                                      sc["trainer"]["train_iters"], tag, sc["scheduler"], sc["launch"]["launcher"])


def program_json(sc) -> Optional[str]:
    """trainer.program's adapter spec for the supervisor and the injector (None: the bundled trainer)."""
    prog = sc["trainer"].get("program")
    if not prog:
        return None
    spec = {k: prog[k] for k in ("adapter",) + programs.KEYS}
    env = {k: v for k, v in sc["launch"]["env"].items() if k not in secret_names(sc)}
    if env:  # what the program's ranks get besides the job's environment (the adapter's preflight reads it)
        spec["env"] = env
    if spec["progress_file"]:  # the supervisor fills the attempt's, the phase's and the checkpoint dir
        spec["progress_file"] = placeholders.fill(spec["progress_file"], {placeholders.SCENARIO_DIR: _scenario_dir(sc)})
    return json.dumps(spec, separators=(",", ":"))


def _scenario_dir(sc) -> str:
    return os.path.dirname(os.path.abspath(sc["source"]))


def program_argv(sc, ph, phase: layout.Phase) -> List[str]:
    """rankenv (torchrun-style variables) + the program's command and the phase's args, with
    {ckpt_dir}, {phase_dir} and {scenario_dir} filled in ({attempt_dir}: the supervisor's, per attempt)."""
    prog = sc["trainer"]["program"]
    where = {placeholders.CKPT_DIR: phase.ckpts, placeholders.PHASE_DIR: phase.path,
             placeholders.SCENARIO_DIR: _scenario_dir(sc)}
    out = [placeholders.fill(w, where) for w in prog["command"] + ph["args"]]
    return verbs.module_argv("rankenv") + ["--"] + out


def node_check_settings(sc, expt: layout.Expt) -> Dict[str, Any]:
    """`restartlab node-check`'s values from the scenario (the supervisor adds its own and the
    per-attempt ones)."""
    rl, tr = sc["relaunch"], sc["trainer"]
    vals = options.from_scenario(tool_options.NODE_CHECK, sc)
    stage = next((p["stage_dir"] for p in sc["phases"] if p["checkpoint"] == "async" and p["stage_dir"]
                  and p["stage_dir"] != "none"), None)
    vals.update(need=sc["job"]["nodes"], min_free=rl["node_check_min_free_mb"] * 2**20, bad_file=expt.bad_nodes,
                stage_dir=stage, device=tr["device"] if rl["node_check_gpus"] else None)
    return vals


def supervise_args(sc, tag, policy, node_check, expt: layout.Expt) -> List[str]:
    """The supervisor's flags that are the same for every phase (the job script adds --stop-at,
    --job and --nodefile at run time, and each phase its own)."""
    vals = options.from_scenario(tool_options.SUPERVISE, sc)
    vals.update(tag=tag, node_policy=policy, program=program_json(sc), warm=False)  # warm: per phase
    if not node_check:
        return options.to_argv(tool_options.SUPERVISE, vals)
    vals.update(node_check=True, hosts_file=expt.hosts_attempt)
    return (options.to_argv(tool_options.SUPERVISE, vals) +
            tool_options.SUPERVISE_NODE_CHECK.argv(node_check_settings(sc, expt)))


def launch_argv(sc, nodes, ppn, rank_env, secrets, hostfile=None) -> List[str]:
    """The launcher's argv for `nodes` x `ppn` ranks (launch.launcher), with launch.mpiexec and
    launch.launcher_args for an MPI launcher."""
    ln = sc["launch"]
    try:
        argv = launchers.get(ln["launcher"]).argv(nodes=nodes, ppn=ppn, rank_env=rank_env, cpu_bind=ln["cpu_bind"],
                                                  depth=ln["depth"], hostfile=hostfile, forward=tuple(secrets))
    except ValueError as e:
        raise RenderError(f"{sc['source']}: {e}")
    if argv and argv[0] == "mpiexec":
        argv = [ln["mpiexec"], *ln["launcher_args"], *argv[1:]]
    return argv


def torchft_launch(sc, ph, rank_env, secrets):
    """(one replica group's launcher argv, the supervisor's --ft-* flags) of a torchft phase: the
    group has launch.ranks_per_node / recovery.groups ranks on the job's one node."""
    rc = ph["recovery"]
    argv = launch_argv(sc, 1, sc["launch"]["ranks_per_node"] // rc["groups"], rank_env, secrets)
    flags = ["--ft-groups", str(rc["groups"]), "--ft-min-replicas", str(rc["min_replicas"]),
             "--ft-heartbeat-timeout", f"{rc['heartbeat_timeout']:g}s", "--ft-join-timeout", f"{rc['join_timeout']:g}s"]
    return argv, flags


def torchft_trainer_argv(sc, ph) -> List[str]:
    """python -m restartlab.trainer.ft's arguments: the scenario's model, steps and batch; the
    group's number and attempt dir are the supervisor's ({group}, {attempt_dir})."""
    tr = sc["trainer"]
    return ["--model", tr["model"], "--train-iters", str(tr["train_iters"]), "--batch-size", str(tr["batch_size"]),
            "--seq-len", str(tr["seq_len"]), "--lr", repr(tr["lr"]), "--seed", str(tr["seed"]),
            "--log-interval", str(tr["log_interval"]), "--min-replicas", str(ph["recovery"]["min_replicas"]),
            "--outdir", placeholders.ATTEMPT_DIR, "--replica-group", placeholders.GROUP]


def torchft_program_argv(sc, ph, phase: layout.Phase) -> List[str]:
    """A torchft program of yours as one replica group: rankenv, then its Python running
    restartlab.trainer.ft_hook, which runs the program ({group}, {attempt_dir}: the supervisor's)."""
    argv = program_argv(sc, ph, phase)
    at = argv.index("--") + 1  # the program's own argv: its Python, then what that Python runs
    return argv[:at + 1] + verbs.module_argv("ft-hook") + ["--outdir", placeholders.ATTEMPT_DIR,
                            "--replica-group", placeholders.GROUP, "--train-iters", str(sc["trainer"]["train_iters"]),
                            "--log-interval", str(sc["trainer"]["log_interval"]), "--"] + argv[at + 1:]


def expt_root(sc) -> str:
    """The scenario's expt_root as an absolute path, {account} filled in (a site profile's project
    space: /lus/flare/projects/{account}/...); left as it is without an account (preflight says so)."""
    root = os.path.expanduser(sc["expt_root"])
    if sc["job"]["account"]:
        root = root.replace("{account}", sc["job"]["account"])
    return os.path.abspath(root)


def context(sc, scheduler=None, expt_dir=None):
    sched_name = scheduler or sc["scheduler"]
    sc = dict(sc, scheduler=sched_name)
    if expt_dir is None:
        expt_dir = os.path.join(expt_root(sc), f"{sc['name']}-{time.strftime('%Y%m%d-%H%M%S')}")
    sc["expt_dir"] = expt_dir
    sched = schedulers.get(sched_name)
    tag = f"rl-{sc['name']}-{uuid.uuid4().hex[:10]}"
    python = sc["launch"]["python"] or sys.executable
    ln = sc["launch"]
    secrets = secret_names(sc)  # by name from the job's environment: never written here
    rank_env = {k: v for k, v in ln["env"].items() if k not in secrets}
    rank_env[TAG_VAR] = tag
    rl = sc["relaunch"]
    if rl["chain"] and not sched.can_chain:
        raise RenderError(f"{sc['source']}: relaunch.chain: the {sched_name} scheduler cannot submit a "
                          f"continuation job (no queue)")
    policy = rl["on_node_loss"]
    node_check = rl["node_check"] if rl["node_check"] is not None else policy != "same"
    expt = layout.Expt(expt_dir)
    hosts_file = expt.hosts_attempt if policy != "same" else None
    # recovering from node loss: the node count and the hosts are decided before each attempt
    launch = launch_argv(sc, launchers.NODES_TOKEN if policy != "same" else sc["job"]["nodes"], ln["ranks_per_node"],
                         rank_env, secrets, hostfile=hosts_file)
    phases = []
    for ph in sc["phases"]:
        phase = expt.phase(ph["name"])
        f = effective_failures(sc, ph)
        inject = ["--inject"] + tool_options.SUPERVISE_INJECT.argv(inject_settings(sc, f)) if f else None
        if is_torchft(ph):  # replica groups, each its own launch under its own relaunch loop
            group_launch, ft_args = torchft_launch(sc, ph, rank_env, secrets)
            group_argv = (torchft_program_argv(sc, ph, phase) if sc["trainer"].get("program") else
                          verbs.module_argv("ft-trainer") + torchft_trainer_argv(sc, ph))
            phases.append({
                "name": ph["name"], "dir": phase.path, "checkpoint": ph["checkpoint"], "ckpts": phase.ckpts,
                "argv": group_launch + [python] + group_argv,
                "warm": False, "ft": ft_args, "strategy": "torchft",
                "inject": inject, "inject_plan": shlex.join(inject_plan(sc, f, phase, tag)) if f else "",
            })
            continue
        # where the program starts: the supervisor starts each rank's program there through its
        # exit recorder (cold) or the standby pool's stub (warm standby restart: the phase's, else
        # relaunch.warm)
        warm_on = rl["warm"] if ph["warm"] is None else ph["warm"]
        at = launch + [PROGRAM_TOKEN]
        if sc["trainer"].get("program"):
            argv = at + [python] + program_argv(sc, ph, phase)
        else:
            argv = at + [python, *verbs.module_argv("trainer")] + trainer_options.trainer_argv(
                sc["trainer"], ph["checkpoint"], phase.ckpts, ph["stage_dir"],
                dp_global=sc["job"]["nodes"] * ln["ranks_per_node"] // sc["trainer"]["tp"] if policy == "shrink" else 0)
        phases.append({
            "name": ph["name"], "dir": phase.path, "checkpoint": ph["checkpoint"], "ckpts": phase.ckpts,
            "argv": argv, "warm": warm_on, "ft": None, "strategy": "restart",
            "inject": inject, "inject_plan": shlex.join(inject_plan(sc, f, phase, tag)) if f else "",
        })
    return {
        "sc": sc, "scheduler": sched_name, "prefix": sched.prefix, "scheduler_title": sched.title,
        "header_template": sched.header_template, "launcher": ln["launcher"],
        "directives": sched.directives(sc), "nodefile_sh": sched.nodefile_sh.format(nodefile=sh(expt.nodefile)),
        "jobid_sh": _jobid_sh(schedulers.jobid_vars()), "files": {"jobs": expt.jobs, "bad_nodes": expt.bad_nodes},
        "expt_dir": expt_dir, "python": python, "tag": tag, "phases": phases, "secrets": secrets, "launch": launch,
        "train_iters": sc["trainer"]["train_iters"], "setup": ln["setup"],
        "supervise_args": supervise_args(sc, tag, policy, node_check, expt),
        # the walltime margin's stop, in seconds from the script's start (0: off)
        "stop_after": int(sc["job"]["walltime"]) - int(rl["walltime_margin"]) if rl["walltime_margin"] else 0,
        "chain": rl["chain"], "exit_walltime": EXIT_WALLTIME, "exit_budget": EXIT_BUDGET,
        "report": sc["collection"]["report"], "source": sc["source"],
        "report_args": options.to_argv(tool_options.REPORT, {"mtbf": sc["collection"]["mtbf"],
                                                             "no_plots": not sc["collection"]["plots"]}),
        "chain_args": options.to_argv(tool_options.CHAIN, {"scheduler": sched_name, "max": rl["chain"],
                                                           "pass_env": ",".join(secrets)}) if rl["chain"] else [],
    }


def _jobid_sh(names):
    """${PBS_JOBID:-${SLURM_JOB_ID:-local}} from every registered scheduler's job-id variable."""
    out = "local"
    for n in reversed(names):
        out = f"${{{n}:-{out}}}"
    return out


SMOKE_WALLTIME_S = 15 * 60  # a smoke job asks for this much at most (its checks take a few minutes)


def smoke_context(sc, scheduler=None, expt_dir=None):
    """The smoke job's context: the experiment's own (header, nodes, launcher line, environment,
    setup lines, Python) with a walltime of minutes, and the smoke rank program where the training
    would run (restartlab.trainer.smoke: the scenario's device and backend, one all-reduce)."""
    job = dict(sc["job"], walltime=min(sc["job"]["walltime"], SMOKE_WALLTIME_S))
    sc = dict(sc, job=job, name=f"{sc['name']}-smoke", relaunch=dict(sc["relaunch"], on_node_loss="same", chain=0))
    ctx = context(sc, scheduler, expt_dir)  # on_node_loss same: its launch line has the nodes and no host file
    ln = sc["launch"]
    ctx["smoke_argv"] = ctx["launch"] + verbs.argv(ctx["python"], "trainer-smoke", "--outdir", placeholders.ATTEMPT_DIR,
                                                    "--device", sc["trainer"]["device"])
    stage = next((p["stage_dir"] for p in sc["phases"] if p["stage_dir"] and p["stage_dir"] != "none"), None)
    ctx["smoke_args"] = ["--fanout", ctx["scheduler"], "--launcher", ln["launcher"], "--tag", ctx["tag"],
                         "--ranks", str(sc["job"]["nodes"] * ln["ranks_per_node"])] + \
        (["--stage-root", os.path.dirname(stage.rstrip("/")) or "/"] if stage else [])
    return ctx


def render_smoke(sc, scheduler=None, expt_dir=None):
    """-> (the smoke job's script text, context)."""
    ctx = smoke_context(sc, scheduler, expt_dir)
    env = _env()
    return env.get_template(ctx["header_template"]).render(**ctx) + env.get_template("smoke.j2").render(**ctx), ctx


def render(sc, scheduler=None, expt_dir=None):
    """-> (script text, context). Deterministic for a given context except the tag and time."""
    ctx = context(sc, scheduler, expt_dir)
    env = _env()
    text = env.get_template(ctx["header_template"]).render(**ctx) + env.get_template("body.j2").render(**ctx)
    return text, ctx
