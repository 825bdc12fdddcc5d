"""get_unsafe_globals_in_checkpoint and the scanner: they agree with torch where
torch is right, read what torch cannot, and never disagree with load."""
from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import struct
import subprocess
import sys
import zipfile

import pytest
import tensorplay
from conftest import TORCH_FIXTURES, torch_manifest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorplay import scanner
from tensorplay.serialization import get_unsafe_globals_in_checkpoint

CASES = torch_manifest()


def _named(name: str, message: str) -> bool:
    """Does an error message name this global? torch's wording drops ``builtins.``
    from unsupported globals and keeps it for blocked ones."""
    return any(f"GLOBAL {shown} " in message for shown in (name, name.removeprefix("builtins.")))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_unsafe_globals_match_torch_where_torch_gives_a_list(case):
    ours = get_unsafe_globals_in_checkpoint(case["path"])
    theirs = case["unsafe_globals"]
    assert len(ours) == len(set(ours))
    if case["name"] == "numpy_arrays":
        assert ours == []  # tensorplay builds plain numpy arrays itself
    elif case["name"] == "empty_bytes":
        assert ours == []  # builtins.bytes is allowlisted in tensorplay
    elif isinstance(theirs, list):
        assert sorted(ours) == sorted(theirs)
    else:
        # torch raises on protocol 4/5 and legacy files; these are all clean.
        assert ours == []


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_scan_agrees_with_load_on_every_fixture(case):
    report = scanner.scan(case["path"])
    assert report.format in ("torch-zip", "torch-legacy")
    try:
        tensorplay.load(case["path"], backend="numpy")
    except tensorplay.UnsafeCheckpointError as e:
        assert report.verdict == "unsafe"
        assert any(_named(name, str(e)) for name in report.globals)
    except tensorplay.CheckpointError:
        pass
    else:
        assert report.verdict == "clean", report


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_pickles_only_scan_finds_what_the_full_scan_finds(case):
    full = scanner.scan(case["path"])
    quick = scanner.scan(case["path"], pickles_only=True)
    assert quick.findings == full.findings
    assert quick.format == full.format
    if full.verdict == "clean":
        assert quick.verdict == "clean", quick.problems


