"""Training-state fingerprints from any PyTorch program, without changing it.

Each optimizer step writes one line of contracts.state_record into the attempt's
state-<rank>.jsonl.

The probe reaches the program from outside, through:

- torch's global optimizer step pre-hook (torch.optim.optimizer.register_optimizer_step_pre_hook).
  It covers every optimizer of the process, whoever made it.
- the DataLoader's iterator (each batch it yields);
- GradScaler.step (its scale).

It does not count the zero-lr step that torch.distributed.checkpoint's get_state_dict takes to
initialise an optimizer before a load (torch 2.13's _init_optim_state). A Python rank of yours gets
the probe through runtime/linebuf/sitecustomize.py once the program imports torch. This happens
when restartlab sets RESTARTLAB_STATE_DIR. The bundled trainer installs the probe itself.

A record is taken as the step begins (contracts/state_record.py says why then). It holds:

- The parameters and every optimizer state tensor, as crc32s of their bytes. These are this
  rank's: a DTensor's local shard. On an accelerator it is a fingerprint computed there
  (device_digest). They come on the attempt's first FIRST steps and at steps 1, N+1, 2N+1, ...
  (N: RESTARTLAB_STATE_EVERY, collection.state_every). They read every byte of the rank's state.
  bench/state_probe.py measures what that costs.
- On every step, the learning rate of each param group and the optimizer's step count (Adam's
  `step`).
- On every step, the RNG streams: Python's, NumPy's global one when NumPy is loaded, torch's CPU
  one, and CUDA's or XPU's when initialised. CUDA's and XPU's are not verified here (no GPU).
- On every step, the latest batch a DataLoader gave. With gradient accumulation, this is the
  step's last micro-batch.
- On every step, the scaler's scale.

A probe that fails says so once on stderr and stops. The program never sees it.

Loads are recorded too (install_load_hooks). The program may call an RNG setter (torch's,
Python's, NumPy's) or an optimizer's or scheduler's load_state_dict. Right after such a call, the
probe writes a record of the pieces that the call set, marked with the load's name. With these
records a resume's verdict tells "restored, then changed before the first step" from "not
restored" (analysis/state_compare.py)."""
import json
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
from restartlab.contracts.envvars import LOSS_LINE_VAR, STATE_DIR_VAR, STATE_EVERY_VAR
from restartlab.contracts.state_record import StateRecord

FIRST = 2  # an attempt's first steps always carry the heavy crcs: a resume's are compared there
HELD = 256  # batches hashed between two steps for a heavy step's whole fingerprint (more: not observed)
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


# Layout-independent fingerprints, for a resume onto another number of ranks (#63.3). Each element
# is weighted by its place in the whole tensor (a DTensor's global offset). The products are summed
# modulo 2**32. The sum over every rank's part is the whole tensor's, however it is sharded. The
# collector adds the ranks' parts (contracts/state_record.whole_tensors).
_K1, _K2, _K3 = -7046029254386353131, -4658895280553007687, 7640891576956012809  # odd 64-bit constants


def _mix(h):
    """A 64-bit finaliser (splitmix64's shape; arithmetic shifts, deterministic) on an int64 tensor."""
    h = (h ^ (h >> 31)) * _K1
    h = (h ^ (h >> 29)) * _K2
    return h ^ (h >> 32)


def _i64(v: int) -> int:
    """A Python int wrapped to a signed 64-bit one (torch refuses a larger scalar)."""
    return (v + (1 << 63)) % (1 << 64) - (1 << 63)


def _hex32(v) -> str:
    return f"{int(v) & 0xFFFFFFFF:08x}"


def _bits(t):
    return t.contiguous().view(_BITS[t.element_size()]).to(torch.int64)


MASK = 0xFFFFFFFF  # whole fingerprints are taken modulo 2**32 (contracts/state_record.add32)


