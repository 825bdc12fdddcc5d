"""Sharded checkpoints as transformers writes them (``save_pretrained(...,
safe_serialization=False, max_shard_size=...)``: ``pytorch_model-0000i-of-0000N.bin``
and ``pytorch_model.bin.index.json``), from a small model built from its config
with random weights: loaded whole, converted to sharded safetensors, and scanned."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorplay
import torch
import transformers


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2_sharded")
    config = transformers.GPT2Config(n_embd=64, n_layer=3, n_head=2, vocab_size=512, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(folder, safe_serialization=False, max_shard_size="200KB")
    index = json.loads((folder / "pytorch_model.bin.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 3
    return folder, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _copy(sharded, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(sharded[0], folder)
    return folder


@pytest.mark.parametrize("how", ["folder", "index", "index-mmap"])
def test_every_shard_loads_into_one_state_dict(sharded, how):
    folder, expected = sharded
    if how == "folder":
        loaded = tensorplay.load(folder)
    else:
        loaded = tensorplay.load(folder / "pytorch_model.bin.index.json", mmap=how.endswith("mmap"))
    assert loaded.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(loaded[key], tensor), key


def test_the_numpy_backend_loads_the_shards_too(sharded):
    folder, expected = sharded
    loaded = tensorplay.load(folder, backend="numpy")
    assert all(np.array_equal(loaded[k], v.numpy()) for k, v in expected.items())


class ShardNote:
    """A class of this test file's: torch.load needs it allowlisted."""

    def __init__(self, text: str) -> None:
        self.text = text


def test_a_safe_globals_block_covers_every_shard_and_stubs_warn_once(tmp_path):
    """Shards load on worker threads: the caller's safe_globals block holds
    there too (a context of its own per thread would refuse the class), and
    with unknown_globals="stub" one warning names what every shard stubbed."""
    folder = tmp_path / "noted"
    folder.mkdir()
    weight_map = {}
    for i in range(3):
        name = f"pytorch_model-0000{i + 1}-of-00003.bin"
        torch.save({f"w{i}": torch.full((2,), float(i)), f"note{i}": ShardNote(str(i))}, folder / name)
        weight_map.update({f"w{i}": name, f"note{i}": name})
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(tensorplay.UnsafeCheckpointError, match="ShardNote"):
        tensorplay.load(folder)
    with tensorplay.safe_globals([ShardNote]):
        loaded = tensorplay.load(folder)
    assert [loaded[f"note{i}"].text for i in range(3)] == ["0", "1", "2"]
    with pytest.warns(tensorplay.StubWarning) as caught:
        stubbed = tensorplay.load(folder, unknown_globals="stub")
    assert len(caught) == 1 and "ShardNote" in str(caught[0].message)
    assert isinstance(stubbed["note2"], tensorplay.Stub) and torch.equal(stubbed["w2"], torch.full((2,), 2.0))


def _edit_index(folder, edit):
    path = folder / "pytorch_model.bin.index.json"
    index = json.loads(path.read_text())
    edit(index["weight_map"])
    path.write_text(json.dumps(index))


def test_a_key_the_index_lists_but_its_shard_lacks_is_an_error(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    _edit_index(folder, lambda m: m.__setitem__("transformer.extra.weight", next(iter(m.values()))))
    with pytest.raises(tensorplay.MalformedCheckpointError, match="transformer.extra.weight.*no shard holds it"):
        tensorplay.load(folder)


def test_a_key_in_two_shards_is_an_error(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    index = json.loads((folder / "pytorch_model.bin.index.json").read_text())
    first, second = list(dict.fromkeys(index["weight_map"].values()))[:2]
    key = next(k for k, v in index["weight_map"].items() if v == first)
    extra = torch.load(folder / second)
    extra[key] = torch.zeros(1)
    torch.save(extra, folder / second)
    with pytest.raises(tensorplay.MalformedCheckpointError, match="in two shards"):
        tensorplay.load(folder)


@pytest.mark.parametrize("shard", ["pytorch_model-00001-Of-00002.bin", "sub"])
def test_a_shard_the_folder_lacks_is_a_malformed_checkpoint(sharded, tmp_path, shard):
    """transformers raises FileNotFoundError (or IsADirectoryError); tensorplay
    names the index and the shard."""
    folder = _copy(sharded, tmp_path)
    (folder / "sub").mkdir()
    _edit_index(folder, lambda m: m.__setitem__(next(iter(m)), shard))
    with pytest.raises(tensorplay.MalformedCheckpointError, match=f"index.json names '{shard}', which its folder"):
        tensorplay.load(folder)


def test_an_index_may_not_name_files_outside_its_folder(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    _edit_index(folder, lambda m: m.__setitem__(next(iter(m)), "../outside.bin"))
    with pytest.raises(tensorplay.MalformedCheckpointError, match="not a file name in the index's folder"):
        tensorplay.load(folder)
    code, reports = _scan(folder)
    # tensorplay.load refuses the index; a loader that joins names follows it out of the folder.
    assert code == 1 and any(r["verdict"] == "unreadable" and r["path"].endswith(".index.json") for r in reports)
    outside = [r for r in reports if r["verdict"] == "unsafe"]
    assert [g["name"] for r in outside for g in r["globals"]] == ["<a file outside the folder: ../outside.bin>"]


def test_convert_writes_sharded_safetensors_with_an_index(sharded, tmp_path):
    folder, expected = sharded
    out = tmp_path / "converted"
    subprocess.run([sys.executable, "-m", "tensorplay", "convert", str(folder), str(out)], check=True,
                   capture_output=True, timeout=300)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    source = json.loads((folder / "pytorch_model.bin.index.json").read_text())
    # The same shard boundaries: each key in the shard of the same number.
    for key, shard in index["weight_map"].items():
        assert shard == source["weight_map"][key].replace("pytorch_model", "model").replace(".bin", ".safetensors")
    # transformers reads the converted folder as its own safetensors shards.
    model = transformers.GPT2LMHeadModel.from_pretrained(folder, use_safetensors=False)
    shutil.copy(folder / "config.json", out / "config.json")
    reloaded = transformers.GPT2LMHeadModel.from_pretrained(out, use_safetensors=True)
    for key, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], tensor), key
    assert torch.equal(reloaded.state_dict()["lm_head.weight"], expected["transformer.wte.weight"])


def _scan(path) -> tuple[int, list[dict]]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(path)],
                            capture_output=True, timeout=120)
    return result.returncode, json.loads(result.stdout)["files"]


def test_scan_reads_every_shard_and_checks_the_index(sharded, tmp_path):
    code, reports = _scan(sharded[0])
    assert code == 0
    assert sum(r["verdict"] == "clean" and r["path"].endswith(".bin") for r in reports) >= 3
    folder = _copy(sharded, tmp_path)
    missing = sorted(folder.glob("pytorch_model-*.bin"))[1]
    missing.unlink()
    code, reports = _scan(folder)
    # The index points a loader at the missing shard: that reading fails.
    pointed = [r for r in reports if r["reached_from"] is not None]
    assert code == 2 and [r["path"] for r in pointed] == [str(missing)] and pointed[0]["verdict"] == "unreadable"
    assert pointed[0]["reached_from"] == {"source": str(folder / "pytorch_model.bin.index.json"),
                                          "item": missing.name, "reader": "a sharded checkpoint's shard, read by "
                                                                           "torch.load"}
    assert [p["kind"] for p in pointed[0]["problems"]] == ["io"] and "FileNotFoundError" in \
        pointed[0]["problems"][0]["message"]
