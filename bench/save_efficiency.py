"""Sync save and load efficiency against the file system's own bandwidth, measured in the same run.

Each repeat runs the variants below interleaved, so that a busy neighbour moves every variant
alike. It uses 4 ranks and the `small` model (~300 MB checkpoint with AdamW state).
- dd floor: every rank writes its share of the checkpoint's bytes with `dd bs=4M conv=fdatasync`,
  all at once. This is the write bandwidth of this file system.
- restartlab sync: restartlab's sync save (dcp.save + crc32 as written + manifest + .complete).
- dcp.save: plain `dcp.save(state, checkpoint_id=...)` with its defaults.
- threads: restartlab's sync save with DCP's writer on 2 threads per rank (thread_count=2, two
  files per rank). The trainer's thread_count is 1.
- memory floor: every rank writes its tensors of the same state from the model's memory into one
  file, one write each, then fsyncs. No save can skip this. It then reads them back into a buffer in
  memory, which no load can skip. dd's reads stay in a cache-sized buffer.
- read floor: every rank reads its share of the same bytes back with `dd bs=4M` (warm cache).
- restartlab load: restartlab's verifying load of the checkpoint just written (warm cache).
- cold: the read floor and the loads again. Before each, every rank drops the files it reads from
  the page cache with posix_fadvise DONTNEED. This touches only these files, needs no root and
  leaves everybody else's cache alone. It gives the file system's own read bandwidth.

Every variant starts from the same page cache. What a save wrote is dropped from the cache once it
is timed. The files are fsynced and so clean: this needs no root and leaves everybody else's cache
alone. A warm read first reads its files in.
Efficiency = (checkpoint bytes / seconds) / (floor bytes / floor seconds). The target is >= 0.8 for
the sync save and for the warm load. The cold figure is stated beside it. Each figure is the slowest
rank's, median over repeats.

Where the seconds go: restartlab's save and load are also timed in their data phase alone, on the
slowest rank. For a save that is the storage writer's write_data: serialization, checksums, writes,
fsync. For a load it is the reader's read_data: reads, checksums, torch.load, copies into the model.
The rest of each is coordination: DCP's planning rounds, .metadata, and restartlab's manifest,
.complete and agreement. For a save the coordination is split into three parts, each the slowest
rank's own:
- what dcp.save spends beyond its data phase;
- torch's get_state_dict;
- restartlab's own work around them.

Usage: python bench/save_efficiency.py [--ranks 4] [--repeats 3] [--model small] [--json F]
"""
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import mpibench

TARGET = 0.8


def _dd(args):
    subprocess.run(["dd", *args, "bs=4M", "status=none"], check=True)


