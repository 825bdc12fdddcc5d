"""`tensorplay scan` on a model repository as hubs and CI hold one: a `git clone`
of a Hugging Face model repository (sharded `pytorch_model-*.bin` with their
index, `model.safetensors`, text files, `.git`), the Hub's cache layout
(`snapshots/<rev>/` links into `blobs/`), safetensors headers, Git LFS
pointers, and `--list-globals`, which shows every global a pickle imports as
the Hub's file view does."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest
import torch
import transformers
from conftest import TORCH_FIXTURES
from tensorplay import scanner

MALICIOUS = TORCH_FIXTURES.parent.parent / "malicious" / "files"


def _git(cwd, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A clone of a model repository: what `save_pretrained` writes in both
    formats, the text files a Hub repository has, committed with git."""
    root = tmp_path_factory.mktemp("hub") / "tiny-gpt2"
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=256, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(root, safe_serialization=False, max_shard_size="100KB")
    model.save_pretrained(root / "safe", safe_serialization=True)
    shutil.move(root / "safe" / "model.safetensors", root / "model.safetensors")
    shutil.rmtree(root / "safe")
    (root / "README.md").write_text("---\nlicense: mit\n---\n# tiny-gpt2\n")
    (root / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "weights")
    assert len(list(root.glob("pytorch_model-*.bin"))) >= 2
    return root


def _scan(*args: str, cwd=None) -> tuple[int, dict, dict]:
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", *map(str, args)],
                            capture_output=True, text=True, timeout=300, cwd=cwd)
    document = json.loads(result.stdout)
    files = {os.path.relpath(r["path"], args[-1]) if os.path.isdir(args[-1]) else r["path"]: r
             for r in document["files"]}
    return result.returncode, files, document["summary"]


def test_every_model_file_of_a_clone_is_scanned_and_the_rest_said(repo):
    code, files, summary = _scan(repo)
    assert code == 0, files
    models = sorted(p for p in files if p.endswith((".bin", ".safetensors")))
    assert models == sorted([*(p.name for p in repo.glob("*.bin")), "model.safetensors"])
    for name in models:
        assert files[name]["verdict"] == "clean", files[name]
    assert files["model.safetensors"]["format"] == "safetensors"
    assert all(files[p]["format"] == "torch-zip" for p in models if p.endswith(".bin"))
    # Text files are skipped, each with the reason; git's own files are read as
    # pickles from byte 0 (nothing is passed over for its folder), and skipped.
    for name in ("config.json", "generation_config.json", "README.md", ".gitattributes",
                 "pytorch_model.bin.index.json"):
        assert files[name]["verdict"] == "skipped" and files[name]["skipped_because"] == "text, no pickle", name
    git = [p for p in files if p.startswith(".git" + os.sep)]
    assert len(git) > 10
    for name in git:
        assert files[name]["verdict"] == "skipped" and files[name]["skipped_because"] == scanner.GIT_DATA, name
    assert summary["passed_over"] == []
    assert summary["skipped"] == 5 + len(git) and summary["clean"] == len(models)
    text = subprocess.run([sys.executable, "-m", "tensorplay", "scan", str(repo)], capture_output=True, text=True,
                          timeout=300).stdout
    assert "SKIPPED" in text and "(text, no pickle)" in text
    assert f"({scanner.GIT_DATA})" in text and "passed over" not in text


def test_a_hostile_file_in_a_clone_fails_it(repo, tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(repo, clone, symlinks=True)
    shutil.copy(MALICIOUS / "global_reduce_os_system.pt", clone / "training_args.bin")
    code, files, _ = _scan(clone)
    assert code == 1 and files["training_args.bin"]["verdict"] == "unsafe"
    assert [g["dangerous"] for g in files["training_args.bin"]["globals"]] == [True]


def _safetensors_with(path, edit) -> None:
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header, body = edit(header, bytes(data[8 + n:]))
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def _first_tensor(header):
    return next(k for k in header if k != "__metadata__")


@pytest.mark.parametrize(("case", "kind", "words"), [
    ("not_json", "malformed_archive", "not JSON"),
    ("overlap", "tensor_bounds", "overlaps"),
    ("past_the_end", "tensor_bounds", "run past the end"),
    ("length_past_the_file", "malformed_archive", "runs past the end"),
    ("wrong_size", "tensor_bounds", "does not fit"),
])
def test_a_safetensors_file_whose_header_a_reader_refuses_is_unreadable(repo, tmp_path, case, kind, words):
    target = tmp_path / "model.safetensors"
    shutil.copy(repo / "model.safetensors", target)
    if case == "not_json":
        data = bytearray(target.read_bytes())
        data[9] = ord("}")  # `{}"...`: the object closes, and text follows it
        target.write_bytes(bytes(data))
    elif case == "overlap":
        def edit(header, body):
            ordered = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])
            first, second = header[ordered[0]], header[ordered[1]]
            shift = first["data_offsets"][1] - first["data_offsets"][0]
            assert shift >= 8
            second["data_offsets"] = [second["data_offsets"][0] - 4, second["data_offsets"][1] - 4]
            return header, body
        _safetensors_with(target, edit)
    elif case == "past_the_end":
        data = target.read_bytes()
        target.write_bytes(data[:-16])
    elif case == "length_past_the_file":
        data = bytearray(target.read_bytes())
        data[:8] = struct.pack("<Q", len(data))
        target.write_bytes(bytes(data))
    else:
        def edit(header, body):
            header[_first_tensor(header)]["shape"] = [3, 3, 3]
            return header, body
        _safetensors_with(target, edit)
    code, files, _ = _scan(target)
    report = files[str(target)]
    assert code == 2 and report["verdict"] == "unreadable", report
    assert report["problems"][0]["kind"] == kind and words in report["problems"][0]["message"], report
    # The safetensors library refuses each too.
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    with pytest.raises((SafetensorError, ValueError)):
        load_file(target)


