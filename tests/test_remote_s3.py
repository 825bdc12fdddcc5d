"""Scanning files in S3: moto's standalone server (the S3 API over HTTP, on
127.0.0.1) holds the corpus and fixtures, and s3fs, pointed at it by
AWS_ENDPOINT_URL with dummy credentials, reads them through tensorplay._objects.
A scan of an s3:// URL says what the local scan of the same file says, reads a
GPT-2 checkpoint by a few ranges in three round trips, and is never CLEAN when
it could not read what it asked for. The path fsspec file systems other than
S3 take (gs://, az://) is run against the same server, through an s3fs file
system that offers only fsspec's generic calls."""
from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys

import boto3
import pytest
import s3fs
from moto.server import ThreadedMotoServer
from remote_corpus import CORPUS, TESTS, gpt2_state_dict, hostile, no_tensor_byte, payloads, summary, unsafe_globals
from tensorplay import _http, _objects, _paths, _remote, cli, scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint

BUCKET = "corpus"
VERSIONED = "versioned"
CHECKPOINT = "fixtures/torch/parameters.pt"  # a torch checkpoint: three waves by ranges


class S3:
    """A boto3 client of the server, that puts and replaces objects."""

    def __init__(self, endpoint: str):
        self.admin = boto3.client("s3", endpoint_url=endpoint)

    def put(self, bucket: str, key: str, data: bytes) -> str | None:
        """Puts ``data`` at ``key``; its version id, where the bucket keeps versions."""
        return self.admin.put_object(Bucket=bucket, Key=key, Body=data).get("VersionId")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's server with the test folder's corpus and fixtures at s3://corpus/repo/,
    and a bucket keeping versions; the environment names it as s3fs reads it."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request, else
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    unset = tmp_path_factory.mktemp("aws") / "none"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        # Nothing of the machine's own AWS set-up may answer instead.
        env.setenv("AWS_CONFIG_FILE", str(unset))
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(unset))
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            env.delenv(name, raising=False)
        store = S3(f"http://{host}:{port}")
        store.admin.create_bucket(Bucket=BUCKET)
        store.admin.create_bucket(Bucket=VERSIONED)
        store.admin.put_bucket_versioning(Bucket=VERSIONED, VersioningConfiguration={"Status": "Enabled"})
        for relative in CORPUS:
            store.put(BUCKET, f"repo/{relative}", (TESTS / relative).read_bytes())
        yield store
    server.stop()


def s3_url(key: str, bucket: str = BUCKET) -> str:
    return f"s3://{bucket}/{key}"


def scan_with(store: _objects.Store, url: str, **options) -> scanner.ScanReport:
    """``url`` scanned by a session whose s3:// store is ``store``."""
    client = _http.Client()
    try:
        return _remote.scan_url(url, _remote.Readers(client, stores={"s3": store}), allow=[], **options)
    finally:
        client.close()


@pytest.mark.parametrize("full", [False, True], ids=["by-ranges", "full"])
def test_every_corpus_file_and_fixture_scans_from_s3_as_it_scans_locally(s3, full):
    urls = [s3_url(f"repo/{relative}") for relative in CORPUS]
    reports = scanner.scan_paths(urls, full=full, list_globals=True)
    assert len(reports) == len(CORPUS) > 400
    differ = []
    for relative, url, remote in zip(CORPUS, urls, reports):
        local = scanner.scan(TESTS / relative, pickles_only=not full, list_globals=True)
        assert remote.path == url
        if summary(remote) != summary(local):
            differ.append((relative, summary(remote), summary(local)))
        assert remote.remote.identity.size == (TESTS / relative).stat().st_size
        assert remote.remote.identity.etag and remote.remote.identity.last_modified
    assert not differ, differ[:3]


def test_get_unsafe_globals_of_an_s3_url_is_that_of_the_file(s3):
    sample = [*CORPUS[::40], hostile(), CHECKPOINT, "fixtures/torch/legacy_format.pt"]
    differ = [(relative, remote, local) for relative in sample
              if (remote := unsafe_globals(s3_url(f"repo/{relative}"))) != (local := unsafe_globals(TESTS / relative))]
    assert not differ, differ[:3]
    with pytest.raises(OSError, match="no such object"):
        get_unsafe_globals_in_checkpoint(s3_url("repo/no-such-file.pt"))


def _asked(byte_range: str, size: int) -> range:
    """The bytes a ``Range`` value asks for, of an object of ``size`` bytes."""
    first, last = byte_range.removeprefix("bytes=").split("-")
    start = max(size - int(last), 0) if not first else int(first)
    return range(start, min(int(last) + 1, size) if first else size)


