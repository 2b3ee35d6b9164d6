"""restartlab report: the report, its summary (+ PNG plots) for an experiment directory, or for
ezpz-format JSONL files given with --baseline/--sync/--async globs."""
import argparse
import glob
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

from .. import programs
from ..contracts import jobslog, layout, options
from ..contracts.attempts import PhaseEnd
from ..contracts.job_status import JobStatus
from ..contracts.live import Malformed
from ..contracts.registry import RegistryError
from ..contracts.scenario_record import Scenario
from ..tools import options as tool_options
from . import collect, own_metrics, strategies, survival
from ..contracts import metric_keys as K
from ..contracts.ft_summary import FtSummary
from ..contracts.phase_summary import Ended, FailureEvent, Layers, PhaseSummary
from ..contracts.summary import Summary


_FINISHED = (PhaseEnd.COMPLETED, PhaseEnd.WALLTIME)  # a phase with its overhead computed


def add_args(p):
    p.add_argument("expt_dir", nargs="?", help="experiment directory (phases as subdirectories)")
    p.add_argument("--baseline", help="glob of ezpz metrics JSONL files (no-failure run)")
    p.add_argument("--sync", help="glob of ezpz metrics JSONL files (sync checkpoint run)")
    p.add_argument("--async", dest="async_", help="glob of ezpz metrics JSONL files (async run)")
    p.add_argument("--out", help="output directory (default: the experiment directory)")
    options.add_to_parser(p, tool_options.REPORT)
    p.add_argument("--expect", nargs="*", default=None, help="phase names that must be present")
    p.add_argument("--wandb", action="store_true", help="also log the tables, figures and plots as a W&B run "
                   "(project/entity/mode from the scenario's trainer.wandb unless given below)")
    p.add_argument("--wandb-project")
    p.add_argument("--wandb-entity")
    p.add_argument("--wandb-mode", choices=("online", "offline", "disabled"))


def _start_kind(event: FailureEvent) -> str:
    """How the restart's ranks started: warm or cold.

    Warm ranks are forked from the standby pools, with their imports done. Their count is the pools'
    own count in the attempt record, else the bundled trainer's startup row."""
    n = event.warm_ranks
    if n is None:
        n = event.startup.get(K.STARTUP_WARM)
    return "warm" if n else "cold"


def _fmt(x, nd=2):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def find_phases(expt_dir, order=None):
    """The experiment's phase directories, in the scenario's order (`order`), the rest by name."""
    if not os.path.isdir(expt_dir):
        raise FileNotFoundError(f"{expt_dir}: not an experiment directory (no such directory)")
    out = [p.name for p in layout.Expt(expt_dir).phases()]
    rank = {n: i for i, n in enumerate(order or [])}
    return sorted(out, key=lambda n: (rank.get(n, len(rank)), n))


def _program(data: Optional[Scenario]) -> Optional[programs.Spec]:
    """The experiment's trainer.program resolved through its adapter (None: the bundled trainer)."""
    prog = data.trainer.program if data else None
    try:
        return programs.resolve(prog) if prog else None
    except RegistryError:  # an adapter this restartlab does not know
        return None


def _scenario(scen: str, problems: list) -> Optional[Scenario]:
    """The experiment's resolved scenario (None if absent or malformed)."""
    if not os.path.exists(scen):
        return None
    from .. import scenario
    try:
        return scenario.read_resolved(scen)
    except scenario.ScenarioError as e:
        problems.append(Malformed(f"{e}, phases taken from the directories"))
        return None


def _expected_phases(data: Optional[Scenario]) -> Optional[List[str]]:
    """Phase names from the resolved scenario (None if it cannot tell)."""
    return [p.name for p in data.phases] if data else None


def _checkpoint_modes(data: Optional[Scenario]) -> Dict[str, str]:
    """{phase name: checkpoint mode} from the resolved scenario ({} if it cannot tell)."""
    return {p.name: p.checkpoint for p in data.phases} if data else {}


def _policy(data: Optional[Scenario]) -> Optional[str]:
    return data.relaunch.on_node_loss if data else None


