"""Checkpoint bytes with their checksums.

This module wraps DCP's file system, writer and reader. As they are written, every shard's bytes
and crc32 are known. So is each item's, from the running crc at its two ends. As they are read,
every item is checked against manifest.json. The module also makes the durable copy of a staged
file and gives one-line descriptions of storage errors."""
import bisect
import contextlib
import errno
import io
import math
import os
import struct
from contextlib import contextmanager

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystem, _StorageInfo
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from restartlab.contracts import ckptdir, private as private_io
from restartlab.trainer.testpoints import delay


class HashingStream(io.RawIOBase):
    """A write-only file that keeps a running crc32 and byte count of what passes through."""

    def __init__(self, f, on_first_write=None):
        self._f = f
        self.crc = 0
        self.nbytes = 0
        self.marks = {0: 0}  # offset -> running crc32 there, at every write boundary
        self.writes = {}  # length -> [offsets where a write of that length began], ascending
        self.error = None
        self._on_first_write = on_first_write

    def writable(self):
        return True

    def write(self, b):
        mv = memoryview(b).cast("B")
        self.crc = ckptdir.crc32(mv, self.crc)
        self.writes.setdefault(len(mv), []).append(self.nbytes)
        self.nbytes += len(mv)
        self.marks[self.nbytes] = self.crc
        try:
            n = self._f.write(mv)
        except OSError as e:  # torch.save's zip writer hides it behind its own error: keep it
            self.error = OSError(e.errno, e.strerror, self._f.name)
            raise self.error from e
        if self._on_first_write:
            cb, self._on_first_write = self._on_first_write, None
            self._f.flush()
            cb()
        return n

    def tell(self):
        return self._f.tell()

    def fileno(self):
        return self._f.fileno()

    def flush(self):
        if not self._f.closed:
            self._f.flush()

    def close(self):
        if not self._f.closed:
            self._f.close()
        super().close()


class HashingFileSystem(FileSystem):
    """DCP's FileSystem that records {file name: (bytes, crc32)} of every shard written.

    It also records the running crc32 at every write boundary. Each item's own crc32 follows from
    these."""

    def __init__(self, on_first_write=None, step=-1, rank=-1, private=False):
        super().__init__()
        self.private = private  # a stage dir: files 0600, never through a symlink
        self.files = {}
        self.marks = {}
        self.writes = {}
        self.error = None  # the first OSError a shard write met
        self._on_first_write = on_first_write
        self._step, self._rank = step, rank

    def mkdir(self, path):
        """Create the directory as DCP's mkdir does (mkdir -p), with the test delay points inside.

        Another rank may create the directory between our attempt and our check. Nobody may
        remove it."""
        path = str(path)
        delay("mkdir", self._step, self._rank)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.mkdir(path, 0o700 if self.private else 0o777)
        except FileExistsError:
            delay("mkdir-exists", self._step, self._rank)
            if not os.path.isdir(path):
                raise

    @contextmanager
    def create_stream(self, path, mode):
        name = os.path.basename(str(path))
        opener = private_io.open_private if self.private and "w" in mode else open
        if "w" not in mode or not name.endswith(".distcp"):
            if opener is open:
                with super().create_stream(path, mode) as s:
                    yield s
            else:
                with opener(str(path), mode) as s:
                    yield s
            return
        with opener(str(path), mode) as f:
            hs = HashingStream(f, self._on_first_write)
            self._on_first_write = None
            try:
                yield hs
            finally:
                self.error = self.error or hs.error
            self.files[name] = {"bytes": hs.nbytes, "crc32": hs.crc}
            self.marks[name] = hs.marks
            self.writes[name] = hs.writes


def _torch_zip_crc_off():
    """torch.save computes a CRC-32 of every record of its zip (its own, slower than ours) over
    the same bytes our stream checksums as they pass: turn that second pass off while DCP writes
    (measured: torch.save 0.18 -> 0.10 s for 75 MB here). The files load as before (torch.load
    does not check it); our manifest's crc32 covers them. Older torch without the switch: as is."""
    try:
        import torch.utils.serialization.config as cfg
        cfg.save.compute_crc32  # noqa: B018  the switch exists in this torch
    except (ImportError, AttributeError):
        return contextlib.nullcontext()
    return cfg.patch({"save.compute_crc32": False})


FORMATS = ("dcp", "raw")  # how a tensor item's bytes are laid out in a shard file (see below)


