"""Training-state fingerprints from any PyTorch program, without changing it: each optimizer step
writes one line of contracts.state_record into the attempt's state-<rank>.jsonl.

Reached from outside the program: torch's global optimizer step pre-hook
(torch.optim.optimizer.register_optimizer_step_pre_hook: every optimizer of the process, whoever
made it), the DataLoader's iterator (each batch it yields) and GradScaler.step (its scale); the
zero-lr step torch.distributed.checkpoint's get_state_dict takes to initialise an optimizer before a
load is not counted (torch 2.13's _init_optim_state). A Python rank of yours gets it through runtime/linebuf/sitecustomize.py once the program imports
torch (when restartlab sets RESTARTLAB_STATE_DIR); the bundled trainer installs it itself.

What a record holds, taken as the step begins (contracts/state_record.py says why then): the
parameters and every optimizer state tensor (this rank's: a DTensor's local shard) as crc32s of
their bytes (on an accelerator, a fingerprint computed there: device_digest), on the attempt's
first FIRST steps and at steps 1, N+1, 2N+1, ... (N: RESTARTLAB_STATE_EVERY, collection.state_every:
they read every byte of the rank's state; bench/state_probe.py measures what that costs); on every step the learning rate of each param group, the
optimizer's step count (Adam's `step`), the RNG streams (Python, NumPy's global one when NumPy is
loaded, torch's CPU one, CUDA's or XPU's when initialised: not verified here, no GPU), the latest
batch a DataLoader gave (with gradient accumulation, the step's last micro-batch) and the scaler's
scale. A probe that fails says so once on stderr and stops; the program never sees it."""
import os
import random
import sys
import threading
import time
import zlib

import torch

try:  # the same crc32 as zlib's, several times faster (a restartlab dependency; zlib where it is missing)
    from isal.isal_zlib import crc32
except ImportError:
    from zlib import crc32

from restartlab.contracts import layout
from restartlab.contracts.envvars import STATE_DIR_VAR, STATE_EVERY_VAR
from restartlab.contracts.state_record import StateRecord

FIRST = 2  # an attempt's first steps always carry the heavy crcs: a resume's are compared there
DCP_STATE_DICT = os.path.join("distributed", "checkpoint", "state_dict.py")


def tensors_crc(tensors, start: int = 0) -> int:
    """crc32 of the tensors' bytes, in order, from `start` (a DTensor's local shard). Host tensors
    only; device_digest is the accelerator's."""
    crc = start
    for t in tensors:
        t = t.detach()
        if hasattr(t, "to_local"):
            t = t.to_local()
        t = t.contiguous().reshape(-1)
        if t.numel():
            crc = crc32(t.cpu().view(torch.uint8).numpy(), crc)
    return crc


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
CHUNK = 1 << 24  # elements widened to int64 at a time (128 MiB of scratch)


def device_digest(tensors) -> int:
    """A fingerprint computed where the tensors are, so that no state crosses to the host: per
    tensor, the wrapping int64 sum of its elements' bit patterns and of their squares, weighted by
    the tensor's position; the host gets two numbers per call. Any single changed element changes
    it; a permutation within a tensor would not. Not verified on a GPU here (none on this machine);
    tests/test_resume_state.py runs it on host tensors."""
    acc = None
    for i, t in enumerate(tensors, 1):
        t = t.detach()
        if hasattr(t, "to_local"):
            t = t.to_local()
        v = t.contiguous().reshape(-1)
        if not v.numel():
            continue
        v = v.view(_BITS[v.element_size()])
        for c in v.split(CHUNK):
            c = c.to(torch.int64)
            part = torch.stack([c.sum(), (c * c).sum()]) * i
            acc = part if acc is None else acc + part
    return 0 if acc is None else zlib.crc32(repr(acc.tolist()).encode())


def digest(tensors) -> str:
    """The state's fingerprint: a crc32 of the bytes on the host, device_digest on an accelerator."""
    tensors = list(tensors)
    on_device = any((t.to_local() if hasattr(t, "to_local") else t).device.type != "cpu" for t in tensors)
    return f"{device_digest(tensors) if on_device else tensors_crc(tensors):08x}"


def _leaves(obj, out):
    """The tensors of a batch (nested tuples, lists, dicts, and objects with tensor attributes)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _leaves(obj[k], out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _leaves(v, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k in sorted(vars(obj)):
            _leaves(vars(obj)[k], out)
    return out


def rng_pieces() -> dict:
    py = zlib.crc32(repr(random.getstate()).encode())
    np_ = None
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            name, keys, pos, has_gauss, cached = np.random.get_state()
            np_ = zlib.crc32(repr((name, pos, has_gauss, cached)).encode(), zlib.crc32(keys.tobytes()))
        except Exception:
            np_ = None
    dev = None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            dev = digest([torch.cuda.get_rng_state()])
        elif hasattr(torch, "xpu") and torch.xpu.is_available() and torch.xpu.is_initialized():
            dev = digest([torch.xpu.get_rng_state()])
    except Exception:
        dev = None
    return {"rng_python": f"{py:08x}", "rng_numpy": None if np_ is None else f"{np_:08x}",
            "rng_torch": digest([torch.get_rng_state()]), "rng_device": dev}


def _num(v):
    if isinstance(v, torch.Tensor):
        return float(v.detach().cpu().reshape(-1)[0]) if v.numel() else None
    return float(v) if isinstance(v, (int, float)) else None


def _in_dcp_init() -> bool:
    """Called from torch.distributed.checkpoint's _init_optim_state (torch 2.13): get_state_dict
    initialises an optimizer that has no state yet (a relaunch, before its load) with one
    optimizer.step() at lr 0: not a training step, and counted as one it would shift every step
    number of the attempt. Told by the calling frames, not by wrapping the function: importing
    torch.distributed.checkpoint to wrap it would add seconds to every rank's start (measured here:
    half of `import torch`'s time), for programs that never use it."""
    f = sys._getframe(2)
    for _ in range(16):
        if f is None:
            return False
        code = f.f_code
        if code.co_name == "_init_optim_state" and code.co_filename.endswith(DCP_STATE_DICT):
            return True
        f = f.f_back
    return False