def build(a):
    """-> (phases, summaries, missing phase names, problems outside any phase, the experiment's
    resolved scenario or None)."""
    phases, missing, problems, policy, data, modes = [], [], [], None, None, {}
    losses = False  # each step's loss is kept only where survival compares it with the baseline's
    if a.expt_dir:
        expt = layout.Expt(a.expt_dir)
        data = _scenario(expt.scenario, problems) if os.path.isdir(a.expt_dir) else None
        names = find_phases(a.expt_dir, _expected_phases(data))
        expected = a.expect if a.expect is not None else _expected_phases(data)
        policy, modes = _policy(data), _checkpoint_modes(data)
        ft_names = torchft_phases(a.expt_dir)  # their groups' loops: not phases of attempts
        missing = [n for n in (expected or []) if n not in names and n not in ft_names]
        losses = bool(a.baseline) or any(collect.is_baseline(m) for m in modes.values())
        for n in names:
            phases.append(collect.load_phase(n, phase_dir=expt.phase(n).path, losses=losses))
    for name, pattern, mode in (("baseline", a.baseline, "none"), ("sync", a.sync, "sync"),
                                ("async", a.async_, "async")):
        if pattern:
            files = sorted(glob.glob(pattern))
            if not files:
                missing.append(f"{name} (no file matches {pattern})")
            else:
                phases.append(collect.load_phase(name, metrics_files=files, losses=losses))
                modes[name] = mode
    summaries = [collect.summarize_phase(p) for p in phases]
    for s in summaries:
        s.checkpoint = modes.get(s.phase)
    base = next((s for s in summaries if collect.is_baseline(s.checkpoint)), None)
    for s in summaries:
        s.overhead = collect.overhead(s, base) if s is not base else None
        s.young_daly = collect.young_daly(s.save_cost(), collect.phase_restart_cost(s.failures), a.mtbf)
        s.policy = policy  # relaunch.on_node_loss: what its ETTR was measured under
    if a.expt_dir:
        expt = layout.Expt(a.expt_dir)
        base_ph = next((p for p, s in zip(phases, summaries) if s is base), None)
        spec = _program(data)
        for s, ph in zip(summaries, phases):
            d = expt.phase(s.phase).path
            s.survival = survival.judge(ph, base_ph if s is not base else None, _tolerance(data),
                                        _last_step(data)).summary()
            s.ended = Ended(**ph.ended.to_dict()) if ph.ended else None
            s.own_metrics = own_metrics.phase(spec, d, s.failures) if spec else None
            s.reused_from = expt.phase(s.phase).reused_from()
    return phases, summaries, missing, problems, data


def job_states(expt_dir: str, data: Optional[Scenario]) -> List[JobStatus]:
    """The states of the experiment's jobs, as its scheduler reports them now (one query).

    Returns [] where the scheduler cannot be asked: no queue, or its tool not on PATH. On an error it
    returns one entry saying why."""
    from .. import schedulers
    try:
        recs = jobslog.job_ids(expt_dir)
    except (OSError, ValueError):
        recs = []  # a local run, or a log we cannot read: nothing to ask about
    name = data.scheduler if data else None
    if not recs or name not in schedulers.names(queued_only=True):
        return []
    sched = schedulers.get(name)
    import shutil
    if not shutil.which(sched.status_cmd(recs)[0]):
        return []  # not where the scheduler can be asked (inside a job whose PATH lacks it, say)
    try:
        st = sched.status(recs, schedulers.run_tool)
    except (schedulers.SchedulerError, OSError) as e:
        return [JobStatus(",".join(recs), "unknown", None, f"not asked: {e}")]
    return [st[j] for j in recs]


def _tolerance(data: Optional[Scenario]) -> float:
    prog = data.trainer.program if data else None
    return prog.tolerance if prog else 0.0


def torchft_phases(expt_dir) -> List[str]:
    """The experiment's phases of torchft replica groups (runtime/ft_phase.py), by name."""
    try:
        names = sorted(os.listdir(expt_dir))
    except OSError:
        return []
    return [n for n in names if layout.Expt(expt_dir).phase(n).groups()]


def _last_step(data: Optional[Scenario]) -> Optional[int]:
    """The run's last step (trainer.train_iters), None without a scenario."""
    return data.trainer.train_iters if data else None


def torchft_summaries(expt_dir: str, data: Optional[Scenario]) -> Dict[str, FtSummary]:
    """{phase: its accounting and verdict} (ft_accounting), from the run's files."""
    from . import ft_accounting
    iters = _last_step(data) or 0
    return {n: ft_accounting.summarize(layout.Expt(expt_dir).phase(n).path, iters) for n in torchft_phases(expt_dir)}


