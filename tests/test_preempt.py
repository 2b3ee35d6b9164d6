"""Preemption: SIGTERM to every rank (what a scheduler's preemption or walltime warning sends).
The ranks agree to stop after the same step, write an emergency checkpoint of it (waiting for an
async save in flight), stamp .complete, and exit 5; the resume loses no step and stays
bit-exact."""
import os
import signal
import subprocess
import uuid

import pytest

from restartlab.contracts import ckptdir, layout
from restartlab.runtime import killer
from tests.helpers import check_warm, final_crc, losses, rows, run_trainer, shared_trainer_run, trainer_cmd, wait_for

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


def args(d, mode):
    a = ["--model", "tiny", "--train-iters", "40", "--save-interval", "10", "--ckpt-dir", os.path.join(d, "ckpts"),
         "--outdir", os.path.join(d, "out"), "--log-interval", "1000"]
    return a + (["--async-ckpt", "--ckpt-stage-dir", os.path.join(d, "stage")] if mode == "async" else [])


def reference(tmp_path_factory):
    """The uninterrupted run, once per session (helpers.shared_run): sync and async checkpointing
    train alike, so both modes are held to the same one."""
    return shared_trainer_run(tmp_path_factory, "preempt-ref", 4, lambda d: args(d, "sync"))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_emergency_checkpoint_zero_lost_steps(tmp_path, tmp_path_factory, mode):
    ref, run = reference(tmp_path_factory), str(tmp_path / "run")
    tag = f"t-{uuid.uuid4().hex[:8]}"
    metrics = os.path.join(run, "out", layout.metrics_name(0))
    # warm ranks (helpers.trainer_pool): the TERM reaches each stub, which passes it to its rank
    p = subprocess.Popen(trainer_cmd(4, args(run, mode), tag, warm_ranks=True), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(m.get("train/iter", 0) >= 13 for m in rows(metrics)), 120, "step 13")
        receipt = killer.kill_ranks(tag, signal.SIGTERM)
        assert len(receipt.pids) >= 4
        out, _ = p.communicate(timeout=120)
        check_warm(out, True)
    finally:
        if p.poll() is None:
            p.kill()
        killer.kill_ranks(tag)
    assert p.returncode == 5, out[-3000:]
    stopped = [int(line.split("step=")[1].split(":")[0]) for line in out.splitlines() if "PREEMPTED at step=" in line]
    assert stopped and "emergency checkpoint of step" in out, out[-3000:]
    s = stopped[0]
    last = max(m["train/iter"] for m in rows(metrics) if "train/loss" in m)
    assert last == s and ckptdir.newest_complete_step(os.path.join(run, "ckpts")) == s  # nothing to lose
    assert any(m.get("train/preempted") == s for m in rows(metrics))
    r = run_trainer(4, args(run, mode))
    assert r.returncode == 0 and f"RESUMED from step={s}" in r.stdout, r.stdout[-3000:]
    ref_l = dict(losses(os.path.join(ref, "out", layout.metrics_name(0))))
    got = losses(metrics)
    assert [it for it, _ in got] == list(range(1, 41))  # every step once: 0 lost, 0 recomputed
    assert all(loss == ref_l[it] for it, loss in got)
    assert final_crc(metrics) == final_crc(os.path.join(ref, "out", layout.metrics_name(0)))


def test_a_second_stop_signal_during_the_first_ones_print_does_nothing(monkeypatch):
    """A warm rank can get a stop signal twice.

    restartlab's killer now leaves it to the rank's stub (tests/test_warm.py). But a scheduler's
    signal to every process of the job can reach both the stub, which passes it on, and the rank the
    pool forked. The second can land while the first handler prints. A nested print raised
    "reentrant call inside BufferedWriter", and the rank died without its emergency checkpoint
    (CI, test_failure_kinds[warm]). Here it is forced: the print itself delivers the second signal."""
    import builtins
    import signal as sig
    from restartlab.trainer.__main__ import StopRequest
    old = sig.getsignal(sig.SIGTERM)
    try:
        stop = StopRequest("TERM", rank=0)
        printed = []
        real_print = builtins.print

        def print_then_signalled_again(*args, **kw):
            printed.append(args)
            if len(printed) == 1:
                stop._handle(sig.SIGTERM, None)  # the second TERM, inside the first one's print
        monkeypatch.setattr(builtins, "print", print_then_signalled_again)
        stop._handle(sig.SIGTERM, None)
        monkeypatch.setattr(builtins, "print", real_print)
        assert stop.requested and len(printed) == 1, printed
    finally:
        sig.signal(sig.SIGTERM, old)
