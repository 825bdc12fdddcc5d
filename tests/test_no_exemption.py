"""Nothing is exempt from a reading because of its name, suffix, folder or first
byte: every file of a folder and every member of an archive is also read as the
pickle an unpickler handed it reads from byte 0. Each hostile case here is first
proven by a real reader in a sandboxed subprocess; then the scan must not call it
clean. Benign bytes of the same kinds (tensor bytes, text, git's objects) stay
clean or skipped."""
from __future__ import annotations

import io
import subprocess
import zipfile

import pytest
import tensorplay
from conftest import TORCH_FIXTURES
from sandboxed import protocol_0_payload, runs_payload
from tensorplay import cli, scanner

UNPICKLE_FILE = "import pickle\npickle.load(open(path, 'rb'))\n"
UNPICKLE_MEMBER = "import pickle, zipfile\npickle.loads(zipfile.ZipFile(path).read(member))\n"


def _zip(path, members: dict[str, bytes], method=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_zip_member_of_any_name_is_read_as_a_pickle(tmp_path, method):
    # pandas.read_pickle("x.zip") unpickles a zip's single member, whatever its name.
    archive = tmp_path / "notes.zip"
    _zip(archive, {"notes.txt": protocol_0_payload()}, method)
    assert runs_payload(UNPICKLE_MEMBER, path=str(archive), member="notes.txt")
    report = scanner.scan(archive)
    assert report.verdict == "unsafe" and report.globals == ("posix.system",)
    assert report.findings[0].location == "notes.txt"
    assert tensorplay.serialization.get_unsafe_globals_in_checkpoint(archive) == ["posix.system"]
    assert scanner.scan(archive, pickles_only=True).verdict == "unsafe"


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_tensor_payload_entry_is_read_from_byte_0(tmp_path, method):
    """A torch checkpoint whose tensor's bytes are a pickle: torch reads them as
    floats, an unpickler handed the entry runs them."""
    torch = pytest.importorskip("torch")
    source = tmp_path / "saved.pt"
    torch.save({"w": torch.zeros(64)}, source)
    with zipfile.ZipFile(source) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    payloads = [n for n in members if "/data/" in n and not n.endswith("serialization_id")]
    payload_entry = max(payloads, key=lambda n: len(members[n]))
    size = len(members[payload_entry])
    planted = protocol_0_payload().ljust(size, b"\0")
    assert len(planted) == size, "the payload must fit the tensor's bytes"
    members[payload_entry] = planted
    archive = tmp_path / "model.pt"
    _zip(archive, members, method)
    assert runs_payload(UNPICKLE_MEMBER, path=str(archive), member=payload_entry)
    report = scanner.scan(archive)
    assert report.verdict == "unsafe" and report.globals == ("posix.system",), report
    assert report.findings[0].location == payload_entry


def test_a_pickle_may_start_with_any_opcode(tmp_path):
    """No PROTO (protocols 0 and 1), or a FRAME first: a README.md that is a
    pickle is one, whatever it is called."""
    readme = tmp_path / "README.md"
    readme.write_bytes(protocol_0_payload())
    framed = tmp_path / "framed.txt"
    body = protocol_0_payload()
    framed.write_bytes(b"\x95" + len(body).to_bytes(8, "little") + body)
    for path in (readme, framed):
        assert runs_payload(UNPICKLE_FILE, path=str(path))
        reports = scanner.scan_paths([path])
        assert cli.exit_code(reports) == cli.EXIT_UNSAFE, reports


def test_a_tensordict_leaf_and_a_git_object_are_read_from_byte_0(tmp_path):
    folder = tmp_path / "repo"
    (folder / ".git" / "objects" / "ab").mkdir(parents=True)
    (folder / "meta.json").write_text('{"x": {"device": "cpu", "shape": [8], "dtype": "torch.uint8"}}')
    leaf = folder / "x.memmap"
    git_object = folder / ".git" / "objects" / "ab" / "cdef"
    for path in (leaf, git_object):
        path.write_bytes(protocol_0_payload())
        assert runs_payload(UNPICKLE_FILE, path=str(path))
    reports = {r.path: r for r in scanner.scan_paths([folder])}
    assert cli.exit_code(list(reports.values())) == cli.EXIT_UNSAFE
    for path in (leaf, git_object):
        assert reports[str(path)].verdict == "unsafe" and reports[str(path)].globals == ("posix.system",)


def test_benign_bytes_read_from_byte_0_stay_clean_or_skipped(tmp_path):
    """Tensor bytes, text and git's own objects name nothing when read as pickles."""
    folder = tmp_path / "repo"
    folder.mkdir()
    for fixture in ("seed_tensor.pt", "seed_batchnorm_state_dict.pt"):
        (folder / fixture).write_bytes((TORCH_FIXTURES / fixture).read_bytes())
    (folder / "meta.json").write_text('{"x": {"device": "cpu", "shape": [64], "dtype": "torch.float32"}}')
    import numpy as np

    (folder / "x.memmap").write_bytes(np.random.default_rng(0).standard_normal(64).astype(np.float32).tobytes())
    (folder / "README.md").write_text("# model\n\ncos\nsystem\nis no pickle here: the first byte breaks it\n")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "add", "."], cwd=folder, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x"], cwd=folder,
                   check=True)
    reports = scanner.scan_paths([folder])
    assert cli.exit_code(reports) == 0, [(r.path, r.verdict, r.problems, r.findings) for r in reports
                                         if r.verdict not in ("clean", "skipped")]
    leaf = next(r for r in reports if r.path.endswith("x.memmap"))
    assert leaf.verdict == "skipped" and leaf.skipped_because == scanner.TENSORDICT_LEAF
    git = [r for r in reports if "/.git/" in r.path]
    assert git and all(r.skipped_because == scanner.GIT_DATA for r in git)


