"""What the remote-scan tests share, whatever serves the files (nginx in
test_remote_scan.py, an S3 server in test_remote_s3.py): the corpus and
fixtures a remote scan must judge as a local one, what of a report is
compared, a GPT-2-shaped checkpoint, where a checkpoint's tensor bytes lie
(a file's, a DCP folder's), and what of a file a server's access log says it sent."""
from __future__ import annotations

import io
import pathlib
import struct
import zipfile

from tensorplay import CheckpointError, scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint

TESTS = pathlib.Path(__file__).parent
CORPUS = sorted(
    p.relative_to(TESTS).as_posix()
    for folder in (TESTS / "malicious" / "files", TESTS / "fixtures")
    for p in folder.rglob("*")
    if p.is_file() and not p.is_symlink()
)


def summary(report: scanner.ScanReport) -> tuple:
    """What a remote report must say as the local one does."""
    return (report.format, report.verdict, report.findings, tuple(report.problems),
            tuple(p.kind for p in report.problems), report.pickles, report.skipped_because, report.allowlisted)


def hostile() -> str:
    """A corpus file the local scan calls unsafe."""
    return next(r for r in CORPUS if r.startswith("malicious/") and scanner.scan(TESTS / r).verdict == "unsafe")


def unsafe_globals(source: str | pathlib.Path) -> list[str] | str:
    """``get_unsafe_globals_in_checkpoint``, or the name of the CheckpointError it raised."""
    try:
        return get_unsafe_globals_in_checkpoint(source)
    except CheckpointError as e:
        return type(e).__name__


def payloads(path: pathlib.Path) -> list[range]:
    """The byte ranges of a torch checkpoint's tensor payloads."""
    return zip_payloads(path.read_bytes())


def zip_payloads(data: bytes, at: int = 0) -> list[range]:
    """The byte ranges of the tensor payloads of ``data``, a ``torch.save`` zip
    that starts at offset ``at`` of its file (a DCP item's record: 0 for a file)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        infos = [i for i in z.infolist() if "/data/" in i.filename and not i.filename.endswith("serialization_id")]
    found = []
    for info in infos:
        start = info.header_offset
        name_len, extra_len = struct.unpack_from("<HH", data, start + 26)  # the local header's own lengths
        start += 30 + name_len + extra_len
        found.append(range(at + start, at + start + info.compress_size))
    return found


def dcp_payloads(folder: pathlib.Path) -> dict[str, list[range]]:
    """The byte ranges of a DCP folder's tensor payloads, by file name: those of
    each item's ``torch.save`` record, where the folder's ``.metadata`` says it lies."""
    from torch.distributed.checkpoint import FileSystemReader

    found: dict[str, list[range]] = {}
    for info in FileSystemReader(str(folder)).read_metadata().storage_data.values():
        with open(folder / info.relative_path, "rb") as f:
            f.seek(info.offset)
            found.setdefault(info.relative_path, []).extend(zip_payloads(f.read(info.length), info.offset))
    return found


def sent_ranges(log: list[tuple], uri: str, size: int) -> list[range]:
    """The byte ranges of the file at ``uri`` (``size`` bytes) that access-log
    rows ``(method, uri, range header, status, body bytes, ...)`` say were sent:
    a 206's range, a 200's whole body from byte 0."""
    ranges = []
    for _, logged_uri, header, status, body, *_ in log:
        if logged_uri != uri:
            continue
        first, _, last = header.removeprefix("bytes=").partition("-")
        start = 0 if status == 200 else int(first) if first else size - int(last)
        ranges.append(range(start, start + body))
    return ranges


def no_tensor_byte(fetched: list[range], tensors: list[range]) -> None:
    for r in fetched:
        hit = [p for p in tensors if p.start < r.stop and r.start < p.stop]
        assert not hit, (r, hit[:2])


def gpt2_state_dict(torch) -> dict:
    """GPT-2 small's state dict as transformers saves it: its names and shapes
    (124M parameters, 500 MB), the values left uninitialised."""
    embd, ctx, vocab = 768, 1024, 50257
    sd = {"transformer.wte.weight": torch.empty(vocab, embd), "transformer.wpe.weight": torch.empty(ctx, embd)}
    for i in range(12):
        p = f"transformer.h.{i}."
        for name, shape in (("ln_1.weight", (embd,)), ("ln_1.bias", (embd,)),
                            ("attn.c_attn.weight", (embd, 3 * embd)), ("attn.c_attn.bias", (3 * embd,)),
                            ("attn.c_proj.weight", (embd, embd)), ("attn.c_proj.bias", (embd,)),
                            ("ln_2.weight", (embd,)), ("ln_2.bias", (embd,)),
                            ("mlp.c_fc.weight", (embd, 4 * embd)), ("mlp.c_fc.bias", (4 * embd,)),
                            ("mlp.c_proj.weight", (4 * embd, embd)), ("mlp.c_proj.bias", (embd,))):
            sd[p + name] = torch.empty(*shape)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = torch.empty(embd), torch.empty(embd)
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    return sd
