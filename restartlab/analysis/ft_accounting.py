"""The accounting and the verdict of a phase of torchft replica groups (runtime/ft_phase.py).

It reads the phase's files only:

- Each group's attempts (groups/g<k>/attempts/<n>): launch and end records, and the trainer's
  ft-rank<R>.jsonl, one line per step attempted.
- The phase's injection records.

Per group it counts attempts, steps attempted and steps committed.

Per failure (an injection that killed) it finds:

- Which groups it struck. The struck ranks' command lines name their --replica-group.
- Detection: the kill to the end of the survivors' first quorum without the struck group.
- The survivors' stall: the steps they attempted after the kill and could not commit, and that
  quorum's wait.
- The relaunched group's process start (its launch to its first step). Its heal: the quorum in which
  it received a survivor's state.
- Its rejoin: the kill to its first commit.

The job's progress is committed steps per second before the first failure, while a group was out,
and after.

Efficiency, two ways:

- torchft's own terms. Its Manager counts `batches_committed`, "the total number of batches
  committed across all steps and replicas" (torchft 0.2.0, manager.py, Manager.batches_committed).
  Each committed step adds num_participants(). Here it is batches committed / (committed steps x
  replica groups): the share of the groups' step slots that trained.
- restartlab's ETTR, as for the other phases: productive time / wall time. Productive time is the
  summed step time of every step committed (the job's progress), counted once per step.

The verdict asks:

- Did a group the failures did not strike restart? That is a survivor restarted.
- Did every healed group's parameters equal the survivors' at its first commit? This compares the
  shard crc, rank by rank.
- Did the job ever start over? That is a step committed below a step committed before it. With
  torchft's `--min_replicas 1` and every group lost, torchft restarts from a fresh initialisation,
  silently.
- Did it finish? It did if a group completed the last step. A group still relaunching then is
  stopped by the phase and named in `stopped_when_done`.
- Did a program die of an exception of its own? The record is ft-rank<R>-crash.json, written by
  restartlab.trainer.ft_hook. A crash of a struck group after the strike is the strike's.
- Did a heal fail? That is a step whose quorum asked the group to heal and the heal was not applied,
  with torchft's error.

A crash or failed heal that matches a torchft behaviour known here (KNOWN) is named with it."""
import dataclasses
import json
import re
import statistics
from typing import Dict, List, Optional

from ..contracts import ft_records, layout, live
from ..contracts.ft_records import FtCrash, FtStep
from ..contracts.ft_summary import (Throughput, Crash, FtFailure, FtSummary, FtVerdict, GroupStats, Heal, HealFailure, Relaunch,
                                    StartOver)
from ..contracts.injections import Injection
from ..contracts.attempts import AttemptRecord, LaunchRecord, NotARecord, PhaseEnd, phase_end

GROUP_ARG = re.compile(r"--replica-group[= ](\d+)")
# torchft 0.2.0 behaviours, each made to happen on purpose by tests/test_ft.py: (a regex over
# "<error> at <file>:<line> <source line>", what it is)
KNOWN = [
    (re.compile(r"Numpy is not available"),
     "torchft 0.2.0 does not declare numpy, which its heal needs (PGTransport, Tensor.numpy()): install numpy "
     "with torchft (restartlab's [torchft] extra does)"),
    (re.compile(r"^AssertionError.* at torchft/ddp\.py:\d+ assert fut\._fut"),
     "torchft 0.2.0's DistributedDataParallel: a survivor whose peer died during the gradient allreduce fails "
     "its communication hook (a failed bucket's future has no _fut), the restart torchft exists to avoid; "
     "averaging the gradients with Manager.allreduce does not"),
]


def _attempt_launch(att: layout.Attempt) -> Optional[float]:
    """When the group's loop launched the attempt (its launch record)."""
    launch = LaunchRecord.read(att)
    if launch is not None and launch.launch_ts is not None:
        return launch.launch_ts
    try:
        rec = AttemptRecord.read(att)
    except NotARecord:
        return None
    return rec.launch_ts if rec is not None else None


