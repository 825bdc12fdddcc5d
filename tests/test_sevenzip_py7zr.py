"""7z archives as py7zr 1.1.4 writes them, with every coder chain it can write: the
scan reads each benign one to its end (CLEAN, so every member's CRC, which py7zr
lists, matched what the reader decoded: the members hold bytes in which every
filter converts instructions), and finds the payload of a hostile one (UNSAFE),
which py7zr's ``extractall`` and ``pickle.load`` really run. The chains the reader
does not decode (PPMd, Brotli, AES) are UNREADABLE, never CLEAN, naming the coder.

There is no binding that lists a 7z archive's members; tests/sevenzip.rs compares
the members' bytes with what py7zr wrote (tests/fixtures/sevenzip/make.py), and
src/archive/sevenzip/filters.rs holds the filters to liblzma's vectors.
"""
from __future__ import annotations

import pickle
import random

import pytest

py7zr = pytest.importorskip("py7zr")

from sandboxed import protocol_0_payload, runs_payload  # noqa: E402
from tensorplay import scanner  # noqa: E402

LZMA2 = {"id": py7zr.FILTER_LZMA2, "preset": 7}
COMPRESSORS = {
    "lzma2": LZMA2,
    "lzma": {"id": py7zr.FILTER_LZMA},
    "bzip2": {"id": py7zr.FILTER_BZIP2},
    "deflate": {"id": py7zr.FILTER_DEFLATE},
    "copy": {"id": py7zr.FILTER_COPY},
    "zstd": {"id": py7zr.FILTER_ZSTD},
}
# The branch filters py7zr writes before any compressor (through pybcj, or
# liblzma before LZMA and LZMA2).
BRANCH = {
    "x86": {"id": py7zr.FILTER_X86},
    "arm": {"id": py7zr.FILTER_ARM},
    "armt": {"id": py7zr.FILTER_ARMTHUMB},
    "ppc": {"id": py7zr.FILTER_POWERPC},
    "sparc": {"id": py7zr.FILTER_SPARC},
}
# Filters py7zr writes only before LZMA or LZMA2 (liblzma's).
LIBLZMA_ONLY = {
    "ia64": {"id": py7zr.FILTER_IA64},
    "delta": {"id": py7zr.FILTER_DELTA, "dist": 4},
}

CHAINS: dict[str, list[dict] | None] = {"default": None}
CHAINS |= {name: [c] for name, c in COMPRESSORS.items()}
CHAINS |= {f"{f}+{c}": [BRANCH[f], COMPRESSORS[c]] for f in BRANCH for c in COMPRESSORS}
CHAINS |= {f"{f}+{c}": [LIBLZMA_ONLY[f], COMPRESSORS[c]] for f in LIBLZMA_ONLY for c in ("lzma2", "lzma")}
# Three and four coders: liblzma chains several filters before LZMA2.
CHAINS |= {
    "x86+delta+lzma2": [BRANCH["x86"], LIBLZMA_ONLY["delta"], LZMA2],
    "delta+x86+lzma2": [LIBLZMA_ONLY["delta"], BRANCH["x86"], LZMA2],
    "delta+arm+sparc+lzma2": [{"id": py7zr.FILTER_DELTA, "dist": 1}, BRANCH["arm"], BRANCH["sparc"], LZMA2],
}

# py7zr 1.1.4 cannot read back what it writes with ARM, PowerPC or SPARC before
# LZMA or BZip2 (pybcj behind a Python decompressor) once a member before the last
# has a size that is no multiple of 4: extraction stops short, "decompression
# failed to make progress". The scan reads them all the same.
PY7ZR_CANNOT_READ = {f"{f}+{c}" for f in ("arm", "ppc", "sparc") for c in ("lzma", "bzip2")}

# Chains py7zr writes that the reader refuses, and the coder it names.
REFUSED = {
    "ppmd": ([{"id": py7zr.FILTER_PPMD}], None, "PPMd"),
    "brotli": ([{"id": py7zr.FILTER_BROTLI}], None, "Brotli"),
    "x86+ppmd": ([BRANCH["x86"], {"id": py7zr.FILTER_PPMD}], None, "PPMd"),
    "arm+brotli": ([BRANCH["arm"], {"id": py7zr.FILTER_BROTLI}], None, "Brotli"),
    "aes": (None, "secret", "7zAES"),
}


