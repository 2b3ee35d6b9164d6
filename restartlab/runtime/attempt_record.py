"""The attempt record: what the supervisor knows about one launch, written right after it ends, and
the phase's end record. What "completed" and "injected" mean, and how a phase ended, are the
contracts both this writer and the collector import (contracts/attempts.py)."""
import os
import signal

from .. import launchers
from ..contracts import layout, live, rank_exit
from ..contracts.attempts import AttemptRecord, EndRecord, LaunchRecord, PhaseEnd, completed_row, injections_into
from ..contracts.envvars import JOB_START_VAR
from ..contracts.exits import EXIT_PREEMPTED
from ..contracts import metric_keys as K
from typing import Any, Dict, Optional, TextIO, cast


def reached_last_step(att: layout.Attempt, train_iters: int) -> bool:
    """True iff rank 0 wrote its final row (train/params_crc at train_iters) in this attempt."""
    m = live.last_row(att.metrics(0))
    return completed_row(m) and cast(Dict[str, Any], m).get(K.ITER) == train_iters  # completed_row: m is a dict


def record(att: layout.Attempt, phase: layout.Phase, k: int, launch_ts: float, end_ts: float, rc: int,
           train_iters: int, launcher: str = "hydra", ranks: int = 0, job: Optional[str] = None,
           out: Optional[TextIO] = None,
           warm_ranks: Optional[int] = None) -> bool:
    """Write the attempt's record; True when the attempt completed the phase. `warm_ranks`: in a
    warm phase, how many of its ranks the standby pools forked (None: a cold phase)."""
    completed = reached_last_step(att, train_iters)
    exits = rank_exit.read_all(att.rank_exits())
    first = rank_exit.first_failure(exits)
    hosts = None
    if os.path.exists(att.hosts):  # chosen by node-check for this attempt
        with open(att.hosts) as f:
            hosts = [h.strip() for h in f if h.strip()]
    rec = AttemptRecord(
        attempt=k, launch_ts=launch_ts, end_ts=end_ts, exit_code=rc,
        signal=launchers.get(launcher).signal_of(rc), launcher=launcher,
        # the ranks' own ends (exits/): the first that ended badly, and how many recorded theirs
        rank_exit=first, ranks_recorded=len(exits), completed=completed, hang=os.path.exists(att.hang),
        # The trainer's preemption exit, from the launcher or from the first rank that ended.
        # Under Slurm, srun's --kill-on-bad-exit ends the slower ranks of an emergency stop when the
        # first exits 5. srun then reports the launch as 143 (#49: 2 CI failures).
        preempted=rc == EXIT_PREEMPTED or (first is not None and first.exit_code == EXIT_PREEMPTED),
        walltime=os.path.exists(att.walltime),
        # a torchft group shares its phase's strikes: one struck this group's attempt only if it died
        injected=bool(injections_into(live.read_injections(phase.path), launch_ts, end_ts, k))
        and not (phase.is_group and rc == 0),
        hosts=hosts, ranks=ranks or None, job=job, warm_ranks=warm_ranks, job_start=_job_start())
    rec.write(att)
    print(f"restartlab: {phase.name} attempt {k}: rc={rc} completed={completed} injected={rec.injected} "
          f"({end_ts - launch_ts:.1f}s)", file=out, flush=True)
    return completed


def launched(att: layout.Attempt, k: int, launch_ts: float, job: Optional[str] = None) -> None:
    """Write what is known of an attempt at its launch, before the launcher starts.

    That is its number, launch time, job and that job's run. An attempt cut short with its job
    (killed, requeued, its node lost) leaves no record. This one still tells which run of which job
    it was in."""
    LaunchRecord(k, launch_ts, job, _job_start()).write(att)


def _job_start() -> Optional[float]:
    """When this run of the batch job started (the job script's RL_JOB_START).

    A job that PBS requeues runs again under the same id. This time tells its runs' attempts apart."""
    try:
        return float(os.environ[JOB_START_VAR])
    except (KeyError, ValueError):
        return None


def is_over(att: layout.Attempt) -> bool:
    """The supervisor has recorded the attempt's end (its record is written after the launcher exited)."""
    return os.path.exists(att.record)


def write_end(phase: layout.Phase, how: PhaseEnd, k: int, job: Optional[str] = None, sig: Optional[int] = None,
              why: Optional[str] = None) -> None:
    """The supervisor's last word on the phase in this job (appended: a chain's jobs each add one)."""
    EndRecord(PhaseEnd(how), k, job, signal.Signals(sig).name if sig else None, why).append(phase)
