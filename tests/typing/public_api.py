"""The public API as a user's script sees it, for type checkers, not pytest.

`.ci/typing` runs pyright (strict) and mypy (--strict) on this file against the
installed package: every `assert_type` fails if a public type regresses, and
every `# type: ignore[...]` marks a call that must stay an error (both checkers
fail on an ignore that suppresses nothing). Importing it runs nothing: the
calls are inside functions that nothing calls.
"""
from __future__ import annotations

import argparse
import collections
import mmap
import pickle
from pathlib import Path
from typing import Any, assert_type

import tensorplay
from tensorplay.scanner import GlobalFinding, ScanReport


def loading(path: str) -> None:
    # torch tensors when torch is installed, numpy arrays otherwise: Any either way.
    state = tensorplay.load(path)
    assert_type(state, Any)
    tensorplay.load(path, backend="torch", map_location="cpu", mmap=True, weights_only=True)
    tensorplay.load(Path(path), backend="numpy", limits={"max_nodes": 10_000}, encoding="latin1")
    tensorplay.load(path, map_location={"cuda:0": "cpu"}, backend=None)
    with open(path, "rb") as f:
        tensorplay.serialization.load(f, backend="numpy")
    tensorplay.load(path, backend="jax")  # type: ignore[arg-type]


def whole_modules(path: str, data: bytes) -> None:
    state = tensorplay.module_state_dict(path)
    assert_type(state, dict[str, Any])
    root = tensorplay.load(path, unknown_globals="stub")
    if isinstance(root, tensorplay.Stub):
        assert_type(root.source, str | None)
        tensorplay.module_state_dict(root, backend="numpy", limits={"max_nodes": 10_000})
    tensorplay.module_state_dict(Path(data.decode()))
    tensorplay.jit_state_dict(path)
    tensorplay.module_state_dict(path, backend="jax")  # type: ignore[arg-type]


def saving(path: str, obj: dict[str, Any]) -> None:
    tensorplay.save(obj, path)
    tensorplay.save(obj, Path(path), pickle_protocol=4)
    with open(path, "wb") as f:
        tensorplay.serialization.save(obj, f)
    with tensorplay.serialization.skip_data():
        tensorplay.save(obj, path)
    tensorplay.serialization.set_crc32_options(False)
    assert_type(tensorplay.serialization.get_crc32_options(), bool)
    with tensorplay.serialization.set_default_mmap_options(mmap.MAP_SHARED):
        pass
    tensorplay.serialization.set_default_load_endianness(tensorplay.serialization.LoadEndianness.BIG)
    config = tensorplay.utils.serialization.config
    assert_type(config.load.mmap, bool)
    config.load.mmap = True
    assert_type(config.save.storage_alignment, int)


def inspecting(path: str) -> None:
    info = tensorplay.inspect(path, limits={"max_nodes": 10})
    assert_type(info, tensorplay.Inspection)
    assert_type(info.format, str)
    assert_type(info.totals(), dict[str, Any])
    for name, tensor in info.tensors():
        assert_type(name, str)
        assert_type(tensor, tensorplay.TensorInfo)
        assert_type(tensor.dtype, str | None)
        assert_type(tensor.shape, tuple[int, ...])
        assert_type(tensor.offset, int | None)
        assert_type(tensor.numel, int)
    spec = tensorplay.TensorSpec("float32", (2, 3), (3, 1))
    assert_type(spec.shape, tuple[int, ...])


def tensordict_folders(path: str) -> None:
    tree = tensorplay.load_memmap(path)
    assert_type(tree, Any)
    tensorplay.load_memmap(Path(path), "meta", subpath=("a", "b"), mode="r", backend="numpy", num_threads=2)
    tensorplay.load_memmap(path, mode="r+", backend="torch", allow_pickle=True)
    tensorplay.load_memmap(path, 0, True, out={"a": None}, backend="numpy", allow_pickle=None)
    tensorplay.load_memmap(path, mode="w")  # type: ignore[arg-type]
    tensorplay.load_memmap(path, backend="jax")  # type: ignore[arg-type]


class Point:
    pass