def _chunk_nbytes(sizes, dtype) -> int:
    return math.prod(sizes) * torch.empty((), dtype=dtype).element_size()  # (dtype.itemsize: torch >= 2.1)


def _tensor_bytes(t):
    """A contiguous CPU tensor's bytes, without a copy."""
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


class ChecksummingWriter(dcp.FileSystemWriter):
    """DCP's writer that also lists a checksum for every item.

    Each shard file's entry lists [offset, length, crc32] of every item in it. The crc32 comes from
    the running crc at the item's two ends, so there is no second pass over the bytes. In fmt "dcp"
    a fourth number gives where a contiguous tensor's bytes begin inside the item's zip. See
    _tensor_record. VerifyingReader confirms it before it reads the bytes into the model.

    - fmt "dcp": DCP's own layout. Each tensor item is a torch.save zip. Plain dcp.load and
      torch's format tools read it.
    - fmt "raw": each tensor item is its bytes and nothing else, one file per rank. DCP's
      planning, metadata and file names are unchanged. Only VerifyingReader reads it. It takes
      the dtype and shape from DCP's metadata. There is no per-item torch.save/torch.load."""

    fmt = "dcp"

    def write_data(self, plan, planner):
        with _torch_zip_crc_off():
            fut = self._write_raw(plan, planner) if self.fmt == "raw" else super().write_data(plan, planner)
        items = {item.index: item for item in plan.items}
        for r in fut.value():
            si = r.storage_data
            marks = self.fs.marks[si.relative_path]
            crc = ckptdir.crc32_segment(marks[si.offset], marks[si.offset + si.length], si.length)
            entry = [si.offset, si.length, crc]
            if self.fmt == "dcp":
                entry += self._tensor_record(items[r.index], planner, si)
            self.fs.files[si.relative_path].setdefault("items", []).append(entry)
        return fut

    def _tensor_record(self, item, planner, si):
        """Return [offset in the item] of a contiguous tensor's bytes inside its torch.save zip.

        The bytes lie there in C order. The offset is that of the one write of exactly the chunk's
        size within the item at a multiple of 64. Each record that torch.save writes is one write,
        aligned to 64 bytes. The reader checks the zip's header of that record before it trusts
        the offset. Otherwise return []. The reader then takes DCP's road for that item."""
        if item.type == WriteItemType.BYTE_IO:
            return []
        n = _chunk_nbytes(item.tensor_data.chunk.sizes, item.tensor_data.properties.dtype)
        if not n or not planner.resolve_data(item).is_contiguous():  # (DCP saves a view's storage as laid out)
            return []
        starts = self.fs.writes[si.relative_path].get(n, ())
        lo, hi = bisect.bisect_left(starts, si.offset), bisect.bisect_right(starts, si.offset + si.length - n)
        found = [b - si.offset for b in starts[lo:hi] if (b - si.offset) % 64 == 0]
        return found if len(found) == 1 else []

    def _write_raw(self, plan, planner):
        """Write the plan's items into one file, in plan order, and fsync it.

        DCP's other values (BYTE_IO) go in as DCP serializes them. Tensors go in as their bytes.
        Returns a WriteResult per item, as DCP's own writer does."""
        name = f"{plan.storage_data.prefix}0{DEFAULT_SUFFIX}"
        results = []
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "wb") as stream:
            for item in plan.items:
                data = planner.resolve_data(item)
                offset = stream.tell()
                if item.type == WriteItemType.BYTE_IO:
                    stream.write(data.getbuffer())
                else:
                    stream.write(_tensor_bytes(data.detach().cpu().contiguous()))  # cpu(): no copy on CPU
                length = stream.tell() - offset
                results.append(WriteResult(index=item.index, size_in_bytes=length,
                                           storage_data=_StorageInfo(name, offset, length)))
            stream.flush()
            os.fsync(stream.fileno())
        fut = Future()
        fut.set_result(results)
        return fut


def writer(path, step, rank, on_first_write=None, fmt="dcp", private=False):
    """DCP's writer into `path`, with checksums; `private`: a stage dir (files 0600, no symlink followed)."""
    w = ChecksummingWriter(path, sync_files=True)
    w.fs = HashingFileSystem(on_first_write, step, rank, private)
    w.fmt = fmt
    return w


class ChecksumError(ValueError):
    pass


