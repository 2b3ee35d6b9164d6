"""Scenario -> job script text, through Jinja with StrictUndefined.

One filter owns shell quoting: `sh` with a context: 'arg' (one word, single-quoted as needed),
'env' (the value of NAME=value), 'directive' (a #PBS/#SBATCH line: never a newline), and
`sh_argv` for a list of words. Templates never put quotes around a filtered value."""
import os
import shlex
import sys
import time
import uuid
from typing import List

import jinja2

from . import killer, launchers, schedulers, trainer_options
from .resources import resource_dir
from .scenario import ScenarioError, effective_failures


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


def inject_args(sc, f, phase_dir, ckpt_dir, tag):
    """Arguments of `restartlab inject` for one phase's failure settings."""
    s = f["schedule"]
    a = ["--phase-dir", phase_dir, "--ckpt-dir", ckpt_dir, "--tag", tag, "--until", f"{phase_dir}/done",
         "--kind", f["kind"], "--grace", f"{f['grace']}s", "--fanout", sc["scheduler"],
         "--launcher", sc["launch"]["launcher"],
         "--train-iters", sc["trainer"]["train_iters"], "--seed", s.get("seed") or 0]
    if s.get("every") is not None:
        a += ["--every", f"{s['every']}s"]
    elif s.get("at_steps"):
        a += ["--at-steps", ",".join(str(x) if isinstance(x, int) else f"{x['step']}:{x['kind']}"
                                     for x in s["at_steps"])]
    elif s.get("every_steps"):
        a += ["--every-steps", s["every_steps"]]
    elif s.get("mtbf") is not None:
        a += ["--mtbf", f"{s['mtbf']}s"]
    if f.get("signal"):
        a += ["--signal", f["signal"]]
    if f.get("gate"):
        a += ["--gate", f["gate"]]
    if f.get("wait_first_complete"):
        a.append("--wait-first-complete")
    if f.get("max_kills") is not None:
        a += ["--max-kills", f["max_kills"]]
    if f.get("node") is not None:
        a += ["--node", f["node"]]
    return [str(x) for x in a]


def node_check_args(sc, policy) -> List[str]:
    """`restartlab node-check` flags from the scenario (the job script adds the per-attempt ones)."""
    rl, tr = sc["relaunch"], sc["trainer"]
    a = ["--policy", policy, "--need", str(sc["job"]["nodes"]), "--min-nodes", str(rl["min_nodes"]),
         "--timeout", str(int(rl["node_check_timeout"])), "--launcher", sc["launch"]["launcher"],
         "--min-free", str(rl["node_check_min_free_mb"] * 2**20)]
    if rl["node_check_gpus"]:
        a += ["--device", tr["device"], "--gpus", str(rl["node_check_gpus"])]
    stage = next((p["stage_dir"] for p in sc["phases"] if p["checkpoint"] == "async" and p["stage_dir"]
                  and p["stage_dir"] != "none"), None)
    if stage:
        a += ["--stage-dir", stage]
    if rl["node_check_cmd"]:
        a += ["--site-cmd", rl["node_check_cmd"]]
    return a


