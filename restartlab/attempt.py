"""attempt.json: what the relaunch loop knows about one launch, written right after it ends.
Also decides whether the trainer reached its last step (not merely rc 0)."""
import json
import os

from . import collect


def reached_last_step(attempt_dir: str, train_iters: int) -> bool:
    """True iff rank 0 wrote its final row (train/params_crc at train_iters) in this attempt."""
    m = collect.last_row(os.path.join(attempt_dir, "metrics-0.jsonl"))
    return m is not None and "train/params_crc" in m and m.get("train/iter") == train_iters


def injected_between(phase_dir: str, t0: float, t1: float) -> bool:
    return any(t0 <= r.get("time", -1) <= t1 and r.get("killed") for r in collect.read_injections(phase_dir))


def record(attempt_dir, phase_dir, attempt, launch_ts, end_ts, rc, train_iters) -> bool:
    completed = reached_last_step(attempt_dir, train_iters)
    info = {"attempt": attempt, "launch_ts": launch_ts, "end_ts": end_ts, "exit_code": rc,
            # a shell reports a signal as 128+N; MPICH Hydra exits with N itself when a rank died of N
            "signal": rc - 128 if rc > 128 else (rc if rc in (6, 9, 15) else 0),
            "completed": completed, "hang": os.path.exists(os.path.join(attempt_dir, "hang")),
            "injected": injected_between(phase_dir, launch_ts, end_ts)}
    with open(os.path.join(attempt_dir, "attempt.json"), "w") as f:
        json.dump(info, f)
    print(f"restartlab: {os.path.basename(phase_dir)} attempt {attempt}: rc={rc} "
          f"completed={completed} injected={info['injected']} ({end_ts - launch_ts:.1f}s)", flush=True)
    return completed
