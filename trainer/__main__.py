"""python -m restartlab.trainer: flags and the training loop, nothing else."""
import time
from restartlab.contracts import metric_keys as K

_T_IMPORT0 = time.time()

import faulthandler  # noqa: E402
import signal  # noqa: E402

from restartlab.contracts.envvars import LAUNCH_TS_VAR  # noqa: E402
from restartlab.contracts.frozen_imports import frozen_imports  # noqa: E402
from restartlab.contracts.trainer_options import STACKS_SIGNAL  # noqa: E402


def stacks_on_signal():
    """Dump every thread's Python stack on STACKS_SIGNAL.

    The relaunch loop sends this signal to a hung attempt before it kills it. The stacks go to
    this process's stderr, the attempt's output. The handler is registered before the heavy
    imports, so a rank stuck in them answers too. main() registers it again, because a warm
    restart's forked rank writes to a stderr of its own."""
    faulthandler.register(signal.Signals["SIG" + STACKS_SIGNAL], all_threads=True)


stacks_on_signal()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from restartlab.trainer import dist as rdist  # noqa: E402
from restartlab.trainer import testpoints  # noqa: E402

from restartlab.contracts import trainer_options  # noqa: E402
from restartlab.contracts import ckptdir  # noqa: E402
from restartlab.contracts.ckptdir import step_dirname as ckptdir_name  # noqa: E402