def _row_sums(part, wcol):
    """sum(bits(part[r, c]) * wcol[c]) over c for each row r, modulo 2**32 (wrapping int32
    arithmetic; 8-byte elements in int64, reduced). On the host a NumPy matrix-vector product: one
    pass (torch's integer multiply and sum take several times longer here)."""
    size = part.element_size()
    if part.device.type == "cpu":
        import numpy as np
        a = part.contiguous().view(_BITS[size]).numpy()
        if size == 8:
            return torch.from_numpy((a @ wcol.numpy()) & MASK)
        return torch.from_numpy((a.astype(np.int32, copy=False) @ wcol.numpy().astype(np.int32)).astype(np.int64) & MASK)
    return (_bits(part) * wcol).sum(dim=1) & MASK


def _mesh_key(mesh):
    """A mesh as a dict key: itself (torch hashes a mesh by its ranks and layout), else its id."""
    try:
        hash(mesh)
        return mesh
    except TypeError:
        return id(mesh)


_INDICES: dict = {}  # (mesh, global shape, placements) -> _split_indices: a layout's indices, made once


def _local_indices(t, coord) -> list:
    """_split_indices of DTensor t, once per layout (a model's tensors keep theirs from step to step)."""
    key = (_mesh_key(t.device_mesh), tuple(t.shape), tuple(t.placements))
    if key not in _INDICES:
        _INDICES[key] = _split_indices(t, coord)
    return _INDICES[key]


def _split_indices(t, coord) -> list:
    """For each dimension of DTensor t, the global indices of this rank's local elements along it.

    The indices are int64 tensors. Each sharding placement, left to right along the mesh, splits the
    index list of its dimension. It splits it as torch splits the tensor itself, with the placement's
    own split. So a _StridedShard's rows (FSDP2 over tensor parallel) come out interleaved as they
    are. This rank keeps its piece. The result is checked against torch's own local shape and first
    offset. It raises where they differ, where a placement is not known, or where the values are
    partial sums."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    idx = [torch.arange(n) for n in t.shape]
    for md, p in enumerate(t.placements):
        if p.is_replicate():
            continue
        d, split = getattr(p, "dim", None), getattr(p, "_split_tensor", None)
        if p.is_partial() or d is None or split is None:
            raise ValueError(f"placement {p}: not compared whole")
        pieces, _ = split(idx[d].reshape([1] * d + [-1]), t.device_mesh.size(md), with_padding=False)
        idx[d] = pieces[coord[md]].reshape(-1)
    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    got = tuple(len(x) for x in idx)
    if got != tuple(shape) or any(len(x) and int(x[0]) != o for x, o in zip(idx, offset)):
        raise ValueError(f"the split of {t.placements} is not torch's: {got} against {tuple(shape)} at {tuple(offset)}")
    return idx


_FIRST_COPY: dict = {}  # a mesh -> whether this rank's copy of it counts (_first_copy)


def _first_copy(mesh) -> bool:
    """Whether this rank's mesh is the first copy of it.

    A DTensor on a mesh that does not span the job has a copy on each other slice. An example is
    FSDP's data-parallel slice of a data x tensor-parallel mesh, for the parameters that tensor
    parallelism leaves alone. The copies' ranks hold the same values and must not add them again.
    The copies are laid out by torch from the mesh's own layout (its `_layout.remap_to_tensor`, read
    in torch 2.13.0). This holds for sliced, flattened and unflattened meshes alike. The first copy
    counts.

    Pipeline stages are not told apart. Their slices hold different tensors, but each is taken for
    a copy. So only the first stage's are added."""
    key = _mesh_key(mesh)
    if key not in _FIRST_COPY:
        layout, rank_map = getattr(mesh, "_layout", None), getattr(mesh, "_rank_map", None)
        if layout is None or rank_map is None:
            raise ValueError("this torch's DeviceMesh has no layout: its copies are not known")
        copies = layout.remap_to_tensor(rank_map)
        _FIRST_COPY[key] = mesh.get_rank() in copies.reshape(copies.shape[0], -1)[0].tolist()
    return _FIRST_COPY[key]