def _warm(data: Optional[Scenario]) -> Dict[str, bool]:
    """{phase: relaunched warm} from the resolved scenario."""
    if not data:
        return {}
    return {p.name: data.relaunch.warm if p.warm is None else p.warm for p in data.phases}


def _save_then(e: FailureEvent) -> str:
    """The newest complete save when a kill struck, and how many steps the run had taken since."""
    n, after = e.newest_complete_at_kill, e.steps_after_save
    return "-" if n is None else f"{n} (+{after})" if after is not None else str(n)


def lost_steps_lines(summaries: List[PhaseSummary]) -> list:
    """Per phase with failures: the measured loss beside what a failure at a random time loses on average.

    The lines also show where the kills landed. This way a gated minimum is not read as the typical
    cost."""
    out = []
    for s in summaries:
        ev, exp = s.failures, s.expected_loss
        if not ev or not exp:
            continue
        lost = statistics.median(e.lost_steps for e in ev)
        after = [e.steps_after_save for e in ev if e.steps_after_save is not None]
        lag = exp.complete_lag_steps
        line = f"- **{s.phase}**: {_fmt(lost)} step(s) lost per failure (median of {len(ev)})"
        if after:
            line += f", struck {_fmt(statistics.median(after))} step(s) after the newest complete save (median)"
        line += (f"; a failure at a random time strikes {(exp.save_interval_steps - 1) / 2:.1f} steps after one "
                 f"and loses {exp.per_failure:.1f} on average here (a save every {exp.save_interval_steps:g} "
                 f"steps" + (f", and {lag:.1f} steps a save is still being written while training goes on" if lag
                             else "") + ")")
        if all(e.gate == "complete" for e in ev):
            line += (". These kills waited for a step's `.complete` and landed just after a save: their loss is "
                     "near the least a failure costs, not its typical cost")
        out.append(line + ".")
    return ([""] + out) if out else []


def _scheduler_layers(la: Layers) -> str:
    parts = ([f"node down {_fmt(la.scheduler_down_s)}"] if la.scheduler_down_s is not None else []) + \
        ([f"ran again {_fmt(la.next_run_s)}"] if la.next_run_s is not None else [])
    return "; ".join(parts) or "-"


def _clock(t) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "?"


SCHEDULER_NAMES = {"pbs": "PBS", "slurm": "Slurm"}  # as the reports write them


def rerun_text(e: FailureEvent) -> str:
    """A failure whose next attempt ran in another run of the same job (the scheduler requeued it),
    told in its parts, each with its time."""
    r = e.rerun
    if r is None:
        return "the job was not requeued"
    parts = []
    if r.stopped_at:
        parts.append(f"the watchdog decided to stop attempt {e.attempt} at {_clock(r.stopped_at)}")
    parts.append(f"its last sign of life at {_clock(r.end_ts)} ({r.end_evidence})")
    nodes = "; ".join(f"{n.node} {n.state} since {_clock(n.since)}"
                      + (f" ({n.comment})" if n.comment else "") for n in r.nodes)
    who = SCHEDULER_NAMES.get(r.scheduler or "", r.scheduler or "the scheduler")
    at = f" at {_clock(r.requeued_at)}" if r.requeued_at else ""
    parts.append(f"{who} requeued job {r.job}{at}" + (f": {nodes}" if nodes else "")
                 + (f" (not asked: {r.scheduler_error})" if r.scheduler_error else ""))
    if r.eligible_at:
        parts.append(f"eligible to run again at {_clock(r.eligible_at)}")
    parts.append(f"run {r.run or 2} began {_clock(r.scheduler_start or r.run_start)}")
    parts.append(f"attempt {r.next_attempt or e.attempt + 1} launched {_clock(r.launch_ts)}, "
                 f"first step {_clock(r.first_ts)}")
    gap = f"{r.between_runs_s:.0f} s between the runs" if r.between_runs_s is not None else "the time between the runs unknown"
    return "; ".join(parts) + f": {gap}, {e.downtime_s:.0f} s of downtime" if e.downtime_s is not None else \
        "; ".join(parts) + f": {gap}"