from restartlab.contracts.exits import EXIT_FAILED, EXIT_NO_CHECKPOINT, EXIT_PREEMPTED, EXIT_SAVE_FAILED, EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (the relaunch loop's log stays readable)
        self.exit(2, f"restartlab.trainer: error: {message}\n")


def parse_args(argv=None):
    p = _Parser(prog="python -m restartlab.trainer",
                description="restartlab's FSDP2/TP trainer with DCP checkpoints and bit-exact auto-resume")
    trainer_options.add_to_parser(p)
    return p.parse_args(argv)


def check_args(a, world_size):
    """Bad input: one clear line before any training starts (exit 2); a value below its option's
    minimum is the parser's (trainer_options)."""
    if world_size % a.tp:
        return f"--tp {a.tp} does not divide the world size {world_size}"
    dp = world_size // a.tp
    if dp % a.dp_replicate:
        return (f"--dp-replicate {a.dp_replicate} does not divide the {dp} data-parallel ranks "
                f"({world_size} ranks / tp {a.tp})")
    if a.dp_global and (a.dp_global < dp or a.dp_global % dp):
        return (f"--dp-global {a.dp_global}: must be a multiple of the {dp} data-parallel ranks "
                f"({world_size} ranks / tp {a.tp})")
    if a.data:
        from restartlab.trainer.data import DataError, check_file
        from restartlab.trainer.model import PRESETS
        try:
            check_file(a.data, a.data_dtype, a.vocab or PRESETS[a.model].vocab, a.seq_len)
        except DataError as e:
            return str(e)
    if a.save_interval:
        try:
            os.makedirs(a.ckpt_dir, exist_ok=True)
            probe = os.path.join(a.ckpt_dir, f".write-probe-{os.getpid()}")
            open(probe, "w").close()
            os.unlink(probe)
        except OSError as e:
            return f"--ckpt-dir {a.ckpt_dir}: not writable ({e.strerror})"
    return None


def launch_ts():
    """When this attempt was launched: RESTARTLAB_LAUNCH_TS (set by the relaunch loop before
    mpiexec), else this process's start time."""
    if LAUNCH_TS_VAR in os.environ:
        return float(os.environ[LAUNCH_TS_VAR])
    try:
        import psutil
        return psutil.Process().create_time()
    except (ImportError, OSError):
        return _T_IMPORT0


def params_fingerprint(model, dist, world_size) -> str:
    """crc32 of every rank's local parameter shards, combined in rank order: equal across two
    runs with the same layout iff every parameter is bit-identical."""
    import zlib
    crc = 0
    for _, p in sorted(model.named_parameters()):
        local = p.to_local() if hasattr(p, "to_local") else p
        crc = zlib.crc32(local.detach().cpu().contiguous().numpy().tobytes(), crc)
    crcs = [None] * world_size
    dist.all_gather_object(crcs, crc)
    return "".join(f"{c:08x}" for c in crcs)


class StopRequest:
    """A preemption or walltime warning.

    The signal is SIGTERM by default, never SIGUSR1, which NCCL uses. The handler only takes
    note. The training loop agrees on it across ranks after the current step."""

    def __init__(self, signame: str, rank: int):
        self.requested = False
        self.agreed = False
        self.signame = signame
        self._rank = rank
        signal.signal(signal.Signals["SIG" + signame], self._handle)

    def _handle(self, signum, frame):
        # Set the flag first. A second signal can land while this one prints: a warm rank gets the
        # TERM twice, from the killer and from its stub. A print nested in a print raises
        # "reentrant call inside BufferedWriter". CI saw this: the rank died with exit 1, no checkpoint.
        first, self.requested = not self.requested, True
        if first and self._rank == 0:
            print(f"[rank0] received SIG{self.signame}: emergency checkpoint after this step", flush=True)


class Preempted(Exception):
    pass


class Job:
    """What one attempt has built: the model, optimizer, training state and checkpointer, and
    when each start-up stage ended (the first row's startup/* breakdown)."""

    def __init__(self, a, info, t_launch):
        # torch is imported without the cyclic collector, then frozen, as the first step's freeze
        # does for the model. CPU time goes 2.19 -> 1.78 CPU-s for one rank of the tiny model here
        # (8 runs each way). Since 2026-12-07 startup/import_s holds torch._dynamo. Before, build_s held it.
        with frozen_imports():
            import torch
            import torch._dynamo  # noqa: F401  (FSDP2's DTensor imports it at the first shard: here, with the rest)

            from restartlab.trainer.model import PRESETS
            from restartlab.trainer.parallel import build_mesh, dp_rank_of, use_meta_init
        self.a, self.info, self.times = a, info, {"launch": t_launch}
        self.stop = StopRequest(a.preempt_signal, info.rank)
        self.save_done = False  # every rank's background save has finished (agreed in step())
        threads = rdist.intra_op_threads()
        if threads:
            torch.set_num_threads(threads)
        if a.deterministic:  # before the first cuBLAS handle is made
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        self.times["imported"] = time.time()
        self.device_type, self.backend = rdist.pick_device(a.device)
        self.device = rdist.init(info, self.device_type, self.backend, a.pg_timeout, order=a.device_order)
        self.mesh = build_mesh(self.device_type, info.world_size, a.tp, a.dp_replicate)
        self.dp_rank = dp_rank_of(self.mesh)
        # gradient accumulation over the micro-batches of the data-parallel ranks that are missing
        self.accum = (a.dp_global // (info.world_size // a.tp)) if a.dp_global else 1
        self.times["dist"] = time.time()
        self.log = (lambda msg: print(f"[rank0] {msg}", flush=True)) if info.rank == 0 else (lambda msg: None)
        self.cfg = dataclasses.replace(PRESETS[a.model], vocab=a.vocab) if a.vocab else PRESETS[a.model]
        from restartlab.trainer.data import source
        self.data = source(a.data, a.data_dtype, self.cfg.vocab, a.seq_len)
        # the training-state fingerprints restartlab asked for (RESTARTLAB_STATE_DIR): the same
        # records a program of yours writes through the probe, its batch given here (no DataLoader)
        from restartlab.trainer import state_probe
        self.probe = state_probe.install_from_env()
        self.meta = use_meta_init(a.meta_init, self.cfg)
        self._build_model()
        self.times["built"] = time.time()
        self.ckpt = self._checkpointer() if a.save_interval or not a.no_resume else None
        self.start = 0
        self.at = 0  # the step the loop is in
        if self.ckpt and not a.no_resume:
            self._resume()
        self.times["loaded"] = time.time()
        self.log(f"model={a.model} params={self.cfg.n_params():,} world={info.world_size} tp={a.tp} "
                 f"replicate={a.dp_replicate} accum={self.accum} "
                 f"device={self.device_type} launcher={info.launcher} threads={torch.get_num_threads()} "
                 f"meta_init={self.meta} start={self.start} data={a.data or 'synthetic'}")

    def _build_model(self):
        import torch

        from restartlab.trainer.parallel import build_model
        from restartlab.trainer.state import TrainState
        a = self.a
        # meta init seeds each local shard by its place within one replica: replicas stay equal
        replica_rank = self.info.rank % (self.info.world_size // a.dp_replicate)
        self.model = build_model(self.cfg, self.mesh, self.device, a.seed, self.meta, replica_rank)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=a.lr, weight_decay=0.0)
        self.state = TrainState(self.model, self.optim, self.info.rank)

    def _resume(self):
        loaded, rejected = self.ckpt.load_newest(self.state)
        if loaded is not None:
            self.start = loaded
            self.log(f"RESUMED from step={self.start}")
            return
        if not rejected:
            return  # no checkpoint yet: a fresh start
        if not self.a.allow_fresh_start:
            if self.info.rank == 0:
                why = "".join(f"\n  {ckptdir_name(s)}: {r}" for s, r in rejected)
                print(f"restartlab.trainer: error: {len(rejected)} complete checkpoint(s) in "
                      f"{self.a.ckpt_dir}, none loads:{why}\nnot starting from step 0 over them "
                      f"(--allow-fresh-start does)", file=sys.stderr, flush=True)
            rdist.clean_exit(EXIT_NO_CHECKPOINT)
        self.log(f"no complete checkpoint loads ({len(rejected)} rejected): starting from step 0 "
                 f"(--allow-fresh-start)")
        self._build_model()  # a rejected load may have written into the model: start clean

    def _stage_dir(self):
        """Pick the async save's stage dir.

        Returns (where, fresh), or (None, False) to write straight to the checkpoint dir.

        - A given path is the stage dir. It must be private to this user, or it is refused.
        - `none` means no stage dir.
        - By default it is a fresh private directory with an unguessable name under /tmp
          (restartlab.contracts.private). This does not apply when /tmp is on the checkpoint dir's
          own file system. There staging adds a second full write and nothing else. In
          bench/async_ckpt.py, save -> .complete takes about 1.7x vanilla dcp.async_save staged,
          1.1x direct."""
        from restartlab.trainer.ckpt_stage_dir import STAGE_PARENT
        a = self.a
        if a.ckpt_stage_dir:
            return (None, False) if a.ckpt_stage_dir == "none" else (a.ckpt_stage_dir, False)
        if ckptdir.same_file_system(STAGE_PARENT, a.ckpt_dir):
            self.log(f"async: writing straight to {a.ckpt_dir} (the default stage dir's parent "
                     f"{STAGE_PARENT} is on the same file system)")
            return None, False
        return STAGE_PARENT, True

    def _checkpointer(self):
        from restartlab.trainer.checkpoint import Checkpointer
        a, info = self.a, self.info
        stage, fresh = self._stage_dir() if a.async_ckpt else (None, False)
        return Checkpointer(a.ckpt_dir, rank=info.rank, world_size=info.world_size,
                            mesh_info={"shape": list(self.mesh.shape), "dims": list(self.mesh.mesh_dim_names)},
                            mode="async" if a.async_ckpt else "sync",
                            stage_dir=stage, stage_fresh=fresh,
                            local_rank=info.local_rank, keep=a.keep, log=self.log, pg_timeout_s=a.pg_timeout,
                            on_save_error=a.on_save_error, ckpt_format=a.ckpt_format)

    def step(self, step: int) -> dict:
        """One optimizer step on batch `step`; returns its metrics row."""
        import torch
        import torch.distributed as dist

        a, vocab = self.a, self.cfg.vocab
        t0 = time.time()
        testpoints.delay("step", step, self.info.rank)
        loss = 0.0
        for j in range(self.accum):  # batch v of the global batch: a pure function of (seed, step, v)
            x, y = self.data.batch(a.seed, step, self.dp_rank * self.accum + j, a.batch_size, a.seq_len)
            if self.probe is not None:
                self.probe.on_batch((x, y))
            logits = self.model(x.to(self.device))
            micro = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab),
                                                      y.to(self.device).reshape(-1)) / self.accum
            micro.backward()
            loss = loss + micro.detach()
        if self.ckpt:
            self.ckpt.before_param_update()  # GPU: a save's staging copies have read the parameters
        self.optim.step()
        self.optim.zero_grad(set_to_none=True)
        # One collective carries three values:
        # - The loss.
        # - Whether any rank was asked to stop. A preemption signal reaches the ranks at slightly
        #   different times. They must stop after the same step.
        # - Whether every rank's background save has finished. Each rank's thread finishes at its
        #   own time. The ranks take its result, and an abort, after the same step.
        done = float(bool(self.ckpt and self.ckpt.save_done()))
        both = torch.stack([loss.detach(), torch.tensor(float(self.stop.requested), device=loss.device),
                            torch.tensor(done, device=loss.device)])
        dist.all_reduce(both, op=dist.ReduceOp.SUM)  # SUM, then divide: gloo (and not every ccl) has AVG
        both /= self.info.world_size
        loss_avg, stop, done = both.tolist()
        self.stop.agreed = stop > 0
        self.save_done = done == 1.0  # n / n: every rank's
        return {K.ITER: step, K.LOSS: loss_avg, K.DT: time.time() - t0}

    def startup_row(self, t_first_step: float) -> dict:
        t = self.times
        row = {K.STARTUP_IMPORT_S: t["imported"] - t["launch"], K.STARTUP_DIST_INIT_S: t["dist"] - t["imported"],
               K.STARTUP_BUILD_S: t["built"] - t["dist"], K.STARTUP_LOAD_S: t["loaded"] - t["built"],
               K.STARTUP_FIRST_STEP_S: t_first_step - t["loaded"], K.STARTUP_LAUNCH_TS: t["launch"]}
        if os.environ.get("RESTARTLAB_WARM") == "1":  # forked from the warm standby pool (restartlab.runtime.warm)
            row[K.STARTUP_WARM] = 1
        if self.start > 0:
            row.update({K.RESTART_S: t_first_step - t["launch"], K.RESUMED_FROM: self.start})
        return row


