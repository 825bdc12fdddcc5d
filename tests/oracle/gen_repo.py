"""A model repository's folder: the weights beside ``README.md``, ``config.json``,
``tokenizer.json``, ``.gitattributes``, an image and the Trainer's
``training_args.bin`` (which users ``torch.load``), with the payload put in one of
them: as a bare pickle, as a pickle followed by what the name promises (a PNG's
bytes, JSON), or as a torch archive."""
from __future__ import annotations

import random
import zlib

from . import gen_torch, payloads
from .cases import Case

NAME = "repo"
PLACES = ("README.md", "config.json", "tokenizer.json", ".gitattributes", "image.png", "training_args.bin",
          "optimizer.pt", "pytorch_model.bin", "docs/notes.txt", "scheduler.pt")
PNG = (b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
       + zlib.crc32(b"IHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00").to_bytes(4, "big")
       + b"\x00\x00\x00\x00IEND\xaeB`\x82")


def repository(fixture: str = gen_torch.SMALL[0]) -> dict[str, bytes]:
    return {
        "README.md": b"---\nlicense: mit\n---\n# toy model\n",
        "config.json": b'{"model_type": "toy", "hidden_size": 4}',
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE", "vocab": {}}}',
        ".gitattributes": b"*.bin filter=lfs diff=lfs merge=lfs -text\n",
        "image.png": PNG,
        "pytorch_model.bin": gen_torch.rebuild(fixture, None, "benign", b"")[0],
    }


def build(place: str, form: str, payload: bytes) -> dict[str, bytes]:
    files = repository()
    if form == "bare pickle":
        data = payload
    elif form == "pickle then the bytes the name promises":
        data = payload + files.get(place, b"")
    else:
        data = gen_torch.rebuild(gen_torch.SMALL[0], None, "replace data.pkl", payload)[0]
    files[place] = data
    return files


FORMS = ("bare pickle", "pickle then the bytes the name promises", "torch archive")


def seeds() -> list[Case]:
    hostile = payloads.hostile_pickle()
    out = [Case(NAME, f"{place} as a {FORMS[i % 3]}", "repo", True, "repo", files=build(place, FORMS[i % 3], hostile))
           for i, place in enumerate(PLACES)]
    out.append(Case(NAME, "benign", "repo", False, "repo", files=repository()))
    return out


def generate(rng: random.Random) -> Case:
    if rng.random() < 0.15:
        return Case(NAME, "benign", "repo", False, "repo", files=repository(rng.choice(gen_torch.SMALL)))
    place, form = rng.choice(PLACES), rng.choice(FORMS)
    return Case(NAME, f"{place} as a {form}", "repo", True, "repo",
                files=build(place, form, payloads.random_hostile(rng)[0]))
