"""torch.export archives (``.pt2``) read as data: the weights, constants and
sample inputs ``torch.export.load`` would give, without deserializing the
program (which imports and runs what the archive names). The layouts of each
torch release are in docs/pt2_format.md.

Raw weights and constants are records of bytes described by a JSON config
(dtype, sizes, strides, storage offset), parsed strictly here; every pickled
part (a tensor subclass, the older layouts' whole state dicts, the sample
inputs) is a nested ``torch.save`` archive loaded by ``tensorplay.load``."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from typing import Any, Literal

from . import _core, _limits, _strides

_Source = str | os.PathLike[str] | bytes | memoryview
_Unknown = Literal["error", "stub"]
_Backend = Literal["torch", "numpy"]

# torch/_export/serde/schema.py `ScalarType`: the config's dtype numbers, by the
# names the core's dtype table (`_core.dtypes()`) uses.
_SERDE_DTYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
    9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16", 28: "uint16",
    29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz",
    33: "float8_e8m0fnu", 34: "uint32", 35: "uint64",
}
_STRIDED_LAYOUT = 7  # schema.py `Layout.Strided`
# torch.export.load reads the program saved under this name (torch.export.save's).
_MODEL = "model"
# The archive versions torch 2.6 to 2.15 write (docs/pt2_format.md).
_ARCHIVE_VERSIONS = {0}
# Torch 2.6 and 2.7 wrote a zip without a root folder (torch.export.load still reads it);
# which layout a zip has is the core's to say (`_core.archive_kind`).
_OLD_PROGRAM = "serialized_exported_program.json"
_KINDS = {"pt2": "pt2", "pt2_zip": "zip", "aoti": "aoti"}


def reads(kind: str | None) -> bool:
    """Whether an archive of this ``_core.archive_kind`` is one this module reads (or refuses by name)."""
    return kind in _KINDS


def export_state_dict(path: _Source, *, backend: _Backend | None = None,
                      limits: dict[str, int] | None = None, unknown_globals: _Unknown = "error") -> dict[str, Any]:
    """The weights (parameters and persistent buffers) of the torch.export archive
    at ``path`` (a path, or its bytes), named and ordered as
    ``torch.export.load(path).state_dict`` names them, with their dtypes, shapes,
    strides and storage offsets; entries that share a storage in the archive share
    it here. Parameters are ``torch.nn.Parameter`` (backend "torch"). Nothing from
    the archive is run: pickled parts load as ``load(..., unknown_globals=...)``
    loads them. The constants (tensor attributes, non-persistent buffers) are
    ``export_constants``'s."""
    with _Archive(path, limits) as archive:
        return _salvaged(archive, lambda: archive.state_dict(_backend(backend), unknown_globals), unknown_globals)


def export_constants(path: _Source, *, backend: _Backend | None = None,
                     limits: dict[str, int] | None = None, unknown_globals: _Unknown = "error") -> dict[str, Any]:
    """The constants of the torch.export archive at ``path`` (tensor attributes
    and non-persistent buffers), named and ordered as
    ``torch.export.load(path).constants`` names them; as ``export_state_dict``."""
    with _Archive(path, limits) as archive:
        return _salvaged(archive, lambda: archive.constants(_backend(backend), unknown_globals), unknown_globals)


def _salvaged(archive: _Archive, read: Callable[[], Any], unknown_globals: _Unknown) -> Any:
    """What ``read`` gives, unless the archive carries a dangerous global anywhere
    (a constant, the sample inputs): ``torch.export.load`` unpickles every part,
    so neither a part read here nor a stub that stood in makes such a file safe."""
    from . import _allowlist, _refusal, _stub

    with _stub.collecting() if unknown_globals == "stub" else contextlib.nullcontext():
        value = read()
    _refusal.refuse_dangerous(archive.source, _allowlist.resolved()[0], archive.limits)
    return value


def is_export_archive(source: _Source | int, limits: dict[str, int] | None) -> bool:
    """Whether ``source`` is a zip laid out as torch.export writes its archives
    (an AOTInductor package too): asked only of a file the checkpoint loader refused."""
    try:
        return reads(_core.archive_kind(source, limits=_limits.merged(limits)))
    except _core.CheckpointError:
        return False