def test_an_archive_member_named_like_a_payload_is_read_by_content(tmp_path):
    """Under a torch checkpoint's folder, a member no torch record names is read
    whole, whatever its name; one that is no pickle and names nothing is no
    problem (text, a tokenizer's JSON)."""
    out = io.BytesIO()
    with zipfile.ZipFile(TORCH_FIXTURES / "seed_tensor.pt") as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    root = next(iter(members)).split("/")[0]
    members[f"{root}/tokenizer.json"] = b'{"model": {"vocab": {"a": 0}}}'
    members[f"{root}/notes.bin.txt"] = bytes(range(256))
    _zip(out, members)
    report = scanner.scan(out.getvalue())
    assert report.verdict == "clean", report



# A reader that unpickles through a decompressing file object, for each format.
READ_THROUGH = {
    "gz": "import pandas\npandas.read_pickle(path)\n",
    "bz2": "import pandas\npandas.read_pickle(path)\n",
    # pandas 3.1.1 cannot read most zstd pickles (it seeks the stream backwards).
    "zst": "import io, pickle, zstandard\n"
           "pickle.load(io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, 'rb'), "
           "read_across_frames=True)))\n",
}


@pytest.mark.parametrize("suffix", sorted(READ_THROUGH))
def test_a_compressed_pickle_cut_short_reports_what_decoded_before_the_break(tmp_path, suffix):
    """A stream of two members (gzip), streams (bzip2) or frames (zstd), the
    second cut in half: a reader unpickling through a decompressing file object
    runs the first one's pickle before it meets the break. The scan names the
    global (UNSAFE, exit 1) and the break, not only the break."""
    import bz2
    import gzip
    import random
    import string

    import zstandard

    compress = {"gz": gzip.compress, "bz2": bz2.compress, "zst": zstandard.ZstdCompressor().compress}[suffix]
    rng = random.Random(0)
    tail = compress("".join(rng.choice(string.ascii_letters) for _ in range(1 << 16)).encode())
    path = tmp_path / f"frame.pkl.{suffix}"
    path.write_bytes(compress(protocol_0_payload()) + tail[:len(tail) // 2])
    assert runs_payload(READ_THROUGH[suffix], path=str(path))
    report = scanner.scan(path)
    assert report.verdict == "unsafe" and report.globals == ("posix.system",), report
    assert any(p.kind == "malformed_archive" and "stream" in p for p in report.problems), report.problems
    assert cli.exit_code([report]) == cli.EXIT_UNSAFE
