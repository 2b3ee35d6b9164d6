"""restartlab command line: validate render submit status cancel run fuzz supervise inject kill-ranks
node-check teardown chain report simulate."""
import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Dict, List, Optional, cast

if TYPE_CHECKING:
    from .contracts.scenario_record import Scenario


def _loaded(module: str, name: str) -> tuple:
    """The one-tuple (class `name` of `module`,) if that module was imported, else ().

    An except clause over () catches nothing. That is right when the verb never loaded the
    module: nothing in it could have raised. So the verbs a job script runs many times (supervise,
    inject, kill-ranks, report) start without the scenario package, preflight, fuzz and Jinja
    (tests/test_cli_start.py)."""
    m = sys.modules.get(f"{__package__}.{module}")
    return (getattr(m, name),) if m else ()


def _scenario_error() -> tuple:
    return _loaded("scenario.source", "ScenarioError")


def _scheduler_error() -> tuple:
    return _loaded("schedulers.base", "SchedulerError")


def _load(path: str, sets: List[str]) -> "Scenario":
    from . import scenario
    return scenario.load(path, sets)


def cmd_validate(a):
    from .scenario import ScenarioError
    bad = 0
    for path in a.scenarios:
        try:
            sc = _load(path, a.set)
            print(f"{path}: ok ({sc.scheduler}, {sc.job.nodes} node(s) x "
                  f"{sc.launch.ranks_per_node} ranks, phases: {', '.join(p.name for p in sc.phases)})")
        except ScenarioError as e:
            print(str(e), file=sys.stderr)
            bad = 1
    return 2 if bad else 0


def _take_auto(p, sc: "Scenario", verb: str, refused: str = "nothing submitted") -> bool:
    """After preflight `p` judged the queues: job.queue auto's choice into `sc`, said (True); or its
    findings printed, when it refused (False)."""
    from .job import preflight
    if preflight.errors(p.findings):
        preflight.report(p.findings, refused=refused)
        return False
    print(f"restartlab {verb}: job.queue auto: {p.chosen_queue}", file=sys.stderr)
    sc.job.queue = p.chosen_queue
    return True