def refusal(source: _Source | int, limits: dict[str, int] | None) -> _core.UnsupportedCheckpointError:
    """What ``load`` says of an archive ``is_export_archive`` recognised."""
    with _Archive(source, limits) as archive:
        archive.check_loadable()
    return _core.error(
        "unsupported",
        "a torch.export archive (.pt2): torch.load refuses it and torch.export.load rebuilds the program it "
        "holds, unpickling its parts with weights_only=False; tensorplay.load(path, unknown_globals=\"stub\") "
        "gives its weights, constants and sample inputs as data, and tensorplay.export_state_dict(path) its "
        "state dict", entry=archive.where)


def contents(source: _Source | int, backend: _Backend, limits: dict[str, int] | None) -> dict[str, Any]:
    """What ``load(path, unknown_globals="stub")`` gives for a torch.export archive."""
    with _Archive(source, limits) as archive:
        archive.check_loadable()
        return _salvaged(archive, lambda: {
            "format": "torch.export",
            "archive_version": archive.version,
            "state_dict": archive.state_dict(backend, "stub"),
            "constants": archive.constants(backend, "stub"),
            "sample_inputs": archive.sample_inputs(backend),
        }, "stub")


def _backend(backend: _Backend | None) -> _Backend:
    from . import _settings

    return _settings.resolve_backend(backend)


