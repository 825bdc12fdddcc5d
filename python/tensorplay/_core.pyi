"""Types of ``tensorplay._core``, the Rust extension (the bindings crate, bindings/src/).

Every name the module exports, with the signatures of its ``#[pyo3(signature)]``
attributes. String options are the names the bindings accept (bindings/src/options.rs);
any other string is a ``ValueError`` at run time.
"""

import os
import pickle
from collections.abc import Callable, Container, Sequence
from typing import Any, ClassVar, Final, Literal, Protocol, TypeAlias, TypedDict, final, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

__all__ = [
    "CheckpointError",
    "UnsafeCheckpointError",
    "MalformedCheckpointError",
    "LimitExceededError",
    "UnsupportedCheckpointError",
    "MappedFile",
    "MapMode",
    "DataMode",
    "Restore",
    "Placement",
    "LoadOptions",
    "HeapMemory",
    "ScanResult",
    "ScanFinding",
    "ScanProblem",
    "load",
    "allowed_in_file",
    "is_dangerous",
    "export_program_hazards",
    "is_export_program",
    "default_limits",
    "huge_pages",
    "dtypes",
    "scan",
    "plan_archive",
    "inspect",
    "unsafe_globals",
    "denylist",
    "is_tensordict_leaf",
    "loads",
    "zip_entries",
    "is_storage_record",
    "archive_kind",
    "pt2_record_kind",
    "decode_stream",
    "dcp_chunks",
    "read_ranges",
    "inflate_entries",
    "_tar_model",
    "error",
    "build_error",
    "_npy_header_model",
    "reader_models",
    "scan_spans",
    "scan_spans_waves",
    "torchscript_module_lists",
    "scan_waves",
    "unsafe_globals_waves",
    "FIRST_TAIL",
    "FIRST_BLOCK",
    "RUNS_CODE_KINDS",
    "ERROR_KINDS",
    "ERROR_ATTRIBUTES",
    "__version__",
]

__version__: Final[str]
FIRST_TAIL: Final[int]
FIRST_BLOCK: Final[int]
# Scan problem kinds of a file whose reader runs code the file carries (``torchscript``,
# ``torch_package``, ``mobile_bytecode``, ``aoti_package``).
RUNS_CODE_KINDS: Final[list[str]]
# The core's table of error kinds: ``(code, class name, summary, made by error())`` each.
ERROR_KINDS: Final[list[tuple[str, str, str, bool]]]
# The attributes the core sets on every error it raises (``kind``, ``reason``, ``location``...).
ERROR_ATTRIBUTES: Final[list[str]]

# A path, mapped; the descriptor of an open regular file, mapped read-only; or
# the file's bytes (a bytes object, or another contiguous buffer such as a
# memoryview of a map), read in place (load.rs `open_source`).
_Path: TypeAlias = str | os.PathLike[str]
_Source: TypeAlias = _Path | bytes | memoryview | int
# `{limit name: value}` overrides of the defaults (`default_limits()` names them);
# the bindings take a dict, not any mapping.
_Limits: TypeAlias = dict[str, int] | None

_Backend: TypeAlias = Literal["torch", "numpy"]
_Endianness: TypeAlias = Literal["native", "little", "big"]
# <error-kinds>
# Made from the core's table of error kinds (src/error.rs `error_kinds!`, by .ci/error_kinds.py): do not edit.
_ErrorKind: TypeAlias = Literal[
    "io",
    "malformed_archive",
    "malformed_pickle",
    "tensor_bounds",
    "unsafe_global",
    "blocked_global",
    "extension_code",
    "forbidden",
    "unsafe_file",
    "limit",
    "unsupported",
]
# The kinds `error` makes, by the class each becomes.
_MalformedKind: TypeAlias = Literal["malformed_archive", "malformed_pickle", "tensor_bounds"]
_UnsafeKind: TypeAlias = Literal["forbidden", "unsafe_file"]
_UnsupportedKind: TypeAlias = Literal["unsupported"]
_LimitKind: TypeAlias = Literal["limit"]
# </error-kinds>

