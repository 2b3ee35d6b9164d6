"""python -m restartlab.trainer: flags and the training loop, nothing else."""
import time

_T_IMPORT0 = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from restartlab.trainer import dist as rdist  # noqa: E402

from restartlab import trainer_options  # noqa: E402


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (the relaunch loop's log stays readable)
        self.exit(2, f"restartlab.trainer: error: {message}\n")


def parse_args(argv=None):
    p = _Parser(prog="python -m restartlab.trainer",
                description="restartlab's FSDP2/TP trainer with DCP checkpoints and bit-exact auto-resume")
    trainer_options.add_to_parser(p)
    return p.parse_args(argv)


def check_args(a, world_size):
    """Bad input: one clear line before any training starts (exit 2)."""
    err = trainer_options.check(vars(a))
    if err:
        return err
    if world_size % a.tp:
        return f"--tp {a.tp} does not divide the world size {world_size}"
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
    if "RESTARTLAB_LAUNCH_TS" in os.environ:
        return float(os.environ["RESTARTLAB_LAUNCH_TS"])
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


def main(argv=None):
    a = parse_args(argv)
    info = rdist.discover_ranks()
    err = check_args(a, info.world_size)
    if err:
        if info.rank == 0:
            print(f"restartlab.trainer: error: {err}", file=sys.stderr, flush=True)
        os._exit(2)
    t_launch = launch_ts()

    import torch
    import torch.distributed as dist

    from restartlab.trainer.checkpoint import Checkpointer
    from restartlab.trainer.data import batch
    from restartlab.trainer.metrics import MetricsWriter
    from restartlab.trainer.model import PRESETS
    from restartlab.trainer.parallel import build_mesh, build_model, dp_rank_of, use_meta_init
    threads = rdist.intra_op_threads()
    if threads:
        torch.set_num_threads(threads)
    t_imported = time.time()

    device_type, backend = rdist.pick_device(a.device)
    device = rdist.init(info, device_type, backend)
    mesh = build_mesh(device_type, info.world_size, a.tp)
    dp_rank = dp_rank_of(mesh)
    t_dist = time.time()

    log = (lambda msg: print(f"[rank0] {msg}", flush=True)) if info.rank == 0 else (lambda msg: None)
    cfg = PRESETS[a.model]
    meta = use_meta_init(a.meta_init, cfg)
    model = build_model(cfg, mesh, device, a.seed, meta, info.rank)
    optim = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    t_built = time.time()

    ckpt = None
    if a.save_interval or not a.no_resume:
        from restartlab import schedulers
        jobid = schedulers.job_id(os.environ)
        ckpt = Checkpointer(a.ckpt_dir, rank=info.rank, world_size=info.world_size,
                            mesh_info={"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names)},
                            mode="async" if a.async_ckpt else "sync",
                            stage_dir=a.ckpt_stage_dir or f"/tmp/restartlab-{jobid}",
                            local_rank=info.local_rank, keep=a.keep, log=log)
    start = 0
    if ckpt and not a.no_resume:
        loaded = ckpt.load_newest(model, optim)
        if loaded is not None:
            start = loaded
            log(f"RESUMED from step={start}")
    t_loaded = time.time()
    log(f"model={a.model} params={cfg.n_params():,} world={info.world_size} tp={a.tp} "
        f"device={device_type} launcher={info.launcher} threads={torch.get_num_threads()} "
        f"meta_init={meta} start={start}")

    metrics = MetricsWriter(a.outdir, info.rank) if info.rank == 0 else None
    first = True
    for step in range(start + 1, a.train_iters + 1):
        t0 = time.time()
        x, y = batch(a.seed, step, dp_rank, a.batch_size, a.seq_len, cfg.vocab)
        x, y = x.to(device), y.to(device)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab), y.reshape(-1))
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        loss_avg = loss.detach().clone()
        dist.all_reduce(loss_avg, op=dist.ReduceOp.AVG if backend != "gloo" else dist.ReduceOp.SUM)
        if backend == "gloo":
            loss_avg /= info.world_size
        t1 = time.time()
        row = {"train/iter": step, "train/loss": loss_avg.item(), "train/dt": t1 - t0}
        if first:
            row.update({"startup/import_s": t_imported - t_launch, "startup/dist_init_s": t_dist - t_imported,
                        "startup/build_s": t_built - t_dist, "startup/load_s": t_loaded - t_built,
                        "startup/first_step_s": t1 - t_loaded, "startup/launch_ts": t_launch})
            if start > 0:
                row["train/restart_seconds"] = t1 - t_launch
                row["train/resumed_from"] = start
            first = False
        if ckpt:
            row.update(ckpt.poll())
            if a.save_interval and (step % a.save_interval == 0 or step == a.train_iters):
                row.update(ckpt.save(step, model, optim))
        if metrics:
            metrics.write(row, ts=time.time())
        if step % a.log_interval == 0 or step == a.train_iters:
            log(f"step={step} loss={row['train/loss']:.6f} dt={row['train/dt']:.4f}")
    if ckpt:
        final = ckpt.close()
        if final and metrics:
            metrics.write(dict(final, **{"train/iter": a.train_iters}))
    fingerprint = params_fingerprint(model, dist, info.world_size)
    if metrics:
        metrics.write({"train/iter": a.train_iters, "train/params_crc": fingerprint})
        metrics.close()
    log(f"TRAINING DONE step={a.train_iters} params_crc={fingerprint}")
    rdist.clean_exit(0)


if __name__ == "__main__":
    main()
