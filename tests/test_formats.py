"""Every checkpoint in the wild: byte order, compression, alignment, old archives,
and every load option of the serialization document (map_location, mmap flags,
skip_data, FakeTensorMode, config), plus ``inspect``."""
from __future__ import annotations

import io
import mmap
import os
import resource
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tensorplay
from conftest import EXTRA_FIXTURES, TORCH_FIXTURES, has_torch, torch_manifest, views_the_mapped_file
from expectations import _tensors_in_order
from tensorplay.serialization import (
    LoadEndianness,
    config,
    get_default_load_endianness,
    get_default_mmap_options,
    set_default_load_endianness,
    set_default_mmap_options,
    skip_data,
)

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")
BACKENDS = ["numpy", pytest.param("torch", marks=needs_torch)]
CASES = torch_manifest()

def _float_tensor_pickle(numel: int) -> bytes:
    """``_rebuild_tensor_v2`` of a 1-D float32 tensor over storage '0' of ``numel`` elements."""
    n = b"\x8a\x08" + struct.pack("<q", numel)
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
            b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu" + n + b"tQK\x00" + n + b"\x85K\x01\x85\x89"
            b"ccollections\nOrderedDict\n)RtR.")


def _declare_size(data: bytes, name: str, size: int) -> bytes:
    """Rewrite the uncompressed size the central directory declares for ``name``."""
    full = f"archive/{name}".encode()
    # The local header repeats the size (zipfile writes no data descriptor): change both.
    for signature, name_at, size_at in ((b"PK\x01\x02", 46, 24), (b"PK\x03\x04", 30, 22)):
        at = data.find(signature)
        while at != -1 and data[at + name_at:at + name_at + len(full)] != full:
            at = data.find(signature, at + 4)
        if at == -1:
            raise KeyError(name)
        data = data[:at + size_at] + struct.pack("<I", size) + data[at + size_at + 4:]
    return data


def _zip(records: dict[str, bytes], compress: set[str] = frozenset()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in records.items():
            z.writestr(f"archive/{name}", data, zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED)
    return buf.getvalue()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _sparse_checkpoint(path, nbytes: int) -> None:
    """A torch-layout checkpoint with one float32 storage of ``nbytes`` that is a hole
    in the file: writing it costs nothing, and reading it would show in RSS."""
    pkl = _float_tensor_pickle(nbytes // 4)
    entries, out = [], open(path, "wb")
    with out:
        for name, size, data in (("data.pkl", len(pkl), pkl), ("version", 2, b"3\n"), ("data/0", nbytes, None)):
            full = f"archive/{name}".encode()
            offset = out.tell()
            zip64 = size >= 0xFFFFFFFF
            extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
            # Pad like torch so the payload is 64-byte aligned and can be mapped in place.
            pad = -(offset + 30 + len(full) + len(extra) + 4) % 64
            extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, 0,
                                  0xFFFFFFFF if zip64 else size, 0xFFFFFFFF if zip64 else size, len(full), len(extra)))
            out.write(full + extra)
            if data is None:
                out.seek(size, os.SEEK_CUR)
            else:
                out.write(data)
            entries.append((full, size, offset, zip64))
        cd = out.tell()
        for full, size, offset, zip64 in entries:
            extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
            out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, 0,
                                  0xFFFFFFFF if zip64 else size, 0xFFFFFFFF if zip64 else size, len(full), len(extra),
                                  0, 0, 0, 0, offset))
            out.write(full + extra)
        cd_size = out.tell() - cd
        z64 = out.tell()
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 3, 3, cd_size, cd))
        out.write(struct.pack("<IIQI", 0x07064B50, 0, z64, 1))
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 3, 3, cd_size, 0xFFFFFFFF, 0))


# --- formats ------------------------------------------------------------------