def cmd_render(a):
    from .job import experiment, preflight
    from . import scenario, schedulers
    sc, where = scenario.load_located(a.scenario, a.set)
    name = a.scheduler or sc.scheduler
    if sc.job.queue == "auto" and schedulers.get(name).has_queue:
        p = preflight.Preflight(sc, where, name)
        p.queue()  # the server's queues decide: without them, the line says the key and why
        if not _take_auto(p, sc, "render", "nothing rendered"):
            return 2
    text, ctx, resolved = experiment.render_script(sc, a.scheduler, expt_dir=a.expt_dir)
    if not sc.job.account and (sc.site.account_required or ctx.unfilled):
        print(f"restartlab render: warning: {where(('job', 'account'))}: job.account is not set: "
              + "; ".join(x for x in (
                  "the script charges no project (-A), which the site requires" if sc.site.account_required else "",
                  "its paths hold a literal {account}, so it stops at once if run" if ctx.unfilled else "") if x)
              + ": render it again with --set job.account=PROJECT", file=sys.stderr)
    if a.output and a.output != "-":
        from .contracts import layout
        side = layout.sidecar_scenario(a.output)
        experiment.write_script(a.output, text, resolved, side)
        print(f"wrote {a.output} (resolved scenario: {side})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_preflight(a):
    from .job import preflight
    return preflight.main(a)


def cmd_submit(a):
    from .job import experiment, preflight, render
    from . import scenario, schedulers
    from .scenario import ScenarioError
    from .schedulers.base import SchedulerError
    sc, where = scenario.load_located(a.scenario, a.set)
    name = a.scheduler or sc.scheduler
    sched = schedulers.get(name)
    judged = render.smoke_scenario(sc) if a.smoke else sc  # the job preflight judges: the smoke job's shape
    if sched.has_queue and sc.job.queue == "auto" and (a.dry_run or a.no_preflight):
        # the choice needs the server either way: asked alone, without the other checks
        p = preflight.Preflight(judged, where, name)
        p.queue()
        if not _take_auto(p, sc, "submit"):
            return 2
    if a.dry_run:
        text = render.render_smoke(sc, name)[0] if a.smoke else experiment.render_script(sc, name)[0]
        sys.stdout.write(text)
        return 0
    if not sched.has_queue:
        print(f"restartlab submit: the scenario's scheduler is {name!r}, which has no queue: "
              f"use `restartlab run`", file=sys.stderr)
        return 2
    tool = sched.submit_cmd("x")[0]
    try:
        secrets = scenario.secret_values(sc)  # the job gets them from qsub/sbatch's environment
    except ScenarioError as e:
        print(f"restartlab submit: error: {e}", file=sys.stderr)
        return 2
    if not shutil.which(tool):
        print(f"restartlab submit: `{tool}` is not on PATH (not a {name} login node?). "
              f"Use --dry-run to see the script, or `restartlab run` to run on this machine.", file=sys.stderr)
        return 3
    if a.after:
        from .job import after, jobref
        if a.poll <= 0:
            print(f"restartlab submit: --poll {a.poll:g}: give seconds above 0", file=sys.stderr)
            return 2
        if not a.no_preflight:
            # what the wait cannot change is said now, not after it (the jobs waited for not counted)
            try:
                waiting_for = after.awaited(a.after, name)[1]
            except jobref.RefError:
                waiting_for = []  # the wait says why
            p = preflight.Preflight(judged, where, name, ignore_jobs=waiting_for)
            findings = p.check()
            if preflight.errors(findings):
                preflight.report(findings, quiet_ok=True)
                print("restartlab submit: not waiting: preflight refuses the job whatever the wait brings",
                      file=sys.stderr)
                return 2
        rc = after.wait(a.after, name, poll=a.poll)
        if rc:
            return rc
    if a.no_preflight:
        checked = "preflight: skipped (restartlab submit --no-preflight)\n"
        print(checked.strip(), file=sys.stderr)
    else:
        p = preflight.Preflight(judged, where, name)
        findings = p.check()
        checked = preflight.report(findings, quiet_ok=True)
        if preflight.errors(findings):
            return 2
        if p.chosen_queue:
            _take_auto(p, sc, "submit")
            checked += f"preflight: job.queue auto: {p.chosen_queue}\n"  # the experiment's record of the choice
    script, ctx = experiment.create(sc, name, smoke=a.smoke)
    from .contracts import layout
    expt = layout.Expt(ctx.expt_dir)
    with open(expt.preflight, "w") as f:
        f.write(checked)
    why = None
    try:
        r = subprocess.run(sched.submit_cmd(script, sorted(secrets)), capture_output=True, text=True,
                           cwd=ctx.expt_dir, timeout=120, env=dict(os.environ, **secrets))
        if r.returncode:
            why = " ".join((r.stderr.strip() or r.stdout.strip() or "no message").split())
            why = f"{tool} refused the job (exit {r.returncode}): {why}"
        else:
            jid = sched.parse_submit(r.stdout)
    except subprocess.TimeoutExpired:
        why = f"{tool} did not answer in 120 s (is the server reachable?)"
    except SchedulerError as e:
        why = str(e)
    if why:
        # the directory stays for inspection, marked: nothing in it ever ran
        with open(expt.not_submitted, "w") as f:
            f.write(why + "\n")
        print(f"restartlab submit: {why} (never submitted: {expt.not_submitted})", file=sys.stderr)
        return 1
    with open(expt.jobid, "w") as f:
        f.write(jid + "\n")
    print(f"job {jid}\nexperiment {ctx.expt_dir}")
    if a.smoke:
        print(f"smoke job: its readiness report will be {expt.smoke_md} (restartlab status {ctx.expt_dir})")
    return 0


def cmd_status(a):
    from .job import jobref
    from .schedulers.base import run_tool
    from .contracts import layout
    try:
        sched, ids, local = jobref.resolve(a.jobids, a.scheduler)
    except jobref.RefError as e:
        print(f"restartlab status: {e}", file=sys.stderr)
        return e.code
    from .contracts import smoke
    if not ids and not local:
        print("restartlab status: no jobs (an experiment directory without its jobs log?)", file=sys.stderr)
        return 2
    for d in local:
        print(jobref.local_status(d))
    st = sched.status(ids, run_tool) if ids else {}
    for jid in ids:
        s = st[jid]
        print(json.dumps(s.as_dict()) if a.json else f"{jid}\t{s.state}\t{s.detail}")
    for d in a.jobids:  # a smoke job's readiness report, where there is one
        report = smoke.read_report(layout.Expt(d).smoke_report) if os.path.isdir(d) else None
        lines = report.lines() if report else None
        if lines and not a.json:
            print("\n".join(f"{d}: {x}" if i == 0 else x for i, x in enumerate(lines)))
    return 0


def cmd_cancel(a):
    from .job import jobref
    from .schedulers.base import run_tool
    try:
        sched, ids, local = jobref.resolve(a.jobids, a.scheduler)
    except jobref.RefError as e:
        print(f"restartlab cancel: {e}", file=sys.stderr)
        return e.code
    for d in local:
        print(f"restartlab cancel: {d}: a local experiment (restartlab run) has no batch job: stop it where it "
              "runs (Ctrl-C)", file=sys.stderr)
    if local:
        return 2
    bad = 0
    for jid in ids:
        err = sched.cancel_error(*run_tool(sched.cancel_cmd(jid)))
        if err:
            print(f"restartlab cancel: {jid}: {err}", file=sys.stderr)
            bad = 1
        else:
            print(f"cancelled {jid}")
    return bad


def cmd_run(a):
    from .job import run
    return run.main(a)


def cmd_inject(a):
    from .runtime import inject
    return inject.main(a)


def cmd_kill_ranks(argv):
    from .runtime import killer
    return killer.main(argv)


def cmd_teardown(a):
    """Signal this job's ranks on every node (found by tag): SIGKILL by default, or the trainer's
    preemption signal (the walltime warning)."""
    from .contracts.signals import parse_signal
    from .runtime import teardown
    from .tools import options as tool_options
    try:
        parse_signal(a.signal)
    except ValueError as e:
        print(f"restartlab teardown: error: {e}", file=sys.stderr)
        return 2
    # the end of a run: its warm standby pool goes too (the supervisor's own teardowns spare it)
    return teardown.teardown(a.tag, a.signal, a.fanout, tool_options.nodefile_default(a.nodefile), a.launcher,
                             standby=True, timeout=a.timeout)


def cmd_supervise(a):
    from .runtime import supervise
    return supervise.main(a)


def cmd_chain(a):
    from .job import chain
    return chain.main(a)


def cmd_fuzz(a):
    from . import fuzz
    return fuzz.main(a)


def cmd_report(a):
    from .analysis import report
    return report.main(a)


def cmd_render_all(a):
    """make render: every example scenario x every scheduler into one directory."""
    from .job import experiment
    from . import schedulers
    from .contracts.resources import resource_dir
    d = resource_dir("scenarios")
    os.makedirs(a.outdir, exist_ok=True)
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".yaml"):
            sc = _load(os.path.join(d, fn), [])
            for s in schedulers.names():
                text, _, _ = experiment.render_script(sc, s, expt_dir=f"/path/to/expt/{sc.name}")
                out = os.path.join(a.outdir, f"{fn[:-5]}.{s}.sh")
                with open(out, "w") as f:
                    f.write(text)
                print(out)
    return 0