def test_a_gpt2_checkpoint_in_s3_is_judged_from_under_a_thousandth_of_it(s3, tmp_path, monkeypatch):
    """The issue's goal on S3: at most 0.1% of the bytes, at most 3 round
    trips, no tensor byte: counted from the GetObject calls the store made."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "pytorch_model.bin"
    torch.save(gpt2_state_dict(torch), path)
    size = path.stat().st_size
    s3.admin.upload_file(str(path), BUCKET, "gpt2/pytorch_model.bin")
    asked: list[str] = []
    get = _objects.Store._s3_get

    async def recorded(self, key, byte_range, identity):
        asked.append(byte_range)
        return await get(self, key, byte_range, identity)

    monkeypatch.setattr(_objects.Store, "_s3_get", recorded)
    try:
        report = scanner.scan(s3_url("gpt2/pytorch_model.bin"))
    finally:
        s3.admin.delete_object(Bucket=BUCKET, Key="gpt2/pytorch_model.bin")
    assert report.verdict == "clean" and report.pickles_only and not report.remote.whole_file, report
    assert report.remote.round_trips <= 3 and report.remote.identity.size == size
    fetched = [_asked(r, size) for r in asked]
    assert len(fetched) == report.remote.requests
    assert sum(map(len, fetched)) == report.remote.bytes_read <= size // 1000
    no_tensor_byte(fetched, payloads(path))


@pytest.mark.parametrize("data", [b"", b"cos\nsystem\n(S'true'\ntR."], ids=["empty", "smaller-than-the-tail"])
def test_an_object_smaller_than_the_tail_scans_as_it_does_locally(s3, tmp_path, data):
    (tmp_path / "file").write_bytes(data)
    s3.put(BUCKET, "small/file", data)
    report = scanner.scan(s3_url("small/file"))
    assert summary(report) == summary(scanner.scan(tmp_path / "file", pickles_only=True))
    assert report.remote.identity.size == len(data) and report.remote.bytes_read <= 2 * len(data)


def test_a_folder_lists_every_object_under_it_sorted_with_sizes(s3):
    objects = {"a.pt": b"abc", "sub/deep/b.bin": b"xy", "with space.pt": b"", "z": b"1"}
    for name, data in objects.items():
        s3.put(BUCKET, f"listing/model/{name}", data)
    s3.put(BUCKET, "listing/model2/beside.pt", b"not under model/")
    s3.put(BUCKET, "listing/modelx", b"not under model/ either")
    client = _http.Client()
    store = _remote.Readers(client).store(s3_url("listing/model/"))
    expected = [(name, s3_url(f"listing/model/{name}"), len(data)) for name, data in sorted(objects.items())]
    assert store.list(s3_url("listing/model/")) == expected
    assert store.list(s3_url("listing/model")) == expected
    assert store.list(s3_url("listing/nothing/")) == []
    assert [name for name, _, _ in store.list(s3_url("listing/"))] == [
        "model/a.pt", "model/sub/deep/b.bin", "model/with space.pt", "model/z", "model2/beside.pt", "modelx"]
    # A listing is read afresh, and each object it names reads as that object.
    s3.put(BUCKET, "listing/model/new.pt", b"new")
    assert ("new.pt", s3_url("listing/model/new.pt"), 3) in store.list(s3_url("listing/model/"))
    for _, url, size in expected:
        identity, _ = store.open(url, tail=98, head=512)
        assert identity.url == url and identity.size == size
    client.close()


def test_the_command_line_scans_s3_urls_with_exit_codes_and_json(s3, capsys):
    clean, unsafe = s3_url(f"repo/{CHECKPOINT}"), s3_url(f"repo/{hostile()}")
    assert cli.main(["scan", clean]) == cli.EXIT_CLEAN
    capsys.readouterr()
    assert cli.main(["scan", "--json", clean, unsafe]) == cli.EXIT_UNSAFE
    files = json.loads(capsys.readouterr().out)["files"]
    assert [f["verdict"] for f in files] == ["clean", "unsafe"]
    assert files[0]["remote"]["object"]["etag"] and files[0]["remote"]["round_trips"] == 3
    assert cli.main(["scan", "--json", clean, s3_url("repo/no-such-file.pt")]) == cli.EXIT_UNREADABLE
    files = json.loads(capsys.readouterr().out)["files"]
    assert [f["verdict"] for f in files] == ["clean", "unreadable"]
    # A missing object is a missing file, as a local scan reports one.
    assert files[1]["problems"][0]["kind"] == "io"


@pytest.mark.parametrize("name, url", [
    ("s3://bucket/model.pt", True), ("gs://bucket/model.pt", True), ("gcs://b/m", True), ("az://c/m", True),
    ("abfs://c/m", True), ("HTTPS://host/m", True), ("hf://org/repo/m", True), ("s3a://b/m", True),
    ("model.pt", False), ("folder/model.pt", False), ("C:\\models\\model.pt", False), ("C://models/m", False),
    ("model:v1.pt", False), ("runs/2024-01-01T10:00:00/model.pt", False), ("./s3://b/m", False),
    ("simplecache::s3://b/m", False), ("://b/m", False), ("1s://b/m", False), ("s_3://b/m", False), ("", False),
])
def test_what_names_a_url_and_what_a_local_path(name, url):
    assert _paths.is_url(name) is url


# --- the fail-closed cases -------------------------------------------------------------------------


def _unreadable(report: scanner.ScanReport, reason: str, kind: str = "network") -> None:
    assert report.verdict == "unreadable", report
    assert [p.kind for p in report.problems] == [kind] and reason in report.problems[0], report.problems
    assert cli.exit_code([report]) == cli.EXIT_UNREADABLE


@pytest.mark.parametrize("url", [s3_url("repo/no-such-file.pt"), "s3://no-such-bucket/model.pt"])
def test_a_missing_object_is_unreadable(s3, url):
    _unreadable(scanner.scan(url), "no such object", kind="io")


def test_a_folder_is_no_object(s3):
    _unreadable(scanner.scan(s3_url("repo/fixtures")), "names a folder")
    with pytest.raises(ValueError, match="names a folder"):
        scanner.scan(s3_url("repo/fixtures/"))


def _replace_before_the_second_wave(monkeypatch, replace) -> list[bool]:
    """Calls ``replace()`` once, when a scan asks for its second wave (after
    the first round trip named the object)."""
    done: list[bool] = []
    read = _objects.Store.read

    def replacing(self, identity, ranges):
        if not done:
            replace()
            done.append(True)
        return read(self, identity, ranges)

    monkeypatch.setattr(_objects.Store, "read", replacing)
    return done


def test_an_object_replaced_between_two_waves_is_unreadable(s3, monkeypatch):
    """Without versions, every read after the first is conditional on the ETag: S3 refuses (412)."""
    key, hostile_data = "replaced/parameters.pt", (TESTS / hostile()).read_bytes()
    s3.put(BUCKET, key, (TESTS / CHECKPOINT).read_bytes())
    done = _replace_before_the_second_wave(monkeypatch, lambda: s3.put(BUCKET, key, hostile_data))
    _unreadable(scanner.scan(s3_url(key)), "the object changed between two reads (412")
    assert done


def test_with_versions_the_version_first_read_is_the_one_read_to_the_end(s3, monkeypatch):
    """With versions, every read after the first is of the version the first named:
    an overwrite meanwhile changes nothing of what is read."""
    key, original = "replaced/parameters.pt", (TESTS / CHECKPOINT).read_bytes()
    first = s3.put(VERSIONED, key, original)
    later = []
    _replace_before_the_second_wave(monkeypatch, lambda: later.append(s3.put(VERSIONED, key, b"other bytes")))
    report = scanner.scan(s3_url(key, VERSIONED))
    assert summary(report) == summary(scanner.scan(TESTS / CHECKPOINT, pickles_only=True))
    assert report.verdict == "clean" and report.remote.round_trips == 3
    assert first and report.remote.identity.version_id == first != later[0]


def test_with_versions_a_version_deleted_between_two_waves_is_unreadable(s3, monkeypatch):
    key = "deleted/parameters.pt"
    first = s3.put(VERSIONED, key, (TESTS / CHECKPOINT).read_bytes())
    _replace_before_the_second_wave(monkeypatch, lambda: s3.admin.delete_object(Bucket=VERSIONED, Key=key,
                                                                                 VersionId=first))
    _unreadable(scanner.scan(s3_url(key, VERSIONED)), "no such object", kind="io")


class _Body:
    """A GetObject body with a byte less, or more, than S3 sent."""

    def __init__(self, body, change: int):
        self.body, self.change = body, change

    async def read(self) -> bytes:
        data = await self.body.read()
        return data[:-1] if self.change < 0 else data + b"\0"

    def close(self) -> None:
        self.body.close()


@pytest.mark.parametrize("change", [-1, 1], ids=["short", "long"])
def test_a_short_or_long_answer_is_unreadable(s3, monkeypatch, change):
    """The file system wrapped so that the answers of the second wave lose (or gain) a byte."""
    call = s3fs.S3FileSystem._call_s3
    calls = []

    async def altered(self, method, *args, **kwargs):
        answer = await call(self, method, *args, **kwargs)
        if method == "get_object":
            calls.append(kwargs["Range"])
            if len(calls) > 2:
                answer["Body"] = _Body(answer["Body"], change)
        return answer

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", altered)
    _unreadable(scanner.scan(s3_url(f"repo/{CHECKPOINT}")), "(a short or long body)")


def test_a_store_that_does_not_answer_is_unreadable(s3):
    """An endpoint that takes the connection and never answers: the file
    system's timeout, then UNREADABLE."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        fs = s3fs.S3FileSystem(endpoint_url=f"http://127.0.0.1:{silent.getsockname()[1]}", skip_instance_cache=True,
                               config_kwargs={"connect_timeout": 0.5, "read_timeout": 0.5,
                                              "retries": {"max_attempts": 1}})
        fs.retries = 1  # s3fs's own attempts (a class setting), as botocore's above: one
        _unreadable(scan_with(_objects.Store(fs), s3_url(f"repo/{CHECKPOINT}")), "timeout")