@pytest.mark.parametrize("mmap_on", [False, True])
def test_big_endian_payloads_are_swapped_for_every_dtype(mmap_on):
    arrays = tensorplay.load(EXTRA_FIXTURES / "big_endian_all_dtypes.pt", backend="torch" if has_torch() else "numpy",
                             mmap=mmap_on) if has_torch() else None
    if arrays is None:
        pytest.skip("complex32 needs torch")
    assert arrays["uint16"].tolist() == [[150, 375, 900], [30000, 600, 2250]]
    assert arrays["uint64"].tolist() == [[150, 375, 900], [30000, 600, 2250]]
    assert arrays["float8_e4m3fn"].float().tolist()[0] == [0.5, -1.25, 3.0]


@needs_torch
def test_the_endianness_option_decides_files_without_a_byteorder_record():
    path = EXTRA_FIXTURES / "no_byteorder_big.pt"
    assert get_default_load_endianness() is None
    wrong = tensorplay.load(path, backend="torch")["uint16"]
    assert wrong.tolist()[0] == [38400, 30465, 33795]  # read as little-endian
    set_default_load_endianness(LoadEndianness.BIG)
    try:
        assert tensorplay.load(path, backend="torch")["uint16"].tolist()[0] == [150, 375, 900]
        set_default_load_endianness(LoadEndianness.NATIVE)
        assert tensorplay.load(path, backend="torch")["uint16"].tolist()[0] == [38400, 30465, 33795]
    finally:
        set_default_load_endianness(None)
    with pytest.raises(TypeError, match="set_default_load_endianness"):
        set_default_load_endianness("big")
    # A byteorder record always wins over the option.
    set_default_load_endianness(LoadEndianness.BIG)
    try:
        assert tensorplay.load(TORCH_FIXTURES / "seed_views.pt", backend="numpy")[0].tolist() == list(range(1, 10))
    finally:
        set_default_load_endianness(None)


@needs_torch
def test_older_archives_without_metadata_records_load():
    arrays = tensorplay.load(EXTRA_FIXTURES / "older_archive.pt", backend="torch")
    assert arrays["uint32"].tolist()[1] == [30000, 600, 2250]


@pytest.mark.parametrize("backend", BACKENDS)
def test_deflated_entries_are_right_even_under_mmap(backend):
    """torch's mmap=True returns the compressed bytes for this file."""
    eager = tensorplay.load(TORCH_FIXTURES / "rezip_deflated.pt", backend=backend)
    mapped = tensorplay.load(TORCH_FIXTURES / "rezip_deflated.pt", backend=backend, mmap=True)
    for key in ("0.weight", "0.bias", "2.weight"):
        assert np.array_equal(np.asarray(eager["model"][key]), np.asarray(mapped["model"][key]))
    reference = tensorplay.load(TORCH_FIXTURES / "training_checkpoint.pt", backend=backend)
    assert np.array_equal(np.asarray(mapped["model"]["0.weight"]), np.asarray(reference["model"]["0.weight"]))


def test_deflate_bombs_and_truncated_entries_are_refused(tmp_path):
    pkl = _float_tensor_pickle(4)
    bomb = _zip({"data.pkl": pkl, "version": b"3\n", "data/0": bytes(1 << 20)}, compress={"data/0"})
    # Declare 16 bytes for a million: the inflater stops at 16 and says so.
    path = tmp_path / "bomb.pt"
    path.write_bytes(_declare_size(bomb, "data/0", 16))
    with pytest.raises(tensorplay.MalformedCheckpointError, match="inflates to more than"):
        tensorplay.load(path, backend="numpy")
    # A declared size beyond the cap is refused before anything is inflated.
    big = _zip({"data.pkl": _float_tensor_pickle(2**30 - 1), "version": b"3\n", "data/0": bytes(4096)},
               compress={"data/0"})
    path.write_bytes(_declare_size(big, "data/0", 2**32 - 4))
    with pytest.raises(tensorplay.CheckpointError):
        tensorplay.load(path, backend="numpy", limits={"max_inflated_bytes": 1 << 20})
    truncated = (TORCH_FIXTURES / "seed_tensor.pt").read_bytes()
    path.write_bytes(truncated[:720])
    with pytest.raises(tensorplay.MalformedCheckpointError):
        tensorplay.load(path, backend="numpy")


