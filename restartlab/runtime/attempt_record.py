"""The attempt record: what the supervisor knows about one launch, written right after it ends, and
the one definition of "completed" (reached the last step, not merely rc 0) and "injected" (an
injection record with a kill inside the attempt's window)."""
import json
import os
import signal
import time
from typing import Iterable

from .. import launchers
from ..contracts import layout, live, rank_exit
from ..contracts.exits import EXIT_PREEMPTED

# an injection record is written just after its strike's signals went out; the launcher may see
# the deaths first. A strike this long after an attempt's end still belongs to it.
INJECTION_SLACK_S = 0.5


def completed_row(m) -> bool:
    """Rank 0's final row: the bundled trainer's carries the parameters' checksum at the last step;
    a tapped program's is train/finished (tap.py: it exited 0 after logging the last step)."""
    return isinstance(m, dict) and ("train/params_crc" in m or m.get("train/finished") is True)


def reached_last_step(att: layout.Attempt, train_iters: int) -> bool:
    """True iff rank 0 wrote its final row (train/params_crc at train_iters) in this attempt."""
    m = live.last_row(att.metrics(0))
    return completed_row(m) and m.get("train/iter") == train_iters


def injected(record: dict, t0, t1, number=None) -> bool:
    """Whether an injection record struck attempt `number` that ran from t0 to t1: by the attempt
    the record names (the injector's, when it ran with the phase dir), else by its time."""
    if not record.get("killed"):
        return False
    if number is not None and isinstance(record.get("attempt"), int):
        return record["attempt"] == number
    t = record.get("time")
    return isinstance(t, (int, float)) and not isinstance(t, bool) \
        and t0 is not None and t1 is not None and t0 <= t <= t1 + INJECTION_SLACK_S


def injections_into(records: Iterable[dict], t0, t1, number=None):
    return [r for r in records if injected(r, t0, t1, number)]


def record(att: layout.Attempt, phase: layout.Phase, k: int, launch_ts: float, end_ts: float, rc: int,
           train_iters: int, launcher: str = "hydra", ranks: int = 0, job=None, out=None,
           warm_ranks: int = None) -> bool:
    """Write the attempt's record; True when the attempt completed the phase. `warm_ranks`: in a
    warm phase, how many of its ranks the standby pools forked (None: a cold phase)."""
    completed = reached_last_step(att, train_iters)
    exits = rank_exit.read_all(att.rank_exits())
    first = rank_exit.first_failure(exits)
    hosts = None
    if os.path.exists(att.hosts):  # chosen by node-check for this attempt
        with open(att.hosts) as f:
            hosts = [h.strip() for h in f if h.strip()]
    info = {"attempt": k, "launch_ts": launch_ts, "end_ts": end_ts, "exit_code": rc,
            "signal": launchers.get(launcher).signal_of(rc), "launcher": launcher,
            # the ranks' own ends (exits/): the first that ended badly, and how many recorded theirs
            "rank_exit": first._asdict() if first else None, "ranks_recorded": len(exits),
            "completed": completed, "hang": os.path.exists(att.hang),
            # the trainer's preemption exit, by the launcher or by the first rank that ended: srun's
            # --kill-on-bad-exit ends the slower ranks of an emergency stop when the first exits 5,
            # and then reports the launch as 143 (Slurm, #49: 2 CI failures)
            "preempted": rc == EXIT_PREEMPTED or (first is not None and first.exit_code == EXIT_PREEMPTED),
            "walltime": os.path.exists(att.walltime),
            # a torchft group shares its phase's strikes: one struck this group's attempt only if it died
            "injected": bool(injections_into(live.read_records(phase.injections), launch_ts, end_ts, k))
            and not (phase.is_group and rc == 0),
            "hosts": hosts, "ranks": ranks or None, "job": job, "warm_ranks": warm_ranks,
            "job_start": _job_start()}
    with open(att.record, "w") as f:
        json.dump(info, f)
    print(f"restartlab: {phase.name} attempt {k}: rc={rc} completed={completed} injected={info['injected']} "
          f"({end_ts - launch_ts:.1f}s)", file=out, flush=True)
    return completed


def launched(att: layout.Attempt, k: int, launch_ts: float, job=None) -> None:
    """What is known of an attempt at its launch (its number, launch time, job and that job's run),
    written before the launcher starts: an attempt cut short with its job (killed, requeued, its
    node lost) leaves no record, and this still tells which run of which job it was in."""
    tmp = att.launched + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"attempt": k, "launch_ts": launch_ts, "job": job, "job_start": _job_start()}, f)
    os.replace(tmp, att.launched)


def _job_start():
    """When this run of the batch job started (the job script's RL_JOB_START): a job that PBS
    requeues runs again under the same id, and its attempts are told apart by it."""
    try:
        return float(os.environ["RL_JOB_START"])
    except (KeyError, ValueError):
        return None


def is_over(att: layout.Attempt) -> bool:
    """The supervisor has recorded the attempt's end (its record is written after the launcher exited)."""
    return os.path.exists(att.record)


# how a phase's supervisor ended (the `how` of its end record; "died": it left none)
_ENDED = {"completed": "finished in attempt {k}",
          "walltime": "stopped by the walltime margin in attempt {k} (its newest checkpoint is the emergency one)",
          "budget": "relaunch budget used up after attempt {k}",
          "failed": "failed in attempt {k} (relaunching could not help)",
          "cannot_run": "not started: {why}",
          "interrupted": "interrupted by {signal} in attempt {k}: the job was stopped (the scheduler's qdel, "
                         "walltime or preemption, or by hand)"}


def write_end(phase: layout.Phase, how: str, k: int, job=None, sig=None, why=None) -> None:
    """The supervisor's last word on the phase in this job (appended: a chain's jobs each add one)."""
    rec = {"time": time.time(), "how": how, "attempt": k, "job": job,
           "signal": signal.Signals(sig).name if sig else None}
    if why:
        rec["why"] = why
    with open(phase.ended, "a") as f:
        f.write(json.dumps(rec) + "\n")


def phase_end(phase: layout.Phase) -> dict:
    """How the phase's latest supervisor ended: {how, attempt, job, signal, text}, `how` one of
    completed, walltime, budget, failed, interrupted, died (it left no end record after its last
    attempt: SIGKILLed, or its node was lost) or not started."""
    atts = phase.attempts()
    k = int(os.path.basename(atts[-1].path)) if atts else 0
    recs = live.read_records(phase.ended)
    last = recs[-1] if recs else None
    if last is not None and isinstance(last.get("attempt"), int) and last["attempt"] >= k and last.get("how") in _ENDED:
        out = {key: last.get(key) for key in ("how", "attempt", "job", "signal")}
        out["text"] = _ENDED[last["how"]].format(k=last["attempt"], signal=last.get("signal") or "a signal",
                                                 why=last.get("why") or "the program cannot run here")
        return out
    if not k:
        return {"how": "not started", "attempt": 0, "job": None, "signal": None, "text": "not started"}
    rec = atts[-1].record
    return {"how": "died", "attempt": k, "job": None, "signal": None,
            "text": f"its supervisor ended without a word during attempt {k}"
                    + ("" if os.path.exists(rec) else " (which has no record of its end)")
                    + ": killed (SIGKILL), or its node was lost"}