def describe_error(e: BaseException) -> str:
    """Describe a storage error in one line: errno name, message and path.

    It finds the error inside DCP's wrapper too. It also finds it behind torch.save's own error
    when the OSError came first, e.g. a full disk mid-zip."""
    if isinstance(e, dcp.api.CheckpointException) and e.failures:
        first = next(iter(e.failures.values()))
        e = first[0] if isinstance(first, tuple) else first
    cause = e
    while cause is not None and not (isinstance(cause, OSError) and cause.errno):
        cause = cause.__cause__ or cause.__context__
    e = cause or e
    if isinstance(e, OSError) and e.errno:
        where = f" on {e.filename}" if e.filename else ""
        return f"{errno.errorcode.get(e.errno, e.errno)} ({e.strerror}){where}"
    return f"{type(e).__name__}: {str(e)[:300]}"


class VerifyingFileSystem(FileSystem):
    """Reads `.metadata` whole and checks it against the manifest before DCP unpickles it."""

    def __init__(self, expected_metadata):
        super().__init__()
        self._meta = expected_metadata

    @contextmanager
    def create_stream(self, path, mode):
        if os.path.basename(str(path)) != ".metadata" or "r" not in mode:
            with super().create_stream(path, mode) as s:
                yield s
            return
        with open(path, "rb") as f:
            data = f.read()
        if self._meta is None or len(data) != self._meta["bytes"] or ckptdir.crc32(data) != self._meta["crc32"]:
            raise ChecksumError(f"{path}: checksum mismatch (manifest.json)")
        yield io.BytesIO(data)