def test_other_compression_methods_are_named(tmp_path):
    path = tmp_path / "bz2.pt"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_BZIP2) as z:
        z.writestr("archive/data.pkl", b"\x80\x02N.")
        z.writestr("archive/version", b"3\n")
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="bzip2"):
        tensorplay.load(path, backend="numpy")


def test_unaligned_entries_are_copied_only_where_needed():
    arrays = tensorplay.load(TORCH_FIXTURES / "rezip_stored_unaligned.pt", backend="numpy", mmap=True)
    for a in arrays.values():
        assert a.ctypes.data % a.dtype.alignment == 0
        assert a.tolist() in ([1.0, 2.0], [3.0, 4.0])
    aligned = tensorplay.load(TORCH_FIXTURES / "seed_tensor_dict.pt", backend="numpy", mmap=True)
    assert all(views_the_mapped_file(a) for a in aligned.values())


@needs_torch
@pytest.mark.parametrize("fmt", ["legacy", "rezipped"])
def test_complex128_under_mmap_is_16_byte_aligned_wherever_the_file_puts_it(tmp_path, fmt):
    """torch loads complex128 with 16-byte aligned vector instructions: an element
    8 bytes off (legal for its 8-byte parts) crashed them. Such payloads are copied."""
    import torch

    offsets = set()
    for pad in range(16):
        key = "x" * pad if fmt == "legacy" else "x"  # a longer key moves the legacy payload
        state = {key: torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex128)}
        path = tmp_path / f"{fmt}{pad}.pt"
        if fmt == "legacy":
            torch.save(state, path, _use_new_zipfile_serialization=False)
        else:
            torch.save(state, tmp_path / "aligned.pt")
            with zipfile.ZipFile(tmp_path / "aligned.pt") as z, zipfile.ZipFile(path, "w") as w:
                w.writestr("aligned/pad", bytes(pad))  # moves every payload after it
                for info in z.infolist():
                    w.writestr(info.filename, z.read(info))
        offsets.add(tensorplay.inspect(path).tensors()[0][1].offset % 16)
        for backend in ("torch", "numpy"):
            loaded = next(iter(tensorplay.load(path, mmap=True, backend=backend).values()))
            address = loaded.data_ptr() if backend == "torch" else loaded.ctypes.data
            assert address % 16 == 0 and loaded.tolist() == [1 + 2j, 3 - 4j]
    assert {0, 8} <= offsets  # aligned and 8 bytes off (the case that crashed) were both tried


def test_legacy_files_load_with_mmap_and_keep_their_views():
    numbers, evens = tensorplay.load(TORCH_FIXTURES / "legacy_seed_views.pt", backend="numpy", mmap=True)
    evens *= 2
    assert numbers.tolist() == [1, 4, 3, 8, 5, 12, 7, 16, 9]


def test_tar_checkpoints_are_refused_as_torch_refuses_them(tmp_path):
    import tarfile

    path = tmp_path / "old.tar"
    with tarfile.open(path, "w") as t:
        info = tarfile.TarInfo("pickle")
        info.size = 3
        t.addfile(info, io.BytesIO(b"N.\n"))
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="tar"):
        tensorplay.load(path, backend="numpy")


# --- options --------------------------------------------------------------------

@needs_torch
def test_map_location_follows_torch():
    import torch

    path = TORCH_FIXTURES / "seed_tensor_dict.pt"
    for loc in ("cpu", torch.device("cpu"), {"cpu": "cpu"}):
        assert tensorplay.load(path, map_location=loc)["a"].tolist() == [1.0, 2.0]
    calls = []

    def relocate(storage, location):
        calls.append((type(storage).__name__, location))
        return storage

    assert tensorplay.load(path, map_location=relocate)["b"].tolist() == [3.0, 4.0]
    assert calls == [("UntypedStorage", "cpu"), ("UntypedStorage", "cpu")]
    with pytest.raises(RuntimeError, match="CUDA"):
        tensorplay.load(path, map_location="cuda:0")
    with pytest.raises(ValueError, match="numpy backend"):
        tensorplay.load(path, map_location="cuda:0", backend="numpy")


@pytest.fixture
def device_registry():
    """torch's device registry, which register_package extends for the whole
    process, put back as it was after the test."""
    import torch

    saved = list(torch.serialization._package_registry)
    yield torch
    torch.serialization._package_registry[:] = saved


