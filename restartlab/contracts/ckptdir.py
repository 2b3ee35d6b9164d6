"""The checkpoint-directory contract, readable without torch.

    <ckpt_dir>/step-<N>/  DCP shards, .metadata, manifest.json, then .complete (written last)

Only a step directory with `.complete` (and, when asked, a manifest whose files match on disk)
is resumable. Everybody who asks "which checkpoint?" (trainer rank 0, injector, collector,
pruner) asks here.
"""
import dataclasses
import functools
import json
import os
import re
import shutil
import zlib
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import jsonvalue

try:  # ISA-L's CRC-32: the same checksum as zlib's, ~7x faster here (SIMD), GIL released
    from isal.isal_zlib import crc32
except ImportError:  # a platform without the isal wheel: zlib's, same values
    crc32 = zlib.crc32

STEP_RE = re.compile(r"^step-(\d+)$")
COMPLETE = ".complete"
TRASH_PREFIX = ".deleting-"  # a step directory being pruned (never matches STEP_RE)
MANIFEST = "manifest.json"


def step_dirname(step: int) -> str:
    return f"step-{step:08d}"


def step_path(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, step_dirname(step))


def list_steps(ckpt_dir: str) -> List[int]:
    """All step directories (complete or not), ascending."""
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return []
    steps = []
    for name in names:
        m = STEP_RE.match(name)
        if m and os.path.isdir(os.path.join(ckpt_dir, name)):
            steps.append(int(m.group(1)))
    return sorted(steps)


def is_complete(ckpt_dir: str, step: int) -> bool:
    return os.path.exists(os.path.join(step_path(ckpt_dir, step), COMPLETE))


def complete_markers(ckpt_dir: str) -> List[str]:
    """The .complete markers of every complete checkpoint, in step order."""
    try:
        names = sorted(n for n in os.listdir(ckpt_dir) if STEP_RE.match(n))
    except OSError:
        return []
    found = (os.path.join(ckpt_dir, n, COMPLETE) for n in names)
    return [c for c in found if os.path.exists(c)]


def complete_steps(ckpt_dir: str) -> List[int]:
    return [s for s in list_steps(ckpt_dir) if is_complete(ckpt_dir, s)]