def rerun_lines(summaries: List[PhaseSummary]) -> List[str]:
    rows = [(s.phase, e) for s in summaries for e in s.failures if e.rerun]
    if not rows:
        return []
    return ["", "Between two runs of one job (the scheduler requeued it): the time is the failure's downtime, "
            "in the phase's wall time and its ETTR.", ""] + [f"- {ph}: {rerun_text(e)}" for ph, e in rows]


def storage_lines(summaries: List[PhaseSummary]) -> List[str]:
    """## Storage faults: each strike on each rank that took it (analysis/storagefaults.py)."""
    rows = [(s.phase, f) for s in summaries for f in s.storage_faults]
    if not rows:
        return []
    L = ["", "## Storage faults: what each write met, and what followed", "",
         "| phase | kind | armed at step | rank | attempt | file | effect | what followed |", "|" + "---|" * 8]
    for ph_name, f in rows:
        L.append(f"| {ph_name} | {f.kind} | {f.armed_step if f.armed_step is not None else '-'} | "
                 f"{f.rank if f.rank is not None else '-'} | {f.attempt or '-'} | {f.file or '-'} | "
                 f"{f.effect} | {f.followed or '-'} |")
    return L


def markdown(summaries: List[PhaseSummary], missing, src, problems=(), strategy_lines=()) -> str:
    L = [f"# restartlab report: {src}", ""]
    if missing:
        L += [f"**Missing phases:** {', '.join(missing)}", ""]
    verdicts = [s.survival for s in summaries if s.survival]
    if verdicts:
        L += survival.markdown(verdicts)
    L += list(strategy_lines)
    L += ["## Phases", "", "| phase | wall s | steps | attempts | kills | lost steps | downtime s | "
          "recompute s | save stall s | interference s | step-time drift s | ETTR | overhead vs baseline s | "
          "residual s |", "|" + "---|" * 14]
    for s in summaries:
        o = s.overhead
        L.append(f"| {s.phase} | {_fmt(s.wall_s, 1)} | {s.steps} | {s.attempts} | {s.kills} | "
                 f"{s.lost_steps} | {_fmt(s.downtime_s)} | {_fmt(s.recompute_s)} | "
                 f"{_fmt(s.save_stall_s)} | {_fmt(s.interference_s)} | {_fmt(o and o.drift_s)} | "
                 f"{_fmt(s.ettr, 3)} | {_fmt(o and o.measured_s)} | {_fmt(o and o.residual_s)} |")
    starts = ", ".join(f"{s.phase} {_fmt(s.first_start_s)} s" for s in summaries)
    L += ["", "Overhead = downtime + recompute + save stalls + background interference + step-time drift + "
          "residual. Background interference: the steps that ran beside an async save, times how much longer "
          "such a step took than one without. Step-time drift: (the phase's mean step time - the "
          "baseline's) x its steps, over steps without a save in flight: the machine's noise moves whole phases. The residual is "
          "what the named parts do not explain. The baseline is the phase with checkpoint: none. Each phase is compared with the baseline net of its first "
          f"launch's start-up (launch -> first step: {starts}): whichever phase runs first pays the cold "
          "file cache, which is no failure's cost; relaunches' start-ups are in the downtime.", ""]
    est = [f"{s.phase} ({s.saves_estimated} of {sum(v.count for v in s.save.values())})"
           for s in summaries if s.saves_estimated]
    if est:
        L += ["Save stalls estimated from the step times, not measured: " + ", ".join(est) + ". The program logs a "
              "save's start, not its length: each is the time between the two progress lines around that line "
              "less the median of the attempt's steps without a save before it.", ""]
    for s in summaries:
        if s.reused_from:
            L += [f"Phase {s.phase} was not run in this experiment: it is the baseline recorded in "
                  f"{s.reused_from} (restartlab run --baseline-from: the same command, finished there).", ""]
    policies = sorted({s.policy for s in summaries if s.policy})
    if policies and policies != ["same"]:
        L += [f"Recovery from node loss (relaunch.on_node_loss): {', '.join(policies)}.", ""]
    for s in summaries:
        end = s.ended
        if end and end.how not in _FINISHED:
            L.append(f"- **{s.phase} did not finish**: {end.text}; no overhead is computed for it.")
        w = s.walltime_stop
        if w:
            ck = w.emergency_checkpoint
            L.append(f"- **{s.phase} stopped by the walltime warning** (attempt {w.attempt}): last step "
                     f"{w.last_step}, " + (f"emergency checkpoint of step {ck}: {w.lost_steps} step(s) "
                                           f"not in a checkpoint" if ck is not None else
                                           "no emergency checkpoint was written") + ".")
        for h in s.handovers:
            L.append(f"- **{s.phase}: job {h.from_job} -> job {h.to_job}** (chained after attempt "
                     f"{h.attempt}): {_fmt(h.queue_wait_s)} s waiting in the queue (not in the wall "
                     f"time above), {h.lost_steps} step(s) lost at the hand-over.")
    if any(s.walltime_stop or s.handovers or (s.ended and s.ended.how not in _FINISHED) for s in summaries):
        L.append("")
    L += ["## Failures", "", "| phase | attempt | kind | bad nodes | recovery | ranks | step at kill | "
          "newest complete save then | resumed from | lost steps | downtime s | restart s (launch->first step) | start | "
          "import s | dist init s | build s | load s | recompute s |", "|" + "---|" * 18]
    for s in summaries:
        for e in s.failures:
            st = e.startup
            ranks = (f"{e.ranks_before} -> {e.ranks_after}" if e.ranks_before else "-")
            L.append(f"| {s.phase} | {e.attempt} | {e.kind or 'not injected'} | "
                     f"{', '.join(e.bad_nodes) or '-'} | {e.recovery} | {ranks} | {e.step_at_kill} | "
                     f"{_save_then(e)} | {e.resumed_from} | {e.lost_steps} | {_fmt(e.downtime_s)} | {_fmt(e.restart_s)} | "
                     f"{_start_kind(e)} | {_fmt(st.get(K.STARTUP_IMPORT_S))} | {_fmt(st.get(K.STARTUP_DIST_INIT_S))} | "
                     f"{_fmt(st.get(K.STARTUP_BUILD_S))} | {_fmt(st.get(K.STARTUP_LOAD_S))} | {_fmt(e.recompute_s)} |")
    L += lost_steps_lines(summaries)
    L += rerun_lines(summaries)
    L += ["", "## By failure kind (medians)", "", "| phase | kind | failures | detection s (fault -> attempt end) | "
          "relaunch gap s | restart s | downtime s | lost steps | recompute s | detected by |", "|" + "---|" * 10]
    for s in summaries:
        for kind, k in s.by_kind.items():
            L.append(f"| {s.phase} | {kind} | {k.failures} | {_fmt(k.detection_s)} | {_fmt(k.launch_gap_s)} | "
                     f"{_fmt(k.restart_s)} | {_fmt(k.downtime_s)} | {_fmt(k.lost_steps)} | "
                     f"{_fmt(k.recompute_s)} | {'; '.join(collect.DETECTIONS[d].text for d in k.detected_by)} |")
    nets = [(s.phase, f) for s in summaries for f in s.network_faults]
    if nets:
        L += ["", "## Network faults: who noticed, and when (seconds from the fault's start)", "",
              "| phase | kind | node(s) | down s | stood still s | watchdog | its stop | process-group timeout | "
              "attempt end | node check | scheduler | outcome | lost steps |", "|" + "---|" * 13]
        for ph_name, f in nets:
            la = f.layers
            L.append(f"| {ph_name} | {f.kind} | {', '.join(f.nodes)} | {_fmt(f.down_s)} | "
                     f"{_fmt(f.stood_still_s)} | {_fmt(la.watchdog_s)} | {la.stop or '-'} | "
                     f"{_fmt(la.pg_timeout_s)} | {_fmt(la.attempt_end_s)} | {_fmt(la.node_check_s)} | "
                     f"{_scheduler_layers(la)} | {f.outcome} | {f.lost_steps} |")
        L += [""] + [f"- {ph_name}: {f.text}" for ph_name, f in nets] + ["", "The scheduler's own view (the node "
              "it marked down, the job's next run) is read where it requeued the job (the next run asks it); "
              "otherwise it is not seen from inside the job."]
    L += storage_lines(summaries)
    L += ["", "## Save cost (seconds the training loop was blocked)", "",
          "| phase | kind | count | median | p90 |", "|---|---|---|---|---|"]
    for s in summaries:
        for kind, q in list(s.save.items()) + [("finalize (save -> .complete)", s.finalize)]:
            if q.count:
                L.append(f"| {s.phase} | {kind} | {q.count} | {_fmt(q.median, 4)} | {_fmt(q.p90, 4)} |")
    for s in summaries:
        i = s.interference
        if i:
            L.append(f"\n{s.phase}: a step beside a background save takes {i.busy_dt_s:.4f} s, "
                     f"without one {i.idle_dt_s:.4f} s ({100 * i.slowdown:+.1f}%; means over "
                     f"{i.busy_steps} and {i.idle_steps} steps)")
    L += [""] + own_metrics.markdown(summaries)
    L += ["## Checkpoint interval (Young-Daly)", ""]
    for s in summaries:
        yd = s.young_daly
        if yd and yd.young_s:
            L.append(f"- {s.phase}: save cost {yd.save_cost_s:.4f} s, restart cost R (detection + gap + "
                     f"restart) {_fmt(yd.restart_cost_s)} s, MTBF {yd.mtbf_s:.0f} s -> "
                     f"Young {yd.young_s:.1f} s, Daly {yd.daly_s:.1f} s between checkpoints")
    warn = list(problems) + [w for s in summaries for w in s.warnings]
    if warn:
        L += ["", "## Warnings", ""] + [f"- {w}" for w in warn[:50]]
    return "\n".join(L) + "\n"


