"""The training step inside a checkpoint written by torch.save (a zip: data.pkl holds the pickled
object, tensors are separate entries), read without torch and without running anything the pickle
names: every class it asks for is a stand-in (collections.OrderedDict excepted), every tensor
storage None. A file whose zip directory does not read (written last: a save cut short) gives
None. For frameworks whose checkpoint names do not carry the step (Lightning's last.ckpt)."""
import collections
import os
import pickle
import zipfile
from typing import Callable, Dict, Optional

STEP_KEYS = ("global_step", "step")
MAX_PICKLE_BYTES = 64 << 20  # data.pkl of a checkpoint is small (the tensors are elsewhere).
# What a file said, by its identity and last change. The fuzz lists the checkpoints every 5 ms.
# A finished file says the same each time. One being written changes size or mtime.
_SEEN: Dict[tuple, object] = {}
_SEEN_MAX = 4096


class _Stub:
    """Whatever the pickle names. It is built from any arguments.

    It keeps the state the pickle gives it, to be read and never acted on. The Trainer's
    training_args.bin holds its process count there."""

    def __init__(self, *args, **kwargs):
        self._state = None

    def __setstate__(self, state):
        self._state = state

    def __call__(self, *args, **kwargs):
        return _Stub()


class _Unpickler(pickle.Unpickler):
    SAFE = {("collections", "OrderedDict"): collections.OrderedDict}

    def find_class(self, module, name):
        return self.SAFE.get((module, name)) or type(name, (_Stub,), {})

    def persistent_load(self, pid):
        return None


def _once(path: str, what: str, read: Callable[[str], object]):
    """read(path), or what it gave for the same file unchanged since (device, inode, size, mtime)."""
    try:
        st = os.stat(path)
    except OSError:
        return read(path)
    key = (what, path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    said = _SEEN.get(key, _SEEN)  # (the dict itself: not seen; it may be cleared by another thread)
    if said is _SEEN:
        said = read(path)
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[key] = said
    return said


def whole(path: str) -> bool:
    """True when the torch.save file's zip directory reads (it is written last: a file cut short
    has none) and lists data.pkl."""
    return _once(path, "whole", _whole)


def _whole(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n == "data.pkl" or n.endswith("/data.pkl") for n in z.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def read_step(path: str) -> Optional[int]:
    """The top-level global_step (or step) of a torch.save file; None when it does not read."""
    found = read_ints(path, STEP_KEYS)
    return next((found[k] for k in STEP_KEYS if k in found), None)


def read_ints(path: str, keys) -> Dict[str, int]:
    """The top-level integers of a torch.save file's dict under `keys` ({} when it does not read):
    DeepSpeed's model states say dp_world_size and mp_world_size."""
    ints = _once(path, "ints", _top_ints)
    return {k: ints[k] for k in keys if k in ints}


def _ints(d) -> Dict[str, int]:
    return {k: v for k, v in d.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)} \
        if isinstance(d, dict) else {}


_UNREAD = object()


def _load(path: str):
    """The object data.pkl holds (stand-ins for every class), or _UNREAD."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n == "data.pkl" or n.endswith("/data.pkl")), None)
            if name is None or z.getinfo(name).file_size > MAX_PICKLE_BYTES:
                return _UNREAD
            with z.open(name) as f:
                return _Unpickler(f).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            AttributeError, IndexError, KeyError, RecursionError):
        return _UNREAD


def _top_ints(path: str) -> Dict[str, int]:
    return _ints(_load(path))


def read_attr_int(path: str, owner: str, key: str) -> Optional[int]:
    """The integer `key` in the state of an object of class `owner` inside a torch.save file.

    The state is the object's pickled attributes, read one level of objects down from the top. For
    example, the Trainer's training_args.bin is a TrainingArguments. Its distributed_state, an
    accelerate PartialState, says num_processes. None when the file does not read or holds no such
    object or key."""
    return _once(path, f"attr:{owner}.{key}", lambda p: _attr_int(p, owner, key))


def _attr_int(path: str, owner: str, key: str) -> Optional[int]:
    top = _load(path)
    state = getattr(top, "_state", None)
    values = state.values() if isinstance(state, dict) else ()
    for v in (top, *values):
        if type(v).__name__ == owner and isinstance(v, _Stub):
            return _ints(v._state).get(key)
    return None