@needs_torch
@pytest.mark.parametrize("mmap", [False, True])
def test_a_registered_package_tags_storages_on_save_and_restores_them_on_load(tmp_path, device_registry, mmap):
    torch = device_registry
    state = {"on_ipu": torch.arange(4.0), "on_cpu": torch.ones(3)}
    on_ipu = {state["on_ipu"].untyped_storage().data_ptr()}
    restored = []

    def ipu_tag(storage):
        return "ipu:1" if storage.data_ptr() in on_ipu else None

    def ipu_restore(storage, location):
        if not location.startswith("ipu"):
            return None
        restored.append((type(storage).__name__, location, storage.nbytes()))
        return storage

    tensorplay.serialization.register_package(9, ipu_tag, ipu_restore)
    (tmp_path / "torch").mkdir()
    (tmp_path / "ours").mkdir()
    torch.save(state, tmp_path / "torch" / "ckpt.pt")
    tensorplay.save(state, tmp_path / "ours" / "ckpt.pt")
    written = (tmp_path / "ours" / "ckpt.pt").read_bytes()
    assert written == (tmp_path / "torch" / "ckpt.pt").read_bytes()
    assert b"ipu:1" in zipfile.ZipFile(io.BytesIO(written)).read("ckpt/data.pkl")

    theirs = torch.load(tmp_path / "torch" / "ckpt.pt", mmap=mmap)
    assert restored == [("UntypedStorage", "ipu:1", 16)]
    ours = tensorplay.load(tmp_path / "ours" / "ckpt.pt", mmap=mmap)
    assert restored == [("UntypedStorage", "ipu:1", 16)] * 2
    for key in state:
        assert torch.equal(ours[key], theirs[key]) and torch.equal(ours[key], state[key])

    torch.serialization._package_registry[:] = [p for p in torch.serialization._package_registry if p[1] != ipu_tag]
    devices = {path: info.device for path, info in tensorplay.inspect(tmp_path / "ours" / "ckpt.pt").tensors()}
    assert devices == {"on_ipu": "ipu:1", "on_cpu": "cpu"}
    command = [sys.executable, "-m", "tensorplay", "inspect", str(tmp_path / "ours" / "ckpt.pt")]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "(16 B) on ipu:1" in printed and "(12 B)\n" in printed
    with pytest.raises(RuntimeError, match="don't know how to restore data location"):
        torch.load(tmp_path / "torch" / "ckpt.pt")
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match='"ipu:1".*map_location'):
        tensorplay.load(tmp_path / "ours" / "ckpt.pt")


@needs_torch
@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("map_location", [None, "cpu", "torch.device('cpu')"])
def test_a_package_registered_ahead_of_torchs_cpu_entry_sees_every_storage_as_in_torch(
        device_registry, mmap, map_location):
    torch = device_registry
    if map_location is not None and map_location.startswith("torch"):
        map_location = torch.device("cpu")
    seen = []

    def zeroed(storage, location):
        seen.append((location, storage.nbytes()))
        return storage.clone().fill_(0)

    tensorplay.serialization.register_package(5, lambda storage: None, zeroed)
    path = TORCH_FIXTURES / "seed_tensor_dict.pt"
    theirs = torch.load(path, map_location=map_location, mmap=mmap)
    by_torch, seen[:] = list(seen), []
    ours = tensorplay.load(path, map_location=map_location, mmap=mmap)
    assert seen == by_torch == [("cpu", 8), ("cpu", 8)]
    for key, tensor in theirs.items():
        assert tensor.tolist() == [0.0, 0.0] and torch.equal(ours[key], tensor)