# --- exceptions (errors.rs) -------------------------------------------------------------

class CheckpointError(pickle.UnpicklingError):
    """A checkpoint tensorplay refuses to load: bad, unsafe or beyond the limits."""

    # Set on every instance the core raises (errors.rs `describe`); None where unknown.
    #: What went wrong, for programs: a code of ``ERROR_KINDS``.
    kind: _ErrorKind
    #: What was wrong, without where.
    reason: str
    #: Where, as the message writes it (`` [entry 'data.pkl', byte offset 2, opcode GLOBAL (0x63)]``); ""
    #: when unknown, or when the message lists several places (every global of a refused file).
    location: str
    #: The archive entry or file where it happened.
    entry: str | None
    #: The byte offset in that entry or file.
    offset: int | None
    #: The pickle opcode being run.
    opcode: str | None
    #: For a ``LimitExceededError``: the limit's name and its value.
    limit: str | None
    maximum: int | None

class UnsafeCheckpointError(CheckpointError): ...
class MalformedCheckpointError(CheckpointError, RuntimeError): ...
class LimitExceededError(CheckpointError): ...
class UnsupportedCheckpointError(CheckpointError, RuntimeError): ...

# --- the mapping tensors loaded with mmap=True are views of (mapping.rs) ------------------

@final
class MappedFile:
    """A mapped checkpoint file, as a buffer: writable unless mapped read-only.
    Only ``load`` makes one."""

    def __len__(self) -> int: ...
    # The buffer protocol (PEP 688). A C slot before Python 3.12, which has no
    # `__buffer__` attribute (tests/typing/stubtest-allowlist.txt).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

# --- the memory a numpy-backend storage of 4 MiB and more is copied into (heap_memory.rs) --

@final
class HeapMemory:
    """A block of the C heap that a storage's arrays keep as their base. Only
    ``load`` makes one."""

    def __len__(self) -> int: ...

# --- a load's options (load_options.rs, storages.rs): checked where they are made, so
# that `load` is never handed a combination it cannot do ------------------------------------

@final
class MapMode:
    """How a load maps a file it opens by path: read-only (storages get copies),
    a private writable mapping the storages are views of (``mmap=True``), or a
    shared one whose writes reach the file."""

    READ_ONLY: ClassVar[MapMode]
    PRIVATE: ClassVar[MapMode]
    SHARED: ClassVar[MapMode]
    def __int__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class DataMode:
    """What storages get: their bytes read, memory left unread (torch's
    ``skip_data``), or no memory at all (meta storages)."""

    READ: ClassVar[DataMode]
    SKIP: ClassVar[DataMode]
    META: ClassVar[DataMode]
    def __int__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Restore:
    """Which storages, all built on the CPU first, a ``restore_location`` moves:
    none (``STAY``); torch's default for those saved elsewhere than the CPU
    (``SAVED``), and the CPU ones too (``SAVED_AND_CPU``: a package registered
    ahead of torch's CPU entry); or every storage, with the caller's mapping
    (``MAPPED``)."""

    STAY: ClassVar[Restore]
    SAVED: ClassVar[Restore]
    SAVED_AND_CPU: ClassVar[Restore]
    MAPPED: ClassVar[Restore]
    def __int__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Placement:
    """What storages get and where they go. ``restore_location(storage,
    location)`` is torch's ``restore_location``, given with a ``restore`` other
    than ``STAY`` and only then; ``fake(tensor)`` is called for each tensor, with
    ``DataMode.META`` only, which takes ``Restore.STAY``. Anything else is a
    ``ValueError``."""

    def __new__(
        cls,
        data: DataMode = ...,
        restore: Restore = ...,
        restore_location: Callable[[Any, str], Any] | None = None,
        fake: Callable[[Any], object] | None = None,
    ) -> Placement: ...
    @property
    def data(self) -> DataMode: ...
    @property
    def restore(self) -> Restore: ...
    @property
    def restore_location(self) -> Callable[[Any, str], Any] | None: ...
    @property
    def fake(self) -> Callable[[Any], object] | None: ...

