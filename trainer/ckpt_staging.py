"""The async save's stager.

It copies each rank's state into host buffers that are allocated once and reused, together with a
DTensor's wrapper. So the training loop blocks only for the copies. On a GPU the copies run on a
side stream into pinned buffers and overlap the next forward/backward. `before_param_update` makes
the training stream wait for them before the optimizer writes the parameters in place. The
background thread waits on `event` before it reads the buffers."""
import contextlib

import torch
from torch.distributed.tensor import DTensor

from restartlab.trainer.testpoints import fault


class HostStager:
    def __init__(self, rank: int):
        self.rank = rank
        self._buffers = {}  # key -> (spec, host buffer, staged tensor over it)
        self._stream = None  # GPU: the side stream the staging copies run on
        self.event = None    # GPU: recorded on it after the last copy of the in-flight save
        self._bytes = None

    def stage_state(self, state, step: int) -> dict:
        """Every part of the training state (a TrainState), staged: {part name: staged state dict}."""
        staged = {}
        with self.stream():
            for i, (name, part) in enumerate(state.parts.items()):
                staged[name] = self.stage(part.state_dict(), name)
                if i == 0:
                    fault("stage", step, self.rank)
        return staged

    def stage(self, obj, key):
        """Copy tensors into reusable host buffers; DTensors keep their metadata. The buffers and
        the DTensor wrappers around them are built on the first save and reused afterwards
        (rebuilding ~200 wrappers per save cost as much as the copy itself)."""
        if isinstance(obj, dict):
            return {k: self.stage(v, f"{key}/{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.stage(v, f"{key}/{i}") for i, v in enumerate(obj))
        if isinstance(obj, torch.Tensor):
            return self._buffer(key, obj)
        return obj

    def _buffer(self, key, t):
        """The staged copy of `t`: a preallocated host tensor (a DTensor over one, for a DTensor)."""
        is_dt = isinstance(t, DTensor)
        local = t.to_local() if is_dt else t
        spec = (local.shape, local.dtype, t.shape, t.placements, t.device_mesh) if is_dt \
            else (local.shape, local.dtype)
        cached = self._buffers.get(key)
        if cached is None or cached[0] != spec:
            buf = torch.empty(local.shape, dtype=local.dtype, device="cpu",
                              pin_memory=local.device.type == "cuda")
            staged = buf
            if is_dt:
                staged = DTensor.from_local(buf, t.device_mesh, t.placements, run_check=False,
                                            shape=t.shape, stride=t.stride())
                # from_local moves a local tensor to the mesh's device (a GPU mesh: a GPU copy of
                # the buffer, made once, so every later staging copy would be invisible to the
                # save; found on an H200). The wrapper must read the host buffer itself, as
                # torch's own CPU staging does (_state_dict_utils._create_cpu_state_dict).
                staged._local_tensor = buf
            cached = self._buffers[key] = (spec, buf, staged)
            self._bytes = None
        if local.device.type == "cuda":
            local.record_stream(self._stream)  # not reused by the allocator before the copy ran
            cached[1].copy_(local.detach(), non_blocking=True)
        else:
            cached[1].copy_(local.detach())
        return cached[2]

    def staged_bytes(self) -> int:
        if self._bytes is None:
            self._bytes = sum(b.numel() * b.element_size() for _, b, _ in self._buffers.values())
        return self._bytes

    @contextlib.contextmanager
    def stream(self):
        """GPU: run the staging copies on a side stream that first waits for everything the
        training stream has queued (the optimizer step that produced this state), and record an
        event after them; the loop goes on without waiting. CPU: the copies are synchronous."""
        if not torch.cuda.is_available():
            self.event = None
            yield
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):
            yield
            self.event = torch.cuda.Event()
            self.event.record(self._stream)

    def before_param_update(self):
        """The "safe to train" guarantee: call before the optimizer next writes parameters or
        optimizer state in place. On a GPU the training stream waits (on the device, the host does
        not block) until the staging copies of the in-flight save have read them; forward and
        backward before it only read them and overlap the copies. No-op on CPU and when the copies
        are known to be done."""
        ev = self.event
        if ev is not None:
            torch.cuda.current_stream().wait_event(ev)
            self.event = None