def _shard_part(i: int, t) -> tuple:
    """Fingerprint tensor number i of a DTensor.

    Returns a pair:

    - this rank's part of its whole fingerprint;
    - the same, or 0 on a replica that is not the first along a replicated mesh dimension. So the
      sum over ranks counts each element once.

    The whole fingerprint is sum(bits(x[r, c]) * wrow[r] * wcol[c]) modulo 2**32. It runs over the
    global tensor's rows r (its first dimension) and columns c (the rest, flattened). The weights
    are odd and pseudo-random, from the global indices. It is a sum, so any split among ranks gives
    the same total. The weights are odd, so any one changed element changes it. It raises where the
    layout is not known.

    Measured on this machine's CPU (bench/state_probe.py), it takes 2.5 times a crc32's time for one
    tensor of 25 M float32 elements. It takes 3.4 times for a model's many small ones.

    Modulo 2**32, an element's bits times an odd weight keep their trailing zero bits. So several
    elements that change together among round values (many zero low bits) cancel out more often
    than 2**-32. Trained weights and moments have full mantissas."""
    coord = t.device_mesh.get_coordinate()
    if coord is None:
        return 0, 0
    counted = _first_copy(t.device_mesh) and all(not p.is_replicate() or c == 0 for p, c in zip(t.placements, coord))
    local = t.to_local().detach()
    idx = _local_indices(t, coord)
    if tuple(local.shape) != tuple(len(x) for x in idx):
        raise ValueError(f"local shape {tuple(local.shape)} is not {tuple(len(x) for x in idx)}")
    if not local.numel():
        return 0, 0
    if not local.dim():
        local, idx, gshape = local.reshape(1, 1), [torch.zeros(1, dtype=torch.int64)] * 2, (1, 1)
    else:
        gshape = tuple(t.shape)
    dev = local.device
    col = torch.zeros((), dtype=torch.int64, device=dev)  # each local column's global index within a row
    stride = 1
    for d in range(len(idx) - 1, 0, -1):
        col = col + (idx[d].to(dev) * stride).reshape([-1] + [1] * (len(idx) - 1 - d))
        stride *= gshape[d]
    wcol = (_mix(col.reshape(-1) + _i64(i * _K3)) | 1) & MASK
    rows_idx = idx[0].to(dev)
    total = 0
    rows = max(1, CHUNK // max(1, wcol.numel()))
    for a in range(0, local.shape[0], rows):
        part = local[a:a + rows].reshape(min(rows, local.shape[0] - a), -1)
        wrow = (_mix(rows_idx[a:a + part.shape[0]] + _i64((i + 1) * _K2)) | 1) & MASK
        total += int((_row_sums(part, wcol) * wrow).sum())  # wrapping int64: exact modulo 2**32
    return total & MASK, (total & MASK) if counted else 0


_WHOLE_OFF = []  # the first error of a whole fingerprint (said once on stderr)


def _softly(fn):
    """fn(), or None where it fails (a layout the whole fingerprints do not know): said once on
    stderr; the other pieces go on."""
    try:
        return fn()
    except Exception as e:
        if not _WHOLE_OFF:
            _WHOLE_OFF.append(e)
            sys.stderr.write(f"restartlab: whole-state fingerprints not taken: {type(e).__name__}: {e}\n")
        return None


def fingerprint(tensors) -> tuple:
    """(this rank's fingerprint of the tensors, their whole fingerprint: [the DTensors' part, to be
    summed over the ranks; the plain tensors' digest, each rank's whole copy], None where there are
    none). Plain tensors only: the digest, as always. DTensors: their global-position hashes (one
    pass serves both), the plain ones' digest beside; where their layout is not known, the digest
    of every local shard and no whole fingerprint."""
    tensors = list(tensors)
    dt, plain = [], []
    for i, t in enumerate(tensors):
        if hasattr(t, "to_local") and hasattr(t, "placements"):
            dt.append((i, t))
        else:
            plain.append(t)
    pd = digest(plain) if plain else None
    if not dt:
        return pd, [None, pd]
    parts = _softly(lambda: [_shard_part(i, t) for i, t in dt])
    if parts is None:
        return digest(tensors), None
    mine = "w" + _hex32(sum(p[0] for p in parts))  # "w": the weighted sum, not a crc (records of older probes)
    return (mine if pd is None else f"{mine}:{pd}"), [_hex32(sum(p[1] for p in parts)), pd]


def samples_part(batch):
    """Fingerprint a batch as a set of samples.

    Returns [the fingerprint, how many samples, a sample's width (its elements, all tensors)]. Each
    row of the batch's tensors is hashed as one sample, and the rows' hashes are summed. So the same
    samples give the same sum in any order, split in any way among ranks and micro-batches.

    A batch whose tensors do not share their first dimension counts as one sample. A sample padded
    to the longest in its batch has another width, and another hash, when the batches are split
    otherwise. The verdict does not compare such batches across a change in the number of ranks."""
    leaves = [t.detach() for t in _leaves(batch, [])]
    if leaves and all(x.dim() >= 1 for x in leaves) and \
            len({x.shape[0] for x in leaves}) == 1:
        n = leaves[0].shape[0]
        rows = [x.reshape(n, -1) for x in leaves]
    else:
        n, rows = 1, [x.reshape(1, -1) for x in leaves]
    acc = None
    for i, r in enumerate(rows):
        if not r.numel():
            continue
        pos = torch.arange(r.shape[1], device=r.device) + _i64(i * _K3)
        s = _mix(_bits(r) ^ _mix(pos)).sum(dim=1)
        acc = s if acc is None else acc + s
    width = sum(r.shape[1] for r in rows)
    if acc is None:
        return [_hex32(0), n, width]
    return [_hex32(_mix(acc + _K2).sum()), n, width]


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


def rng_python() -> str:
    return f"{zlib.crc32(repr(random.getstate()).encode()):08x}"


def rng_numpy():
    """NumPy's global RNG, where NumPy is loaded (None elsewhere)."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    try:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        return f"{zlib.crc32(repr((name, pos, has_gauss, cached)).encode(), zlib.crc32(keys.tobytes())):08x}"
    except Exception:
        return None


def rng_device():
    """CUDA's or XPU's RNG where initialised (None elsewhere; not verified here: no GPU)."""
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return digest([torch.cuda.get_rng_state()])
        if hasattr(torch, "xpu") and torch.xpu.is_available() and torch.xpu.is_initialized():
            return digest([torch.xpu.get_rng_state()])
    except Exception:
        return None
    return None


def rng_pieces() -> dict:
    return {"rng_python": rng_python(), "rng_numpy": rng_numpy(),
            "rng_torch": digest([torch.get_rng_state()]), "rng_device": rng_device()}


def _num(v):
    if isinstance(v, torch.Tensor):
        return float(v.detach().cpu().reshape(-1)[0]) if v.numel() else None
    return float(v) if isinstance(v, (int, float)) else None


TORCH_RNG_RESTORERS = (os.path.join("torch", "utils", "checkpoint.py"), os.path.join("torch", "random.py"))


def _in_torch_rng_restore() -> bool:
    """Called from torch's own save-and-restore of the RNG: activation checkpointing's recompute
    (torch/utils/checkpoint.py, twice a backward) or torch.random.fork_rng. Not a load of the
    program's. Told by the calling frames (the wrapper's caller and a few above it)."""
    f = sys._getframe(3)
    for _ in range(4):
        if f is None:
            return False
        if f.f_code.co_filename.endswith(TORCH_RNG_RESTORERS):
            return True
        f = f.f_back
    return False


def _in_dcp_init() -> bool:
    """Whether this is called from torch.distributed.checkpoint's _init_optim_state (torch 2.13).

    get_state_dict initialises an optimizer that has no state yet (a relaunch, before its load). It
    does so with one optimizer.step() at lr 0. That is not a training step. Counted as one, it would
    shift every step number of the attempt.

    The calling frames tell it, not a wrapper around the function. Importing
    torch.distributed.checkpoint to wrap it would add seconds to every rank's start, for programs
    that never use it. Measured here, that is half of `import torch`'s time."""
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
        self.batch, self.loader_seen, self.batch_pos = None, False, None
        self.held = []    # the samples_part of each batch since the last step, before a heavy step (None: not observed)
        self.scale = None
        self.off = self.dead = False  # off: no fingerprints (a failure); dead: no records (the file)
        self.pid = os.getpid()
        self.pending = {}  # id(optimizer) -> its load records, until its first step numbers it
        self.lock = threading.Lock()

    def retarget(self, path: str, every: int) -> None:
        """Records of another attempt from here on (its own file and step count)."""
        if path == self.path:
            return
        if self.fd is not None:
            os.close(self.fd)
        self.path, self.every, self.fd = path, max(1, every), None
        self.opts, self.steps = {}, {}
        self.batch, self.loader_seen, self.scale, self.held, self.batch_pos = None, False, None, [], None
        self.pending, self.pid = {}, os.getpid()

    def _write(self, rec: StateRecord) -> None:
        self._write_line(rec.to_json())

    def _write_line(self, line: str) -> None:
        if self.fd is None:  # opened at the first record: a process that never steps writes nothing
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self.fd, (line + "\n").encode())  # one write per line: a fork never repeats it

    def _fail(self, e: BaseException) -> None:
        """Stop the fingerprints (said once).

        The steps go on being recorded without them. Where the steps come from these records, a
        failed fingerprint must not look like a hang."""
        if not self.off:
            sys.stderr.write(f"restartlab: training-state fingerprints stopped: {type(e).__name__}: {e}\n")
        self.off = True

    def on_batch(self, batch, pos=None) -> None:
        """Hold the latest batch, not fingerprinted, until the next step.

        So a program that skips batches by iterating at a resume, or accumulates gradients, pays for
        one crc a step. Where the next step is heavy, each batch's samples are also hashed as the
        batch comes (samples_part). This is the whole fingerprint, kept small. At most HELD batches
        a step are hashed. With more, the batches are not observed.

        `pos` is [its number in its epoch (1: the first), the batches in the epoch], where a
        DataLoader's iterator says. The verdict tells an epoch's reset or skip by it."""
        if self.off:
            return
        heavy = self.heavy(self.steps.get(0, 0) + 1)
        part = _softly(lambda: samples_part(batch)) if heavy and self.held is not None and len(self.held) < HELD \
            else None
        with self.lock:
            self.batch, self.loader_seen, self.batch_pos = batch, True, pos
            if heavy and self.held is not None:
                self.held = None if part is None else self.held + [part]  # too many, or a failure: not observed

    def pre_step(self, opt, args, kwargs) -> None:
        if self.dead or _in_dcp_init():
            return
        try:
            n = self.opts.setdefault(id(opt), len(self.opts))
            k = self.steps[n] = self.steps.get(n, 0) + 1
            for rec in self.pending.pop(id(opt), []):  # its loads, numbered now (optimizers: by their first step)
                self._write(rec._replace(opt=n))
            pieces = {}
            if not self.off:
                try:
                    pieces = self._pieces(opt, k)
                except Exception as e:
                    self._fail(e)
            self._write(StateRecord(k, n, time.time(), pieces))
        except Exception as e:  # the file cannot be written: nothing more is recorded
            self.dead = True
            sys.stderr.write(f"restartlab: training-state records stopped: {type(e).__name__}: {e}\n")

    def heavy(self, k: int) -> bool:
        """Whether step k is heavy: an attempt's first steps, and each step after a multiple of `every`.

        A resume from a checkpoint at such a multiple begins at that step. The baseline has the same
        step's fingerprints then."""
        return k <= FIRST or (k - 1) % self.every == 0

    def _pieces(self, opt, k: int) -> dict:
        heavy = self.heavy(k)
        params = [p for g in opt.param_groups for p in g["params"]]
        with self.lock:
            batch = f"{tensors_crc(_leaves(self.batch, [])):08x}" if self.loader_seen else None
            held, self.held, pos = self.held, [], self.batch_pos
        mine, whole = fingerprint(params) if heavy else (None, None)
        pieces = {**opt_pieces(opt, heavy), "params": mine, "batch": batch, "scale": self.scale, **rng_pieces(),
                  "batch_pos": pos, "threads": torch.get_num_threads()}
        if heavy:  # the same, whole: comparable across a change in the number of ranks
            pieces["params_g"] = whole
            pieces["batch_g"] = None if not self.loader_seen or held is None else held
        return pieces

    def on_loss_line(self, loss: str) -> None:
        """Record the loss the program printed (watch_output).

        It writes one record {step: the optimizer steps so far, logged_loss}. This is not a step
        record (contracts/state_record.py). The tap books it at that step."""
        if self.dead:
            return
        try:
            self._write_line(json.dumps({"step": self.steps.get(0, 0), "opt": 0, "time": time.time(),
                                         "logged_loss": loss}, separators=(",", ":")))
        except Exception:
            pass

    def on_load(self, what: str, pieces, of_opt=None) -> None:
        """Record a load the program made, once it has returned.

        `what` is a contracts.state_record.LOADS name. The record holds the pieces the load set,
        fingerprinted as a step's record would be (`pieces()`). With them, a resume's verdict tells
        "restored, then changed before the first step" from "not restored". So only these loads are
        recorded:

        - loads before this attempt's first optimizer step;
        - loads in the process that installed the probe, not in a DataLoader worker it forked;
        - not torch's own save-and-restore of the RNG (activation checkpointing, fork_rng:
          _in_torch_rng_restore).

        An optimizer's load (`of_opt()` gives its optimizer) is held until that optimizer's first
        step numbers it."""
        if self.off or self.steps or os.getpid() != self.pid or _in_torch_rng_restore():
            return
        try:
            opt = None if of_opt is None else of_opt()
            rec = StateRecord(0, 0, time.time(), pieces(), what)
            if opt is None:
                self._write(rec)
            elif id(opt) in self.opts:
                self._write(rec._replace(opt=self.opts[id(opt)]))
            else:
                self.pending.setdefault(id(opt), []).append(rec)
        except Exception as e:
            self._fail(e)


