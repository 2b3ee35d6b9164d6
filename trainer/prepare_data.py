"""Write a token file for `--data` from any text files, with a byte-level tokenizer.

The tokenizer needs no downloads and no vocabulary file. Each byte is a token (0-255). Each input
file ends with an end-of-text token (256). So a model needs a vocabulary of at least 257, and
every preset has more.

    python -m restartlab.trainer.prepare_data OUT.bin IN.txt [IN2.txt ...] [--dtype uint16]

OUT.bin is a flat array of token ids (nanoGPT's layout, no header). OUT.bin.json beside it
records the dtype, token count and vocabulary, which `--data-dtype auto` reads. The script is
torch-free (numpy), so it runs on a login node. It streams, so inputs may be larger than memory."""
import argparse
import json
import os
import sys

import numpy as np

EOT = 256
VOCAB = 257
CHUNK = 1 << 24


def write(out: str, inputs, dtype: str = "uint16") -> int:
    tmp = out + ".tmp"
    n = 0
    with open(tmp, "wb") as f:
        for path in inputs:
            with open(path, "rb") as src:
                while True:
                    chunk = src.read(CHUNK)
                    if not chunk:
                        break
                    f.write(np.frombuffer(chunk, dtype=np.uint8).astype(dtype).tobytes())
                    n += len(chunk)
            f.write(np.array([EOT], dtype=dtype).tobytes())
            n += 1
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out)
    with open(out + ".json", "w") as f:
        json.dump({"dtype": dtype, "tokens": n, "vocab": VOCAB, "tokenizer": "bytes",
                   "inputs": [os.path.abspath(p) for p in inputs]}, f, indent=1)
    return n


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m restartlab.trainer.prepare_data",
                                description="byte-level token file for the trainer's --data")
    p.add_argument("out")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--dtype", choices=("uint16", "uint32"), default="uint16")
    a = p.parse_args(argv)
    for path in a.inputs:
        if not os.path.isfile(path):
            p.exit(2, f"{p.prog}: error: {path}: no such file\n")
    try:
        n = write(a.out, a.inputs, a.dtype)
    except OSError as e:
        p.exit(2, f"{p.prog}: error: {e.filename or a.out}: {e.strerror}\n")
    print(f"{a.out}: {n:,} tokens ({a.dtype}, byte-level, vocabulary {VOCAB}) from {len(a.inputs)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