@pytest.mark.parametrize("as_path", [True, False], ids=["path", "bytes"])
def test_a_storage_whose_local_header_disagrees_is_unreadable(tmp_path, as_path):
    # A path is scanned from reads of each local header, bytes from memory: both
    # must catch what a load refuses, though no pickle is touched.
    data = bytearray((TORCH_FIXTURES / "seed_batchnorm_state_dict.pt").read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        storage = next(i for i in z.infolist() if "/data/" in i.filename)
    name_at = storage.header_offset + 30
    assert data[name_at:name_at + len(storage.filename)] == storage.filename.encode()
    data[name_at + len(storage.filename) - 1] ^= 0x01
    path = tmp_path / "renamed_storage.pt"
    path.write_bytes(bytes(data))
    report = scanner.scan(path if as_path else bytes(data))
    assert report.verdict == "unreadable", report
    assert any(p.kind == "parser_disagreement" and "disagree" in p for p in report.problems), report.problems
    with pytest.raises(tensorplay.CheckpointError, match="disagree"):
        tensorplay.load(path, backend="numpy")
    # A storage's header is no pickle's: the pickles-only scan never reads it.
    assert scanner.scan(path if as_path else bytes(data), pickles_only=True).verdict == "clean"


def test_a_pickle_whose_local_header_disagrees_is_reported_by_a_pickles_only_scan(tmp_path):
    data = bytearray((TORCH_FIXTURES / "seed_batchnorm_state_dict.pt").read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        pkl = next(i for i in z.infolist() if i.filename.endswith("/data.pkl"))
    data[pkl.header_offset + 30 + len(pkl.filename) - 1] ^= 0x01
    report = scanner.scan(bytes(data), pickles_only=True)
    assert report.verdict == "unreadable"
    assert any(p.kind == "parser_disagreement" and "data.pkl" in p for p in report.problems), report.problems


@pytest.mark.parametrize("pickles_only", [False, True], ids=["full", "pickles-only"])
def test_an_npz_member_whose_local_header_sizes_disagree_is_a_parser_disagreement(tmp_path, pickles_only):
    """numpy.load takes the sizes from the directory; a streaming reader from the
    local header: both scans call it what it is, the same problem kind."""
    import numpy as np

    path = tmp_path / "arrays.npz"
    np.savez(path, x=np.arange(6))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        member = z.infolist()[0]
    # The local header's sizes (numpy writes ZIP64 markers there), one byte more.
    struct.pack_into("<II", data, member.header_offset + 18, member.compress_size + 1, member.file_size + 1)
    path.write_bytes(bytes(data))
    assert np.load(path)["x"].tolist() == list(range(6))  # the reader is undisturbed
    report = scanner.scan(path, pickles_only=pickles_only)
    assert report.verdict == "unreadable", report
    assert [p.kind for p in report.problems] == ["parser_disagreement"], report.problems


def test_user_entries_count_as_allowed():
    path = TORCH_FIXTURES / "custom_class.pt"
    assert get_unsafe_globals_in_checkpoint(path) == ["fixture_classes.Point"]
    import fixture_classes

    with tensorplay.safe_globals([fixture_classes.Point]):
        assert get_unsafe_globals_in_checkpoint(path) == []
    assert scanner.scan(path, allow=["fixture_classes.Point"]).verdict == "clean"


def test_raw_pickles_and_file_objects_are_read():
    class Evil:
        def __reduce__(self):
            return (print, ("never",))

    data = pickle.dumps([1, Evil()], protocol=4)
    assert get_unsafe_globals_in_checkpoint(io.BytesIO(data)) == ["builtins.print"]
    report = scanner.scan(data)
    assert report.format == "pickle" and report.verdict == "unsafe"
    assert report.findings[0].name == "builtins.print" and not report.findings[0].dangerous


def _pickle_bytes(ops: list[bytes]) -> bytes:
    return b"\x80\x02" + b"".join(ops) + b"."


GLOBALS = st.sampled_from([
    b"ccollections\nOrderedDict\n", b"ctorch\nSize\n", b"cos\nsystem\n", b"cbuiltins\nprint\n",
    b"c__builtin__\neval\n", b"cmymod\nThing\n", b"ctorch\nfloat32\n", b"c_codecs\nencode\n",
])
VALUES = st.sampled_from([b"N", b"K\x01", b")", b"]", b"}", b"X\x01\x00\x00\x00a"])


@st.composite
def pickles(draw):
    """Streams mixing allowed and unallowed globals with calls, tuples and lists."""
    ops = []
    depth = 0
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["global", "value", "call", "tuple"]))
        if kind == "global":
            ops.append(draw(GLOBALS))
            depth += 1
        elif kind == "value" or depth < 2:
            ops.append(draw(VALUES))
            depth += 1
        elif kind == "call":
            ops.append(b"\x85R")  # TUPLE1, REDUCE
            depth -= 1
        else:
            ops.append(b"\x86")
            depth -= 1
    return _pickle_bytes(ops)