def _scen(sp, many=False):
    sp.add_argument("scenarios" if many else "scenario", nargs="+" if many else None)
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                    help="override a scenario value (repeatable); extends=FILE swaps the site profile")


def _schedulers(queued_only=False):
    from . import schedulers
    return schedulers.names(queued_only=queued_only)


def _args_validate(sp):
    _scen(sp, many=True)


def _args_render(sp):
    _scen(sp)
    sp.add_argument("--scheduler", choices=_schedulers())
    sp.add_argument("-o", "--output")
    sp.add_argument("--expt-dir", help="experiment directory baked into the script")


def _args_submit(sp):
    _scen(sp)
    sp.add_argument("--scheduler", choices=_schedulers(queued_only=True))
    sp.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    sp.add_argument("--smoke", action="store_true",
                    help="submit the smoke job instead: the experiment's shape for a few minutes, proving on the "
                    "allocation what it relies on (ranks on every host, torch and the device, one all-reduce, the "
                    "fan-out, a kill by tag, the teardown, a relaunch, a shared directory, a private stage dir); "
                    "its readiness report goes to the experiment directory")
    sp.add_argument("--no-preflight", action="store_true",
                    help="submit without the preflight checks (the experiment records that they were skipped)")
    sp.add_argument("--after", metavar="JOB|EXPT_DIR",
                    help="wait here until that job (or every job of that experiment) has ended, then submit; "
                    "after a smoke job (submit --smoke's experiment directory), only if its report says READY; after "
                    "another job, however it ended. preflight runs before the wait (the jobs waited for not counted) "
                    "and again after it. "
                    "For a queue that takes one job per user, where the server refuses a second while the "
                    "first is waiting or running")
    sp.add_argument("--poll", type=float, default=30.0, metavar="SECONDS",
                    help="--after: seconds between two questions to the server (default 30)")