def _log_wandb(a: argparse.Namespace, scenario: Optional[Scenario], summaries: List[PhaseSummary], out: str) -> bool:
    """`--wandb`: the report as a W&B run; False (after one line) when it could not be logged."""
    from . import report_wandb
    try:
        cfg = report_wandb.settings(scenario, a.wandb_project, a.wandb_entity, a.wandb_mode)
        name = os.path.basename(os.path.abspath(a.expt_dir)) if a.expt_dir else "restartlab"
        print(f"restartlab report: W&B run in {report_wandb.log(summaries, out, name, cfg)}")
        return True
    except report_wandb.WandbReportError as e:
        print(f"restartlab report: {e}", file=sys.stderr)
        return False


def jobs_markdown(jobs: List[JobStatus]) -> str:
    if not jobs:
        return ""
    L = ["", "## The jobs", "", "As the scheduler reports them when this report was written:", ""]
    for j in jobs:
        code = "" if j.exit_status is None else f", exit status {j.exit_status}"
        L.append(f"- job {j.jobid}: {j.state}{code}" + (f" ({j.detail})" if j.detail else ""))
    return "\n".join(L) + "\n"


def main(a) -> int:
    """Exit 0, or 2 when the input is not an experiment or some of it was malformed.

    With malformed input the report is still written from the rest. Each problem is named with its file
    and line."""
    if not a.expt_dir and not (a.baseline or a.sync or a.async_):
        print("restartlab report: give an experiment directory or --baseline/--sync/--async globs", file=sys.stderr)
        return 2
    try:
        phases, summaries, missing, problems, scenario = build(a)
    except (FileNotFoundError, NotADirectoryError) as e:
        print(f"restartlab report: {e}", file=sys.stderr)
        return 2
    out = a.out or a.expt_dir or "."
    os.makedirs(out, exist_ok=True)
    src = a.expt_dir or "ezpz metrics"
    warnings = list(problems) + [w for s in summaries for w in s.warnings]
    for w in warnings:
        print(f"restartlab report: warning: {w}", file=sys.stderr)
    if missing:
        print(f"restartlab report: missing phases: {', '.join(missing)}", file=sys.stderr)
    files = layout.Expt(out)
    jobs = job_states(a.expt_dir, scenario) if a.expt_dir else []
    ft = torchft_summaries(a.expt_dir, scenario) if a.expt_dir else {}
    table = strategies.rows(summaries, ft, _warm(scenario), _expected_phases(scenario) or [])
    Summary(source=src, missing=missing, problems=problems, jobs=jobs, phases=summaries, torchft=ft,
            strategies=table if ft else None).write(files.summary)
    with open(files.report, "w") as f:
        f.write(markdown(summaries, missing, src, problems, strategies.markdown(table, ft)) + jobs_markdown(jobs))
    if not a.no_plots:
        from . import plot
        plot.all_plots(phases, summaries, out)
    print(f"restartlab report: {files.report}")
    if a.wandb and not _log_wandb(a, scenario, summaries, out):
        return 2
    bad = [w for w in warnings if isinstance(w, Malformed)]
    if bad:
        print(f"restartlab report: {len(bad)} malformed input(s) skipped (named above); the report "
              f"covers the rest", file=sys.stderr)
        return 2
    return 0