def _moments(opt) -> list:
    """Every optimizer state tensor but the step count, in the param groups' order."""
    return [st[key] for g in opt.param_groups for p in g["params"] for st in [opt.state.get(p) or {}]
            for key in sorted(st) if key != "step" and isinstance(st[key], torch.Tensor)]


def opt_pieces(opt, heavy: bool = True) -> dict:
    """An optimizer's pieces: its param groups' learning rates, its step count (Adam's `step`) and,
    where `heavy`, a fingerprint of its state tensors (the moments)."""
    opt_step = None
    for g in opt.param_groups:
        for p in g["params"]:
            st = opt.state.get(p) or {}
            if "step" in st and opt_step is None:
                opt_step = _num(st["step"])
    moments = _moments(opt) if heavy else []
    mine, whole = fingerprint(moments) if moments else ("empty", None)
    out = {"lr": [_num(g.get("lr")) for g in opt.param_groups],
           "opt_step": 0.0 if opt_step is None else opt_step,  # no state yet: no step taken
           # "empty": no state yet (Adam before its first step) or none kept (plain SGD)
           "opt_state": mine if heavy else None}
    if heavy:
        out["opt_g"] = whole if moments else [None, None]
    return out


def _after(owner, name: str, what: str, pieces, of_opt=None) -> None:
    """Wrap owner.name so that the probe records the load `what` once the call returns.

    `pieces(*args)` fingerprints what the call set. `of_opt(*args)` gives the optimizer it belongs
    to. The record takes that optimizer's number, as its steps do."""
    orig = getattr(owner, name)

    def wrapper(*args, **kwargs):
        out = orig(*args, **kwargs)
        if _PROBE is not None:
            _PROBE.on_load(what, lambda: pieces(*args), None if of_opt is None else lambda: of_opt(*args))
        return out
    wrapper.__wrapped__ = orig
    wrapper.__name__, wrapper.__doc__ = getattr(orig, "__name__", name), getattr(orig, "__doc__", None)
    setattr(owner, name, wrapper)


