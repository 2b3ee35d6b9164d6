"""A failure ingredient for any PyTorch program: one rank's checkpoint writes made slow, so that a
kill can find that rank's file half-written, or not yet begun, while the other ranks have finished
theirs (a framework that marks a checkpoint done from one rank without waiting for the others, as
DeepSpeed's `latest` file and the Hugging Face Trainer's trainer_state.json do, then points at a
torn checkpoint).

Set by the scenario (failures.slow_writes: {rank: R, seconds: S, hold: inside|before}); the
supervisor passes it to the ranks as RESTARTLAB_SLOW_WRITES=R:S (hold inside) or R:S:before, and a
Python rank of yours installs it when its program imports torch (the rank's sitecustomize,
runtime/linebuf/; a warm-forked rank in its fork). On the rank whose RANK (the torchrun-style
variable restartlab gives your ranks) is R, `torch.save` to a path:
  inside  opens the path at once (empty from the call on, as torch.save's own writer opens it
          before it writes), has torch.save write the file whole in a private temp dir ($TMPDIR),
          then writes the first half of its bytes to the path, flushes, sleeps S seconds, writes
          the rest: the file exists torn for S seconds, and is then byte for byte the file
          torch.save would have written;
  before  sleeps S seconds, then calls torch.save: for S seconds the file is not there at all (a
          rank late to its save), then it is torch.save's own.
A file object given to torch.save, DCP's writer and safetensors are not slowed. Each slowed write
says so on the rank's standard error."""
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
        # the path is there, empty, from the call on: torch.save opens it before it writes, and a
        # file that shows only when its first half does would look, to a reader listing the folder
        # meanwhile (DeepSpeed's other shards: all there and whole), like a save that has finished
        with open(f, "wb") as out:
            # torch.save names the archive inside the file after the file: written whole under the
            # same name in a private temp dir, so the bytes are the ones it would have written in place
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
