"""``tensorplay.inspect(url)`` and ``tensorplay.load(url)``: a checkpoint read
where it lives (a real nginx), by ranges, gives what the local file gives;
inspect fetches no tensor byte; what cannot be read as asked raises."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tensorplay
from http_servers import Misbehaving, Nginx
from remote_corpus import TESTS, gpt2_state_dict, hostile, no_tensor_byte, payloads
from tensorplay import _http

torch = pytest.importorskip("torch")

FIXTURES = ["parameters.pt", "shapes_and_strides.pt", "shared_storage_tied.pt", "all_dtypes.pt",
            "legacy_format.pt", "rezip_deflated.pt", "protocol_5.pt", "big_endian.pt"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "repo").symlink_to(TESTS)
    (root / "made").mkdir()
    server = Nginx(root, tmp_path_factory.mktemp("nginx"))
    yield server, root / "made"
    server.stop()


def _bytes(t) -> list[int]:
    return t.reshape(-1).contiguous().view(torch.uint8).tolist()


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        # Bytes, not values: every dtype compares (complex32 has no torch.equal), NaN too.
        assert _bytes(a) == _bytes(b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("name", FIXTURES)
def test_a_remote_checkpoint_inspects_and_loads_as_the_local_file(served, name):
    server, _ = served
    url, local = f"{server.url}/repo/fixtures/torch/{name}", TESTS / "fixtures" / "torch" / name
    assert tensorplay.inspect(url).to_json() == tensorplay.inspect(local).to_json()
    _same(tensorplay.load(url), tensorplay.load(local))
    meta = tensorplay.load(url, map_location="meta")
    assert json.dumps(meta, default=lambda t: [t.dtype.__repr__(), list(t.shape)]) == json.dumps(
        tensorplay.load(local, map_location="meta"), default=lambda t: [t.dtype.__repr__(), list(t.shape)])


def test_inspecting_a_gpt2_checkpoint_fetches_no_tensor_byte(served):
    server, made = served
    path = made / "gpt2.bin"
    torch.save(gpt2_state_dict(torch), path)
    before = len(server.requests())
    result = tensorplay.inspect(f"{server.url}/made/gpt2.bin")
    assert result.to_json() == tensorplay.inspect(path).to_json()
    size = path.stat().st_size
    fetched = []
    for _, uri, header, status, body, _ in server.requests()[before:]:
        assert uri == "/made/gpt2.bin" and status == 206
        first, _, last = header.removeprefix("bytes=").partition("-")
        start = int(first) if first else size - int(last)
        fetched.append(range(start, start + body))
    no_tensor_byte(fetched, payloads(path))
    assert sum(map(len, fetched)) < size // 100
    _same(tensorplay.load(f"{server.url}/made/gpt2.bin"), tensorplay.load(path))


def test_a_hostile_remote_file_is_refused_as_the_local_one(served):
    server, _ = served
    url, local = f"{server.url}/repo/{hostile()}", TESTS / hostile()
    with pytest.raises(tensorplay.CheckpointError) as remote_error:
        tensorplay.load(url)
    with pytest.raises(tensorplay.CheckpointError) as local_error:
        tensorplay.load(local)
    assert type(remote_error.value) is type(local_error.value)
    with pytest.raises(ValueError, match="weights-only"):
        tensorplay.load(url, weights_only=False)
    with pytest.raises(ValueError, match="names a folder"):
        tensorplay.load(f"{server.url}/repo/fixtures/torch/")


@pytest.mark.parametrize("mode", ["ignore-range", "changing", "short-body"])
def test_a_server_that_misbehaves_fails_the_load(mode):
    data = (TESTS / "fixtures" / "torch" / "parameters.pt").read_bytes()
    server = Misbehaving(data, mode)
    try:
        with pytest.raises(_http.RemoteError):
            tensorplay.load(server.url)
        with pytest.raises(_http.RemoteError):
            tensorplay.inspect(server.url)
    finally:
        server.stop()


def test_the_command_line_inspects_a_url(served):
    server, _ = served
    url = f"{server.url}/repo/fixtures/torch/parameters.pt"
    run = subprocess.run([sys.executable, "-m", "tensorplay", "inspect", "--json", url], capture_output=True,
                         text=True, check=True)
    assert json.loads(run.stdout)["entries"] == tensorplay.inspect(TESTS / "fixtures/torch/parameters.pt").to_json()[
        "entries"]