def _args_preflight(sp):
    from .job import preflight
    sp.description = preflight.__doc__.split("\n\n")[0]
    _scen(sp)
    sp.add_argument("--scheduler", choices=_schedulers(queued_only=True) + ["local"])


def _args_status(sp):
    sp.add_argument("jobids", nargs="+", help="job ids, or experiment directories (every job of a chain)")
    sp.add_argument("--scheduler", choices=_schedulers(queued_only=True))
    sp.add_argument("--json", action="store_true")


def _args_cancel(sp):
    sp.add_argument("jobids", nargs="+", help="job ids, or experiment directories (every job of a chain)")
    sp.add_argument("--scheduler", choices=_schedulers(queued_only=True))


def _args_run(sp):
    sp.add_argument("scenario", nargs="?", default=None, help="default: the shipped scenarios/local.yaml")
    sp.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    sp.add_argument("--expt-dir", help="default: <expt_root>/<name>-<time>")
    sp.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    sp.add_argument("--smoke", action="store_true", help="the smoke job's checks on this machine instead of the "
                    "experiment (what submit --smoke runs on an allocation)")
    sp.add_argument("--baseline-from", metavar="EXPT_DIR",
                    help="copy the baseline phase (checkpoint: none) of this earlier experiment instead of running "
                    "it again; refused unless it ran the same command and finished")


def _args_inject(sp):
    from .runtime import inject
    inject.add_args(sp)


def _args_fuzz(sp):
    from . import fuzz
    fuzz.add_args(sp)


def _args_report(sp):
    from .analysis import report
    report.add_args(sp)


def _args_diff(sp):
    from .contracts import diff_args
    diff_args.add_args(sp)


def _args_supervise(sp):
    from .runtime import supervise
    sp.description = supervise.__doc__.split("\n\n")[0]
    supervise.build_parser(sp)


def _args_teardown(sp):
    from .contracts import options
    from .tools import options as tool_options
    options.add_to_parser(sp, tool_options.TEARDOWN)


def _args_chain(sp):
    from .job import chain
    chain.add_args(sp)


def _args_render_all(sp):
    sp.add_argument("outdir")


def _no_args(sp):
    """A verb with a parser of its own (main() hands it its arguments unparsed)."""


