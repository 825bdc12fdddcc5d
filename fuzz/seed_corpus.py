#!/usr/bin/env python3
"""Build the seed corpora of the fuzz targets from the real fixtures and the
malicious corpus. Run from the repository root: python3 fuzz/seed_corpus.py

- pickle_vm, scanner_differential: the data.pkl of every zip fixture, the raw
  pickles of the malicious corpus, and the pickles of the legacy files.
- zip_archive, checkpoint_open, round_trip's neighbours: whole files.
- legacy: the legacy-format files.
- wrappers: the malicious files, bare and compressed by Python's own modules
  (gzip, bz2, xz, LZMA-alone, zlib) or put in a tar, and the 7z fixtures.
Files over MAX_LEN bytes are skipped (libFuzzer runs with -max_len=65536).
Seeds are named seed-<source>; files a campaign adds keep libFuzzer's hash names.
The seeds join the corpus folders fuzz/corpus/<target>/ (unpacked from their archives
by fuzz/corpus.sh first, if absent), which are packed back into fuzz/corpus/<target>.tar.zst
at the end.
"""
import bz2
import glob
import gzip
import io
import lzma
import os
import struct
import subprocess
import tarfile
import zipfile
import zlib

MAX_LEN = 65536
# A ustar header holds a name of up to 100 bytes; fuzz/corpus.sh packs in that format.
MAX_NAME = 100
ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(ROOT)
CORPUS_SH = os.path.join(ROOT, "corpus.sh")
TARGETS = ("pickle_vm", "scanner_differential", "zip_archive", "checkpoint_open",
           "legacy", "round_trip", "wrappers")

# Seeds are added to the corpus, never replace it: start from the committed archives.
for target in TARGETS:
    if not os.path.isdir(os.path.join(ROOT, "corpus", target)):
        subprocess.run(["sh", CORPUS_SH, "unpack", target], check=True)

fixtures = sorted(
    glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.pt"))
    + glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.pth"))
    + glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.bin"))
)
malicious = sorted(
    f for f in glob.glob(os.path.join(REPO, "tests/malicious/files/*"))
    if os.path.isfile(f)
)


def put(target, name, data):
    if not data or len(data) > MAX_LEN:
        return
    if len(("seed-" + name).encode()) > MAX_NAME:
        raise SystemExit(f"seed name too long for the corpus archive: seed-{name}")
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def legacy_pickles(data):
    """The pickles of a legacy file, split with the stdlib's pickletools."""
    import io
    import pickletools
    out, pos = [], 0
    for _ in range(5):
        try:
            ops = list(pickletools.genops(io.BytesIO(data[pos:])))
        except Exception:
            break
        end = pos + ops[-1][2] + 1
        out.append(data[pos:end])
        pos = end
    return out


for path in fixtures + malicious:
    base = os.path.basename(path)
    kind = os.path.basename(os.path.dirname(path))
    name = f"{kind}-{base}"
    with open(path, "rb") as f:
        data = f.read()
    put("zip_archive", name, data)
    put("checkpoint_open", name, data)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    if info.filename.endswith(".pkl"):
                        pkl = z.read(info)
                        stem = info.filename.replace("/", "_")
                        put("pickle_vm", f"{name}-{stem}", pkl)
                        put("scanner_differential", f"{name}-{stem}", pkl)
        except Exception:
            pass
    elif base.startswith("legacy") or data.startswith(b"\x80\x02\x8a\x0a\x6c\xfc"):
        put("legacy", name, data)
        for i, p in enumerate(legacy_pickles(data)):
            put("pickle_vm", f"{name}-pickle{i}", p)
            put("scanner_differential", f"{name}-pickle{i}", p)
    else:
        put("pickle_vm", name, data)
        put("scanner_differential", name, data)

# round_trip decodes a tree from its bytes (see Tree::from_bytes in src/fuzzing/round_trip.rs):
# tag % 10 = None, bool, int, float, str, bytes, tuple, list, dict, tensor.

def f32s(*v):
    return struct.pack(f"<{len(v)}f", *v)

round_trip_seeds = {
    "state_dict": b"\x08\x03"
    + b"\x00\x06weight" + b"\x09\x04" + f32s(1.0, -2.5, float("nan"), 0.0)
    + b"\x00\x04bias" + b"\x09\x02" + f32s(0.5, float("inf"))
    + b"\x01" + b"\x03" + struct.pack("<q", -(2**40)) + b"\x06\x03\x00\x01\x01\x02\x01\x07",
    "python_values": b"\x07\x06" + b"\x00" + b"\x01\x01" + b"\x02\x02" + struct.pack("<i", 70000)
    + b"\x03" + struct.pack("<d", 0.1) + b"\x04\x03\xc3\xa9x" + b"\x05\x03\x00\xff\x80",
    "nested": b"\x06\x01" * 30 + b"\x09\x01" + f32s(3.0),
    "empty_things": b"\x07\x05\x06\x00\x07\x00\x08\x00\x09\x00\x05\x00",
}
for name, data in round_trip_seeds.items():
    put("round_trip", name, data)

sevenzip = sorted(glob.glob(os.path.join(REPO, "tests/fixtures/sevenzip/*.7z")))
for path in malicious + sevenzip:
    base = os.path.basename(path)
    if base.startswith("deep_"):
        continue  # resource bombs: the other targets have them; here they only slow replay
    with open(path, "rb") as f:
        data = f.read()
    put("wrappers", base, data)
    if path in sevenzip or len(data) > 4096:
        continue
    put("wrappers", base + ".gz", gzip.compress(data, mtime=0))
    put("wrappers", base + ".bz2", bz2.compress(data))
    put("wrappers", base + ".xz", lzma.compress(data))
    put("wrappers", base + ".lzma", lzma.compress(data, format=lzma.FORMAT_ALONE))
    put("wrappers", base + ".zlib", zlib.compress(data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo(base)
        info.size, info.mtime = len(data), 0
        t.addfile(info, io.BytesIO(data))
    put("wrappers", base + ".tar", buf.getvalue())

subprocess.run(["sh", CORPUS_SH, "pack", *TARGETS], check=True)