class _Archive:
    """One archive's entries and its layout."""

    def __init__(self, source: _Source | int, limits: dict[str, int] | None):
        self.source = os.fspath(source) if isinstance(source, os.PathLike) else source
        self.user_limits = limits
        self.limits = _limits.merged(limits)
        # The values the checks made here compare with.
        self.bounds = {**_limits.default_limits(), **(limits or {})}
        self.entries: dict[str, Any] = {}
        for entry in _core.zip_entries(self.source, limits=self.limits):
            try:
                self.entries[entry["name"].decode("utf-8")] = entry
            except UnicodeDecodeError:
                # As the checkpoint reader refuses one: the root would be another entry's otherwise.
                raise _core.error("malformed_archive", f"torch.export archive: entry name {entry['name']!r} is "
                                  "not UTF-8") from None
        self.kind = _KINDS.get(_core.archive_kind(self.source, limits=self.limits) or "")
        if self.kind is None:
            raise _malformed("archive_format", "not a torch.export archive: it has no archive_format record "
                             f"and no {_OLD_PROGRAM}")
        first = next(iter(self.entries))  # archive_kind found records: there is one
        self.root = "" if self.kind == "zip" else first.split("/", 1)[0] + "/"
        self.where = self.root + ("archive_format" if self.kind != "zip" else _OLD_PROGRAM)
        self.version: int | None = None

    def __enter__(self) -> _Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.entries.clear()

    # --- records ---------------------------------------------------------------------

    def has(self, record: str) -> bool:
        return self.root + record in self.entries

    def read(self, record: str) -> Any:
        """The record's bytes, as a numpy uint8 array."""
        return self.read_entry(self.root + record)

    def read_entry(self, name: str) -> Any:
        """An entry's bytes by its full name, as a numpy uint8 array."""
        entry = self.entries.get(name)
        if entry is None:
            raise _malformed(name, "the archive has no such record")
        request = (entry["data_offset"], entry["compressed_size"], entry["size"], entry["method"], entry["flags"],
                   name)
        (data,) = _core.inflate_entries(self.source, [request], 1, limits=self.limits)
        return data

    def check_loadable(self) -> None:
        """Refuse what this reader does not read: compiled code, unknown versions."""
        if self.kind == "aoti":
            raise _core.error("unsupported", "an AOTInductor package (.pt2 holding compiled code under "
                              "data/aotinductor/): its weights are read by running that code, which tensorplay "
                              "never does; load it with torch._inductor.aoti_load_package on trusted files only",
                              entry=self.where)
        self.check_programs()
        if self.kind == "zip":
            return
        if bytes(self.read("archive_format")) != b"pt2":
            raise _malformed(self.root + "archive_format", "the archive_format record is not 'pt2'")
        if not self.has("archive_version"):
            self.version = 0  # torch's reading of an archive without one
        else:
            text = bytes(self.read("archive_version")).decode("ascii", "replace").strip()
            if not text.isdigit() or int(text) not in _ARCHIVE_VERSIONS:
                raise _core.error("unsupported", f"archive_version {text[:20]!r} of a torch.export archive: "
                                  f"tensorplay reads versions {sorted(_ARCHIVE_VERSIONS)}",
                                  entry=self.root + "archive_version")
            self.version = int(text)
        if self.has("byteorder") and bytes(self.read("byteorder")) != b"little":
            raise _core.error("unsupported", "a big-endian torch.export archive", entry=self.root + "byteorder")

    def check_programs(self) -> None:
        """Refuse an archive whose programs give ``torch.export.load`` Python to run
        (the core's rule, the scan's too): a file with a payload is never salvaged."""
        programs = [n for n in self.entries if _core.is_export_program(self.root, n)]
        for name in programs:
            hazards = _core.export_program_hazards(bytes(self.read_entry(name)), name)
            if hazards:
                at, why = hazards[0]
                raise _core.error("unsafe_file", f"{at}: {why}" + (f" (and {len(hazards) - 1} more)"
                                                                   if len(hazards) > 1 else ""),
                                  entry=name)

    def check_model(self) -> None:
        """An archive of programs none of which is ``model`` (``package_pt2`` of a
        dict) holds nothing ``torch.export.load`` reads."""
        if self.has(f"models/{_MODEL}.json"):
            return
        names = sorted(n[len(self.root) + len("models/"):-len(".json")] for n in self.entries
                       if n.startswith(self.root + "models/") and n.endswith(".json"))
        raise _core.error("unsupported", f"the archive holds no program named {_MODEL!r} (torch.export.load "
                          f"reads only that one); its programs: {names}", entry=self.root + f"models/{_MODEL}.json")

    # --- the three parts -----------------------------------------------------------------

    def state_dict(self, backend: _Backend, unknown: _Unknown) -> dict[str, Any]:
        self.check_loadable()
        if self.kind == "zip":
            return self.pickled_dict("serialized_state_dict.pt", backend, unknown)
        if self.has(f"data/weights/{_MODEL}.pt"):  # the first pt2 layout: one torch.save'd dict
            return self.pickled_dict(f"data/weights/{_MODEL}.pt", backend, unknown)
        self.check_model()
        return self.configured("data/weights/", f"data/weights/{_MODEL}_weights_config.json", backend, unknown)

    def constants(self, backend: _Backend, unknown: _Unknown) -> dict[str, Any]:
        self.check_loadable()
        if self.kind == "zip":
            return self.pickled_dict("serialized_constants.pt", backend, unknown)
        if self.has(f"data/constants/{_MODEL}.pt"):
            return self.pickled_dict(f"data/constants/{_MODEL}.pt", backend, unknown)
        self.check_model()
        return self.configured("data/constants/", f"data/constants/{_MODEL}_constants_config.json", backend,
                               unknown)

    def sample_inputs(self, backend: _Backend) -> Any:
        record = "serialized_example_inputs.pt" if self.kind == "zip" else f"data/sample_inputs/{_MODEL}.pt"
        if not self.has(record):
            return None
        return self.nested(record, backend, "stub")

    # --- pickled parts -----------------------------------------------------------------

    def nested(self, record: str, backend: _Backend, unknown: _Unknown) -> Any:
        """A record holding a ``torch.save`` archive, loaded as ``tensorplay.load`` loads one."""
        from . import _load_file

        data = self.read(record)
        if not len(data):
            return {}  # torch reads an empty payload as an empty dict
        return _load_file.load(data.tobytes(), backend=backend, limits=self.user_limits, unknown_globals=unknown)

    def pickled_dict(self, record: str, backend: _Backend, unknown: _Unknown) -> dict[str, Any]:
        value = self.nested(record, backend, unknown)
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _malformed(self.root + record, f"holds a {type(value).__name__}, not a dict of names")
        return dict(value)

    # --- raw records and their config ----------------------------------------------------

    def configured(self, folder: str, config_record: str, backend: _Backend, unknown: _Unknown) -> dict[str, Any]:
        where = self.root + config_record
        config = _config(self.read(config_record), where, self.bounds)
        storages: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for fqn, meta in config.items():
            path_name = meta["path_name"]
            at = f"{where}: {fqn!r}"
            kind = _core.pt2_record_kind(folder, path_name, meta["use_pickle"])
            if kind == "torchbind":
                raise _core.error("unsupported", f"{at} is a TorchScript object (torchbind), which only its "
                                  "registered C++ class rebuilds", entry=self.root + folder + path_name)
            if kind == "opaque":
                out[fqn] = self.opaque(folder + path_name, backend, unknown)
                continue
            if kind == "unknown":
                raise _malformed(where, f"{fqn!r}: path_name {path_name!r} names no kind of constant")
            if kind == "pickled":
                value = self.nested(folder + path_name, backend, unknown)
                if not _is_tensor(value, backend):
                    raise _malformed(self.root + folder + path_name, f"holds a {type(value).__name__}, not a tensor")
                out[fqn] = value
                continue
            tensor_meta = meta["tensor_meta"]
            if tensor_meta is None:
                raise _malformed(where, f"{fqn!r}: a raw record needs tensor_meta")
            if path_name not in storages:
                storages[path_name] = self.storage(folder + path_name, tensor_meta, backend, at)
            storage, dtype = storages[path_name]
            if dtype != tensor_meta["dtype"]:
                raise _malformed(where, f"{fqn!r} reads {path_name} as {tensor_meta['dtype']}, "
                                 f"an earlier entry as {dtype}")
            view = _view(storage, tensor_meta, backend, at)
            if backend == "torch" and meta["is_param"]:
                import torch

                try:
                    view = torch.nn.Parameter(view, requires_grad=tensor_meta["requires_grad"])
                except RuntimeError as e:
                    raise _malformed(where, f"{fqn!r}: {e}") from None
            out[fqn] = view
        return out

    def storage(self, record: str, tensor_meta: dict, backend: _Backend, at: str) -> tuple[Any, str]:
        """The flat storage of a raw record, of the dtype the first entry reading it names."""
        import numpy as np

        name = tensor_meta["dtype"]
        itemsize, spec, from_ml_dtypes, _ = _core.dtypes()[name]
        if self.root + record not in self.entries:
            raise _malformed(self.root + record, f"{at} names this record, which the archive does not hold")
        data = self.read(record)
        if len(data) % itemsize:
            raise _malformed(self.root + record, f"{len(data)} bytes are not a whole number of {name} elements")
        if len(data) == 0:
            # torch makes zeros of the entry's size for an empty record (a fake tensor saved).
            numel = math.prod(tensor_meta["sizes"])
            # Bytes the file makes us build without carrying them: bounded as other payload is.
            if numel * itemsize > self.bounds["max_payload_bytes"]:
                raise _core.error("limit", f"{at}: {numel} zero elements", entry=self.root + record,
                                  limit="max_payload_bytes", maximum=self.bounds["max_payload_bytes"])
            data = np.zeros(numel * itemsize, dtype=np.uint8)
        if backend == "torch":
            import torch

            dtype = getattr(torch, name)
            if not len(data):
                return torch.empty(0, dtype=dtype), name
            return torch.frombuffer(data, dtype=dtype), name
        if spec is None:
            raise _core.error("unsupported", f"{at}: numpy has no {name}", entry=self.root + record)
        if from_ml_dtypes:
            import ml_dtypes

            np_dtype = np.dtype(getattr(ml_dtypes, spec))
        else:
            np_dtype = np.dtype(spec)
        return np.frombuffer(data, dtype=np.uint8).view(np_dtype), name

    def opaque(self, record: str, backend: _Backend, unknown: _Unknown) -> Any:
        """An opaque constant: a plain pickle (``pickle.dumps``), read by the safe VM."""
        from . import _allowlist, _stub

        names, objects = _allowlist.resolved()
        data = self.read(record).tobytes()
        with _stub.warning():
            return _core.loads(data, name=self.root + record, backend=backend, user_names=names,
                               user_objects=objects, limits=self.limits, stub=unknown == "stub")