def context(sc, scheduler=None, expt_dir=None):
    sched_name = scheduler or sc["scheduler"]
    sc = dict(sc, scheduler=sched_name)
    if expt_dir is None:
        expt_dir = os.path.join(os.path.abspath(sc["expt_root"]),
                                f"{sc['name']}-{time.strftime('%Y%m%d-%H%M%S')}")
    sc["expt_dir"] = expt_dir
    sched = schedulers.get(sched_name)
    tag = f"rl-{sc['name']}-{uuid.uuid4().hex[:10]}"
    python = sc["launch"]["python"] or sys.executable
    ln = sc["launch"]
    rank_env = dict(ln["env"])
    rank_env[killer.TAG_VAR] = tag
    rl = sc["relaunch"]
    if rl["chain"] and not sched.chain_sh:
        raise RenderError(f"{sc['source']}: relaunch.chain: the {sched_name} scheduler cannot submit a "
                          f"continuation job (no queue)")
    policy = rl["on_node_loss"]
    node_check = rl["node_check"] if rl["node_check"] is not None else policy != "same"
    hosts_file = os.path.join(expt_dir, "hosts.attempt") if policy != "same" else None
    try:
        # recovering from node loss: the node count and the hosts are decided before each attempt
        launch = launchers.get(ln["launcher"]).argv(
            nodes=launchers.NODES_TOKEN if policy != "same" else sc["job"]["nodes"], ppn=ln["ranks_per_node"],
            rank_env=rank_env, cpu_bind=ln["cpu_bind"], depth=ln["depth"], hostfile=hosts_file)
    except ValueError as e:
        raise RenderError(f"{sc['source']}: {e}")
    phases = []
    for ph in sc["phases"]:
        pdir = os.path.join(expt_dir, ph["name"])
        ckpt = os.path.join(pdir, "ckpts")
        f = effective_failures(sc, ph)
        phases.append({
            "name": ph["name"], "dir": pdir, "checkpoint": ph["checkpoint"],
            "argv": launch + [python, "-m", "restartlab.trainer"] + trainer_options.trainer_argv(
                sc["trainer"], ph["checkpoint"], ckpt, ph["stage_dir"],
                dp_global=sc["job"]["nodes"] * ln["ranks_per_node"] // sc["trainer"]["tp"] if policy == "shrink" else 0),
            "inject": inject_args(sc, f, pdir, ckpt, tag) if f else None,
        })
    return {
        "sc": sc, "scheduler": sched_name, "prefix": sched.prefix, "scheduler_title": sched.title,
        "header_template": sched.header_template, "launcher": ln["launcher"],
        "directives": sched.directives(sc), "nodefile_sh": sched.nodefile_sh,
        "jobid_sh": _jobid_sh(schedulers.jobid_vars()),
        "expt_dir": expt_dir, "python": python, "tag": tag, "phases": phases,
        "train_iters": sc["trainer"]["train_iters"], "setup": ln["setup"],
        "relaunch": {"max_attempts": sc["relaunch"]["max_attempts"],
                     "backoff": int(sc["relaunch"]["backoff"]),
                     "hang_timeout": int(sc["relaunch"]["hang_timeout"]),
                     "startup_timeout": int(sc["relaunch"]["startup_timeout"]),
                     "walltime_margin": int(sc["relaunch"]["walltime_margin"])},
        "walltime": int(sc["job"]["walltime"]),
        "chain": rl["chain"], "chain_sh": sched.chain_sh,
        "nodes": {"policy": policy, "check": node_check, "need": sc["job"]["nodes"], "ppn": ln["ranks_per_node"],
                  "min_nodes": rl["min_nodes"], "timeout": int(rl["node_check_timeout"]), "hosts_file": hosts_file,
                  "check_args": node_check_args(sc, policy)}, "preempt_signal": sc["trainer"]["preempt_signal"],
        "exit_preempted": trainer_options.EXIT_PREEMPTED,
        "report": sc["collection"]["report"], "plots": sc["collection"]["plots"],
        "exit_no_checkpoint": trainer_options.EXIT_NO_CHECKPOINT,
        "mtbf": int(sc["collection"]["mtbf"]), "source": sc["source"],
    }


def _jobid_sh(names):
    """${PBS_JOBID:-${SLURM_JOB_ID:-local}} from every registered scheduler's job-id variable."""
    out = "local"
    for n in reversed(names):
        out = f"${{{n}:-{out}}}"
    return out


def render(sc, scheduler=None, expt_dir=None):
    """-> (script text, context). Deterministic for a given context except the tag and time."""
    ctx = context(sc, scheduler, expt_dir)
    env = _env()
    text = env.get_template(ctx["header_template"]).render(**ctx) + env.get_template("body.j2").render(**ctx)
    return text, ctx