def emergency_stop(job: Job, step: int, saved: bool, metrics) -> None:
    """Preempted after `step`: checkpoint it (unless just saved), wait until it is complete, log,
    and leave with EXIT_PREEMPTED. The resume loses no step."""
    row = {K.ITER: step, K.PREEMPTED: step}
    if job.ckpt and job.a.save_interval:
        if not saved:
            row.update(job.ckpt.save(step, job.state))
        job.ckpt.wait()  # async: until .complete
        row.update(job.ckpt.last_finalized)
        what = f"emergency checkpoint of step {step} complete"
    else:
        what = "no checkpointing in this run: nothing saved"
    if metrics:
        metrics.write(row, ts=time.time())
    job.log(f"PREEMPTED at step={step}: {what}")
    raise Preempted(step)


def train(job: Job, metrics) -> None:
    """The loop. A step's row is written before any checkpoint of that step can be complete, so
    a kill right after a save never loses the step's record; the save's own figures follow on a
    second row of the same step."""
    a = job.a
    for step in range(job.start + 1, a.train_iters + 1):
        job.at = step
        busy = bool(job.ckpt and job.ckpt.mode == "async" and job.ckpt.in_flight())
        row = job.step(step)
        if busy:  # this step ran beside a background save (the report's interference figure)
            row[K.CKPT_INFLIGHT] = 1
        if step == job.start + 1:
            row.update(job.startup_row(time.time()))
            # The model, optimizer state and torch's own ~300k objects are here for good. Freeze
            # them out of the collector's sight, so that a full collection never scans them. With
            # them it takes 0.17 s, measured on rank 0 inside a save. Every rank waits for it at
            # the next collective.
            gc.freeze()
        if job.ckpt and job.save_done:  # every rank's: they all take the result now
            row.update(job.ckpt.poll())
        if metrics:
            metrics.write(row, ts=time.time())
        saved = bool(job.ckpt and a.save_interval and (step % a.save_interval == 0 or step == a.train_iters))
        if saved:
            save_row = job.ckpt.save(step, job.state)
            if metrics:
                metrics.write(dict(save_row, **{K.ITER: step}), ts=time.time())
        if job.stop.agreed:
            emergency_stop(job, step, saved, metrics)
        if step % a.log_interval == 0 or step == a.train_iters:
            job.log(f"step={step} loss={row[K.LOSS]:.6f} dt={row[K.DT]:.4f}")