def _is_tensor(value: Any, backend: _Backend) -> bool:
    if backend == "torch":
        import torch

        return isinstance(value, torch.Tensor)
    import numpy as np

    return isinstance(value, np.ndarray)


def _view(storage: Any, meta: dict, backend: _Backend, at: str) -> Any:
    """``torch.as_strided`` of the storage as the entry's metadata says, after
    checking that every element it reaches lies inside the storage."""
    shape, stride, offset = tuple(meta["sizes"]), tuple(meta["strides"]), meta["storage_offset"]
    numel = storage.shape[0]
    if len(stride) != len(shape):
        raise _malformed(at, f"{len(shape)} sizes but {len(stride)} strides")
    if math.prod(max(n, 1) for n in shape) >= 1 << 62 or any(abs(s) >= 1 << 56 for s in stride):
        # Byte strides (element strides times the itemsize) must fit numpy's and torch's int64.
        raise _core.error("tensor_bounds", f"{at}: sizes {list(shape)} and strides {list(stride)} are too large "
                          "to address")
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else offset - 1
    if offset > numel or last >= numel:
        raise _core.error("tensor_bounds", f"{at}: sizes {list(shape)}, strides {list(stride)} and storage "
                          f"offset {offset} reach element {max(last, offset)} of a storage of {numel}")
    return _strides.strided(storage, shape, stride, offset, backend)


