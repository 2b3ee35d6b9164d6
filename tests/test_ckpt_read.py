"""The verified reader puts a DCP-format item's tensor bytes straight into the model's tensor (#37).
The writer lists where torch.save put a contiguous tensor's record. The reader checks the whole
item's bytes first, then the zip header of that record, before it trusts the place. Anything it
cannot confirm takes DCP's road (read whole, torch.load). One process, no group."""
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

from restartlab.contracts import ckptdir  # noqa: E402
from restartlab.trainer import ckpt_io  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _state():
    g = torch.Generator().manual_seed(3)
    return {"w": torch.randn(300, 70, generator=g),
            "half": torch.randn(64, 33, generator=g).to(torch.bfloat16),
            "ids": torch.arange(1000),
            "tr": torch.randn(40, 30, generator=g).t(),  # not contiguous: saved as laid out
            "step": torch.tensor(7.0), "epoch": 3}


def _zeros(sd):
    return {k: torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, torch.Tensor) else 0 for k, v in sd.items()}


def _save(sd, path):
    """As the trainer does: DCP's save through restartlab's writer, the manifest from its files."""
    w = ckpt_io.writer(path, 1, 0)
    dcp.save(sd, storage_writer=w, no_dist=True)
    files = {name: dict(info) for name, info in w.fs.files.items()}
    files[".metadata"] = ckptdir.file_crc32(os.path.join(path, ".metadata"))
    return {"format": "dcp", "files": files}


def _load(path, manifest, sd):
    out = _zeros(sd)
    reader = ckpt_io.VerifyingReader(path, json.loads(json.dumps(manifest)))  # as read from disk
    dcp.load(out, storage_reader=reader, no_dist=True)
    return out, reader


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def _shard(manifest):
    (name,) = [n for n in manifest["files"] if n.endswith(".distcp")]
    return name, manifest["files"][name]["items"]


def test_records_go_straight_into_the_tensors_and_plain_dcp_load_still_reads_the_files(tmp_path):
    sd = _state()
    manifest = _save(sd, str(tmp_path))
    _, items = _shard(manifest)
    with_record = [it for it in items if len(it) == 4]
    assert len(with_record) >= 3, items  # w, half, ids: big enough to be the one write of their size
    assert all(off % 64 == 0 and 0 < off < n for _, n, _, off in with_record)
    out, reader = _load(str(tmp_path), manifest, sd)
    assert _equal(out, sd)
    # Only items without a record took DCP's road. These are the transposed one (its storage is not
    # in C order), and the 4-byte step if its size met another write's.
    assert reader.took_dcp_road == len(items) - len(with_record) - 1, items  # (- the BYTE_IO epoch)
    assert len(with_record) <= len(items) - 2
    plain = _zeros(sd)
    dcp.load(plain, checkpoint_id=str(tmp_path), no_dist=True)  # the format is DCP's own
    assert _equal(plain, sd)


def test_a_record_offset_the_zip_does_not_confirm_takes_dcps_road_with_the_right_values(tmp_path):
    sd = _state()
    manifest = _save(sd, str(tmp_path))
    _, items = _shard(manifest)
    shifted = 0
    for it in items:
        if len(it) == 4 and it[3] + 64 + 4 <= it[1]:
            it[3] += 64  # still inside the item, so the checksum of the three parts still holds
            shifted += 1
    assert shifted >= 3
    out, reader = _load(str(tmp_path), manifest, sd)
    assert _equal(out, sd)  # had the reader trusted the offset, these would be shifted bytes
    assert reader.took_dcp_road >= shifted


def test_a_manifest_without_record_offsets_is_read_as_before(tmp_path):
    sd = _state()
    manifest = _save(sd, str(tmp_path))
    for info in manifest["files"].values():
        info["items"] = [it[:3] for it in info.get("items", ())]
    out, reader = _load(str(tmp_path), manifest, sd)
    assert _equal(out, sd)


@pytest.mark.parametrize("where", ["head", "record", "tail"])
def test_a_flipped_byte_anywhere_in_an_item_is_a_checksum_mismatch(tmp_path, where):
    sd = _state()
    manifest = _save(sd, str(tmp_path))
    name, items = _shard(manifest)
    off, n, _, at = max((it for it in items if len(it) == 4), key=lambda it: it[1])
    pos = off + {"head": 10, "record": at + (n - at) // 3, "tail": n - 30}[where]
    path = os.path.join(str(tmp_path), name)
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x01]))
    with pytest.raises(dcp.api.CheckpointException) as e:
        _load(str(tmp_path), manifest, sd)
    assert f"{name}: checksum mismatch in bytes {off}+{n}" in ckpt_io.describe_error(e.value)


def test_the_record_check_reads_the_sizes_from_header_or_descriptor_32_and_64_bit():
    import struct
    name = b"archive/data/0"
    n = 5 << 30
    is_record = ckpt_io.VerifyingReader._record_is

    def header(flags, csize=0, usize=0):
        return b"junk" + struct.pack("<4s5H3I2H", b"PK\x03\x04", 45, flags, 0, 0, 0, 0, csize, usize,
                                      len(name), 0) + name
    desc64, desc32 = struct.pack("<4sIQQ", b"PK\x07\x08", 0, n, n), struct.pack("<4sIII", b"PK\x07\x08", 0, 99, 99)
    assert is_record(header(8), n, desc64 + b"more")
    assert not is_record(header(8), n - 1, desc64)
    assert is_record(header(8), 99, desc32) and is_record(header(8), 99, desc32[4:])  # signature optional
    assert is_record(header(0, 1000, 1000), 1000, b"")
    assert not is_record(header(0, 1000, 1000) + b"\0", 1000, b"")  # the header does not end where the record begins
    assert not is_record(header(0, 1000, 1000).replace(b"/data/0", b"/data/1"), 1000, b"")
