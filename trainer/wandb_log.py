"""Rank 0's metrics to Weights & Biases as well (optional, `pip install restartlab[wandb]`).

The JSONL rows stay the collector's input. Each row also goes to W&B under the same names. There is
one W&B run per attempt, grouped by experiment and phase. The run's config holds the attempt's
resume step and, once its first step is done, its restart cost. The module imports wandb and
starts its run on a thread of its own, fed through a queue. So the training loop never waits for
W&B (its import, its service process, a slow network). A W&B failure is a warning, never a failed
attempt. Nothing here is imported unless --wandb-project is given."""
import os
import queue
import threading

from restartlab.contracts.envvars import ATTEMPT_VAR, EXPT_VAR, PHASE_VAR
from restartlab.contracts.exits import EXIT_PREEMPTED
from restartlab.contracts import metric_keys as K

STOP = object()
FINISH_TIMEOUT_S = 30.0    # the run's last rows and its end, at a normal exit
PREEMPTED_TIMEOUT_S = 5.0  # preempted or warned of the walltime: the job has seconds left


def run_context(env=None):
    """(experiment, phase, attempt) from the relaunch loop's environment (outside a job script:
    the run is named after the process)."""
    env = os.environ if env is None else env
    expt = env.get(EXPT_VAR, "restartlab")
    phase = env.get(PHASE_VAR, "run")
    attempt = int(env.get(ATTEMPT_VAR, "1"))
    return expt, phase, attempt


def loggable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}


class WandbSink:
    def __init__(self, a, start_step: int, log=print, env=None):
        expt, phase, attempt = run_context(env)
        self._log = log
        self._q = queue.Queue()
        self._init = dict(project=a.wandb_project, entity=a.wandb_entity, mode=a.wandb_mode,
                          group=f"{expt}/{phase}", job_type=phase, name=f"{phase}-attempt-{attempt}",
                          dir=os.path.abspath(a.outdir),
                          config=dict({k: v for k, v in vars(a).items() if not k.startswith("wandb_")},
                                      experiment=expt, phase=phase, attempt=attempt, resume_step=start_step))
        self.error = None
        self._exit_code = 0
        self._thread = threading.Thread(target=self._worker, name="wandb", daemon=True)
        self._thread.start()

    def log(self, metrics: dict) -> None:
        """Non-blocking: the row is queued for the W&B thread."""
        if self.error is None:
            self._q.put(dict(metrics))

    def _worker(self):
        try:
            import wandb
            run = wandb.init(**self._init, settings=wandb.Settings(silent=True, console="off"))
            while True:
                row = self._q.get()
                if row is STOP:
                    break
                step = row.get(K.ITER)
                run.log(loggable(row), step=int(step) if step is not None else None)
                if K.RESTART_S in row:
                    run.config.update({"restart_seconds": row[K.RESTART_S],
                                       "resumed_from": row.get(K.RESUMED_FROM)}, allow_val_change=True)
            run.finish(exit_code=self._exit_code)
            wandb.teardown()  # the service process goes with the run (the trainer leaves by os._exit)
        except Exception as e:  # noqa: BLE001  W&B is optional: the training goes on without it
            self.error = f"{type(e).__name__}: {str(e)[:300]}"
            self._log(f"W&B logging off for this attempt: {self.error}")

    def close(self, exit_code: int = 0, timeout: float = None) -> None:
        """Flush the queued rows and finish the run, waiting at most FINISH_TIMEOUT_S.

        After a preemption it waits at most PREEMPTED_TIMEOUT_S. The emergency checkpoint is what
        must fit in the margin."""
        if timeout is None:
            timeout = PREEMPTED_TIMEOUT_S if exit_code == EXIT_PREEMPTED else FINISH_TIMEOUT_S
        self._exit_code = exit_code
        self._q.put(STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._log(f"W&B did not finish within {timeout:g}s: its run may lack the last rows")