def main(argv=None):
    stacks_on_signal()
    a = parse_args(argv)
    info = rdist.discover_ranks()
    err = check_args(a, info.world_size)
    if err:
        if info.rank == 0:
            print(f"restartlab.trainer: error: {err}", file=sys.stderr, flush=True)
        os._exit(EXIT_USAGE)
    try:
        job = Job(a, info, launch_ts())
    except rdist.BackendError as e:  # before any collective: every rank says the same, rank 0 prints
        if info.rank == 0:
            print(f"restartlab.trainer: error: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_USAGE)
    except rdist.RendezvousError as e:  # this rank only: its peers fail on their own, in seconds
        print(f"restartlab.trainer: error: rank {info.rank}: {e}", file=sys.stderr, flush=True)
        os._exit(EXIT_FAILED)
    import torch.distributed as dist

    from restartlab.trainer.metrics import MetricsWriter
    from restartlab.trainer.checkpoint import SaveError
    from restartlab.trainer.data import DataError
    metrics = MetricsWriter(a.outdir, info.rank, sink=wandb_sink(a, job)) if info.rank == 0 else None

    def leave(code, together=False):
        if metrics:
            metrics.close(code)
        rdist.clean_exit(code, barrier=together)
    try:
        train(job, metrics)
        final = job.ckpt.close() if job.ckpt else None
    except SaveError as e:  # raised on every rank after the same step: they stop together
        if info.rank == 0:
            print(f"restartlab.trainer: error: {e} (--on-save-error abort)", file=sys.stderr, flush=True)
        print(f"restartlab.trainer: rank {info.rank}: stopping in step {job.at} after the failed save "
              "(--on-save-error abort)", file=sys.stderr, flush=True)
        leave(EXIT_SAVE_FAILED, together=True)
    except DataError as e:  # a token outside the vocabulary: every rank reading it stops here
        print(f"restartlab.trainer: error: rank {info.rank}: {e}", file=sys.stderr, flush=True)
        leave(EXIT_USAGE)
    except Preempted:
        if job.ckpt:
            job.ckpt.close()
        leave(EXIT_PREEMPTED)
    if final and metrics:
        metrics.write(dict(final, **{K.ITER: a.train_iters}))
    fingerprint = params_fingerprint(job.model, dist, info.world_size)
    if metrics:
        metrics.write({K.ITER: a.train_iters, K.PARAMS_CRC: fingerprint})
    job.log(f"TRAINING DONE step={a.train_iters} params_crc={fingerprint}")
    leave(0)


def wandb_sink(a, job):
    """Rank 0's W&B run for this attempt (None without --wandb-project or with mode disabled)."""
    if not a.wandb_project or a.wandb_mode == "disabled":
        return None
    from restartlab.trainer.wandb_log import WandbSink
    return WandbSink(a, job.start, log=job.log)


if __name__ == "__main__":
    main()
