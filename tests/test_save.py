"""tensorplay.save: torch.save's file record for record, from torch tensors or from
numpy arrays without torch, written atomically."""
from __future__ import annotations

import io
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile

import fixture_classes
import numpy as np
import pytest
import tensorplay
from conftest import TORCH_FIXTURES, has_torch, torch_manifest
from expectations import check_numpy_result, check_torch_result, numpy_cannot_hold
from tensorplay.serialization import config, set_crc32_options, skip_data

needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")
CASES = [c for c in torch_manifest() if not c["needs_safe_globals"] and c["name"] not in
         ("whole_module", "sparse_coo_out_of_range", "no_byteorder_big")]


def _records(path) -> list[tuple[str, int]]:
    """(name, payload offset) of every entry, in file order."""
    data = open(path, "rb").read()
    with zipfile.ZipFile(path) as z:
        out = []
        for info in z.infolist():
            name_len, extra_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little"), \
                int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
            out.append((info.filename, info.header_offset + 30 + name_len + extra_len))
    return out


@needs_torch
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_fixture_saves_byte_identical_to_torch_save(case, tmp_path):
    import torch

    if case["name"] == "numpy_arrays":
        pytest.skip("numpy arrays are written as tensors, which torch's weights-only loader can open")
    if case["name"] == "big_endian_all_dtypes":
        pytest.skip("torch loads this file with unswapped values; nothing to compare against")
    obj = torch.load(case["path"], weights_only=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    torch.save(obj, tmp_path / "a" / "ckpt.pt")
    tensorplay.save(obj, tmp_path / "b" / "ckpt.pt")
    ours = (tmp_path / "b" / "ckpt.pt").read_bytes()
    assert ours == (tmp_path / "a" / "ckpt.pt").read_bytes()
    again = tensorplay.load(tmp_path / "b" / "ckpt.pt", backend="torch")
    check_torch_result(again, case["expected"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_fixture_round_trips_through_the_numpy_backend(case, tmp_path):
    if numpy_cannot_hold(case["expected"]) or case["name"] in ("bare_storages", "meta_tensor"):
        pytest.skip("no numpy form to save back")
    obj = tensorplay.load(case["path"], backend="numpy")
    tensorplay.save(obj, tmp_path / "again.pt")
    check_numpy_result(tensorplay.load(tmp_path / "again.pt", backend="numpy"), _numpy_saved(case["expected"]))


def _numpy_saved(expected):
    """What a numpy round trip keeps: tensors stay tensors, without Parameter or grad flags."""
    if isinstance(expected, dict):
        out = {k: _numpy_saved(v) for k, v in expected.items()}
        if out.get("kind") == "tensor":
            out["parameter"], out["requires_grad"] = False, False
        return out
    if isinstance(expected, list):
        return [_numpy_saved(v) for v in expected]
    return expected


@needs_torch
def test_views_survive_a_round_trip_as_in_the_serialization_document(tmp_path):
    import torch

    numbers = torch.arange(1, 10)
    evens = numbers[1::2]
    tensorplay.save([numbers, evens], tmp_path / "tensors.pt")
    loaded_numbers, loaded_evens = torch.load(tmp_path / "tensors.pt", weights_only=True)
    loaded_evens *= 2
    assert loaded_numbers.tolist() == [1, 4, 3, 8, 5, 12, 7, 16, 9]
    with zipfile.ZipFile(tmp_path / "tensors.pt") as z:
        assert [n for n in z.namelist() if "/data/" in n] == ["tensors/data/0"]


NUMPY_STATE = """
import numpy as np


def numpy_state():
    base = np.arange(12, dtype=np.float32)
    return {"w": base.reshape(3, 4), "row": base.reshape(3, 4)[1], "col": base.reshape(3, 4)[:, 2],
            "t": base.reshape(3, 4).T, "f": np.asfortranarray(np.ones((2, 3), dtype=np.float64)),
            "u16": np.arange(5, dtype=np.uint16), "b": np.array([True, False]), "be": np.arange(3, dtype=">i4"),
            "neg": base[::-1], "zero_d": np.array(7, dtype=">i8"), "scalar": np.float64(2.5),
            "meta": {"epoch": 3, "name": "run"}}
"""


def _numpy_state():
    namespace: dict = {}
    exec(NUMPY_STATE, namespace)
    return namespace["numpy_state"]()


def test_numpy_arrays_save_without_torch_and_torch_opens_them(tmp_path):
    """A subprocess where importing torch fails writes the file; torch then reads it."""
    path = tmp_path / "np.pt"
    code = "import sys; sys.modules['torch'] = None\nimport tensorplay\n" + NUMPY_STATE + \
        "tensorplay.save(numpy_state(), sys.argv[1])\n"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    expected = _numpy_state()
    ours = tensorplay.load(path, backend="numpy")
    for key in ("w", "row", "col", "t", "f", "u16", "b", "be", "neg", "zero_d"):
        assert ours[key].shape == expected[key].shape
        assert np.array_equal(ours[key], expected[key]) and ours[key].dtype == expected[key].dtype.newbyteorder("=")
    assert np.shares_memory(ours["w"], ours["row"]) and np.shares_memory(ours["w"], ours["col"])
    assert ours["scalar"] == 2.5 and ours["meta"] == {"epoch": 3, "name": "run"}
    if has_torch():
        import torch

        loaded = torch.load(path, weights_only=False)
        assert torch.equal(loaded["w"], torch.from_numpy(expected["w"]))
        loaded["row"][0] = -1
        assert loaded["w"][1, 0] == -1  # the view still shares its base
        with_torch = tmp_path / "np2" / "np.pt"
        with_torch.parent.mkdir()
        tensorplay.save(expected, with_torch)
        assert with_torch.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("name", ["shared_storage_tied", "seed_views", "shapes_and_strides", "legacy_seed_views"])
def test_numpy_loads_save_the_same_file_whether_mapped_or_copied(tmp_path, name):
    """Arrays over a mapped checkpoint save their own storages, shared as loaded,
    not the whole mapped file."""
    for mmap in (False, True):
        arrays = tensorplay.load(TORCH_FIXTURES / f"{name}.pt", backend="numpy", mmap=mmap)
        (tmp_path / str(mmap)).mkdir()
        tensorplay.save(arrays, tmp_path / str(mmap) / "again.pt")
    assert (tmp_path / "True" / "again.pt").read_bytes() == (tmp_path / "False" / "again.pt").read_bytes()


def test_arrays_over_other_arrays_and_buffers_save_the_memory_they_view(tmp_path):
    base = np.arange(6, dtype=np.float32)
    state = {"base": base, "windows": np.lib.stride_tricks.sliding_window_view(base, 3),
             "rows": np.broadcast_to(base, (2, 6)),
             "part": np.frombuffer(bytes(range(64)), dtype=np.uint8, count=8, offset=16)}
    tensorplay.save(state, tmp_path / "w.pt")
    loaded = tensorplay.load(tmp_path / "w.pt", backend="numpy")
    for key, a in state.items():
        assert loaded[key].tolist() == a.tolist() and loaded[key].strides == a.strides
    assert np.shares_memory(loaded["windows"], loaded["base"]) and np.shares_memory(loaded["rows"], loaded["base"])
    with zipfile.ZipFile(tmp_path / "w.pt") as z:
        assert z.getinfo("w/data/1").file_size == 8  # the array's bytes, not the whole buffer's


def test_the_file_layout_is_torchs(tmp_path):
    path = tmp_path / "my.model.pt"
    tensorplay.save({"a": np.ones(3, np.float32), "b": np.zeros(2, np.int64)}, path)
    records = _records(path)
    names = [name for name, _ in records]
    assert names == ["my.model/data.pkl", "my.model/.format_version", "my.model/.storage_alignment",
                     "my.model/byteorder", "my.model/data/0", "my.model/data/1", "my.model/version",
                     "my.model/.data/serialization_id"]
    assert all(offset % 64 == 0 for _, offset in records)
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None
        assert z.read("my.model/version") == b"3\n" and z.read("my.model/byteorder") == b"little"


def test_crc32_can_be_turned_off_and_alignment_changed(tmp_path):
    set_crc32_options(False)
    try:
        tensorplay.save({"a": np.ones(3, np.float32)}, tmp_path / "nocrc.pt")
    finally:
        set_crc32_options(True)
    with zipfile.ZipFile(tmp_path / "nocrc.pt") as z:
        assert all(info.CRC == 0 for info in z.infolist())
        assert z.testzip() == "nocrc/data.pkl"  # zipfile checks CRCs; torch and tensorplay do not
    with config.patch(**{"save.storage_alignment": 4096}):
        tensorplay.save({"a": np.ones(3, np.float32)}, tmp_path / "aligned.pt")
    assert all(offset % 4096 == 0 for _, offset in _records(tmp_path / "aligned.pt"))
    assert tensorplay.load(tmp_path / "aligned.pt", backend="numpy")["a"].tolist() == [1.0, 1.0, 1.0]


def test_streams_get_the_archive_root_and_write_only_objects_work():
    buf = io.BytesIO()
    tensorplay.save({"a": np.arange(3)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        assert z.namelist()[0] == "archive/data.pkl"

    class WriteOnly:
        def __init__(self):
            self.chunks = []

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)

    sink = WriteOnly()
    tensorplay.save({"a": np.arange(3)}, sink)
    assert b"".join(sink.chunks) == buf.getvalue()
    with pytest.raises(AttributeError, match="write"):
        tensorplay.save({}, object())


def test_a_failed_save_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    tensorplay.save({"version": 1}, path)
    before = path.read_bytes()
    from tensorplay import _save

    real = _save.write_segments

    def fail_halfway(f, segments, buffers):
        real(f, segments[: len(segments) // 2], buffers)
        raise OSError("disk full")

    monkeypatch.setattr(_save, "write_segments", fail_halfway)
    with pytest.raises(OSError, match="disk full"):
        tensorplay.save({"version": 2, "w": np.ones(1000)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary file left behind


def test_saving_over_a_file_keeps_its_permissions_and_a_new_file_gets_the_umasks(tmp_path):
    path = tmp_path / "ckpt.pt"
    tensorplay.save({"version": 1}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
    os.chmod(path, 0o640)
    tensorplay.save({"version": 2}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert tensorplay.load(path, backend="numpy") == {"version": 2}


@pytest.mark.parametrize("saver", ["tensorplay", pytest.param("torch", marks=needs_torch)])
def test_saving_through_a_symlink_writes_the_file_it_points_to(tmp_path, saver):
    save = tensorplay.save if saver == "tensorplay" else __import__("torch").save
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "step_100.pt"
    tensorplay.save({"step": 100}, target)
    link = tmp_path / "latest.pt"
    link.symlink_to(os.path.join("runs", "step_100.pt"))
    save({"step": 200}, link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("runs", "step_100.pt")
    assert tensorplay.load(target, backend="numpy") == {"step": 200}
    assert sorted(os.listdir(tmp_path)) == ["latest.pt", "runs"] and os.listdir(tmp_path / "runs") == ["step_100.pt"]
    # The archive's folder is named after the path given, as torch names it.
    assert zipfile.ZipFile(target).namelist()[0] == "latest/data.pkl"


def _saved_bytes(tmp_path, state, name) -> bytes:
    """What saving ``state`` to a regular file of that name writes."""
    (tmp_path / "reference").mkdir(exist_ok=True)
    tensorplay.save(state, tmp_path / "reference" / name)
    return (tmp_path / "reference" / name).read_bytes()


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "out.pt"
    os.mkfifo(fifo)
    state = {"w": np.arange(4.0)}
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    tensorplay.save(state, fifo)
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received == [_saved_bytes(tmp_path, state, "out.pt")]


def test_dev_stdout_into_a_pipe_gets_the_checkpoint(tmp_path):
    code = "import numpy, tensorplay\ntensorplay.save({'out': numpy.arange(3.0)}, '/dev/stdout')\n"
    written = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    assert tensorplay.load(io.BytesIO(written), backend="numpy")["out"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a character device needs root")
def test_a_character_device_is_written_through_not_replaced(tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    tensorplay.save({"w": np.ones(3)}, device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


@needs_torch
def test_a_read_only_checkpoint_is_refused_as_torch_refuses_it(tmp_path):
    """Only root may write a file without write permission: torch's open()
    refuses it for anyone else, and so does tensorplay."""
    import torch

    outcomes = []
    for saver in (torch.save, tensorplay.save):
        path = tmp_path / f"{saver.__module__}.pt"
        path.write_bytes(b"precious")
        path.chmod(0o444)
        try:
            saver({"w": np.ones(2)}, path)
            outcomes.append("saved")
        except PermissionError:
            outcomes.append("refused")
            assert path.read_bytes() == b"precious"
    assert outcomes[0] == outcomes[1] == ("saved" if os.geteuid() == 0 else "refused")


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's file, and dropping to that user, need root")
def test_the_owner_is_kept_and_a_folder_without_write_permission_gets_the_file_in_place(tmp_path):
    owned = tmp_path / "owned.pt"
    owned.write_bytes(b"old")
    os.chown(owned, 65534, 65534)
    tensorplay.save({"w": np.ones(2)}, owned)
    assert (os.stat(owned).st_uid, os.stat(owned).st_gid) == (65534, 65534)

    # pytest's folders are root's alone; this one must be reachable by the other user.
    base = tempfile.mkdtemp(prefix="tensorplay-admin-")
    try:
        os.chmod(base, 0o755)
        target = os.path.join(base, "ckpt.pt")
        with open(target, "wb") as f:
            f.write(b"old")
        os.chown(target, 65534, 65534)
        # Everything the save needs is imported before the switch: root's Python
        # installation may not be readable by that user.
        code = ("import os, numpy, tensorplay, tensorplay.serialization, tensorplay._save, importlib.util\n"
                "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
                f"tensorplay.save({{'w': numpy.arange(2.0)}}, {target!r})\n")
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        assert tensorplay.load(target, backend="numpy")["w"].tolist() == [0.0, 1.0]
        assert os.listdir(base) == ["ckpt.pt"]
    finally:
        shutil.rmtree(base)


def test_a_file_that_cannot_be_renamed_over_gets_the_bytes_in_place(tmp_path, monkeypatch):
    """A file bind-mounted on its own (a container's -v host.pt:/app/model.pt)
    refuses the rename with EBUSY."""
    import errno

    from tensorplay import _atomic

    path = tmp_path / "mounted.pt"
    path.write_bytes(b"old")
    inode = os.stat(path).st_ino

    def busy(src, dst):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(_atomic.os, "replace", busy)
    state = {"w": np.arange(5.0)}
    tensorplay.save(state, path)
    assert os.stat(path).st_ino == inode and path.read_bytes() == _saved_bytes(tmp_path, state, "mounted.pt")
    assert sorted(os.listdir(tmp_path)) == ["mounted.pt", "reference"]


def test_saving_over_a_file_loaded_with_mmap_is_safe(tmp_path):
    path = tmp_path / "ckpt.pt"
    tensorplay.save({"w": np.arange(1000, dtype=np.float32)}, path)
    mapped = tensorplay.load(path, backend="numpy", mmap=True)
    tensorplay.save({"w": np.zeros(1000, dtype=np.float32)}, path)
    assert mapped["w"][:3].tolist() == [0.0, 1.0, 2.0]
    assert tensorplay.load(path, backend="numpy")["w"][:3].tolist() == [0.0, 0.0, 0.0]


def test_skip_data_reserves_space_without_writing_it(tmp_path):
    path = tmp_path / "skip.pt"
    with skip_data():
        tensorplay.save({"w": np.arange(1 << 20, dtype=np.float32)}, path)
    assert os.path.getsize(path) > 4 << 20
    assert os.stat(path).st_blocks * 512 < 1 << 20  # a hole, not written zeros
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("skip/data/0").CRC == 0
    assert tensorplay.load(path, backend="numpy")["w"][:3].tolist() == [0.0, 0.0, 0.0]
    with skip_data():
        w = tensorplay.load(path, backend="numpy")["w"]
    assert w.shape == (1 << 20,)
    with skip_data(), pytest.raises(RuntimeError, match="skip_data"):
        tensorplay.save({}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols_and_the_legacy_format(tmp_path, protocol):
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "v": np.arange(6, dtype=np.float32)[::2]}
    tensorplay.save(state, tmp_path / "p.pt", pickle_protocol=protocol)
    assert np.array_equal(tensorplay.load(tmp_path / "p.pt", backend="numpy")["w"], state["w"])
    tensorplay.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    legacy = tensorplay.load(tmp_path / "legacy.pt", backend="numpy")
    assert np.array_equal(legacy["v"], state["v"])
    # No legacy storage class for uint16: an untyped storage, which counts bytes
    # (torch writes these files too and cannot read them back).
    u16 = np.arange(3, dtype=np.uint16)
    tensorplay.save(u16, tmp_path / "u16.pt", _use_new_zipfile_serialization=False, pickle_protocol=protocol)
    assert np.array_equal(tensorplay.load(tmp_path / "u16.pt", backend="numpy"), u16)
    if has_torch():
        import torch

        loaded = torch.load(tmp_path / "legacy.pt", weights_only=False)
        assert loaded["v"].tolist() == [0.0, 2.0, 4.0]


def test_objects_weights_only_cannot_rebuild_are_still_saved(tmp_path):
    path = tmp_path / "obj.pt"
    tensorplay.save({"p": fixture_classes.Point(1, 2), "w": np.ones(2, np.float32)}, path)
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="fixture_classes.Point"):
        tensorplay.load(path, backend="numpy")
    with tensorplay.safe_globals([fixture_classes.Point]):
        assert tensorplay.load(path, backend="numpy")["p"] == fixture_classes.Point(1, 2)
    assert pickle.loads(pickle.dumps(fixture_classes.Point(1, 2))) == fixture_classes.Point(1, 2)


@needs_torch
def test_torch_rules_for_storages_hold():
    import torch

    x = torch.arange(4.0)
    with pytest.raises(RuntimeError, match="different types"):
        tensorplay.save([x, x.view(torch.int32)], io.BytesIO())
    buf = io.BytesIO()
    param = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    tensorplay.save({"p": param, "sd": torch.nn.Linear(2, 2).state_dict()}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert isinstance(loaded["p"], torch.nn.Parameter) and not loaded["p"].requires_grad
    assert hasattr(loaded["sd"], "_metadata")