# --- the JSON config, parsed strictly ----------------------------------------------------

def _config(data: Any, where: str, limits: dict[str, int]) -> dict[str, dict]:
    """``{fqn: PayloadMeta}`` of a weights or constants config (schema.py
    ``PayloadConfig``), every field type-checked; fields torch may add later are
    left alone."""
    try:
        document = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _malformed(where, f"not valid JSON: {e}") from None
    entries = _field(document, "config", dict, where) if isinstance(document, dict) else None
    if entries is None:
        raise _malformed(where, "is not an object with a 'config' object")
    out = {}
    for fqn, meta in entries.items():
        at = f"{where}: {fqn!r}"
        if not isinstance(meta, dict):
            raise _malformed(at, "is not an object")
        path_name = _field(meta, "path_name", str, at)
        if not path_name or "/" in path_name or "\\" in path_name or path_name in (".", ".."):
            raise _malformed(at, f"path_name {path_name!r} is not a record name")
        if not path_name.isascii() and not _encodes(path_name):
            raise _malformed(at, f"path_name {path_name!r} names no record (it is not UTF-8)")
        tensor_meta = meta.get("tensor_meta")
        out[fqn] = {
            "path_name": path_name,
            "is_param": _field(meta, "is_param", bool, at),
            "use_pickle": _field(meta, "use_pickle", bool, at),
            "tensor_meta": None if tensor_meta is None else _tensor_meta(tensor_meta, at, limits),
        }
    return out


def _encodes(text: str) -> bool:
    """Whether ``text`` is UTF-8 (JSON lets a lone surrogate through, which no record name holds)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tensor_meta(meta: Any, at: str, limits: dict[str, int]) -> dict:
    if not isinstance(meta, dict):
        raise _malformed(at, "tensor_meta is not an object")
    number = _field(meta, "dtype", int, at)
    dtype = _SERDE_DTYPES.get(number)
    if dtype is None:
        raise _malformed(at, f"dtype {number} is not one of torch.export's dtype numbers")
    layout = _field(meta, "layout", int, at)
    if layout != _STRIDED_LAYOUT:
        raise _core.error("unsupported", f"{at}: layout {layout} (tensorplay reads strided tensors, layout 7)")
    device = _field(meta, "device", dict, at)
    _field(device, "type", str, at + " device")
    if device.get("index") is not None:
        _field(device, "index", int, at + " device")
    sizes = _ints(_field(meta, "sizes", list, at), at, "sizes", limits)
    strides = _ints(_field(meta, "strides", list, at), at, "strides", limits)
    offset = _int(_field(meta, "storage_offset", dict, at), at, "storage_offset")
    return {"dtype": dtype, "sizes": sizes, "strides": strides, "storage_offset": offset,
            "requires_grad": _field(meta, "requires_grad", bool, at)}


def _ints(items: list, at: str, what: str, limits: dict[str, int]) -> list[int]:
    if len(items) > limits["max_ndim"]:
        raise _core.error("limit", f"{at}: {len(items)} {what}", limit="max_ndim", maximum=limits["max_ndim"])
    return [_int(item, at, what) for item in items]


def _int(item: Any, at: str, what: str) -> int:
    """A ``SymInt`` that is a plain int (``{"as_int": n}``), non-negative and
    below 2**63; a symbolic one (``as_expr``) names no stored tensor."""
    value = item.get("as_int") if isinstance(item, dict) and len(item) == 1 else None
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise _malformed(at, f"{what} holds {item!r}, not {{\"as_int\": n}} with 0 <= n < 2**63")
    return value


def _field(meta: dict, name: str, kind: type, at: str) -> Any:
    if name not in meta:
        raise _malformed(at, f"has no {name!r}")
    value = meta[name]
    # bool is an int to isinstance; JSON's true is not a dtype number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _malformed(at, f"{name} is {value!r}, not a {kind.__name__}")
    return value


def _malformed(entry: str, reason: str) -> _core.MalformedCheckpointError:
    """``entry`` names the record, or a place in one as ``record: what``."""
    record = entry.split(": ", 1)[0]
    return _core.error("malformed_archive", f"torch.export archive: {entry}: {reason}", entry=record)