class VerifyingReader(dcp.FileSystemReader):
    """DCP's reader that checks every item before it parses it.

    Every item's bytes are read once and checked against the crc32 that manifest.json lists for
    them. Only then are they parsed, so a damaged shard never reaches torch.load.

    A tensor item goes straight into the tensor DCP asks to fill when that takes the whole saved
    chunk as laid out. Otherwise it goes into a buffer and is then narrowed and copied, as DCP does.

    - fmt "raw": an item is the tensor's bytes. The dtype and shape come from DCP's metadata.
    - fmt "dcp" with the record's offset in the manifest: restartlab's writer lists the offset
      for a contiguous tensor. The zip's head and tail are read beside the record. The three are
      checked as one item. Then the head must end with the zip header of that record. The tail
      must begin with its sizes (stored, the metadata's size).
    - When these checks fail, and for a manifest without the offset, the reader takes DCP's road.
      The item is read whole and torch.load-ed."""

    def __init__(self, path, manifest):
        super().__init__(path)
        files = manifest.get("files", {})
        self.fs = VerifyingFileSystem(files.get(".metadata"))
        self.fmt = manifest.get("format", "dcp")
        if self.fmt not in FORMATS:
            raise ChecksumError(f"{path}: manifest.json names an unknown format {self.fmt!r}")
        self._expect, self._record = {}, {}  # (file, offset, length) -> crc32, -> the record's offset
        for name, info in files.items():
            for off, n, crc, *record in info.get("items", ()):
                self._expect[(name, off, n)] = crc
                if record:
                    self._record[(name, off, n)] = record[0]
        self._chunks = {}  # (fqn, chunk offsets) -> (chunk sizes, dtype): the saved chunks' layout
        self.took_dcp_road = 0  # tensor items read whole and torch.load-ed (tests, benchmarks)

    def _key(self, sinfo):
        return sinfo.relative_path, sinfo.offset, sinfo.length

    def _want(self, sinfo):
        want = self._expect.get(self._key(sinfo))
        if want is None:
            raise ChecksumError(f"{sinfo.relative_path}: manifest.json has no checksum for bytes "
                                f"{sinfo.offset}+{sinfo.length}")
        return want

    def _mismatch(self, sinfo):
        return ChecksumError(f"{os.path.join(str(self.path), sinfo.relative_path)}: checksum mismatch in "
                             f"bytes {sinfo.offset}+{sinfo.length}")

    def _slice_file(self, file, sinfo):
        want = self._want(sinfo)
        file.seek(sinfo.offset)
        data = file.read(sinfo.length)
        if len(data) != sinfo.length or ckptdir.crc32(data) != want:
            raise self._mismatch(sinfo)
        return io.BytesIO(data)

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        self._chunks = {(fqn, tuple(c.offsets)): (tuple(c.sizes), md.properties.dtype)
                        for fqn, md in metadata.state_dict_metadata.items() if hasattr(md, "chunks")
                        for c in md.chunks}

    def read_data(self, plan, planner):
        if self.fmt == "dcp" and not self._record:  # a manifest from before the offsets
            return super().read_data(plan, planner)
        per_file = {}
        for req in plan.items:
            per_file.setdefault(self.storage_data[req.storage_index].relative_path, []).append(req)
        for name, reqs in per_file.items():
            with open(os.path.join(str(self.path), name), "rb") as f:
                for req in sorted(reqs, key=lambda r: self.storage_data[r.storage_index].offset):
                    sinfo = self.storage_data[req.storage_index]
                    if req.type == LoadItemType.BYTE_IO:
                        planner.load_bytes(req, self._slice_file(f, sinfo))
                        continue
                    target = planner.resolve_tensor(req).detach()
                    if not self._read_tensor(f, sinfo, req, target):
                        self.took_dcp_road += 1
                        saved = torch.load(self._slice_file(f, sinfo), map_location="cpu", weights_only=True)
                        target.copy_(narrow_tensor_by_index(saved, req.storage_offsets, req.lengths))
                    planner.commit_tensor(req, target)
        fut = Future()
        fut.set_result(None)
        return fut

    def _read_tensor(self, f, sinfo, req, target):
        """The saved chunk's bytes into `target` (or a buffer, narrowed and copied), checked;
        False when this item's record cannot be placed without torch.load (DCP's road)."""
        idx = req.storage_index
        sizes, dtype = self._chunks[(idx.fqn, tuple(idx.offset))]
        n = _chunk_nbytes(sizes, dtype)
        if self.fmt == "raw" and n != sinfo.length:
            raise ChecksumError(f"{os.path.join(str(self.path), sinfo.relative_path)}: {idx.fqn} holds "
                                f"{sinfo.length} bytes, its metadata {n}")
        at = 0 if self.fmt == "raw" else self._record.get(self._key(sinfo))
        if at is None or at + n > sinfo.length:
            return False
        whole = tuple(req.lengths) == sizes and not any(req.storage_offsets)
        direct = whole and target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
        buf = target if direct else torch.empty(sizes, dtype=dtype)
        head, tail = self._fill(f, sinfo, at, buf)
        if self.fmt == "dcp" and not self._record_is(head, n, tail):
            return False
        if not direct:
            target.copy_(narrow_tensor_by_index(buf, req.storage_offsets, req.lengths))
        return True

    def _fill(self, f, sinfo, at, t):
        """Read item bytes [at, at + t's size) into the contiguous CPU tensor t.

        The rest of the item (head, tail) is read as bytes. The three are checked against the
        item's crc32 as one."""
        mv = _tensor_bytes(t)
        f.seek(sinfo.offset)
        head = f.read(at)
        got = f.readinto(mv)
        tail = f.read(sinfo.length - at - len(mv))
        crc = ckptdir.crc32(tail, ckptdir.crc32(mv, ckptdir.crc32(head)))  # running, as written
        if len(head) != at or got != len(mv) or len(head) + got + len(tail) != sinfo.length or crc != self._want(sinfo):
            raise self._mismatch(sinfo)
        return head, tail

    @staticmethod
    def _record_is(head, n, tail):
        """Whether the (checked) head of an item's zip ends with the local header of the tensor.

        The header must be that of a stored, uncompressed record of n bytes named .../data/0. That
        is the tensor's storage, right where the manifest says. See zip's local file header and
        data descriptor (PKWARE APPNOTE 4.3.7, 4.3.9). Since torch.save sets flag bit 3, the sizes
        follow the record (32- or 64-bit) in the tail."""
        at = head.rfind(b"PK\x03\x04")
        if at < 0 or len(head) - at < 30:
            return False
        flags, method, csize, usize, nlen, xlen = struct.unpack_from("<6xHH8xIIHH", head, at)
        name = head[at + 30:at + 30 + nlen]
        if method != 0 or at + 30 + nlen + xlen != len(head) or not name.endswith(b"/data/0"):
            return False
        if not flags & 8:
            return csize == usize == n
        desc = tail[4:] if tail[:4] == b"PK\x07\x08" else tail
        return any(len(desc) >= 4 + 2 * w and struct.unpack_from(f"<4x{2 * fmt}", desc) == (n, n)
                   for w, fmt in ((4, "I"), (8, "Q")))


def copy_durable(src: str, dst: str) -> dict:
    """Copy src to dst as tmp + fsync + rename, computing crc32 on the way."""
    tmp = dst + ".tmp"
    with open(tmp, "wb") as fo:
        info = ckptdir.file_crc32(src, sink=fo)
        fo.flush()
        os.fsync(fo.fileno())
    os.replace(tmp, dst)
    return info
