#!/usr/bin/env python3
"""Python-level fuzzer: mutated fixtures through tensorplay's public API.

Each input picks a real checkpoint (tests/fixtures, tests/malicious/files) and
mutates it (bit flips, byte and 32/64-bit overwrites with boundary values,
truncation, insertion, splicing), or uses the input bytes themselves as the
file, then calls

- ``tensorplay.load(io.BytesIO(data), backend="numpy")``: only
  ``tensorplay.CheckpointError`` subclasses and ``MemoryError`` may escape;
- ``tensorplay.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))``:
  only ``tensorplay.CheckpointError`` subclasses may escape;
- ``tensorplay.scanner.scan(data)``: nothing may escape (it returns a report).

Anything else is a finding: it is written to fuzz/artifacts/python/ and listed
in fuzz/logs/python_findings.txt (once per distinct exception), and fuzzing goes
on. Set FUZZ_STOP_ON_FINDING=1 to stop at the first one instead.

    source ~/.cache/tensorplay-venv/bin/activate   # with atheris installed
    nice -n 19 python fuzz/python/fuzz_load.py -max_total_time=1200 -rss_limit_mb=2048 -timeout=10 \
        -max_len=4096 -len_control=0
    python fuzz/python/fuzz_load.py fuzz/artifacts/python/finding-...   # replay one file
"""
import glob
import hashlib
import io
import os
import sys
import traceback

import atheris

with atheris.instrument_imports():
    import tensorplay
    import tensorplay.scanner
    import tensorplay.serialization

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ARTIFACTS = os.path.join(REPO, "fuzz", "artifacts", "python")
FINDINGS = os.path.join(REPO, "fuzz", "logs", "python_findings.txt")
MAX_FIXTURE = 64 * 1024
STOP = os.environ.get("FUZZ_STOP_ON_FINDING") == "1"


def _fixtures():
    paths = sorted(
        glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.pt"))
        + glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.pth"))
        + glob.glob(os.path.join(REPO, "tests/fixtures/torch*/*.bin"))
        + glob.glob(os.path.join(REPO, "tests/malicious/files/*"))
    )
    out = []
    for p in paths:
        if os.path.isfile(p) and os.path.getsize(p) <= MAX_FIXTURE:
            with open(p, "rb") as f:
                out.append(f.read())
    return out


FIXTURES = _fixtures()
BOUNDARY_32 = [0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
BOUNDARY_64 = [0, 1, 1 << 31, 1 << 32, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
SIGNATURES = [b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07", b"PK\x07\x08"]

stats = {"runs": 0, "loaded": 0, "findings": 0}
seen = set()


def mutate(fdp, data):
    data = bytearray(data)
    for _ in range(fdp.ConsumeIntInRange(1, 8)):
        if not data:
            data += fdp.ConsumeBytes(16)
            continue
        op = fdp.ConsumeIntInRange(0, 8)
        pos = fdp.ConsumeIntInRange(0, len(data) - 1)
        if op == 0:
            data[pos] ^= 1 << fdp.ConsumeIntInRange(0, 7)
        elif op == 1:
            data[pos] = fdp.ConsumeIntInRange(0, 255)
        elif op == 2:
            v = BOUNDARY_32[fdp.ConsumeIntInRange(0, len(BOUNDARY_32) - 1)]
            data[pos : pos + 4] = v.to_bytes(4, "little")
        elif op == 3:
            v = BOUNDARY_64[fdp.ConsumeIntInRange(0, len(BOUNDARY_64) - 1)]
            data[pos : pos + 8] = v.to_bytes(8, "little")
        elif op == 4:
            del data[pos:]
        elif op == 5:
            data[pos:pos] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 64))
        elif op == 6:
            n = fdp.ConsumeIntInRange(1, 256)
            del data[pos : pos + n]
        elif op == 7:
            # Splice in a piece of another fixture.
            other = FIXTURES[fdp.ConsumeIntInRange(0, len(FIXTURES) - 1)]
            start = fdp.ConsumeIntInRange(0, max(len(other) - 1, 0))
            data[pos:pos] = other[start : start + fdp.ConsumeIntInRange(1, 512)]
        else:
            data[pos : pos + 4] = SIGNATURES[fdp.ConsumeIntInRange(0, len(SIGNATURES) - 1)]
    return bytes(data)


def finding(where, data, exc):
    digest = hashlib.sha1(data).hexdigest()
    key = (where, type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
    if key in seen:
        return
    seen.add(key)
    stats["findings"] += 1
    os.makedirs(ARTIFACTS, exist_ok=True)
    os.makedirs(os.path.dirname(FINDINGS), exist_ok=True)
    path = os.path.join(ARTIFACTS, f"finding-{digest}")
    with open(path, "wb") as f:
        f.write(data)
    with open(FINDINGS, "a") as f:
        f.write(f"== {where}: {type(exc).__name__}: {exc}\n   input: {path}\n")
        f.write("".join(traceback.format_exception(exc)))
        f.write("\n")
    print(f"FINDING in {where}: {type(exc).__name__}: {exc} ({path})", file=sys.stderr)
    if STOP:
        raise exc


def check(data):
    stats["runs"] += 1
    if stats["runs"] % 5000 == 0:
        report_stats()
    try:
        tensorplay.load(io.BytesIO(data), backend="numpy")
        stats["loaded"] += 1
    except (tensorplay.CheckpointError, MemoryError):
        pass
    except Exception as e:  # noqa: BLE001 - anything else is what we look for
        finding("load", data, e)
    try:
        tensorplay.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(data))
    except tensorplay.CheckpointError:
        pass
    except Exception as e:  # noqa: BLE001
        finding("get_unsafe_globals_in_checkpoint", data, e)
    try:
        report = tensorplay.scanner.scan(data)
        assert report.verdict in ("clean", "unsafe", "unreadable"), report.verdict
    except Exception as e:  # noqa: BLE001
        finding("scanner.scan", data, e)


def test_one_input(raw):
    fdp = atheris.FuzzedDataProvider(raw)
    choice = fdp.ConsumeIntInRange(0, len(FIXTURES))
    if choice == len(FIXTURES):
        # The input itself is the file: lets libFuzzer's own mutations drive.
        data = fdp.ConsumeBytes(fdp.remaining_bytes())
    else:
        data = mutate(fdp, FIXTURES[choice])
    check(data)


def report_stats():
    print(
        f"fuzz_load: {stats['runs']} inputs, {stats['loaded']} loaded, "
        f"{stats['findings']} distinct findings",
        file=sys.stderr,
        flush=True,
    )


def main():
    replay = [a for a in sys.argv[1:] if not a.startswith("-") and os.path.isfile(a)]
    if replay:
        for path in replay:
            with open(path, "rb") as f:
                check(f.read())
        print(f"replayed {len(replay)} files, {stats['findings']} findings")
        return
    # libFuzzer exits without running Python's atexit: stats are printed as we go.
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