@dataclasses.dataclass
class GroupAttempt:
    """One attempt of a replica group, as its files tell it."""
    attempt: int
    launch_ts: Optional[float]
    steps: Dict[int, List[FtStep]]   # rank -> its step records
    crashes: Dict[int, FtCrash]      # rank -> the exception it died of

    @property
    def rank0(self) -> List[FtStep]:
        return self.steps.get(0, [])


@dataclasses.dataclass
class Group:
    attempts: List[GroupAttempt]
    end: PhaseEnd                    # how its loop ended (attempts.phase_end)


@dataclasses.dataclass(frozen=True)
class Commit:
    """A committed step of rank 0 of a group's attempt."""
    group: int
    attempt: int
    rec: FtStep


def _steps(att: layout.Attempt) -> Dict[int, List[FtStep]]:
    """{rank: its step records} of one attempt."""
    return {r: ft_records.read_steps(f) for r, f in att.ft_records().items()}


def _crashes(att: layout.Attempt) -> Dict[int, FtCrash]:
    """{rank: its crash record} of one attempt.

    A crash record means a program run through ft_hook died of an exception. There are none when the
    attempt exited 0: an exception that ended a thread of a program that then finished is no death."""
    out: Dict[int, FtCrash] = {}
    try:
        rec = AttemptRecord.read(att)
    except NotARecord:
        rec = None
    if rec is not None and rec.exit_code == 0:
        return out
    for r, f in att.ft_crashes().items():
        c = ft_records.read_crash(f)
        if c is not None:
            out[r] = c
    return out


def _short(path: Optional[str]) -> str:
    """A source file as a reader finds it: from the package down (site-packages/ cut off)."""
    path = path or "?"
    return path.split("site-packages/")[-1]


def known(text: str) -> Optional[str]:
    return next((what for rx, what in KNOWN if rx.search(text)), None)


def struck_groups(inj: Injection) -> List[int]:
    """The replica groups a strike reached: the --replica-group of the ranks it signalled."""
    found = set()
    for r in inj.receipts:
        for cmd in r.cmdlines.values():
            m = GROUP_ARG.search(cmd)
            if m:
                found.add(int(m.group(1)))
    return sorted(found)


def summarize(phase_dir: str, train_iters: int) -> FtSummary:
    phase = layout.Phase(phase_dir)
    groups: Dict[int, Group] = {}
    for gp in phase.groups():
        if gp.group_index is None:  # phase.groups() lists g<k> folders only
            continue
        atts = [GroupAttempt(att.index, _attempt_launch(att), _steps(att), _crashes(att)) for att in gp.attempts()]
        groups[gp.group_index] = Group(atts, phase_end(gp).how)
    injections = [r for r in live.read_injections(phase.path) if r.struck]
    return _account(groups, injections, train_iters, len(groups))


def _commits(groups: Dict[int, Group]) -> List[Commit]:
    """Every committed step record of rank 0 of every group, in time order, with its group."""
    out = [Commit(g, a.attempt, x) for g, gr in groups.items() for a in gr.attempts for x in a.rank0 if x.commit]
    return sorted(out, key=lambda c: c.rec.t)