@pytest.mark.parametrize("missing", ["fsspec", "s3fs"])
def test_without_fsspec_or_s3fs_an_s3_url_says_what_to_install(s3, missing):
    """In a process where importing it fails cleanly, as when it is not installed."""
    url = s3_url(f"repo/{CHECKPOINT}")
    program = (f"import sys; sys.modules[{missing!r}] = None\n"
               "from tensorplay import cli, serialization\n"
               "try:\n"
               f"    serialization.get_unsafe_globals_in_checkpoint({url!r})\n"
               "except OSError as e:\n"
               "    print('raised:', e)\n"
               f"sys.exit(cli.main(['scan', '--json', {url!r}]))\n")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert run.returncode == cli.EXIT_UNREADABLE, run.stdout + run.stderr
    raised, _, document = run.stdout.partition("\n")
    assert raised.startswith("raised: ") and "pip install 'tensorplay-serialization[s3]'" in raised, raised
    (file,) = json.loads(document)["files"]
    problem = file["problems"][0]
    assert file["verdict"] == "unreadable" and problem["kind"] == "network"
    assert missing in problem["message"] and "tensorplay-serialization[s3]" in problem["message"], problem


# --- the other file systems' path (gs://, az://), run on S3 -----------------------------------------


class _Generic:
    """An s3fs file system offering only fsspec's generic calls, as gcsfs and
    adlfs do: a store reads it as it reads theirs."""

    def __init__(self, fs):
        self._fs = fs

    def __getattr__(self, name):
        if name == "_call_s3":
            raise AttributeError(name)
        return getattr(self._fs, name)