@final
class LoadOptions:
    """Everything a load is asked besides its source. ``user_names`` and
    ``user_objects`` have one item per entry of the user's allowlist; with
    ``stub``, a global outside the allowlist (never a blocked one) becomes a
    ``_build.stub`` instead of a refusal. A placement that calls torch needs
    ``backend="torch"``; the default one leaves read storages on the CPU."""

    def __new__(
        cls,
        *,
        backend: _Backend,
        map: MapMode = ...,
        user_names: Sequence[str] = ...,
        user_objects: Sequence[object] = ...,
        limits: _Limits = ...,
        encoding: str = ...,
        endianness: _Endianness = ...,
        threads: int | None = None,
        stub: bool = False,
        placement: Placement | None = None,
    ) -> LoadOptions: ...
    @property
    def map(self) -> MapMode: ...
    @property
    def placement(self) -> Placement: ...

# --- what the builder calls back (build.rs, tensors/) ---------------------------------------

class _BuildHelpers(Protocol):
    """The contract of ``tensorplay._build``: the functions the builder calls by
    name, positionally, for the rare kinds of value (``load``, ``loads`` and
    ``inspect`` import the module; the core holds nothing else of Python's).
    Every argument is an object already built, or a value the core computed;
    the ``Any`` results become objects of the loaded tree. tests/typing/
    build_contract.py checks that the module provides each one."""

    # --- stub mode: globals outside the allowlist, recorded and never called
    # The stand-in's class: called as ``stub(module, name)`` for each such global,
    # and what a user's entry is checked to be an instance of.
    @property
    def stub(self) -> type[Any]: ...
    # Every ``module.name`` the load stood in for, once before anything is built.
    def stubbed(self, names: list[str], /) -> None: ...
    # REDUCE on a stand-in.
    def stub_call(self, stand_in: Any, args: Any, /) -> Any: ...

    # --- objects of the user's allowlist (torch's weights-only semantics); `allowlisted`
    # is the allowlist's objects.
    def allowlisted_getattr(self, args: Any, allowlisted: tuple[object, ...], /) -> Any: ...
    def call_allowlisted(self, func: Any, args: Any, allowlisted: tuple[object, ...], /) -> Any: ...
    def new_allowlisted(self, cls: Any, args: Any, kwargs: Any, allowlisted: tuple[object, ...], /) -> Any: ...
    # NEWOBJ / NEWOBJ_EX of a class the core does not make itself.
    def new_object(self, cls: Any, args: Any, kwargs: Any, /) -> Any: ...
    # BUILD, APPENDS and SETITEMS on an object that is no plain dict or list.
    def build(self, inst: Any, state: Any, /) -> object: ...
    def append(self, obj: Any, item: Any, /) -> object: ...
    def setitem(self, obj: Any, key: Any, value: Any, /) -> object: ...

    # --- torch's values (the torch backend)
    def typed_storage(self, untyped: Any, dtype: Any, /) -> Any: ...
    # ``{"conj": True, "neg": True}``, the flags a tensor was saved with.
    def set_tensor_metadata(self, tensor: Any, metadata: dict[str, bool], /) -> object: ...
    def meta_tensor(self, dtype: Any, size: Any, stride: Any, /) -> Any: ...
    def qtensor(
        self, untyped: Any, dtype: Any, offset: int, size: Any, stride: Any, qparams: tuple[Any, ...], /
    ) -> Any: ...
    def sparse_tensor(self, layout: Any, parts: tuple[Any, ...], size: Any, coalesced: bool, /) -> Any: ...
    def nested_tensor(self, buffer: Any, sizes: Any, strides: Any, offsets: Any, /) -> Any: ...
    def parameter(self, data: Any, requires_grad: bool, state: Any, /) -> Any: ...
    def from_type(self, tensor: Any, cls: Any, state: Any, /) -> Any: ...
    # A torch._utils rebuild function named ``torch._utils._rebuild_...``, with its arguments.
    def torch_call(self, name: str, args: Any, /) -> Any: ...

    # --- numpy's values (the numpy backend; numpy objects inside a checkpoint, either)
    def apply_conj_neg(self, array: Any, conj: bool, neg: bool, /) -> Any: ...
    def meta_spec(self, dtype: str, shape: tuple[int, ...], stride: tuple[int, ...], /) -> Any: ...
    def numpy_array(self, descr: str, shape: tuple[int, ...], fortran: bool, data: bytes, /) -> Any: ...
    def numpy_dtype(self, descr: str, /) -> Any: ...
    def numpy_scalar(self, descr: str, data: bytes, /) -> Any: ...

    # --- inspect: a tensor's description (``TensorInfo``'s fields, by keyword)
    def tensor_info(self, **fields: Any) -> Any: ...