def _account(groups: Dict[int, Group], injections: List[Injection], train_iters: int, n_groups: int) -> FtSummary:
    commits = _commits(groups)
    per_group = {str(g): GroupStats(attempts=len(gr.attempts),
                                    steps_attempted=sum(len(a.rank0) for a in gr.attempts),
                                    steps_committed=sum(1 for a in gr.attempts for x in a.rank0 if x.commit),
                                    last_step=max((x.step for a in gr.attempts for x in a.rank0 if x.commit), default=0))
                 for g, gr in groups.items()}
    # the job's progress: each step counted once (its first commit); its step time the median of its records
    first_commit: Dict[int, FtStep] = {}
    for c in commits:
        first_commit.setdefault(c.rec.step, c.rec)
    dts = [c.rec.t - c.rec.t0 for c in commits]
    median_dt = statistics.median(dts) if dts else None
    launches = [a.launch_ts for gr in groups.values() for a in gr.attempts if a.launch_ts]
    t_start = min(launches) if launches else (commits[0].rec.t0 if commits else None)
    t_end = commits[-1].rec.t if commits else None
    wall = (t_end - t_start) if t_end is not None and t_start else None
    productive = sum(x.t - x.t0 for x in first_commit.values())
    batches = sum(x.participants or 0 for x in first_commit.values())
    failures = [_failure(inj, groups, median_dt) for inj in sorted(injections, key=lambda r: r.time or 0.0)]
    verdict = _verdict(groups, commits, failures, train_iters)
    return FtSummary(
        strategy="torchft", groups=n_groups, train_iters=train_iters, per_group=per_group, failures=failures,
        steps_committed=len(first_commit), median_step_s=median_dt, wall_s=wall, productive_s=productive,
        ettr=(productive / wall) if wall else None, batches_committed=batches,
        torchft_efficiency=(batches / (len(first_commit) * n_groups)) if first_commit and n_groups else None,
        throughput=_throughput(first_commit, failures, t_start, t_end), verdict=verdict)


def _failure(inj: Injection, groups: Dict[int, Group], median_dt: Optional[float]) -> FtFailure:
    t = inj.time
    struck = struck_groups(inj)
    out = FtFailure(time=t, kind=inj.kind, struck_groups=struck, survivors=[g for g in groups if g not in struck])
    if t is None:  # a strike record without its time (hand-edited): nothing to measure from
        out.relaunch = {str(g): None for g in struck}
        return out
    for g in out.survivors:
        recs = [x for a in groups[g].attempts for x in a.rank0]
        before = [x for x in recs if x.t <= t]
        after = [x for x in recs if x.t > t]
        if not before or not after:
            continue
        q0 = before[-1].quorum
        newq = next((x for x in after if x.quorum != q0), None)
        if newq is None:
            continue
        if out.detection_s is None:
            out.detection_s = newq.quorum_time - t
        # what the survivors spent not training: the steps they attempted and could not commit,
        # then the wait for the quorum without the struck group
        lost = [x for x in after if not x.commit and x.t0 < newq.t0]
        out.uncommitted_steps = max(out.uncommitted_steps, len(lost))
        stall = sum(x.t - x.t0 for x in lost) + (newq.quorum_time - newq.t0)
        out.survivor_stall_s = max(out.survivor_stall_s or 0.0, stall)
    for g in struck:
        later = [a for a in (groups[g].attempts if g in groups else []) if a.launch_ts and a.launch_ts > t]
        if not later:
            out.relaunch[str(g)] = None
            continue
        a = later[0]
        launched = a.launch_ts or 0.0  # later: launched after the strike
        healed = next((x for x in a.rank0 if x.healed), None)
        first_c = next((x for x in a.rank0 if x.commit), None)
        out.relaunch[str(g)] = Relaunch(
            attempt=a.attempt, relaunched_after_s=launched - t,
            process_start_s=(a.rank0[0].t0 - launched) if a.rank0 else None,
            heal_s=healed.heal_s if healed else None, healed_at_step=healed.step if healed else None,
            rejoin_s=(first_c.t - t) if first_c else None, first_step=first_c.step if first_c else None)
    return out


def _throughput(first_commit: Dict[int, FtStep], failures: List[FtFailure], t_start, t_end) -> Throughput:
    """Committed steps per second before the first failure, while a struck group was out (the
    kill to its rejoin), and after the last rejoin."""
    if not first_commit or t_start is None:
        return Throughput()
    times = sorted(x.t for x in first_commit.values())

    def rate(a, b):
        n = sum(1 for x in times if a < x <= b)
        return (n / (b - a)) if b > a else None
    overall = rate(t_start, t_end)
    if not failures:
        return Throughput(overall)
    f0 = failures[0].time
    before = rate(t_start, f0) if f0 is not None else None
    outs = [(f.time, f.time + r.rejoin_s) for f in failures if f.time is not None for r in f.relaunch.values()
            if r and r.rejoin_s is not None]
    if not outs:
        return Throughput(overall, before)
    n = sum(1 for x in times if any(a < x <= b for a, b in outs))
    span = sum(b - a for a, b in outs)
    return Throughput(overall, before, n / span if span else None, rate(max(b for _, b in outs), t_end))


