"""A plain training program that restartlab has never seen: no torch, no restartlab, a deterministic
"model" (a vector of floats), rank 0 prints `step N loss X` and saves every --save-every steps.
The ranks take their rank from RANK (torchrun-style); every rank steps, rank 0 logs and saves.

  --save atomic  writes a checkpoint (state.json, then done) into a hidden temp dir, fsyncs it,
                 renames it to ckpt-N (a checkpoint is either absent or whole) and loads the
                 highest ckpt-N.
  --save torn    writes ckpt-N/state.json in place, chunk by chunk, then ckpt-N/done, and loads
                 the highest ckpt-N without looking at done (as many real programs do).

A save takes --save-time seconds (a big checkpoint, written in 10 chunks), a step --step-time.
--abort-at-exit RANK: that rank dies of SIGABRT after the last step (a crash at exit).
--log-file PATH: rank 0 also appends a record per step there, as a JSON object ({"train/iter": N,
"train/loss": X}; PATH ends .jsonl) or a CSV row (columns step, train_loss; PATH ends .csv)."""
import argparse
import json
import os
import re
import sys
import time

PAD = 640 * 1024  # bytes of padding before the state: a checkpoint of ~640 KiB


def step(x, n):
    return [(v * 0.999 + ((n * 7 + i) % 13) * 1e-3) for i, v in enumerate(x)]


def loss_of(x):
    return sum(v * v for v in x) / len(x)


def checkpoints(d):
    out = []
    for name in os.listdir(d) if os.path.isdir(d) else []:
        m = re.fullmatch(r"ckpt-(\d+)", name)
        if m:
            out.append((int(m.group(1)), os.path.join(d, name)))
    return sorted(out)


def write_chunks(path, payload, save_time):
    """The JSON (padded to make the file big enough to take time, the state last) in 10 chunks,
    flushed one by one: a reader sees a partial file while the save runs."""
    text = json.dumps(dict(pad=" " * PAD, **payload))
    size = len(text) // 10 + 1
    with open(path, "w") as f:
        for i in range(0, len(text), size):
            f.write(text[i:i + size])
            f.flush()
            time.sleep(save_time / 10)
        os.fsync(f.fileno())


def save(d, n, x, mode, save_time):
    payload = {"step": n, "x": x}
    if mode == "atomic":
        tmp = os.path.join(d, f".tmp-ckpt-{n}")
        os.makedirs(tmp, exist_ok=True)
        write_chunks(os.path.join(tmp, "state.json"), payload, save_time)
        with open(os.path.join(tmp, "done"), "w") as f:
            f.write("ok\n")
        os.replace(tmp, os.path.join(d, f"ckpt-{n}"))
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    else:
        final = os.path.join(d, f"ckpt-{n}")
        os.makedirs(final, exist_ok=True)
        write_chunks(os.path.join(final, "state.json"), payload, save_time)
        with open(os.path.join(final, "done"), "w") as f:
            f.write("ok\n")


def log_record(path, n, loss):
    """One record appended to the log file (a CSV gets its header first when it is new)."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a") as f:
        if path.endswith(".csv"):
            f.write(("step,train_loss\n" if new else "") + f"{n},{loss:.12f}\n")
        else:
            f.write(json.dumps({"train/iter": n, "train/loss": round(loss, 12)}) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--save", choices=("atomic", "torn"), default="atomic")
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--save-time", type=float, default=0.3)
    p.add_argument("--log-file", default=None)
    p.add_argument("--abort-at-exit", type=int, default=None, metavar="RANK",
                   help="that rank aborts (SIGABRT) after the last step, as a process whose gloo threads "
                        "outlive it does at exit")
    a = p.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    print(f"rank {rank}/{os.environ.get('WORLD_SIZE')} local {os.environ.get('LOCAL_RANK')}", flush=True)
    x, start = [1.0 + i / 10 for i in range(16)], 0
    found = checkpoints(a.ckpt) if a.save_every else []
    if found:
        n, path = found[-1]  # the highest, complete or not
        with open(os.path.join(path, "state.json")) as f:
            state = json.load(f)
        x, start = state["x"], state["step"]
        if rank == 0:
            print(f"resumed from step {start}", flush=True)
    os.makedirs(a.ckpt, exist_ok=True)
    for n in range(start + 1, a.steps + 1):
        time.sleep(a.step_time)
        x = step(x, n)
        if rank == 0:
            print(f"step {n} loss {loss_of(x):.12f}", flush=True)
            if a.log_file:
                log_record(a.log_file, n, loss_of(x))
            if a.save_every and n % a.save_every == 0:
                t0 = time.time()
                save(a.ckpt, n, x, a.save, a.save_time)
                print(f"saved step {n} in {time.time() - t0:.3f}s", flush=True)
    if a.abort_at_exit == rank:
        # the ranks of this program share no collective: this one waits for rank 0's last save (a barrier's
        # stand-in), then aborts
        last = os.path.join(a.ckpt, f"ckpt-{a.steps}")
        deadline = time.time() + 60
        while a.save_every and a.steps % a.save_every == 0 and not os.path.isdir(last) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # after rank 0's last lines
        os.abort()
    return 0


if __name__ == "__main__":
    sys.exit(main())
