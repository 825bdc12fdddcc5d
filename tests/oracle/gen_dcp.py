"""torch.distributed.checkpoint folders, from a real ``dcp.save`` of tensors and
non-tensor items, whose ``.metadata`` is rewritten so that a bytes item's
``_StorageInfo(relative_path, offset, length)`` points at a payload elsewhere:
appended to the ``.distcp`` file, in a text file, a ``README.md``, a TensorDict
``.memmap`` leaf, a file under ``.git/``, the middle of another tensor's storage,
a file outside the folder; behind the zstd transform descriptor; and a hostile
``.metadata`` itself. DCP's planner hands bytes items to
``torch.load(weights_only=False)``: a torch archive or a bare pickle both run."""
from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import random
import shutil
import tempfile
import warnings

from . import gen_torch, payloads
from .cases import Case

NAME = "dcp"
PLACES = ("appended to the .distcp", "a text file", "README.md", "a TensorDict .memmap leaf", "a file under .git/",
          "inside another tensor's storage", "outside the folder", "zstd transform", "hostile .metadata",
          "the item's own bytes replaced")
TENSORDICT_META = (b'{"x": {"device": "cpu", "shape": [%d], "dtype": "torch.uint8", "is_nested": false}, "shape": [], '
                   b'"device": "cpu", "_type": "<class \'tensordict._td.TensorDict\'>", "_format_version": 1, '
                   b'"_class": "tensordict:TensorDict"}')


def _save(state: dict) -> dict[str, bytes]:
    import torch.distributed.checkpoint as dcp

    folder = tempfile.mkdtemp()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(state, checkpoint_id=folder, no_dist=True)
        out = {}
        for n in os.listdir(folder):
            with open(os.path.join(folder, n), "rb") as f:
                out[n] = f.read()
        return out
    finally:
        shutil.rmtree(folder)


def _state(blob: bytes | None = None) -> dict:
    import torch

    state = {"model": {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)}, "step": 7,
             "meta": {"name": "run-1", "betas": (0.9, 0.99)}}
    if blob is not None:
        state["model"]["blob"] = torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()
    return state


@functools.cache
def base() -> tuple[tuple[str, bytes], ...]:
    return tuple(_save(_state()).items())


def _metadata(files: dict[str, bytes]):
    return pickle.loads(files[".metadata"])  # our own dcp.save's, benign


def _bytes_item(md) -> object:
    """The index of the first non-tensor item."""
    return next(i for i in md.storage_data if type(md.state_dict_metadata[i.fqn]).__name__ == "BytesStorageMetadata")


def _point(files: dict[str, bytes], where: str, offset: int, length: int, transform: list[str] | None = None) -> None:
    md = _metadata(files)
    index = _bytes_item(md)
    md.storage_data[index] = dataclasses.replace(md.storage_data[index], relative_path=where, offset=offset,
                                                 length=length, transform_descriptors=transform)
    files[".metadata"] = pickle.dumps(md)


def item_payload(rng: random.Random | None) -> tuple[bytes, str]:
    """What a bytes item may hold: a torch archive with a hostile data.pkl, or a bare pickle."""
    pickle_bytes, _ = payloads.random_hostile(rng) if rng else (payloads.hostile_pickle(), "")
    if rng is not None and rng.random() < 0.3:
        return pickle_bytes, "bare pickle"
    fixture = rng.choice(gen_torch.SMALL) if rng else gen_torch.SMALL[0]
    return gen_torch.rebuild(fixture, None, "replace data.pkl", pickle_bytes)[0], "torch archive"


def build(place: str, rng: random.Random | None = None) -> tuple[dict[str, bytes], str]:
    payload, what = item_payload(rng)
    files = dict(base())
    distcp = next(n for n in files if n.endswith(".distcp"))
    if place == "appended to the .distcp":
        offset = len(files[distcp])
        files[distcp] += payload
        _point(files, distcp, offset, len(payload))
    elif place == "a text file":
        files["notes.txt"] = b"training notes\n" + payload
        _point(files, "notes.txt", 15, len(payload))
    elif place == "README.md":
        files["README.md"] = payload
        _point(files, "README.md", 0, len(payload))
    elif place == "a TensorDict .memmap leaf":
        files["extra/x.memmap"] = payload
        files["extra/meta.json"] = TENSORDICT_META % len(payload)
        _point(files, "extra/x.memmap", 0, len(payload))
    elif place == "a file under .git/":
        files[".git/objects/ab/cdef0123"] = payload
        _point(files, ".git/objects/ab/cdef0123", 0, len(payload))
    elif place == "inside another tensor's storage":
        files = _save(_state(payload))
        distcp = next(n for n in files if n.endswith(".distcp"))
        offset = files[distcp].find(payload)
        _point(files, distcp, offset, len(payload))
    elif place == "outside the folder":
        files["../outside.bin"] = payload
        _point(files, "../outside.bin", 0, len(payload))
    elif place == "zstd transform":
        import zstandard

        packed = zstandard.ZstdCompressor().compress(payload)
        offset = len(files[distcp])
        files[distcp] += packed
        _point(files, distcp, offset, len(packed), ["stream.zstd/1"])
    elif place == "hostile .metadata":
        files[".metadata"] = payloads.random_hostile(rng)[0] if rng else payloads.hostile_pickle()
    elif place == "the item's own bytes replaced":
        md = _metadata(files)
        info = md.storage_data[_bytes_item(md)]
        data = files[info.relative_path]
        files[info.relative_path] = data[:info.offset] + payload + data[info.offset + info.length:]
        shift = len(payload) - info.length
        for index, other in list(md.storage_data.items()):
            if other.offset > info.offset:
                md.storage_data[index] = dataclasses.replace(other, offset=other.offset + shift)
        md.storage_data[_bytes_item(md)] = dataclasses.replace(info, length=len(payload))
        files[".metadata"] = pickle.dumps(md)
    else:
        raise ValueError(place)
    return files, what


def benign(rng: random.Random | None = None) -> tuple[dict[str, bytes], str]:
    """The save as it is, or its bytes item moved (benign) into a text file beside it."""
    files = dict(base())
    if rng is None or rng.random() < 0.5:
        return files, "benign"
    md = _metadata(files)
    info = md.storage_data[_bytes_item(md)]
    files["notes.txt"] = files[info.relative_path][info.offset:info.offset + info.length]
    _point(files, "notes.txt", 0, info.length)
    return files, "benign, item moved to notes.txt"


def seeds() -> list[Case]:
    out = [Case(NAME, place, "dcp", True, "checkpoint", files=build(place)[0]) for place in PLACES]
    out.append(Case(NAME, "benign", "dcp", False, "checkpoint", files=benign()[0]))
    return out


def generate(rng: random.Random) -> Case:
    if rng.random() < 0.15:
        files, label = benign(rng)
        return Case(NAME, label, "dcp", False, "checkpoint", files=files)
    place = rng.choice(PLACES)
    files, what = build(place, rng)
    return Case(NAME, place, "dcp", True, "checkpoint", files=files, notes={"item": what})
