"""Read the records of an offline W&B run file (`run-<id>.wandb`) without the network or the wandb service.

The file is a LevelDB-style log of `wandb_internal_pb2.Record` protobufs. It starts with a 7-byte
header: ":W&B" + magic + version. Then come 32 KiB blocks of chunks. Each chunk has a crc32c, a
little-endian length and a type: full, first, middle, last. wandb 0.30 ships no Python reader, so
the tests use this one to check what an offline run holds."""
import glob
import json
import os
import struct

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def chunks(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    pos, parts = HEADER, []
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # the rest of a block too small for a chunk header is padding
            pos += room
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        body = data[pos + 7:pos + 7 + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            break
        if kind == FULL:
            yield body
        elif kind == FIRST:
            parts = [body]
        elif kind == MIDDLE:
            parts.append(body)
        elif kind == LAST:
            parts.append(body)
            yield b"".join(parts)


def records(run_file):
    from wandb.proto import wandb_internal_pb2 as pb
    for raw in chunks(run_file):
        r = pb.Record()
        r.ParseFromString(raw)
        yield r


def offline_runs(root):
    """{run file: {"run": Run record, "config": {...}, "history": [{key: value}], "summary": {...}}}"""
    out = {}
    for p in sorted(glob.glob(os.path.join(root, "**", "offline-run-*", "run-*.wandb"), recursive=True)):
        run = {"run": None, "config": {}, "history": [], "files": []}
        for r in records(p):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run["run"] = r.run
                run["config"].update({i.key: json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "config":
                run["config"].update({i.key: json.loads(i.value_json) for i in r.config.update})
            elif kind == "history":
                run["history"].append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                                       for i in r.history.item})
            elif kind == "files":
                run["files"] += [f.path for f in r.files.files]
        out[p] = run
    return out