def install_load_hooks() -> None:
    """Watch the loads a resume makes, from outside the program.

    These are the RNG setters (torch's, Python's, NumPy's global one) and any optimizer's and
    scheduler's load_state_dict. The latter is how torch.distributed.checkpoint's set_state_dict
    loads an optimizer. A program that calls them under another name (bound before the probe was
    installed) is not seen. Its pieces read "not restored" as before."""
    import torch.random
    _after(torch.random, "set_rng_state", "torch.set_rng_state", lambda *a: {"rng_torch": digest([torch.get_rng_state()])})
    torch.set_rng_state = torch.random.set_rng_state
    _after(random, "setstate", "random.setstate", lambda *a: {"rng_python": rng_python()})
    np = sys.modules.get("numpy")  # torch imports it where it is installed
    if np is not None:
        _after(np.random, "set_state", "numpy.random.set_state", lambda *a: {"rng_numpy": rng_numpy()})
    for cls in _own_loaders(torch.optim.Optimizer):
        _after(cls, "load_state_dict", "Optimizer.load_state_dict",
               lambda opt, *a, **kw: opt_pieces(opt), of_opt=lambda opt, *a, **kw: opt)
    from torch.optim.lr_scheduler import LRScheduler
    for cls in _own_loaders(LRScheduler):
        _after(cls, "load_state_dict", "LRScheduler.load_state_dict",
               lambda sched, *a, **kw: {"lr": opt_pieces(sched.optimizer, False)["lr"]},
               of_opt=lambda sched, *a, **kw: sched.optimizer)