def _checkpoint(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


@settings(max_examples=300, deadline=None)
@given(pickles())
def test_a_global_that_load_refuses_is_always_reported(data):
    ckpt = _checkpoint(data)
    try:
        tensorplay.load(io.BytesIO(ckpt), backend="numpy")
    except tensorplay.UnsafeCheckpointError as e:
        message = str(e)
        if "GLOBAL" in message:
            try:
                reported = get_unsafe_globals_in_checkpoint(io.BytesIO(ckpt))
            except tensorplay.CheckpointError:
                pytest.fail(f"load refused a global the scanner could not report: {message}")
            assert any(_named(name, message) for name in reported), (message, reported)
    except tensorplay.CheckpointError:
        pass
    except Exception:  # noqa: BLE001 - building the value may fail in Python; not a scanner concern
        pass


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorplay", *args], capture_output=True, text=True, cwd=cwd)


def test_scan_command_exit_codes_and_json(tmp_path):
    clean = TORCH_FIXTURES / "seed_tensor.pt"
    unsafe = TORCH_FIXTURES / "whole_module.pt"
    broken = tmp_path / "broken.pkl"
    broken.write_bytes(b"\x80\x02]q\x00(K\x01")
    assert _cli("scan", str(clean)).returncode == 0
    assert _cli("scan", str(clean), str(broken)).returncode == 2
    result = _cli("scan", "--json", str(clean), str(unsafe), str(broken))
    assert result.returncode == 1
    reports = {r["path"]: r for r in json.loads(result.stdout)["files"]}
    assert reports[str(unsafe)]["verdict"] == "unsafe"
    assert reports[str(unsafe)]["globals"][0]["name"] == "torch.nn.modules.container.Sequential"
    assert reports[str(broken)]["verdict"] == "unreadable" and reports[str(broken)]["problems"]
    table = _cli("scan", str(unsafe)).stdout
    assert "UNSAFE" in table and "torch.nn.modules.linear.Linear" in table


def test_the_scanner_imports_neither_dataclasses_nor_argparse():
    """`tensorplay scan` runs once per upload: `dataclasses` (through `inspect`)
    was a tenth of the process."""
    code = (
        "import sys, tensorplay.scanner\n"
        "assert not {'dataclasses', 'inspect', 'argparse'} & set(sys.modules), sys.modules.keys()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_scan_command_imports_only_the_scanner(tmp_path):
    """`import tensorplay` defers the loader, the writer and the inspector to first
    use, and a whole `tensorplay scan FILE` (settings, --allow, table) avoids json,
    pickle.py, typing, inspect, datetime, shutil and, in a project whose
    pyproject.toml has no table of ours, tomllib: together they were a third of
    the process, which hubs start once per upload."""
    pickled = tmp_path / "plain.pkl"
    pickled.write_bytes(pickle.dumps({"a": [1, 2.0]}))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')  # no table of ours: not parsed
    code = (
        "import sys, tensorplay.cli\n"
        "code = tensorplay.cli.main(['scan', sys.argv[1], sys.argv[2]])\n"
        "loaded = {m for m in sys.modules if m.startswith('tensorplay.')}\n"
        "assert loaded == {'tensorplay._core', 'tensorplay._limits', 'tensorplay.scanner', 'tensorplay.cli',\n"
        "                  'tensorplay._allow', 'tensorplay._pointers', 'tensorplay._paths', 'tensorplay._findings',\n"
        "                  'tensorplay._scan_policy', 'tensorplay._scan_local'}, loaded\n"
        "heavy = {'json', 'pickle', 'typing', 'inspect', 'datetime', 'dataclasses', 'shutil', 'tomllib'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(TORCH_FIXTURES / "seed_tensor.pt"), str(pickled)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("CLEAN") == 2
    code = (
        "import sys, tensorplay\n"
        "assert tensorplay.utils.serialization.config.load.mmap is False\n"
        "from tensorplay import load, safe_globals, TensorSpec\n"
        "assert load is tensorplay.load is sys.modules['tensorplay.serialization'].load\n"
        "assert tensorplay.serialization.safe_globals is safe_globals\n"
        "assert TensorSpec is sys.modules['tensorplay._types'].TensorSpec\n"
        "assert set(tensorplay.__all__) <= set(dir(tensorplay))\n"
        "assert all(getattr(tensorplay, name) is not None for name in tensorplay.__all__)\n"
        "try:\n"
        "    tensorplay.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert 'no_such_name' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_scanner_is_an_attribute_of_the_package():
    """`import tensorplay` is enough for `tensorplay.scanner.scan(path)`, as for
    `tensorplay.serialization`: the scanner is in the lazy table."""
    code = (
        "import sys, tensorplay\n"
        "assert 'tensorplay.scanner' not in sys.modules\n"
        "report = tensorplay.scanner.scan(b'')\n"
        "assert report.format == 'empty' and tensorplay.scanner is sys.modules['tensorplay.scanner']\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_type_checkers_see_every_lazy_name():
    """Type checkers read the lazy names from an `if TYPE_CHECKING:` block of
    imports that never runs, and not `__getattr__`; both must name the same
    objects, from the same modules."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(tensorplay))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    typed = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, "a re-export for type checkers is `import x as x`"
            typed[alias.name] = (node.module, alias.name) if node.module else (alias.name, None)
    lazy = {name: (module.split(".")[0] if attribute is None else module, attribute)
            for name, (module, attribute) in tensorplay._LAZY.items()}
    assert typed == lazy


def test_the_typed_record_fields_are_the_runtime_ones():
    """Type checkers read the records' fields from a typing.NamedTuple branch that
    never runs; the runtime records are collections.namedtuple. Both must agree."""
    import ast
    import inspect

    from tensorplay import _findings

    tree = ast.parse(inspect.getsource(_findings))
    typed = {
        node.name: [(f.target.id, f.value is not None) for f in node.body if isinstance(f, ast.AnnAssign)]
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in ("_FindingFields", "_ReportFields")
    }
    for record, base in ((scanner.GlobalFinding, "_FindingFields"), (scanner.ScanReport, "_ReportFields")):
        defaults = record._field_defaults
        assert typed[base] == [(name, name in defaults) for name in record._fields], record
    assert scanner.ScanReport("p", "zip", "clean") == ("p", "zip", "clean", (), (), 0, False, None, None, None, None)


def test_the_core_hands_a_scan_over_as_read_only_records_read_by_name():
    """``_core.scan`` returns typed records; the public report is made from their
    fields by name, and nothing can change them on the way."""
    import collections

    from tensorplay import _core

    data = pickle.dumps({"run": os.system, "order": collections.OrderedDict()}, protocol=2)
    scanned = _core.scan(data, [], None, False, True)
    assert (scanned.format, scanned.verdict, scanned.pickles, scanned.skipped_because) == ("pickle", "unsafe", 1, None)
    (found,) = scanned.findings
    (listed,) = scanned.allowlisted
    assert (found.name, found.module, found.dangerous, found.location, found.wrappers) == (
        f"{os.system.__module__}.system", os.system.__module__, True, "", ())
    assert (listed.name, listed.dangerous) == ("collections.OrderedDict", False)
    report = scanner.scan(data, list_globals=True)
    assert report.findings == (scanner.GlobalFinding(found.name, True, "", found.offset, found.module),)
    assert [f.offset for f in report.allowlisted] == [listed.offset]
    for record, field in ((scanned, "verdict"), (found, "name"), (listed, "dangerous")):
        with pytest.raises(AttributeError):
            setattr(record, field, None)
    with pytest.raises(TypeError):
        _core.ScanResult()

    broken = _core.scan(data[:-5], [], None)
    (problem,) = broken.problems
    assert problem.kind == "malformed_pickle" and problem.location == "" and "truncated" in problem.reason
    assert scanner.scan(data[:-5]).problems == (scanner.Problem(problem.kind, problem.location, problem.reason),)


def test_command_help_is_sized_to_columns_as_argparse_sizes_it():
    usage_lines = {}
    for columns in (50, 200):
        env = {**os.environ, "COLUMNS": str(columns)}
        out = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--help"], capture_output=True,
                             text=True, env=env, check=True).stdout
        lines = out.splitlines()
        assert max(map(len, lines)) <= columns - 2
        usage_lines[columns] = next(i for i, line in enumerate(lines) if not line.strip())
    # argparse wraps the usage at the width: narrow, it takes more lines.
    assert usage_lines[50] > usage_lines[200] >= 1, usage_lines


def test_scan_command_pickles_only(tmp_path):
    # A tensor reaching past its storage: a load refuses it, yet nothing in it runs code.
    past = TORCH_FIXTURES.parent.parent / "malicious" / "files" / "size_past_storage.pt"
    assert _cli("scan", str(past)).returncode == 2
    assert _cli("scan", "--pickles-only", str(past)).returncode == 0
    unsafe = TORCH_FIXTURES / "whole_module.pt"
    result = _cli("scan", "--pickles-only", "--json", str(unsafe))
    assert result.returncode == 1
    report = json.loads(result.stdout)["files"][0]
    assert report["globals"][0]["name"] == "torch.nn.modules.container.Sequential"
    assert report["pickles_only"] is True
    assert json.loads(_cli("scan", "--json", str(unsafe)).stdout)["files"][0]["pickles_only"] is False


def test_unsafe_outranks_unreadable(tmp_path):
    payload = tmp_path / "payload_then_garbage.pkl"
    payload.write_bytes(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R\xff\xff")
    report = scanner.scan(payload)
    assert report.verdict == "unsafe" and report.problems
    assert report.findings[0].name == "os.system" and report.findings[0].dangerous
    assert _cli("scan", str(payload)).returncode == 1


def test_directories_are_walked_and_files_recognised_by_content(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "weights.safetensors").write_bytes(pickle.dumps(print, protocol=2))
    (tmp_path / "README.md").write_text("# a model\n")
    (tmp_path / "model.pt").write_bytes((TORCH_FIXTURES / "seed_tensor.pt").read_bytes())
    reports = {r.path: r for r in scanner.scan_paths([tmp_path], jobs=2)}
    assert reports[str(tmp_path / "sub" / "weights.safetensors")].verdict == "unsafe"
    assert reports[str(tmp_path / "README.md")].verdict == "skipped"
    assert reports[str(tmp_path / "model.pt")].verdict == "clean"


def test_scanning_in_parallel_or_one_by_one_gives_the_same_reports_in_order(tmp_path):
    (tmp_path / "a_unsafe.pkl").write_bytes(pickle.dumps(print, protocol=2))
    (tmp_path / "b_model.pt").write_bytes((TORCH_FIXTURES / "seed_tensor.pt").read_bytes())
    (tmp_path / "c_empty.bin").write_bytes(b"")
    runs = {}
    for jobs in (1, 2):
        seen: list[tuple[int, int]] = []
        reports = scanner.scan_paths([tmp_path], jobs=jobs, progress=lambda *p, seen=seen: seen.append(p))
        runs[jobs] = [r.to_json() for r in reports]
        assert seen == [(1, 3), (2, 3), (3, 3)]
    assert runs[1] == runs[2]
    assert [r["verdict"] for r in runs[1]] == ["unsafe", "clean", "skipped"]


def test_every_pickle_of_an_archive_is_scanned(tmp_path):
    path = tmp_path / "scripted.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
        z.writestr("archive/constants.pkl", b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00ls\x85R.")
        z.writestr("archive/version", b"3\n")
    report = scanner.scan(path)
    assert report.format == "torchscript-zip" and report.verdict == "unsafe"
    assert report.findings[0].location == "archive/constants.pkl"
    # torch's get_unsafe_globals_in_checkpoint judges data.pkl, all its load reads;
    # ours lists every pickle's globals, so that [] means no reader reaches one.
    assert get_unsafe_globals_in_checkpoint(path) == ["posix.system"]
    with pytest.raises(tensorplay.UnsupportedCheckpointError, match="TorchScript"):
        tensorplay.load(path, backend="numpy")


GADGETS = [
    "_ctypes.dlopen", "ctypes.CDLL", "torch.fx.graph_module._exec_with_source",
    "_xxsubinterpreters.run_string", "_interpreters.exec", "distutils.spawn.spawn",
    "logging.handlers.SocketHandler", "zipfile.ZipFile", "io.open", "_io.open", "_io.FileIO",
    "sqlite3.connect", "marshal.loads", "types.FunctionType", "types.CodeType", "numpy.load",
    "torch.storage._load_from_bytes", "_posixsubprocess.fork_exec", "multiprocessing.Process",
    "asyncio.create_subprocess_shell", "pdb.run", "code.interact", "idlelib.pyshell.main",
    "webbrowser.open", "shutil.rmtree", "runpy.run_path", "importlib.import_module",
    "operator.attrgetter", "_operator.methodcaller", "functools.partial", "pkgutil.resolve_name",
    "pydoc.locate", "cProfile.run", "timeit.timeit", "venv.__main__.main", "antigravity.fly",
]


@pytest.mark.parametrize("gadget", GADGETS)
def test_known_gadgets_are_dangerous(gadget):
    from tensorplay import scanner

    module, _, name = gadget.rpartition(".")
    data = b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n)R."
    report = scanner.scan(data)
    assert report.verdict == "unsafe"
    assert [(f.name, f.dangerous) for f in report.findings] == [(gadget, True)]


def _stack_global(module: str, name: str, argument: str) -> bytes:
    """Protocol 4's STACK_GLOBAL of ``module`` and a dotted ``name``, called with one str."""
    def text(value: str) -> bytes:
        data = value.encode()
        return b"\x8c" + bytes([len(data)]) + data if len(data) < 256 else b"X" + struct.pack("<I", len(data)) + data
    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(argument) + b"\x85R."


def test_an_attribute_walk_from_a_harmless_builtin_is_as_dangerous_as_where_it_ends():
    """``builtins.getattr.__self__.exec`` is exec: pickle walks the dotted name
    (protocol 4) through ``__self__``, the builtins module. Found by the export oracle."""
    from sandboxed import MARKER, runs_payload

    data = _stack_global("builtins", "print.__self__.exec", f"open({MARKER!r}, 'w').close()")
    assert runs_payload("import pickle\npickle.loads(data)", data=data)
    report = scanner.scan(data)
    assert report.verdict == "unsafe" and [(f.name, f.dangerous) for f in report.findings] == [
        ("builtins.print.__self__.exec", True)]
    with pytest.raises(tensorplay.UnsafeCheckpointError):
        tensorplay.load(data, backend="numpy", unknown_globals="stub")


def test_a_name_of_many_dots_is_judged_at_once():
    """Judging every split of every prefix of a dotted name took time exponential
    in its dots (the fuzz corpus's replay ran for hours); one of 200,000 dots is
    judged as any other name."""
    data = _stack_global("builtins", "a." * 200_000 + "b", "x")
    report = scanner.scan(data)
    assert report.verdict == "unsafe" and not report.findings[0].dangerous
    data = _stack_global("torch", "hub." + "a." * 200_000 + "b", "x")
    assert scanner.scan(data).findings[0].dangerous


def test_the_denylist_names_its_families_and_their_sources():
    from tensorplay import scanner

    families = scanner.denylist()
    assert len({f["family"] for f in families}) == len(families) >= 15
    for f in families:
        assert f["why"] and f["sources"] and (f["modules"] or f["names"]), f
    process = next(f for f in families if f["family"] == "process")
    assert "os" in process["modules"] and "subprocess" in process["modules"]


def test_the_command_reports_its_version():
    result = subprocess.run([sys.executable, "-m", "tensorplay", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == f"tensorplay {tensorplay.__version__}"


def test_a_closed_pipe_ends_the_command_cleanly_with_the_verdict():
    """`tensorplay scan --json FOLDER | head -c 10`: no traceback, the scan's exit code."""
    corpus = pathlib.Path(__file__).parent / "malicious" / "files"
    scan = subprocess.Popen([sys.executable, "-m", "tensorplay", "scan", "--json", str(corpus)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    scan.stdout.read(10)
    scan.stdout.close()
    stderr = scan.stderr.read().decode()
    assert scan.wait(timeout=300) == 1
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def _tar_cut_short() -> bytes:
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("model.pkl")
        body = pickle.dumps({"a": 1})
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return out.getvalue()[:700]


def _nested_gzip(levels: int) -> bytes:
    import gzip

    data = pickle.dumps([1, 2, 3])
    for _ in range(levels):
        data = gzip.compress(data)
    return data


def _zip_after_pickle() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("data.pkl", pickle.dumps(1))
    return pickle.dumps({"a": 1}) + out.getvalue()


PROBLEM_KINDS = {
    "malformed_pickle": (lambda: pickle.dumps({"a": [1, 2, 3]})[:-4], "model.pkl"),
    "malformed_archive": (_tar_cut_short, "model.tar"),
    "limit": (lambda: _nested_gzip(40), "model.pt.gz"),
    "unknown_format": (lambda: bytes(range(256)) * 4, "model.pt"),
    "parser_disagreement": (_zip_after_pickle, "model.pkl"),
}


@pytest.mark.parametrize("kind", sorted(PROBLEM_KINDS))
def test_each_problem_names_its_kind_in_python_and_in_json(kind, tmp_path):
    make, name = PROBLEM_KINDS[kind]
    path = tmp_path / name
    path.write_bytes(make())
    report = scanner.scan(path)
    assert report.verdict == "unreadable", report
    problem = next((p for p in report.problems if p.kind == kind), None)
    assert problem is not None, report.problems
    assert isinstance(problem, str) and problem.reason in problem
    assert pickle.loads(pickle.dumps(problem)).kind == kind
    result = subprocess.run([sys.executable, "-m", "tensorplay", "scan", "--json", str(path)], capture_output=True,
                            text=True, timeout=60)
    (record,) = json.loads(result.stdout)["files"]
    assert {"kind": kind, "location": problem.location, "message": problem.reason} in record["problems"]
    assert all(set(p) == {"kind", "location", "message"} for p in record["problems"])


def test_a_loads_refusal_of_a_file_the_scan_read_has_the_refusals_kind(tmp_path):
    """A storage's local header that disagrees with the directory: the scan reads
    no pickle there, the load refuses the archive."""
    data = bytearray((TORCH_FIXTURES / "seed_batchnorm_state_dict.pt").read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        storage = next(i for i in z.infolist() if "/data/" in i.filename)
    data[storage.header_offset + 30 + len(storage.filename) - 1] ^= 0x01
    report = scanner.scan(bytes(data))
    with pytest.raises(tensorplay.CheckpointError) as refused:
        tensorplay.load(io.BytesIO(bytes(data)), backend="numpy")
    assert any(p.kind == refused.value.kind and "a load would refuse it" in p for p in report.problems), \
        report.problems
