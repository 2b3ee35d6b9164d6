"""Recovery strategies side by side: one row per phase of an experiment, whatever its strategy
(restart cold, restart warm, torchft replica groups), in the same terms, and the torchft phases'
own section. Numbers come from the phase summaries (collect.summarize_phase, survival) and the
torchft accounting (ft_accounting.summarize); nothing is measured here."""
from typing import Dict, List, Optional

from . import ft_accounting
from .collect import known_median
from ..contracts.ft_summary import FtSummary, Relaunch
from ..contracts.phase_summary import PhaseSummary, StrategyRow


def _fmt(x, nd=2):
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def restart_row(s: PhaseSummary, warm: bool, baseline_wall: Optional[float]) -> StrategyRow:
    """Row for a phase of the relaunch loop.

    Its cost per failure is its downtime: the kill to the first step after the resume. Its lost work
    is the steps computed again."""
    surv = s.survival
    checkpoint = s.checkpoint
    strategy = "none (baseline)" if checkpoint == "none" else f"restart {'warm' if warm else 'cold'} ({checkpoint})"
    return StrategyRow(
        phase=s.phase, strategy=strategy, wall_s=s.wall_s, steps=s.steps, failures=s.kills, ettr=s.ettr,
        vs_baseline_s=(s.wall_s - baseline_wall) if s.wall_s is not None and baseline_wall is not None
        and checkpoint != "none" else None,
        recovery_s=known_median(e.downtime_s for e in s.failures),
        work_lost_steps=s.lost_steps, batches_skipped=0,
        restarted_processes="every rank" if s.kills else "-",
        verdict=("did not finish" if not (surv.finished if surv else s.completed) else
                 "resumed as it should" if not surv or surv.survived else "; ".join(surv.findings)[:200]))


def torchft_row(name: str, ft: FtSummary, baseline_wall: Optional[float]) -> StrategyRow:
    """Row for a torchft phase.

    Its cost per failure is the survivors' stall, because the job trains on without the struck group.
    Its lost work is the steps the survivors attempted and could not commit. The struck group's own
    rejoin is in the torchft section."""
    v = ft.verdict
    findings = []
    if v.survivor_restarted:
        findings.append(f"survivor(s) {v.survivor_restarted} restarted")
    if not v.state_equal:
        findings.append("healed state differs")
    if v.started_over:
        findings.append(f"STARTED OVER at step {v.started_over.after_step}")
    if not v.finished:
        findings.append("did not finish")
    if v.crashes:
        findings.append(f"{len(v.crashes)} program crash(es)")
    if v.heal_failures:
        findings.append(f"heals failed in group(s) {sorted({h.group for h in v.heal_failures})}")
    return StrategyRow(
        phase=name, strategy=f"torchft ({ft.groups} groups)", wall_s=ft.wall_s,
        steps=ft.steps_committed, failures=len(ft.failures), ettr=ft.ettr,
        vs_baseline_s=(ft.wall_s - baseline_wall) if ft.wall_s is not None and baseline_wall else None,
        recovery_s=known_median(f.survivor_stall_s for f in ft.failures),
        work_lost_steps=sum(f.uncommitted_steps for f in ft.failures),
        # the groups' batches of committed steps that no group trained (a group out, or healing)
        batches_skipped=ft.steps_committed * ft.groups - ft.batches_committed,
        restarted_processes="the struck group's" if ft.failures else "-",
        verdict="; ".join(findings) or "no survivor restarted, healed state equal")


def rows(summaries: List[PhaseSummary], ft: Dict[str, FtSummary], warm: Dict[str, bool],
         order: List[str]) -> List[StrategyRow]:
    """One row per phase.

    `failure_cost_s` is the wall time against the same strategy without failures. A restart phase
    compares with the baseline. A torchft phase compares with a torchft phase with no failure.
    torchft's own step protocol, a quorum and a commit every step, is not a failure's cost. Without
    such a phase that cost is not separated, and the cell says so."""
    base = next((s for s in summaries if s.checkpoint == "none"), None)
    bw = base.wall_s if base else None
    ft_base = next((f for f in ft.values() if not f.failures and f.wall_s), None)
    out = {s.phase: restart_row(s, warm.get(s.phase, False), bw) for s in summaries}
    for n, f in ft.items():
        out[n] = torchft_row(n, f, bw)
        out[n].failure_cost_s = (f.wall_s - ft_base.wall_s) if ft_base and ft_base.wall_s and f.failures and f.wall_s \
            else None
    for s in summaries:
        out[s.phase].failure_cost_s = out[s.phase].vs_baseline_s
    rank = {n: i for i, n in enumerate(order)}
    return [out[n] for n in sorted(out, key=lambda n: (rank.get(n, len(rank)), n))]