def _own_loaders(base) -> list:
    """`base` and each subclass defined so far that has a load_state_dict of its own (torch's LambdaLR
    does not call its base's). A subclass defined later with its own is not seen."""
    out, todo = [], [base]
    while todo:
        cls = todo.pop()
        if "load_state_dict" in vars(cls):
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


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
    install_load_hooks()
    from torch.utils.data import dataloader
    base = dataloader._BaseDataLoaderIter
    nxt = base.__next__

    def __next__(self):
        batch = nxt(self)
        try:
            pos = [int(self._num_yielded), len(self)]
        except Exception:  # an iterable dataset has no length
            pos = None
        probe.on_batch(batch, pos)
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
    0); None elsewhere. On rank 0, with RESTARTLAB_LOSS_LINE, the program's loss lines too (watch_output)."""
    where, every = env.get(STATE_DIR_VAR), env.get(STATE_EVERY_VAR, "1")
    if not where or every == "0":
        return None
    rank = rank_of(env)
    probe = install(where, rank, int(every) if every.isdigit() else 1)
    if env.get(LOSS_LINE_VAR) and rank == "0":
        watch_output(probe, env[LOSS_LINE_VAR])
    return probe


class _LossLines:
    """sys.stdout or sys.stderr as it was, also reading each line for the program's loss line.

    `rx` is the loss line's pattern, with a `loss` group. The probe books the loss at this process's
    step count. So a loss line belongs to the step it was printed after, whatever its delay through
    the launcher."""

    def __init__(self, stream, probe, rx):
        self._stream, self._probe, self._rx, self._part = stream, probe, rx, ""

    def write(self, text):
        n = self._stream.write(text)
        try:
            *lines, part = (self._part + text).split("\n")  # a line ends with its newline: the rest waits
            self._part = part[-4096:]
            for line in lines:
                m = self._rx.search(line.strip())
                if m:
                    self._probe.on_loss_line(m.group("loss"))
        except Exception:  # never the program's failure (bytes written to a text stream: not read)
            pass
        return n

    def __getattr__(self, name):
        return getattr(self._stream, name)


def watch_output(probe, rx: str) -> None:
    """The program's loss lines read where it writes them (sys.stdout and sys.stderr, wrapped once)."""
    import re
    try:
        compiled = re.compile(rx)
    except re.error as e:
        sys.stderr.write(f"restartlab: loss line not watched: {e}\n")
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _LossLines):
            stream._probe, stream._rx = probe, compiled
        elif stream is not None:
            setattr(sys, name, _LossLines(stream, probe, compiled))