def _verdict(groups: Dict[int, Group], commits: List[Commit], failures: List[FtFailure], train_iters: int) -> FtVerdict:
    struck = {g for f in failures for g in f.struck_groups}
    restarted = sorted(g for g, gr in groups.items() if g not in struck and len(gr.attempts) > 1)
    # every rank's shard crc by (step, rank) as the survivors committed it
    crcs: Dict[tuple, set] = {}
    heals = []
    for g, gr in groups.items():
        for a in gr.attempts:
            for r, recs in a.steps.items():
                for x in recs:
                    if x.commit and x.crc is not None:  # the trainer checks a quorum's first step
                        crcs.setdefault((x.step, r), set()).add(x.crc)
                    if x.healed and r == 0:
                        heals.append((g, a.attempt, x.step))
    unequal = sorted({f"step {s} rank {r}" for (s, r), v in crcs.items() if len(v) > 1})
    crashes, heal_failures = _crashes_and_heal_failures(groups, failures)
    # A start over is a step committed below one committed before it. A group's own first steps come
    # before the others' are in lockstep. They are allowed while no other group has committed past it.
    start_over: Optional[StartOver] = None
    best = 0
    for c in commits:
        if c.rec.step < best - 1:
            start_over = StartOver(group=c.group, attempt=c.attempt, step=c.rec.step, after_step=best, time=c.rec.t)
            break
        best = max(best, c.rec.step)
    # Finished: a group completed the last step. The others complete theirs with it, or the phase
    # stops them once the training is done (still relaunching, or behind).
    ends = {g: gr.end for g, gr in groups.items()}
    finished = any(h == PhaseEnd.COMPLETED for h in ends.values())
    stopped = sorted(g for g, h in ends.items() if h == PhaseEnd.INTERRUPTED)
    return FtVerdict(
        survivor_restarted=restarted, heals=[Heal(g, k, s) for g, k, s in heals],
        state_equal=not unequal, unequal=unequal[:10], started_over=start_over,
        finished=finished, stopped_when_done=stopped, crashes=crashes, heal_failures=heal_failures,
        ok=not restarted and not unequal and start_over is None and finished and not crashes and not heal_failures)


def _crashes_and_heal_failures(groups: Dict[int, Group], failures: List[FtFailure]):
    """The exceptions programs died of on their own, and the heals that failed.

    A struck group's exception after its strike does not count. The failed heals are per group
    attempt: asked by the quorum, not applied, with torchft's error."""
    strikes = [(f.time, set(f.struck_groups)) for f in failures]
    crashes: List[Crash] = []
    heals: List[HealFailure] = []
    for g, gr in groups.items():
        for a in gr.attempts:
            for r, c in sorted(a.crashes.items()):
                t = c.time or 0
                if any(g in gs and a.launch_ts and ft is not None and a.launch_ts <= ft <= t for ft, gs in strikes):
                    continue  # its group was struck while it ran: the strike's doing
                error = f"{c.type}: {c.message}".rstrip(": ")
                where = f"{_short(c.file)}:{c.line}"
                crashes.append(Crash(group=g, attempt=a.attempt, rank=r, step=c.step, error=error, where=where,
                                     code=c.code, known=known(f"{error} at {where} {c.code or ''}")))
            failed = [x for x in a.rank0 if x.heal and not x.healed and x.error]
            if failed:
                t0, t1 = failed[0].t0, failed[-1].t
                # meanwhile the others: their steps not committed that overlap (a heal's peer waits on it)
                stalled = [x for o, ogr in groups.items() if o != g for oa in ogr.attempts
                           for x in oa.rank0 if not x.commit and x.t0 <= t1 and x.t >= t0]
                error = failed[0].error or ""
                heals.append(HealFailure(group=g, attempt=a.attempt, times=len(failed), step=failed[0].step,
                                         error=error, known=known(error),
                                         others_uncommitted_s=sum(x.t - x.t0 for x in stalled)))
    return crashes, heals