# Every verb in --help's order, with its one-line help and the function that adds its arguments.
# The module behind those arguments is imported only when that verb's parser is built.
# add_help is False for a verb with its own parser: that parser answers --help.
VERB_ARGS = {
    "validate": ("check scenarios against the schema", _args_validate),
    "render": ("print (or -o write) the job script", _args_render),
    "submit": ("render + qsub/sbatch; prints the job id and experiment dir", _args_submit),
    "preflight": ("check on the login node that the job can work where it is going (account, queue limits, "
                  "checkpoint bytes vs free space, program, Python, launcher)", _args_preflight),
    "status": ("state of many jobs in one query", _args_status),
    "cancel": ("cancel jobs: job ids, or experiment directories (every job of a chain)", _args_cancel),
    "run": ("the whole experiment on this machine (local scheduler)", _args_run),
    "inject": ("the failure injector", _args_inject),
    "fuzz": ("kill anywhere: random SIGKILLs (many inside saves) into any program, and whether each restart "
             "really survived (exit 1 on a finding)", _args_fuzz),
    "kill-ranks": ("node-local: kill the job's ranks by env tag", _no_args),
    "node-check": ("health of every node of the job; the hosts of the next attempt", _no_args),
    "report": ("tables, plots and goodput for an experiment", _args_report),
    "simulate": ("goodput and the best checkpoint interval at scale, from measured costs", _no_args),
    "diff": ("two checkpoints compared key by key (DCP, torch.save, a framework's folder): what differs, by how "
             "much, what one side lacks", _args_diff),
    "supervise": ("the relaunch loop of one phase (the job script runs it)", _args_supervise),
    "teardown": ("signal a job's ranks on every node (by tag)", _args_teardown),
    "chain": ("submit the continuation job of a chained experiment", _args_chain),
    "render-all": (argparse.SUPPRESS, _args_render_all),
}
OWN_PARSER = ("kill-ranks", "node-check", "simulate")


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The command line's parser.

    Without `only`, every verb gets its arguments. With `only`, every verb is named but only that
    one gets its arguments. main() parses with the latter, so a verb imports only its own modules."""
    from . import __version__
    from .contracts import usage
    p = argparse.ArgumentParser(prog="restartlab", description=__doc__)
    p.add_argument("--version", action="version", version=f"restartlab {__version__}")
    sub = p.add_subparsers(dest="verb", required=True)
    for verb, (text, add) in VERB_ARGS.items():
        sp = sub.add_parser(verb, help=text, add_help=verb not in OWN_PARSER)
        if only in (None, verb):
            add(sp)
            if verb in usage.EXAMPLES:  # an example line at the end of the verb's --help
                sp.epilog, sp.formatter_class = usage.epilog(verb), argparse.RawDescriptionHelpFormatter
    return p


def _mark_as_tool(argv):
    """The injector carries RESTARTLAB_TOOL from its first instruction, so that no killer takes
    it for a rank (an injector run as its own srun task has a rank variable) and its fan-outs
    inherit it. A killer reads /proc/PID/environ, which only shows what a process started with:
    hence a re-exec, once."""
    from .contracts.envvars import TOOL_VAR
    from .tools import verbs
    if TOOL_VAR not in os.environ:
        os.execve(sys.executable, [sys.executable, "-m", verbs.CLI, *argv],
                  dict(os.environ, **{TOOL_VAR: argv[0]}))


def verb_parser(verb: str) -> argparse.ArgumentParser:
    """The parser of one verb: kill-ranks, node-check and simulate have their own (main() hands
    them their arguments unparsed); the rest are build_parser()'s sub-parsers."""
    if verb == "kill-ranks":
        from .runtime import killer
        return killer.build_parser()
    if verb == "node-check":
        from .runtime import nodes
        return nodes.build_parser()
    if verb == "simulate":
        from .analysis import simulate_cli
        return simulate_cli.build_parser()
    sub = next(a for a in build_parser(only=verb)._actions if a.dest == "verb")
    return cast(Dict[str, argparse.ArgumentParser], sub.choices)[verb]


VERBS = {"validate": cmd_validate, "render": cmd_render, "submit": cmd_submit, "preflight": cmd_preflight, "status": cmd_status,
         "cancel": cmd_cancel, "run": cmd_run, "inject": cmd_inject, "report": cmd_report,
         "render-all": cmd_render_all, "teardown": cmd_teardown, "supervise": cmd_supervise,
         "chain": cmd_chain, "fuzz": cmd_fuzz}


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["inject"]:
        _mark_as_tool(sys.argv[1:])
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kill-ranks"]:
        return cmd_kill_ranks(argv[1:])
    if argv[:1] == ["node-check"]:
        from .runtime import nodes
        return nodes.main(argv[1:])
    if argv[:1] == ["simulate"]:  # its own parser: numpy only when it runs
        from .analysis import simulate_cli
        return simulate_cli.main(argv[1:])
    if argv[:1] == ["diff"]:  # tensors are loaded in the trainer's process: orchestration never imports torch
        build_parser(only="diff").parse_args(argv)  # usage errors said here, before torch starts
        from .tools import verbs
        return subprocess.call(verbs.argv(sys.executable, "ckpt-diff", *argv[1:]))
    a = build_parser(only=argv[0] if argv and argv[0] in VERB_ARGS else None).parse_args(argv)
    try:
        return VERBS[a.verb](a)
    except _scenario_error() as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except _scheduler_error() as e:
        print(f"restartlab {a.verb}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