def test_a_safetensors_file_that_is_also_a_pickle_is_unsafe():
    """The corpus's polyglot: safetensors reads one uint8 tensor, pickle runs os.system."""
    from safetensors.numpy import load_file

    polyglot = MALICIOUS / "safetensors_polyglot.bin"
    assert list(load_file(polyglot)) == ["t"]
    code, files, _ = _scan(polyglot)
    report = files[str(polyglot)]
    assert code == 1 and report["format"] == "safetensors" and report["verdict"] == "unsafe"
    assert [g["name"] for g in report["globals"]] == ["os.system"]


def _hub_cache(repo, root, blobs: dict[str, bytes]) -> None:
    """The Hub's cache layout: each file's bytes under blobs/<sha256>, and
    snapshots/<revision>/<name> a relative link to it."""
    model = root / "models--org--tiny-gpt2"
    snapshot = model / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (model / "blobs").mkdir()
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("0" * 40)
    for name, data in blobs.items():
        digest = hashlib.sha256(data).hexdigest()
        (model / "blobs" / digest).write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", digest), snapshot / name)


def test_a_hub_cache_is_scanned_through_its_links(repo, tmp_path):
    names = ["config.json", "model.safetensors", *(p.name for p in repo.glob("pytorch_model*"))]
    blobs = {name: (repo / name).read_bytes() for name in names}
    _hub_cache(repo, tmp_path / "clean", blobs)
    code, files, _ = _scan(tmp_path / "clean")
    snapshot = os.path.join("models--org--tiny-gpt2", "snapshots", "0" * 40)
    for name in names:
        assert files[os.path.join(snapshot, name)]["verdict"] in ("clean", "skipped"), name
    assert files[os.path.join(snapshot, "model.safetensors")]["verdict"] == "clean" and code == 0
    # The snapshot's pytorch_model.bin is a link to a hostile blob.
    blobs["pytorch_model.bin"] = (MALICIOUS / "global_reduce_os_system.pt").read_bytes()
    _hub_cache(repo, tmp_path / "evil", blobs)
    code, files, _ = _scan(tmp_path / "evil")
    assert code == 1 and files[os.path.join(snapshot, "pytorch_model.bin")]["verdict"] == "unsafe"


def test_a_git_lfs_pointer_named_like_a_model_is_unreadable(tmp_path):
    pointer = tmp_path / "pytorch_model.bin"
    pointer.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 1234\n")
    code, files, _ = _scan(pointer)
    report = files[str(pointer)]
    assert code == 2 and report["verdict"] == "unreadable"
    assert "Git LFS pointer" in report["problems"][0]["message"]


def test_list_globals_shows_every_import_allowlisted_ones_included(repo, tmp_path):
    shard = sorted(repo.glob("pytorch_model-*.bin"))[0]
    code, files, _ = _scan("--list-globals", shard)
    report = files[str(shard)]
    assert code == 0 and report["verdict"] == "clean" and report["globals"] == []
    names = {g["name"] for g in report["allowlisted_globals"]}
    assert {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch.FloatStorage"} <= names
    assert all(g["location"].endswith("/data.pkl") for g in report["allowlisted_globals"])
    # A hostile file lists the payload beside what the allowlist holds, as text too.
    plain = tmp_path / "plain.pt"
    torch.save({"w": torch.zeros(2)}, plain)
    payload = MALICIOUS / "payload_among_tensors.pt"
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--list-globals", str(payload), str(plain)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    out = result.stdout
    assert "os.system  [dangerous]" in out
    assert "torch._utils._rebuild_tensor_v2  [allowlisted]" in out
    assert out.count("imports (") == 2
    # From Python: every import in file order, each with whether it is allowlisted.
    from tensorplay import scanner

    imports = scanner.scan(payload, list_globals=True).imports
    assert ("os.system", False) in [(f.name, allowlisted) for f, allowlisted in imports]
    assert [f.offset for f, _ in imports] == sorted(f.offset for f, _ in imports)
    assert scanner.scan(payload).allowlisted is None


def test_listing_changes_no_verdict_or_finding_on_any_corpus_or_fixture_file():
    """Listing walks pickles a plain scan may leave to the load's validation: it
    adds the allowlisted globals and nothing else."""
    from tensorplay import scanner

    files = sorted(MALICIOUS.iterdir()) + sorted(p for p in TORCH_FIXTURES.rglob("*") if p.is_file())
    assert len(files) > 200  # the 228 corpus files and the committed fixtures
    for path in files:
        plain, listing = scanner.scan(path), scanner.scan(path, list_globals=True)
        assert (listing.verdict, listing.findings) == (plain.verdict, plain.findings), path
        assert listing.allowlisted is not None