# --- functions ------------------------------------------------------------------------------

def load(source: _Source, options: LoadOptions, *, stream: bool = False) -> Any:
    """Load a checkpoint as ``options`` ask. With ``stream``, what follows the
    checkpoint is left alone and the result is ``(object, bytes the checkpoint took)``."""

def default_limits() -> dict[str, int]: ...

# Whether an eager load asks for transparent huge pages, and why.
def huge_pages() -> str: ...

def allowed_in_file(file_name: str) -> list[str]:
    """The globals a file of this name may name beyond the allowlist (a distributed
    checkpoint's ``.metadata``: its metadata classes)."""

def is_dangerous(module: str, name: str) -> bool: ...
def is_export_program(root: str, name: str) -> bool:
    """Whether ``torch.export.load`` deserializes the member ``name`` as a program, in a zip
    whose torch.export root folder is ``root`` (``""`` for none)."""
def export_program_hazards(json: bytes, entry: str) -> list[tuple[str, str]]:
    """What in a torch.export program's JSON torch runs as Python: ``(JSON path, what torch
    does with it)`` each; a MalformedCheckpointError naming ``entry`` when it is not JSON
    read to its end."""
def reader_models() -> list[tuple[str, str, str, str]]:
    """The real readers the scanner models: ``(name, reader, version, reads)``."""

def dtypes() -> dict[str, tuple[int, str | None, bool, str | None]]:
    """torch's dtypes by name: ``(itemsize, numpy_spec, from_ml_dtypes, legacy_storage)``."""

def denylist() -> list[tuple[str, str, str, list[str], list[str]]]:
    """The dangerous globals by family: ``(name, why, sources, modules, names)``."""

# --- what the scans return (scan_result.rs): the fields of scanner.ScanReport,
# scanner.GlobalFinding and scanner.Problem, which the package makes from them --------------