def markdown(table: List[StrategyRow], ft: Dict[str, FtSummary]) -> List[str]:
    if not ft:
        return []
    L = ["## Recovery strategies side by side", "",
         "| phase | strategy | wall s | steps | failures | recovery per failure s (median) | work lost (steps) | "
         "batches skipped | processes restarted | ETTR | wall vs baseline s | failure cost s | verdict |",
         "|" + "---|" * 13]
    for r in table:
        L.append(f"| {r.phase} | {r.strategy} | {_fmt(r.wall_s, 1)} | {r.steps} | {r.failures} | "
                 f"{_fmt(r.recovery_s)} | {r.work_lost_steps} | {r.batches_skipped} | {r.restarted_processes} | "
                 f"{_fmt(r.ettr, 3)} | {_fmt(r.vs_baseline_s, 1)} | {_fmt(r.failure_cost_s, 1)} | "
                 f"{r.verdict} |")
    L += ["", "Recovery per failure: restart, the kill to the first step after the resume (downtime); torchft, "
          "the survivors' stall (the steps they could not commit and the wait for a quorum without the struck "
          "group). Work lost: restart, the steps computed again; torchft, the survivors' uncommitted steps (the "
          "struck group's batches of those steps are never trained on). Batches skipped: torchft trains a step "
          "with the groups in its quorum; a group out (or healing) does not train its share, which no one trains "
          "later: committed steps x groups - torchft's batches committed (a restart skips none: it computes the "
          "lost steps again). Wall vs baseline: against the phase with "
          "no checkpoints and no failures. Failure cost: the wall time against the same strategy without "
          "failures (restart: the baseline; torchft: a torchft phase with no failure, which carries torchft's "
          "own per-step quorum and commit; '-' when there is none).", ""]
    L += ["## torchft phases", ""]
    for name, s in ft.items():
        v = s.verdict
        L.append(f"### {name}: {'OK' if v.ok else 'NOT OK'}")
        L.append("")
        L.append(f"- {s.groups} replica groups; per group: " + "; ".join(
            f"g{g} {p.attempts} attempt(s), {p.steps_attempted} steps attempted, {p.steps_committed} committed"
            for g, p in s.per_group.items()))
        L.append(f"- ETTR {_fmt(s.ettr, 3)}; torchft efficiency {_fmt(s.torchft_efficiency, 3)} (batches "
                 "committed, torchft's Manager.batches_committed, / committed steps x groups)")
        t = s.throughput
        L.append(f"- committed steps/s: before the first failure {_fmt(t.before)}, while a group was out "
                 f"{_fmt(t.during)}, after {_fmt(t.after)}")
        so = v.started_over
        if so:
            L.append(f"- **started over silently**: group {so.group} attempt {so.attempt} committed step "
                     f"{so.step} after step {so.after_step} (every group was lost)")
        if not v.state_equal:
            L.append(f"- **healed state differs** from the survivors' at {', '.join(v.unequal)}")
        if v.survivor_restarted:
            L.append(f"- **restarted though no failure struck it**: group(s) {v.survivor_restarted}")
        L += [f"- **{line}**" for line in ft_accounting.findings(v)]
        L += ["", "| failure | kind | struck groups | detection s | survivors' stall s | uncommitted steps | "
              "group | relaunched after s | process start s | heal s | healed at step | rejoin s |", "|" + "---|" * 12]
        for i, f in enumerate(s.failures, 1):
            rel: Dict[str, Optional[Relaunch]] = f.relaunch or {"-": None}
            for g, re_ in rel.items():
                cells = [re_.relaunched_after_s, re_.process_start_s, re_.heal_s, re_.healed_at_step,
                         re_.rejoin_s] if re_ else [None] * 5
                L.append(f"| {i} | {f.kind} | {f.struck_groups} | {_fmt(f.detection_s)} | "
                         f"{_fmt(f.survivor_stall_s)} | {f.uncommitted_steps} | {g} | "
                         + " | ".join(_fmt(c) for c in cells) + " |")
        L.append("")
    return L