def verify_manifest(step_dir: str, checksums: bool = False) -> Optional[str]:
    """None when every file the manifest lists exists with its size (and crc32 when asked);
    otherwise a sentence saying what is wrong."""
    try:
        with open(os.path.join(step_dir, MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        return f"unreadable {MANIFEST}: {e}"
    for name, info in manifest.get("files", {}).items():
        path = os.path.join(step_dir, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            return f"missing file {name}"
        if size != info["bytes"]:
            return f"{name}: {size} bytes on disk, manifest says {info['bytes']}"
        if checksums and file_crc32(path)["crc32"] != info["crc32"]:
            return f"{name}: checksum mismatch"
    return None


def checked_complete_steps(ckpt_dir: str, checksums: bool = False) -> Iterator[Tuple[int, Optional[str]]]:
    """(step, problem or None) for every complete step, newest first: the manifest checked
    against the files (sizes; crc32 too when asked). Lazy: stop at the first one you take."""
    for step in reversed(complete_steps(ckpt_dir)):
        yield step, verify_manifest(step_path(ckpt_dir, step), checksums=checksums)


def newest_complete_step(ckpt_dir: str, verify: bool = True, checksums: bool = False,
                         log: Optional[Callable[[str], object]] = None) -> Optional[int]:
    """Newest step with `.complete` (and a manifest that matches the files, if `verify`)."""
    if not verify:
        complete = complete_steps(ckpt_dir)
        return complete[-1] if complete else None
    for step, problem in checked_complete_steps(ckpt_dir, checksums):
        if problem is None:
            return step
        if log:
            log(f"skipping {step_dirname(step)}: {problem}")
    return None


def file_crc32(path: str, sink: Optional[IO[bytes]] = None, chunk: int = 1 << 22) -> Dict[str, int]:
    """{"bytes", "crc32"} of a file read once in chunks.

    Each chunk also goes to `sink` (a writable file) when given. So a copy and its checksum cost one
    read."""
    crc, n = 0, 0
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return {"bytes": n, "crc32": crc}
            crc = crc32(b, crc)
            n += len(b)
            if sink is not None:
                sink.write(b)


# ---------------------------------------------------------------- crc32 of a segment
# zlib's CRC-32 is linear: crc(A + B) = shift(crc(A), len(B)) ^ crc(B), where shift multiplies by
# x^(8 len(B)) modulo the CRC polynomial (zlib's crc32_combine). So the checksum of any segment
# follows from the running checksums at its two ends, which a writer gets for free.
_POLY = 0xEDB88320  # reflected


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (reflected bit order, as zlib)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


_X2N = [1 << 30]  # x^(2^k) mod p, for k = 0, 1, ...: x^1 is 1 << 30 in reflected order
for _ in range(63):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


@functools.lru_cache(maxsize=4096)
def _x8n(nbytes: int) -> int:
    """x^(8 nbytes) mod p (cached: a checkpoint's items come in few distinct sizes)."""
    p, k, n = 1 << 31, 3, nbytes  # 1 << 31 is x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 63], p)
        n >>= 1
        k += 1
    return p


def crc32_shift(crc: int, nbytes: int) -> int:
    """crc * x^(8 nbytes) mod p: what appending nbytes bytes does to crc before they count."""
    return _multmodp(_x8n(nbytes), crc) if crc else 0


def crc32_segment(crc_to_start: int, crc_to_end: int, length: int) -> int:
    """crc32 of bytes [start, start + length) from the running crc32 up to start and up to end."""
    return crc_to_end ^ crc32_shift(crc_to_start, length)


def same_file_system(a: str, b: str) -> bool:
    """Whether two paths (existing or not: their nearest existing ancestors count) are on one
    file system (the same st_dev)."""
    def dev(p: str) -> int:
        p = os.path.abspath(p)
        while not os.path.exists(p):
            p = os.path.dirname(p)
        return os.stat(p).st_dev
    return dev(a) == dev(b)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: Optional[int] = None) -> None:
    """Write through a tmp file, fsync, rename, then fsync the directory.

    Readers see all of `data` or nothing. When `mode` is given, the file has it from the moment it
    is visible."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


@dataclasses.dataclass(frozen=True)
class Marker:
    """What the bundled trainer's .complete holds (written last, whole: write_atomic). Its one writer
    is mark_complete (trainer/checkpoint.py's rank 0); its one reader read_marker (the collector's
    finalize times)."""
    step: Optional[int] = None
    mode: Optional[str] = None             # sync or async
    save_start: Optional[float] = None     # the save began (epoch s)
    world_size: Optional[int] = None       # the ranks that wrote it
    durable_ts: Optional[float] = None     # the last rank's files were durable (fsync)
    complete_ts: Optional[float] = None    # the marker was written

    @property
    def finalize_s(self) -> Optional[float]:
        """The save's start to its marker; None where either time is missing."""
        if self.save_start is None or self.complete_ts is None:
            return None
        return self.complete_ts - self.save_start

    @classmethod
    def from_json(cls, d: object) -> "Marker":
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        return cls(jsonvalue.integer(d.get("step")), jsonvalue.text(d.get("mode")), jsonvalue.number(d.get("save_start")),
                   jsonvalue.integer(d.get("world_size")), jsonvalue.number(d.get("durable_ts")),
                   jsonvalue.number(d.get("complete_ts")))


def mark_complete(step_dir: str, marker: Marker) -> None:
    write_atomic(os.path.join(step_dir, COMPLETE), json.dumps(dataclasses.asdict(marker)).encode())


def read_marker(path: str) -> Optional[Marker]:
    """The marker at `path`; None for an empty one (another program's marker: ezpz's, say).
    OSError: it cannot be read; ValueError: it holds something else."""
    with open(path) as f:
        text = f.read()
    return Marker.from_json(json.loads(text)) if text else None


def remove_trees(paths: List[str]) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def prune(ckpt_dir: str, keep: int, delete: Callable[[List[str]], None] = remove_trees) -> List[int]:
    """Delete old step directories, keeping the newest `keep` complete ones (keep >= 1).

    Never deletes the newest complete checkpoint, never deletes anything newer than it (a save
    may be in flight there); incomplete directories older than the newest complete one go.
    Each goes out of sight here (one rename); `delete` is handed the renamed trees to delete (the
    trainer's does it on a thread of its own, off the save's path: deleting a big checkpoint's
    files takes as long as a good part of its save). Returns the deleted steps."""
    if keep < 1:
        raise ValueError("prune: keep must be >= 1 (the newest complete checkpoint is never deleted)")
    complete = complete_steps(ckpt_dir)
    if not complete:
        return []
    kept = set(complete[-keep:])
    newest = complete[-1]
    doomed = [s for s in list_steps(ckpt_dir) if s < newest and s not in kept]
    trash = [os.path.join(ckpt_dir, n) for n in os.listdir(ckpt_dir) if n.startswith(TRASH_PREFIX)]  # a killed prune's
    for s in doomed:
        # Out of sight first (one atomic rename), then deleted. A kill mid-delete never leaves a
        # half-deleted step directory, let alone one that still has its .complete.
        path = os.path.join(ckpt_dir, f"{TRASH_PREFIX}{step_dirname(s)}")
        if path in trash:  # a killed prune's, under the same name
            shutil.rmtree(path, ignore_errors=True)
            trash.remove(path)
        try:
            os.replace(step_path(ckpt_dir, s), path)
        except OSError:
            continue
        trash.append(path)
    delete(trash)
    return doomed