@final
class ScanFinding:
    """A global a pickle names. Only the scans make one."""

    @property
    def name(self) -> str: ...
    @property
    def dangerous(self) -> bool: ...
    @property
    def location(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def module(self) -> str: ...
    @property
    def wrappers(self) -> tuple[str, ...]: ...

@final
class ScanProblem:
    """Why (part of) a file could not be read. Only the scans make one."""

    @property
    def kind(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def reason(self) -> str: ...

@final
class ScanResult:
    """One file's scan. Only the scans make one."""

    @property
    def format(self) -> str: ...
    @property
    def verdict(self) -> Literal["clean", "unsafe", "unreadable", "skipped"]: ...
    # The globals outside the allowlist.
    @property
    def findings(self) -> tuple[ScanFinding, ...]: ...
    @property
    def problems(self) -> tuple[ScanProblem, ...]: ...
    @property
    def pickles(self) -> int: ...
    # The globals inside the allowlist when the scan listed them (`list_globals`), else None.
    @property
    def allowlisted(self) -> tuple[ScanFinding, ...] | None: ...
    @property
    def skipped_because(self) -> str | None: ...

@overload
def scan(
    source: _Path | bytes,
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
    pickles_only: bool = False,
    list_globals: bool = False,
    byte_zero_only: bool = False,
    name: str | None = None,
) -> ScanResult: ...
@overload
def scan(
    source: int,
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
    # A pickles-only scan reads a path or bytes, not a descriptor.
    pickles_only: Literal[False] = False,
    list_globals: bool = False,
    byte_zero_only: bool = False,
    name: str | None = None,
) -> ScanResult: ...
def scan_spans(
    source: _Path | bytes,
    spans: Sequence[tuple[int, int, str, Sequence[str]]],
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
    pickles_only: bool = False,
    list_globals: bool = False,
) -> ScanResult: ...
# A pickles-only scan by ranges of a file far away: the next wave of ranges to
# fetch, the report once every byte read was held, or the whole file wanted.
def scan_spans_waves(
    length: int,
    held: Sequence[tuple[int, bytes]],
    spans: Sequence[tuple[int, int, str, Sequence[str]]],
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
    pickles_only: bool = True,
    list_globals: bool = False,
) -> tuple[Literal["report"], ScanResult] | tuple[Literal["fetch"], list[tuple[int, int]]]: ...

def scan_waves(
    length: int,
    held: Sequence[tuple[int, bytes]],
    name: str | None = None,
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
    list_globals: bool = False,
) -> (
    tuple[Literal["report"], ScanResult]
    | tuple[Literal["fetch"], list[tuple[int, int]]]
    | tuple[Literal["whole"], None]
): ...

def plan_archive(
    root: str,
    pickle: bytes,
    buffers: Sequence[Buffer],
    *,
    alignment: int = 64,
    compute_crc32: bool = True,
    byteorder_last: bool = False,
    reserved: bool = False,
) -> list[bytes | int | tuple[Literal["hole"], int]]:
    """The archive's segments: bytes (write them), an int (write buffer i) or ``("hole", n)``."""

def inspect(
    source: _Source,
    *,
    user_names: Sequence[str] = ...,
    user_objects: Sequence[object] = ...,
    limits: _Limits = ...,
    encoding: str = ...,
    stub: bool = False,
) -> tuple[str, Any]:
    """``(format, tree)``, every tensor a ``TensorInfo``."""

def unsafe_globals(
    source: _Source, user_names: Sequence[str] = ..., limits: _Limits = ..., name: str | None = None
) -> list[str]: ...
def unsafe_globals_waves(
    length: int,
    held: Sequence[tuple[int, bytes]],
    name: str | None = None,
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
) -> (
    tuple[Literal["globals"], list[str]]
    | tuple[Literal["fetch"], list[tuple[int, int]]]
    | tuple[Literal["whole"], None]
): ...
def is_tensordict_leaf(name: str, siblings: Container[str]) -> bool: ...
def loads(
    data: bytes | str | os.PathLike[str],
    *,
    name: str = "<pickle>",
    backend: _Backend = ...,
    user_names: Sequence[str] = ...,
    user_objects: Sequence[object] = ...,
    limits: _Limits = ...,
    encoding: str = ...,
    stub: bool = False,
    stream: bool = False,
) -> Any: ...

class _ZipEntry(TypedDict):
    name: bytes
    method: int
    flags: int
    crc32: int
    compressed_size: int
    size: int
    data_offset: int
    length: int

def zip_entries(source: _Source, *, limits: _Limits = ...) -> list[_ZipEntry]: ...
def archive_kind(
    source: _Source, *, limits: _Limits = ...
) -> Literal["torchscript", "pt2", "pt2_zip", "aoti", "torch_package", "mobile_bytecode"] | None:
    """What the zip ``source`` is for by its entries' names; ``None`` for a checkpoint, another zip or no zip."""
    ...
def pt2_record_kind(
    folder: str, path_name: str, use_pickle: bool
) -> Literal["raw", "pickled", "opaque", "torchbind", "unknown"]:
    """How ``torch.export.load`` reads the record ``path_name`` that the config of a
    ``.pt2``'s ``folder`` (``data/weights/`` or ``data/constants/``) lists."""
    ...
def is_storage_record(first: bytes, name: bytes) -> bool:
    """Whether entry ``name`` of a torch zip whose first entry is ``first`` holds a storage's bytes."""
    ...
def torchscript_module_lists(source: _Source, *, limits: _Limits = ...) -> dict[str, tuple[list[str], list[str]]]:
    """``{class: (parameters, buffers)}`` of a TorchScript archive's module classes,
    from the ``__parameters__``/``__buffers__`` lines of its ``code/`` records."""
    ...

# `(data_offset, compressed_size, expected_size, method, flags, name)`.
_InflateRequest: TypeAlias = tuple[int, int, int, int, int, str]

def decode_stream(source: bytes | memoryview, compression: str, *, name: str, limits: _Limits = ...) -> bytes:
    """One stream in a whole-stream compression format ("zstd", "gzip", "bzip2",
    "xz", "lzma", "zlib"), decoded into at most max_inflated_bytes."""
    ...

# (name, linkname, type, offset, offset_data, size, sparse, extractfile, extract):
# what extractfile(m).read() and extract(m) give, bytes or the exception's name.
_TarModelMember: TypeAlias = tuple[
    bytes, bytes, bytes, int, int, int, list[tuple[int, int]] | None, bytes | str | None, bytes | str | None
]

def _tar_model(
    data: bytes, *, max_members: int = ..., max_content: int = ...
) -> tuple[bool, list[_TarModelMember], str | None]:
    """For tests: the scanner's model of CPython's tarfile on data, as
    (opens, members, error)."""
    ...

# Per span: (dtype, shape, stride, storage_offset, data_offset, nbytes), or None.
_DcpChunk: TypeAlias = tuple[str, tuple[int, ...], tuple[int, ...], int, int, int]

def dcp_chunks(
    source: _Source,
    spans: Sequence[tuple[int, int]],
    *,
    name: str,
    user_names: Sequence[str] = ...,
    limits: _Limits = ...,
) -> list[_DcpChunk | None]:
    """The tensor chunks of one ``.distcp`` file, each ``(offset, length)`` span a
    ``torch.save`` archive validated as a load validates it: the one dense tensor a
    chunk stores plainly, described; None for other chunks."""
    ...

def read_ranges(
    source: _Source,
    targets: Sequence[tuple[int, Any]],
    *,
    name: str,
    threads: int | None = None,
    in_order: bool = False,
    limits: _Limits = ...,
) -> None:
    """Each ``(offset, buffer)``: ``len(buffer)`` bytes of the file from ``offset``
    copied into the writable buffer (or contiguous CPU tensor), on ``threads``
    threads, the GIL released. Overlapping buffers are refused, or with
    ``in_order`` copied one after another in the order given."""
    ...

def inflate_entries(
    source: _Source,
    entries: Sequence[_InflateRequest],
    threads: int = 1,
    *,
    limits: _Limits = ...,
) -> list[npt.NDArray[np.uint8]]: ...
@overload
def error(
    kind: _MalformedKind,
    reason: str,
    *,
    entry: str | None = None,
    offset: int | None = None,
    limit: str | None = None,
    maximum: int | None = None,
) -> MalformedCheckpointError: ...
@overload
def error(
    kind: _UnsafeKind,
    reason: str,
    *,
    entry: str | None = None,
    offset: int | None = None,
    limit: str | None = None,
    maximum: int | None = None,
) -> UnsafeCheckpointError: ...
@overload
def error(
    kind: _UnsupportedKind,
    reason: str,
    *,
    entry: str | None = None,
    offset: int | None = None,
    limit: str | None = None,
    maximum: int | None = None,
) -> UnsupportedCheckpointError: ...
@overload
def error(
    kind: _LimitKind,
    reason: str,
    *,
    entry: str | None = None,
    offset: int | None = None,
    limit: str,
    maximum: int | None = None,
) -> LimitExceededError:
    """For ``"limit"`` the limit's name and value say what was exceeded: ``reason`` is not kept."""
def build_error(what: str, cause: BaseException) -> MalformedCheckpointError:
    """A MalformedCheckpointError for an exception raised while building an object."""
def _npy_header_model(data: bytes) -> tuple[Literal["object", "plain", "refused", "unsure"], int | None]:
    """The scanner's reading of an .npy header: what numpy.load(allow_pickle=True)
    does with the file, and where its header ends (its pickle, for "object")."""