def allowlists(path: str) -> None:
    serialization = tensorplay.serialization
    serialization.add_safe_globals([collections.OrderedDict, (Point, "my_module.Point")])
    tensorplay.add_safe_globals(serialization.ARGPARSE_PRESET)
    assert_type(serialization.ARGPARSE_PRESET, list[type])
    with serialization.safe_globals([argparse.Namespace]):
        assert_type(serialization.get_safe_globals(), list[Any])
    with tensorplay.safe_globals([Point]):
        pass
    assert_type(tensorplay.get_safe_globals(), list[Any])
    assert_type(serialization.get_unsafe_globals_in_checkpoint(path), list[str])
    tensorplay.clear_safe_globals()


def scanning(path: str, data: bytes) -> None:
    # The scanner is an attribute of the package: no `import tensorplay.scanner` needed.
    report = tensorplay.scanner.scan(path, allow=["my_module.Point"], pickles_only=True)
    assert_type(report, ScanReport)
    assert_type(tensorplay.scanner.scan(Path(path)), ScanReport)
    assert_type(tensorplay.scanner.scan(data), ScanReport)
    assert_type(report.verdict, str)
    assert_type(report.globals, tuple[str, ...])
    assert_type(report.to_json(), dict[str, Any])
    for finding in report.findings:
        assert_type(finding, GlobalFinding)
        assert_type(finding.name, str)
        assert_type(finding.dangerous, bool)
        assert_type(finding.offset, int)

    def progress(done: int, total: int) -> None:
        print(f"{done}/{total}")

    reports = tensorplay.scanner.scan_paths([path, Path(path)], jobs=2, allow=(), progress=progress)
    assert_type(reports, list[ScanReport])
    tensorplay.scanner.scan(path, pickles_only="yes")  # type: ignore[arg-type]


def patching(path: str) -> None:
    tensorplay.patch_torch()
    tensorplay.unpatch_torch()
    with tensorplay.patched_torch():
        pass
    tensorplay.patch_tensordict()
    tensorplay.patch_tensordict(unknown_globals="stub")
    tensorplay.unpatch_tensordict()
    with tensorplay.patched_tensordict():
        pass
    with tensorplay.patched_tensordict(unknown_globals="error"):
        pass
    tensorplay.patch_tensordict(unknown_globals="yes")  # type: ignore[arg-type]


def limits() -> None:
    assert_type(tensorplay.default_limits(), dict[str, int])
    tensorplay.set_default_limits(max_nodes=10**8, max_pickle_bytes=1 << 31)
    tensorplay.set_default_limits(max_nodes=None)
    tensorplay.set_default_limits(max_nodes="many")  # type: ignore[arg-type]


def errors(path: str) -> None:
    try:
        tensorplay.load(path)
    except tensorplay.LimitExceededError as e:
        assert_type(e.limit, str | None)
        assert_type(e.maximum, int | None)
    except (tensorplay.UnsafeCheckpointError, tensorplay.MalformedCheckpointError) as e:
        kind: str = e.kind
        assert_type(e.reason, str)
        assert_type(e.location, str)
        assert_type(e.entry, str | None)
        # The kinds are the core's table: a misspelt one never matches.
        if e.kind == "malformed_pickles":  # type: ignore[comparison-overlap]
            print(kind)
    except tensorplay.CheckpointError as e:
        assert_type(e.offset, int | None)
        assert_type(e.opcode, str | None)
    # torch's error classes for the same files: code catching those keeps working.
    unpickling: pickle.UnpicklingError = tensorplay.UnsafeCheckpointError("refused")
    runtime: list[RuntimeError] = [
        tensorplay.MalformedCheckpointError("corrupt"),
        tensorplay.UnsupportedCheckpointError("too new"),
    ]
    not_runtime: RuntimeError = tensorplay.LimitExceededError("big")  # type: ignore[assignment]
    print(unpickling, runtime, not_runtime)
    assert tensorplay.serialization.CheckpointError is tensorplay.CheckpointError
    assert_type(tensorplay.__version__, str)


def misspelt() -> None:
    # The lazy names are typed, and a name tensorplay does not have is an error, not Any.
    tensorplay.lod("model.pt")  # type: ignore[attr-defined]