def test_register_package_needs_torch_and_says_so():
    code = ("import sys; sys.modules['torch'] = None\nimport tensorplay.serialization as s\n"
            "try:\n    s.register_package(11, lambda st: None, lambda st, loc: None)\n"
            "except RuntimeError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "register_package needs torch" in result.stdout


@needs_torch
def test_meta_map_location_reads_no_payload_and_tags_offsets():
    import torch

    sd = tensorplay.load(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt", map_location="meta")
    ref = torch.load(TORCH_FIXTURES / "seed_batchnorm_state_dict.pt", map_location="meta")
    for key in ref:
        assert sd[key].device.type == "meta" and sd[key].shape == ref[key].shape
        assert sd[key].untyped_storage()._checkpoint_offset == ref[key].untyped_storage()._checkpoint_offset


@needs_torch
def test_fake_tensor_mode_gives_fake_tensors_with_checkpoint_offsets():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    path = TORCH_FIXTURES / "seed_mymodule_state_dict.pt"
    with FakeTensorMode():
        ours = tensorplay.load(path)
        theirs = torch.load(path)
    for key, ref in theirs.items():
        assert isinstance(ours[key], FakeTensor)
        assert ours[key].device == ref.device and ours[key].shape == ref.shape and ours[key].stride() == ref.stride()
        assert ours[key].untyped_storage()._checkpoint_offset == ref.untyped_storage()._checkpoint_offset


@pytest.mark.parametrize("backend", BACKENDS)
def test_mmap_flags_private_never_writes_and_shared_does(tmp_path, backend):
    path = tmp_path / "views.pt"
    path.write_bytes((TORCH_FIXTURES / "seed_views.pt").read_bytes())
    assert get_default_mmap_options() == mmap.MAP_PRIVATE
    numbers, _ = tensorplay.load(path, backend=backend, mmap=True)
    numbers[0] = 42
    del numbers
    assert tensorplay.load(path, backend=backend)[0].tolist()[0] == 1
    with set_default_mmap_options(mmap.MAP_SHARED):
        numbers, _ = tensorplay.load(path, backend=backend, mmap=True)
        numbers[0] = 42
        del numbers
    assert get_default_mmap_options() == mmap.MAP_PRIVATE
    assert tensorplay.load(path, backend=backend)[0].tolist()[0] == 42
    with pytest.raises(ValueError, match="MAP_PRIVATE or mmap.MAP_SHARED"):
        set_default_mmap_options(5)


def test_config_load_mmap_is_the_default_for_mmap_none(monkeypatch):
    monkeypatch.setattr(config.load, "mmap", True)
    numbers, _ = tensorplay.load(TORCH_FIXTURES / "seed_views.pt", backend="numpy")
    assert views_the_mapped_file(numbers)
    with pytest.raises(AttributeError, match="no option"):
        config.load.mmapp = True


@pytest.mark.parametrize("mapped", [False, True])
def test_calculate_storage_offsets_reads_the_true_bytes_of_a_rezipped_file(mapped, monkeypatch):
    # torch's arithmetic assumes its own padding and misreads this file; the local
    # headers are always read, so the option cannot change what loads.
    monkeypatch.setattr(config.load, "calculate_storage_offsets", True)
    arrays = tensorplay.load(TORCH_FIXTURES / "rezip_stored_unaligned.pt", backend="numpy", mmap=mapped)
    assert {k: v.tolist() for k, v in arrays.items()} == {"a": [1.0, 2.0], "b": [3.0, 4.0]}


# --- skip_data and reading nothing -------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_skip_data_keeps_shapes_dtypes_and_sharing(backend):
    with skip_data():
        numbers, evens = tensorplay.load(TORCH_FIXTURES / "seed_views.pt", backend=backend)
    assert tuple(numbers.shape) == (9,) and tuple(evens.shape) == (4,)
    evens[0] = 77
    assert int(numbers[1]) == 77


@pytest.fixture(scope="module")
def two_gib_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "sparse.pt"
    _sparse_checkpoint(path, 2 << 30)
    return path


def test_inspect_reads_no_payload_page(two_gib_checkpoint):
    before = _rss_mib()
    result = tensorplay.inspect(two_gib_checkpoint)
    assert _rss_mib() - before < 64
    [(path, info)] = result.tensors()
    assert info.shape == ((2 << 30) // 4,) and info.nbytes == 2 << 30 and info.dtype == "float32"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_open_file_is_mapped_not_read_into_memory(two_gib_checkpoint, backend):
    before = _rss_mib()
    with open(two_gib_checkpoint, "rb") as f, skip_data():
        tensor = tensorplay.load(f, backend=backend)
        assert f.tell() == os.path.getsize(two_gib_checkpoint)  # left at its end, as reading it would
    with open(two_gib_checkpoint, "rb", buffering=0) as f:
        assert tensorplay.serialization.get_unsafe_globals_in_checkpoint(f) == []
    assert _rss_mib() - before < 64  # reading the file would have taken 2 GiB
    assert tuple(tensor.shape) == ((2 << 30) // 4,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_in_memory_is_read_in_place_not_copied(tmp_path, backend):
    _sparse_checkpoint(tmp_path / "quarter.pt", 256 << 20)
    data = (tmp_path / "quarter.pt").read_bytes()
    stream = io.BytesIO(data)
    before = _rss_mib()
    with skip_data():
        tensor = tensorplay.load(stream, backend=backend)
    assert tensorplay.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data)) == []
    assert _rss_mib() - before < 64  # a copy would have taken 256 MiB
    assert tuple(tensor.shape) == ((256 << 20) // 4,) and stream.tell() == len(data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lazy_loads_of_a_huge_file_stay_flat(two_gib_checkpoint, backend):
    before = _rss_mib()
    tensor = tensorplay.load(two_gib_checkpoint, backend=backend, mmap=True)
    assert _rss_mib() - before < 64
    with skip_data():
        skipped = tensorplay.load(two_gib_checkpoint, backend=backend)
    assert _rss_mib() - before < 64
    assert tuple(tensor.shape) == tuple(skipped.shape) == ((2 << 30) // 4,)
    del tensor, skipped
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 << 20  # KiB: far below the 2 GiB file


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_inspect_matches_the_manifest(case):
    if case["needs_safe_globals"] or case["name"] == "whole_module":
        with pytest.raises(tensorplay.UnsafeCheckpointError):
            tensorplay.inspect(case["path"])
        return
    if case["name"] == "sparse_coo_out_of_range":  # the core's index checks read the index bytes
        with pytest.raises(tensorplay.MalformedCheckpointError, match="found index 5"):
            tensorplay.inspect(case["path"])
        return
    expected = [t for t in _tensors_in_order(case["expected"], []) if t["kind"] == "tensor"]
    ours = [info for _, info in tensorplay.inspect(case["path"]).tensors()]
    if case["name"] == "bare_storages":  # storages are reported as flat tensors of their dtype
        ours = [ours[1], ours[3]]
    expected_meta = [t for t in _all_tensors(case["expected"]) if t.get("device") == "meta"]
    assert len(ours) == len(expected) + len(expected_meta)
    assert all(o.device == "meta" for o in ours if o.layout == "meta")
    dense = [o for o in ours if o.layout != "meta"]
    for info, tensor in zip(dense, expected):
        assert info.dtype == tensor["dtype"] and info.device == tensor.get("device", "cpu")
        if "shape" in tensor:
            assert list(info.shape) == tensor["shape"]
        if "stride" in tensor and info.layout == "strided":
            assert list(info.stride) == tensor["stride"]


def _all_tensors(desc, out=None):
    out = [] if out is None else out
    if isinstance(desc, dict):
        if desc.get("kind") == "tensor":
            out.append(desc)
        for v in desc.values():
            _all_tensors(v, out)
    elif isinstance(desc, list):
        for v in desc:
            _all_tensors(v, out)
    return out


def test_inspect_takes_what_load_takes():
    path = TORCH_FIXTURES / "shared_storage_tied.pt"
    expected = tensorplay.inspect(path)
    with open(path, "rb") as f:
        assert tensorplay.inspect(f) == expected
    assert tensorplay.inspect(io.BytesIO(path.read_bytes())) == expected == tensorplay.inspect(path.read_bytes())


def test_inspect_command_prints_a_tree_and_totals():
    import subprocess
    import sys

    command = [sys.executable, "-m", "tensorplay", "inspect", str(TORCH_FIXTURES / "shared_storage_tied.pt")]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "embed.weight  float32 [10, 4]" in out and "total: float32 172 B" in out
    assert " on " not in out  # only a device other than the CPU is named
