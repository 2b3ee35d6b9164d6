"""A failure ingredient for any PyTorch program: one rank's checkpoint writes made slow.

A kill can then find that rank's file half-written, or not yet begun, while the other ranks have
finished theirs. Some frameworks mark a checkpoint done from one rank without waiting for the
others, as DeepSpeed's `latest` file and the Hugging Face Trainer's trainer_state.json do. Such a
framework then points at a torn checkpoint.

The scenario sets it (failures.slow_writes: {rank: R, seconds: S, hold: inside|before}). The
supervisor passes it to the ranks as RESTARTLAB_SLOW_WRITES=R:S (hold inside) or R:S:before. A
Python rank of yours installs it when its program imports torch. The rank's sitecustomize does
this (runtime/linebuf/). A warm-forked rank does it in its fork. It acts on the rank whose RANK is
R. RANK is the torchrun-style variable restartlab gives your ranks. There, `torch.save` to a path
works as follows:

- inside: it opens the path at once. The path is empty from the call on, as torch.save's own
  writer opens it before it writes. It has torch.save write the file whole in a private temp dir
  ($TMPDIR). Then it writes the first half of the bytes to the path, flushes, sleeps S seconds
  and writes the rest. The file exists torn for S seconds. Then it is byte for byte the file
  torch.save would have written.
- before: it sleeps S seconds, then calls torch.save. For S seconds the file is not there at all
  (a rank late to its save). Then it is torch.save's own.

A file object given to torch.save is not slowed. Neither are DCP's writer and safetensors. Each
slowed write says so on the rank's standard error."""
import os
import shutil
import sys
import tempfile
import time

from restartlab.contracts.envvars import SLOW_WRITES_VAR as VAR
from restartlab.contracts.envvars import parse_slow_writes as parse  # the variable's one reader


def install(seconds: float, hold: str = "inside") -> None:
    import torch
    if getattr(torch.save, "_restartlab_slow", None) is not None:
        return
    whole = torch.save

    def save(obj, f, *args, **kwargs):
        if not isinstance(f, (str, os.PathLike)):
            return whole(obj, f, *args, **kwargs)
        if hold == "before":
            sys.stderr.write(f"restartlab: slow write: {os.fspath(f)} not begun for {seconds:g} s\n")
            sys.stderr.flush()
            time.sleep(seconds)
            return whole(obj, f, *args, **kwargs)
        # The path is there, empty, from the call on, because torch.save opens it before it writes.
        # A file that shows only when its first half does would look like a save that has finished.
        # That is how a reader listing the folder meanwhile would see it, with DeepSpeed's other
        # shards all there and whole.
        with open(f, "wb") as out:
            # torch.save names the archive inside the file after the file. So it is written whole
            # under the same name in a private temp dir. The bytes are then the ones it would have
            # written in place.
            tmp = tempfile.mkdtemp(prefix="rl-slow-")
            try:
                staged = os.path.join(tmp, os.path.basename(os.fspath(f)))
                whole(obj, staged, *args, **kwargs)
                with open(staged, "rb") as src:
                    data = memoryview(src.read())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            half = len(data) // 2
            out.write(data[:half])
            out.flush()
            sys.stderr.write(f"restartlab: slow write: {os.fspath(f)} held half-written ({half} of {len(data)} "
                             f"bytes) for {seconds:g} s\n")
            sys.stderr.flush()
            time.sleep(seconds)
            out.write(data[half:])

    save._restartlab_slow = seconds
    torch.save = save


def install_from_env(env=os.environ) -> bool:
    """Install on this rank when RESTARTLAB_SLOW_WRITES names it; True when installed."""
    try:
        want = parse(env.get(VAR, ""))
        rank = int(env.get("RANK", "-1"))
    except ValueError as e:
        sys.stderr.write(f"restartlab: slow writes off: {e}\n")
        return False
    if want is None or want[0] != rank:
        return False
    install(want[1], want[2])
    return True