def code(seed: int, n: int) -> bytes:
    """Bytes in which every filter finds instructions: x86 CALL/JMP, ARM and
    Thumb BL, PowerPC bl, SPARC call and IA-64 branch bundles, among random ones."""
    rng = random.Random(seed)
    out = bytearray(rng.randbytes(n))
    opcodes = [0xE8, 0xE9, 0x00, 0xFF, 0xEB, 0xF0, 0xF8, 0x40, 0x7F, 0x48, 0x4B]
    for i in rng.sample(range(n), n // 3):
        out[i] = rng.choice(opcodes)
    for k in range(0, n - 31, 32):
        out[k] = (out[k] & 0xE0) | 0x10
        out[k + 12] &= 0xF8
        out[k + 15] = 0x50 | (out[k + 15] & 0x0F)
    return bytes(out)


def benign_members(seed: int = 1) -> list[tuple[str, bytes]]:
    weights = pickle.dumps({"weight": [1.0, 2.0, 3.0], "code": code(seed, 6000)}, protocol=4)
    return [("model/data.pkl", weights), ("empty.txt", b""), ("notes.txt", b"hello 7z\n" * 50),
            ("more.pkl", pickle.dumps(code(seed + 1, 999), protocol=2))]


def hostile_members() -> list[tuple[str, bytes]]:
    # Members before the payload whose sizes are multiples of 4: py7zr reads them
    # with every chain (see PY7ZR_CANNOT_READ).
    return [("notes.txt", b"hello 7z\n" * 48), ("empty.txt", b""), ("model/data.pkl", protocol_0_payload())]


def write(path, members, filters, *, encoded_header=True, password=None):
    with py7zr.SevenZipFile(path, "w", filters=filters, password=password) as archive:
        if not encoded_header:
            archive.set_encoded_header_mode(False)
        for name, data in members:
            archive.writestr(data, name)
    return path


def extracted(path) -> dict[str, bytes]:
    """What py7zr's extractall writes, by name."""
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, py7zr.SevenZipFile(path) as archive:
        archive.extractall(path=tmp)
        root = pathlib.Path(tmp)
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# pickle.load of the member py7zr extracted, in the sandbox's cwd.
RUN = """
import pickle, py7zr
with py7zr.SevenZipFile(path) as archive:
    archive.extractall(path="out")
with open("out/model/data.pkl", "rb") as f:
    pickle.load(f)
"""


@pytest.mark.parametrize("encoded_header", [True, False], ids=["encoded header", "plain header"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_benign_archives_of_every_chain_are_clean(tmp_path, chain, encoded_header):
    members = benign_members()
    path = write(tmp_path / "model.7z", members, CHAINS[chain], encoded_header=encoded_header)
    if chain in PY7ZR_CANNOT_READ:
        with pytest.raises(py7zr.Bad7zFile, match="failed to make progress"):
            extracted(path)
    else:
        assert extracted(path) == dict(members)
    report = scanner.scan(str(path))
    assert report.format == "7z"
    assert report.verdict == "clean", report
    assert report.pickles >= 2, report


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_hostile_archives_of_every_chain_are_unsafe_and_py7zr_runs_them(tmp_path, chain):
    path = write(tmp_path / "model.7z", hostile_members(), CHAINS[chain])
    report = scanner.scan(str(path))
    assert report.verdict == "unsafe", report
    assert [(f.name, f.location, f.wrappers) for f in report.findings] == [
        ("posix.system", "model/data.pkl", ("7z",))]
    assert runs_payload(RUN, path=str(path))


@pytest.mark.parametrize("chain", ["default", "x86+copy", "zstd", "x86+bzip2", "delta+lzma2", "arm+deflate"])
def test_a_member_larger_than_an_lzma2_chunk(tmp_path, chain):
    # Past 2 MiB, LZMA2's largest chunk; partly random, so it compresses within
    # the scan's inflation budget.
    rng = random.Random(7)
    blob = b"".join(rng.randbytes(4096) + code(i, 4096) + bytes(8192) for i in range(160))
    big = pickle.dumps({"blob": blob}, protocol=4)
    assert len(big) > 2 << 20
    members = [("big.pkl", big), *benign_members()]
    path = write(tmp_path / "model.7z", members, CHAINS[chain])
    assert extracted(path) == dict(members)
    assert scanner.scan(str(path)).verdict == "clean"
    hostile = write(tmp_path / "hostile.7z", [("big.pkl", big), *hostile_members()], CHAINS[chain])
    assert scanner.scan(str(hostile)).verdict == "unsafe"


def test_folders_of_different_chains(tmp_path):
    """py7zr writes one folder per session: appending adds another, with its own
    chain (the archive is no longer solid)."""
    path = write(tmp_path / "model.7z", benign_members(1), None)
    for chain in ("zstd", "arm+bzip2", "delta+x86+lzma2"):
        with py7zr.SevenZipFile(path, "a", filters=CHAINS[chain]) as archive:
            archive.writestr(pickle.dumps(code(len(chain), 3000), protocol=4), f"{chain}.pkl")
    with py7zr.SevenZipFile(path) as archive:
        assert len(archive.header.main_streams.unpackinfo.folders) == 4
    assert scanner.scan(str(path)).verdict == "clean"
    with py7zr.SevenZipFile(path, "a", filters=CHAINS["sparc+deflate"]) as archive:
        archive.writestr(protocol_0_payload(), "model/data.pkl")
    report = scanner.scan(str(path))
    assert [f.name for f in report.findings] == ["posix.system"], report


@pytest.mark.parametrize("chain", sorted(REFUSED))
def test_chains_the_reader_does_not_decode_are_unreadable_naming_the_coder(tmp_path, chain):
    filters, password, coder = REFUSED[chain]
    path = write(tmp_path / "model.7z", hostile_members(), filters, password=password)
    report = scanner.scan(str(path))
    assert report.verdict == "unreadable", report
    assert any(coder in problem for problem in report.problems), report.problems