def findings(v: FtVerdict) -> List[str]:
    """One line per exception a program died of and per group attempt whose heal failed."""
    out = []
    for c in v.crashes:
        out.append(f"group {c.group} attempt {c.attempt} rank {c.rank} died of its own exception at step "
                   f"{c.step}: {c.error} at {c.where}" + (f" `{c.code}`" if c.code else "")
                   + (f" -- known: {c.known}" if c.known else ""))
    for h in v.heal_failures:
        out.append(f"group {h.group} attempt {h.attempt}: its heal failed {h.times} time(s) from step "
                   f"{h.step}: {h.error}; meanwhile the other groups spent {h.others_uncommitted_s:.1f}s "
                   "in steps they could not commit" + (f" -- known: {h.known}" if h.known else ""))
    return out


def describe(summary: FtSummary) -> List[str]:
    """The phase's last lines: the verdict, then each failure in one line."""
    v = summary.verdict
    so = v.started_over
    lines = [f"torchft verdict: {'OK' if v.ok else 'NOT OK'}: "
             + "; ".join([
                 "no survivor restarted" if not v.survivor_restarted else
                 f"group(s) {v.survivor_restarted} restarted though no failure struck them",
                 f"{len(v.heals)} heal(s), state equal to the survivors'" if v.state_equal else
                 f"state differs from the survivors' at {', '.join(v.unequal)}",
                 "never started over" if so is None else
                 f"STARTED OVER SILENTLY: group {so.group} attempt {so.attempt} committed step {so.step} after step "
                 f"{so.after_step} had been committed (every group was lost: a fresh initialisation)",
                 "finished" if v.finished else "did not finish"]
                + ([f"{len(v.crashes)} program(s) died of an exception of their own"] if v.crashes else [])
                + ([f"heals failed in group(s) {sorted({h.group for h in v.heal_failures})}"]
                   if v.heal_failures else []))]
    lines += findings(v)
    for i, f in enumerate(summary.failures, 1):
        parts = [f"failure {i} ({f.kind}) struck group(s) {f.struck_groups}"]
        if f.detection_s is not None:
            parts.append(f"detected in {f.detection_s:.2f}s")
        if f.survivor_stall_s is not None:
            parts.append(f"survivors stalled {f.survivor_stall_s:.2f}s")
        for g, r in f.relaunch.items():
            if r and r.rejoin_s is not None:
                start = "-" if r.process_start_s is None else f"{r.process_start_s:.1f}s"
                parts.append(f"group {g} rejoined after {r.rejoin_s:.1f}s (process start {start}, heal {r.heal_s or 0:.2f}s)")
        lines.append(", ".join(parts))
    if summary.ettr is not None:
        eff = "-" if summary.torchft_efficiency is None else f"{summary.torchft_efficiency:.3f}"
        lines.append(f"ETTR {summary.ettr:.3f}, torchft efficiency {eff} (batches committed / committed steps x groups)")
    return lines


def main(argv=None) -> int:
    """python -m restartlab.analysis.ft_accounting PHASE_DIR TRAIN_ITERS: write PHASE_DIR/ft.json and
    print the verdict's lines (the torchft phase's supervisor runs it at the phase's end)."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m restartlab.analysis.ft_accounting PHASE_DIR TRAIN_ITERS", file=sys.stderr)
        return 2
    summary = summarize(args[0], int(args[1]))
    with open(layout.Phase(args[0]).ft_summary, "w") as f:
        json.dump(summary.to_dict(), f, indent=1)
    for line in describe(summary):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
