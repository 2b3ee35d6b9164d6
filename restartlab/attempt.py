"""attempt.json: what the relaunch loop knows about one launch, written right after it ends.
Also decides whether the trainer reached its last step (not merely rc 0)."""
import json
import os

from . import launchers, live
from .trainer_options import EXIT_PREEMPTED


def reached_last_step(attempt_dir: str, train_iters: int) -> bool:
    """True iff rank 0 wrote its final row (train/params_crc at train_iters) in this attempt."""
    m = live.last_row(os.path.join(attempt_dir, "metrics-0.jsonl"))
    return m is not None and "train/params_crc" in m and m.get("train/iter") == train_iters


def injected_between(phase_dir: str, t0: float, t1: float) -> bool:
    return any(isinstance(r.get("time"), (int, float)) and t0 <= r["time"] <= t1 and r.get("killed")
               for r in live.read_injections(phase_dir))


def record(attempt_dir, phase_dir, attempt, launch_ts, end_ts, rc, train_iters, launcher="hydra",
           ranks=0, job=None) -> bool:
    completed = reached_last_step(attempt_dir, train_iters)
    hosts = None
    if os.path.exists(os.path.join(attempt_dir, "hosts")):  # chosen by node-check for this attempt
        with open(os.path.join(attempt_dir, "hosts")) as f:
            hosts = [h.strip() for h in f if h.strip()]
    info = {"attempt": attempt, "launch_ts": launch_ts, "end_ts": end_ts, "exit_code": rc,
            "signal": launchers.get(launcher).signal_of(rc), "launcher": launcher,
            "completed": completed, "hang": os.path.exists(os.path.join(attempt_dir, "hang")),
            "preempted": rc == EXIT_PREEMPTED,
            "walltime": os.path.exists(os.path.join(attempt_dir, "walltime")),
            "injected": injected_between(phase_dir, launch_ts, end_ts),
            "hosts": hosts, "ranks": ranks or None, "job": job}
    with open(os.path.join(attempt_dir, "attempt.json"), "w") as f:
        json.dump(info, f)
    print(f"restartlab: {os.path.basename(phase_dir)} attempt {attempt}: rc={rc} "
          f"completed={completed} injected={info['injected']} ({end_ts - launch_ts:.1f}s)", flush=True)
    return completed