class Probe:
    def __init__(self, path: str, every: int = 1):
        self.path, self.every = path, max(1, every)
        self.fd = None
        self.opts = {}    # id(optimizer) -> its number (by first step)
        self.steps = {}   # its number -> steps so far in this attempt
        self.batch, self.loader_seen = None, False
        self.scale = None
        self.off = False
        self.lock = threading.Lock()

    def retarget(self, path: str, every: int) -> None:
        """Records of another attempt from here on (its own file and step count)."""
        if path == self.path:
            return
        if self.fd is not None:
            os.close(self.fd)
        self.path, self.every, self.fd = path, max(1, every), None
        self.opts, self.steps = {}, {}
        self.batch, self.loader_seen, self.scale = None, False, None

    def _write(self, rec: StateRecord) -> None:
        if self.fd is None:  # opened at the first record: a process that never steps writes nothing
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self.fd, (rec.to_json() + "\n").encode())  # one write per line: a fork never repeats it

    def _fail(self, e: BaseException) -> None:
        self.off = True
        sys.stderr.write(f"restartlab: training-state fingerprints stopped: {type(e).__name__}: {e}\n")

    def on_batch(self, batch) -> None:
        """The latest batch, held (not fingerprinted) until the next step: a program that skips
        batches by iterating at a resume, or accumulates gradients, pays for one crc a step."""
        if not self.off:
            with self.lock:
                self.batch, self.loader_seen = batch, True

    def pre_step(self, opt, args, kwargs) -> None:
        if self.off or _in_dcp_init():
            return
        try:
            self._record(opt)
        except Exception as e:
            self._fail(e)

    def _record(self, opt) -> None:
        n = self.opts.setdefault(id(opt), len(self.opts))
        k = self.steps[n] = self.steps.get(n, 0) + 1
        # an attempt's first steps, and each step after a multiple of `every` (where a resume from a
        # checkpoint at such a step begins: the baseline has the same step's then)
        heavy = k <= FIRST or (k - 1) % self.every == 0
        params = [p for g in opt.param_groups for p in g["params"]]
        opt_step, moments = None, []
        for p in params:
            st = opt.state.get(p) or {}
            for key in sorted(st):
                v = st[key]
                if key == "step":
                    opt_step = _num(v) if opt_step is None else opt_step
                elif isinstance(v, torch.Tensor):
                    moments.append(v)
        with self.lock:
            batch = f"{tensors_crc(_leaves(self.batch, [])):08x}" if self.loader_seen else None
        pieces = {"lr": [_num(g.get("lr")) for g in opt.param_groups],
                  "opt_step": 0.0 if opt_step is None else opt_step,  # no state yet: no step taken
                  "params": digest(params) if heavy else None,
                  # "empty": no state yet (Adam before its first step) or none kept (plain SGD)
                  "opt_state": (digest(moments) if moments else "empty") if heavy else None,
                  "batch": batch, "scale": self.scale, **rng_pieces()}
        self._write(StateRecord(k, n, time.time(), pieces))


_PROBE = None


def install(out_dir: str, rank, every: int = 1) -> Probe:
    """The probe on every optimizer, DataLoader and GradScaler of this process (once)."""
    global _PROBE
    if _PROBE is not None:  # a rank forked from a warm pool whose probe was installed: this attempt's file
        _PROBE.retarget(layout.Attempt(out_dir).state(rank), every)
        return _PROBE
    probe = _PROBE = Probe(layout.Attempt(out_dir).state(rank), every)
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    register_optimizer_step_pre_hook(probe.pre_step)
    from torch.utils.data import dataloader
    base = dataloader._BaseDataLoaderIter
    nxt = base.__next__

    def __next__(self):
        batch = nxt(self)
        probe.on_batch(batch)
        return batch
    base.__next__ = __next__
    try:
        from torch.amp import GradScaler
    except ImportError:  # older torch
        GradScaler = None
    if GradScaler is not None:
        step = GradScaler.step

        def scaler_step(self, optimizer, *a, **kw):
            if self.is_enabled():
                try:
                    probe.scale = float(self.get_scale())
                except Exception:
                    probe.scale = None
            return step(self, optimizer, *a, **kw)
        GradScaler.step = scaler_step
    return probe


def rank_of(env=os.environ) -> str:
    """This process's rank: torchrun's RANK (rankenv sets it), else the launcher's, else 0."""
    if env.get("RANK", "").isdigit():
        return env["RANK"]
    from restartlab import launchers
    try:
        found = launchers.discover(env)
    except ValueError:
        found = None
    return str(found[0]) if found else "0"


def install_from_env(env=os.environ):
    """install() where restartlab asked for it (RESTARTLAB_STATE_DIR, and RESTARTLAB_STATE_EVERY not
    0); None elsewhere."""
    where, every = env.get(STATE_DIR_VAR), env.get(STATE_EVERY_VAR, "1")
    if not where or every == "0":
        return None
    return install(where, rank_of(env), int(every) if every.isdigit() else 1)