def worker(a):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from async_ckpt import _build, _reduce, _slowest, _time_state_dicts

    from restartlab.contracts import ckptdir
    from restartlab.trainer import dist as rdist
    from restartlab.trainer.checkpoint import Checkpointer
    from restartlab.trainer.ckpt_io import VerifyingReader
    from restartlab.trainer.state import TrainState
    info, mesh, model, optim, device_type, cfg = _build(a)
    rank, world = info.rank, info.world_size
    phase = _time_data_phases()
    mesh_info = {"shape": list(mesh.shape), "dims": list(mesh.mesh_dim_names)}
    cks = {kind: Checkpointer(os.path.join(a.dir, kind), rank=rank, world_size=world, local_rank=info.local_rank,
                              mesh_info=mesh_info, log=lambda m: None, ckpt_format=fmt)
           for kind, fmt in (("restartlab", "dcp"), ("raw", "raw"), ("threads", "dcp"))}
    state = TrainState(model, optim, rank, 1)
    sd_spent = _time_state_dicts(state)  # torch's get_state_dict: counted apart from restartlab's own work
    res = {}
    nbytes = None
    for rep in range(a.repeats + 1):  # rep 0: warm-up (allocations, page cache, file system)
        step = rep + 1
        order = ["dd", "mem", "restartlab", "raw", "dcp", "threads"]
        got = {}
        for kind in order if rep % 2 else order[::-1]:
            phase.clear()
            sd_spent["state_dict"] = 0.0
            dist.barrier()
            t0 = time.perf_counter()
            if kind == "threads":  # DCP's writer with 2 threads (thread_count; default 1), otherwise as restartlab's
                with _writer_threads(2):
                    cks[kind].save(step, state)
            elif kind in cks:
                cks[kind].save(step, state)
            elif kind == "dcp":
                dcp.save(state.state_dict(), checkpoint_id=os.path.join(a.dir, "plain", f"s{step}"))
            elif kind == "mem":
                mem_bytes = _write_tensors(state.state_dict(), os.path.join(a.dir, f"mem-{rank}"))
            else:
                share = max(1, (nbytes or 300 << 20) // world // (4 << 20))
                _dd(["if=/dev/zero", f"of={os.path.join(a.dir, f'dd-{rank}')}", f"count={share}", "conv=fdatasync"])
            spent = time.perf_counter() - t0
            got[kind] = _slowest(spent)
            if kind in cks:  # each the slowest rank's own: the parts need not add up to the whole
                got[f"{kind}_write"] = _slowest(phase["write"])
                got[f"{kind}_dcp"] = _slowest(phase["dcp_save"] - phase["write"])
                got[f"{kind}_own"] = _slowest(spent - phase["dcp_save"] - sd_spent["state_dict"])
                got[f"{kind}_state_dict"] = _slowest(sd_spent["state_dict"])
            dist.barrier()
            if kind == "dd":
                got["dd_bytes"] = float(share * (4 << 20) * world)
            if kind == "mem":
                got["mem_bytes"] = _reduce(float(mem_bytes), "SUM")
            # Drop what was just written from the page cache. It is fsynced, so clean, and drops at once.
            # This way every variant writes into the same free memory. Left there, 2.5 GB a variant
            # filled this 24 GB machine's cache within a repeat. Whichever variant came later then
            # paid the kernel's reclaim. Measured: the same save ran at 0.48 or 0.79 of dd by its turn.
            _evict(_written(a.dir, kind, rank, step))  # (the next variant starts on a barrier)
        manifests = {}
        for kind in cks:
            with open(os.path.join(ckptdir.step_path(os.path.join(a.dir, kind), step), ckptdir.MANIFEST)) as f:
                manifests[kind] = json.load(f)
        nbytes = manifests["restartlab"]["total_bytes"]
        into = bytearray(os.path.getsize(os.path.join(a.dir, f"mem-{rank}")))  # zeroed: its pages exist
        # reads: warm (the files were just written), then cold (each after dropping its files)
        loads = {"load": "restartlab", "rawload": "raw"}
        order = ["read", "readmem", "load", "rawload"]
        for cold in (False, True):
            for kind in order if rep % 2 else order[::-1]:
                ckpt = ckptdir.step_path(os.path.join(a.dir, loads[kind]), step) if kind in loads else None
                own = os.path.join(a.dir, f"mem-{rank}" if kind == "readmem" else f"dd-{rank}")
                files = sorted(os.path.join(ckpt, n) for n in os.listdir(ckpt)) if ckpt else [own]
                if cold:
                    _evict(files)
                else:  # warm: read into the page cache first (the ranks share the files out)
                    _warm(files[rank::world] if ckpt else files)
                phase.clear()
                dist.barrier()
                t0 = time.perf_counter()
                if ckpt:
                    dcp.load(state.state_dict(), storage_reader=VerifyingReader(ckpt, manifests[loads[kind]]))
                elif kind == "readmem":
                    _read_into(own, into)
                else:
                    _dd([f"if={own}", "of=/dev/null"])
                name = f"{kind}_cold" if cold else kind
                got[name] = _slowest(time.perf_counter() - t0)
                if ckpt:
                    got[f"{name}_read"] = _slowest(phase["read"])
        dist.barrier()
        if rank == 0:
            shutil.rmtree(os.path.join(a.dir, "plain"), ignore_errors=True)
            if rep:
                for kind in cks:
                    ckptdir.prune(os.path.join(a.dir, kind), 1)
        if rep:
            got["bytes"] = float(nbytes)
            got["raw_bytes"] = float(manifests["raw"]["total_bytes"])
            for k, v in got.items():
                res.setdefault(k, []).append(v)
    if rank == 0:
        mpibench.emit({"ranks": world, "model": a.model, "device": device_type, "params": cfg.n_params(),
                       "ckpt_bytes": nbytes, "repeats": a.repeats, "results": res})
    rdist.clean_exit(0)


@contextlib.contextmanager
def _writer_threads(n):
    """restartlab's checkpoint writer with DCP's thread_count = n while inside."""
    from restartlab.trainer import checkpoint, ckpt_io

    def threaded(*args, **kw):
        w = ckpt_io.writer(*args, **kw)
        w.thread_count = n
        return w
    checkpoint.writer = threaded
    try:
        yield
    finally:
        checkpoint.writer = ckpt_io.writer


def _write_tensors(state_dict, path) -> int:
    """The write floor from memory: this rank's tensors of the state, one write each, into one file,
    fsync; their bytes. What a save cannot do without (the bytes leave the model's own memory)."""
    import torch

    from async_ckpt import _local_tensors
    n = 0
    with open(path, "wb") as f:
        for t in _local_tensors(state_dict):
            mv = memoryview(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
            f.write(mv)
            n += len(mv)
        f.flush()
        os.fsync(f.fileno())
    return n


def _read_into(path, buf):
    """The read floor into memory: read the file's bytes into a buffer whose pages exist.

    A load lands every byte in memory. dd's reads land in one 4 MiB buffer that stays in the CPU's
    cache."""
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        got = 0
        while got < len(mv):
            n = f.readinto(mv[got:])
            if not n:
                break
            got += n


def _written(d, kind, rank, step):
    """The files a variant just wrote (every rank drops all of a checkpoint's: cheap, idempotent)."""
    from restartlab.contracts import ckptdir
    if kind in ("dd", "mem"):
        return [os.path.join(d, f"{kind}-{rank}")]
    where = os.path.join(d, "plain", f"s{step}") if kind == "dcp" else ckptdir.step_path(os.path.join(d, kind), step)
    return [os.path.join(where, n) for n in os.listdir(where)]


def _warm(paths):
    """Read these files whole, so that their pages are in the page cache."""
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _evict(paths):
    """Drop these files' pages from the page cache (they are fsynced: clean, so droppable)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _time_data_phases():
    """{"write": s, "read": s}: seconds this rank spent in the storage writer's write_data and
    the reader's read_data (restartlab's own classes, timed around DCP's implementation)."""
    from restartlab.trainer import ckpt_io
    spent = collections.defaultdict(float)

    def timed(cls, name, key):
        inner = getattr(cls, name)

        def wrapper(*args, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                spent[key] += time.perf_counter() - t0
        setattr(cls, name, wrapper)
    timed(ckpt_io.ChecksummingWriter, "write_data", "write")
    timed(ckpt_io.VerifyingReader, "read_data", "read")
    import torch.distributed.checkpoint as dcp
    timed(dcp, "save", "dcp_save")  # the rest of dcp.save beyond write_data: DCP's own coordination
    return spent


def report(a, res):
    m = res["medians"]
    mb = m["bytes"] / 1e6
    w_floor = m["dd_bytes"] / m["dd"] / 1e6  # MB/s
    r_floor = m["dd_bytes"] / m["read"] / 1e6
    c_floor = m["dd_bytes"] / m["read_cold"] / 1e6
    rows = [("restartlab sync save", m["restartlab"], m["restartlab_write"], mb, w_floor),
            ("restartlab sync save, --ckpt-format raw", m["raw"], m["raw_write"], m["raw_bytes"] / 1e6, w_floor),
            ("restartlab sync save, 2 writer threads", m["threads"], m["threads_write"], mb, w_floor),
            ("plain dcp.save (defaults)", m["dcp"], None, mb, w_floor),
            ("restartlab load (verified, warm)", m["load"], m["load_read"], mb, r_floor),
            ("restartlab load, raw (verified, warm)", m["rawload"], m["rawload_read"], m["raw_bytes"] / 1e6, r_floor),
            ("restartlab load (verified, cold)", m["load_cold"], m["load_cold_read"], mb, c_floor),
            ("restartlab load, raw (verified, cold)", m["rawload_cold"], m["rawload_cold_read"],
             m["raw_bytes"] / 1e6, c_floor)]
    print(f"checkpoint: {mb:.0f} MB ({m['raw_bytes'] / 1e6:.0f} MB raw), {res['ranks']} ranks, {res['device']}; "
          f"slowest rank, median of {res['repeats']}")
    print(f"  floor: write {w_floor:8.0f} MB/s (dd conv=fdatasync, {res['ranks']} at once); "
          f"read {r_floor:8.0f} MB/s (dd, warm), {c_floor:6.0f} MB/s (dd, cold)")
    mem = {"save": m["mem_bytes"] / m["mem"] / 1e6, "warm": m["mem_bytes"] / m["readmem"] / 1e6,
           "cold": m["mem_bytes"] / m["readmem_cold"] / 1e6}
    print(f"  memory floor: write {mem['save']:8.0f} MB/s (the state's tensors from memory, fsync); read into "
          f"memory {mem['warm']:8.0f} MB/s (warm), {mem['cold']:6.0f} MB/s (cold)")
    out = {}
    for name, secs, data, size, floor in rows:
        bw = size / secs
        eff = bw / floor
        mfloor = mem["save" if "save" in name else "cold" if "cold" in name else "warm"]
        out[name] = {"seconds": secs, "MB_per_s": bw, "floor_MB_per_s": floor, "efficiency": eff,
                     "memory_floor_MB_per_s": mfloor, "memory_floor_efficiency": bw / mfloor}
        verdict = "reference" if name.startswith("plain") else "stated" if "cold" in name else \
            f"target >= {TARGET}: {'met' if eff >= TARGET else 'MISSED'}"
        print(f"  {name:42s} {secs:7.3f} s {bw:8.0f} MB/s  efficiency {eff:5.2f} ({verdict}); "
              f"{bw / mfloor:4.2f} of the memory floor")
        if data is not None:  # where the seconds go: the data phase and the rest
            deff = size / data / floor
            print(f"    data phase {data:6.3f} s (efficiency {deff:4.2f}); coordination {secs - data:6.3f} s "
                  f"({(secs - data) / secs:4.0%})")
            out[name].update(data_phase_seconds=data, data_phase_efficiency=deff, coordination_seconds=secs - data)
            own = {"restartlab sync save": "restartlab", "restartlab sync save, --ckpt-format raw": "raw"}.get(name)
            if own and f"{own}_dcp" in m:  # the coordination split: inside dcp.save, and restartlab's around it
                d, r, sd = m[f"{own}_dcp"], m[f"{own}_own"], m[f"{own}_state_dict"]
                print(f"      slowest rank's: in dcp.save beyond the data (planning, .metadata) {d:6.3f} s; "
                      f"get_state_dict {sd:6.3f} s; restartlab's own (agreement, file lists, manifest, .complete) "
                      f"{r:6.3f} s")
                out[name].update(dcp_coordination_seconds=d, state_dict_seconds=sd, restartlab_coordination_seconds=r)
    mpibench.write_json(a, dict(res, efficiency=out))
    return 0


if __name__ == "__main__":
    sys.exit(mpibench.main(__doc__, 3, "save/load efficiency", __file__, worker, report))