@pytest.fixture
def generic(s3):
    return _objects.Store(_Generic(s3fs.S3FileSystem(skip_instance_cache=True)))


def test_the_generic_path_scans_as_a_local_scan(s3, generic):
    differ = []
    for relative in [*CORPUS[::7], CHECKPOINT]:
        remote = scan_with(generic, s3_url(f"repo/{relative}"), list_globals=True)
        local = scanner.scan(TESTS / relative, pickles_only=True, list_globals=True)
        if summary(remote) != summary(local):
            differ.append((relative, summary(remote), summary(local)))
    assert not differ, differ[:3]
    assert scan_with(generic, s3_url(f"repo/{CHECKPOINT}")).remote.round_trips == 3


def test_the_generic_path_sees_an_object_replaced_between_two_waves(s3, generic, monkeypatch):
    key = "replaced-generic/parameters.pt"
    s3.put(BUCKET, key, (TESTS / CHECKPOINT).read_bytes())
    _replace_before_the_second_wave(monkeypatch, lambda: s3.put(BUCKET, key, (TESTS / hostile()).read_bytes()))
    _unreadable(scan_with(generic, s3_url(key)), "the object changed between two reads")


class _Short(_Generic):
    """The file system wrapped so that every range it reads loses its last byte."""

    def cat_ranges(self, *args, **kwargs):
        return [body[:-1] for body in self._fs.cat_ranges(*args, **kwargs)]


def test_the_generic_path_refuses_a_short_answer(s3):
    store = _objects.Store(_Short(s3fs.S3FileSystem(skip_instance_cache=True)))
    _unreadable(scan_with(store, s3_url(f"repo/{CHECKPOINT}")), "(a short or long answer)")
