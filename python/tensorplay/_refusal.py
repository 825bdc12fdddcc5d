"""One complete error for a load refused for its globals: every global of the file
outside the allowlist (the scan's fast walk finds them all, where the load stops
at the first), each with where it is and whether it is dangerous, and the ways
through that run nothing."""

from __future__ import annotations

import os
from typing import Any, Literal

from . import _core, _stub

Api = Literal["tensorplay", "torch", "cli"]


# The refusals of a global: outside the allowlist, or blocked whatever the allowlist says.
GLOBAL_REFUSALS = ("unsafe_global", "blocked_global")
GETATTR = "builtins.getattr"


def complete(error: BaseException, source: Any, user_names: list[str], limits: dict[str, int],
             api: Api = "tensorplay") -> BaseException:
    """``error`` (a refusal for a global outside the allowlist, or a blocked one) with
    every such global of ``source`` in its message and in ``.globals``, as
    ``scanner.GlobalFinding`` records; when the file cannot be scanned again (a
    stream already read), the global the load stopped on. Every other error is
    returned as it is."""
    from ._findings import GlobalFinding

    if getattr(error, "kind", None) not in GLOBAL_REFUSALS:
        return error
    found = getattr(error, "_found", None)  # completed before: only the advice changes
    if found is None:
        found = _findings(source, user_names, limits) or tuple(map(GlobalFinding._make, error.globals))
        if GETATTR in user_names:
            # The scan reports getattr whatever the allowlist (it runs no call); this
            # load let it through in its one shape and refused for another global.
            found = tuple(f for f in found if f.name != GETATTR) or found
    where = error.location  # type: ignore[attr-defined]
    first_line = None
    if error.kind == "blocked_global":  # type: ignore[attr-defined]
        first_line = f"Weights only load failed. {error.reason}{where}"  # type: ignore[attr-defined]
    refused = type(error)(_message(found, api, where, first_line))
    refused._found = found  # type: ignore[attr-defined]
    for name in _core.ERROR_ATTRIBUTES:
        setattr(refused, name, getattr(error, name, None))
    refused.globals = found  # type: ignore[attr-defined]
    return refused


def refuse_hostile(source: Any, user_names: list[str], limits: dict[str, int], api: Api = "tensorplay") -> None:
    """After a stub-mode load that stubbed something: raise when the scanner finds
    a dangerous global anywhere in the file, in bytes a stub was given (a pickle
    inside a pickle) or in another reading of it. Stub mode salvages data, never
    a file that carries a payload."""
    if _stub.made_any():
        refuse_dangerous(source, user_names, limits, api)


def refuse_dangerous(source: Any, user_names: list[str], limits: dict[str, int], api: Api = "tensorplay") -> None:
    """Raise when the scanner finds a dangerous global anywhere in the file: for a
    reader that takes part of a file whose own reader unpickles every part."""
    found = _findings(source, user_names, limits)
    dangerous = [f for f in found or () if f.dangerous]
    if not dangerous:
        return
    first = dangerous[0]
    reason = f"Trying to load unsupported GLOBAL {first.name}, which runs code or touches the system"
    refused = _core.UnsafeCheckpointError(_message(tuple(found or ()), api, "", f"Weights only load failed. {reason}"))
    # The place of each global is in the message's list, not in one location.
    said = {"kind": "blocked_global", "reason": reason, "location": "", "entry": first.location or None,
            "offset": first.offset}
    for name in _core.ERROR_ATTRIBUTES:
        setattr(refused, name, said.get(name))
    refused.globals = tuple(found or ())  # type: ignore[attr-defined]
    raise refused


def _findings(source: Any, user_names: list[str], limits: dict[str, int]) -> tuple[Any, ...] | None:
    """The scan's findings in ``source`` (a path, the file's bytes, or a file
    descriptor), or None when it cannot be scanned again."""
    from ._findings import GlobalFinding

    if not isinstance(source, (str, os.PathLike, bytes, memoryview, int)):
        return None
    try:
        findings = _core.scan(os.fspath(source) if isinstance(source, os.PathLike) else source,
                              user_names, limits, True).findings
    except (OSError, _core.CheckpointError):
        return None
    return tuple(map(GlobalFinding.of, findings))


def _message(found: tuple[Any, ...], api: Api, stopped_at: str, first_line: str | None = None) -> str:
    def where(f: Any) -> str:
        entry = f"{f.location}, " if f.location else ""
        return f"{entry}byte {f.offset}"

    # torch's words first, verbatim (a builtin as `print`, the paste-able advice on
    # one line): programs and people search for them, torch's own tests among them.
    first_line = first_line or _torchs_words(found[0].name, api, stopped_at)
    lines = [first_line, "", f"The file names {len(found)} global(s) outside the allowlist "
             "(with those in pickles it carries as bytes):"]
    for f in found:
        lines.append(f"  {f.name} ({where(f)}){'  DANGEROUS: runs code or touches the system' if f.dangerous else ''}")
    dangerous = [f.name for f in found if f.dangerous]
    if dangerous:
        lines += ["", f"It names {', '.join(dangerous)}, which no mode loads: treat the file as hostile."]
        return "\n".join(lines)
    names = [f.name for f in found]
    allow = ", ".join(names)
    lines += ["", "Ways through that run nothing from the file:"]
    if api == "cli":
        lines.append(f"  (1) if you trust these classes: {' '.join(f'--allow {n}' for n in names)}")
        lines.append("  (2) to take the tensors and keep the rest as inert data: --stub")
        return "\n".join(lines)
    module = "torch.serialization" if api == "torch" else "tensorplay.serialization"
    lines.append(f"  (1) if you trust these classes, allowlist them (import them first): "
                 f"{module}.add_safe_globals([{allow}])")
    lines.append(f"      (scanning: tensorplay scan {' '.join(f'--allow {n}' for n in names)})")
    lines.append("  (2) to take the tensors and keep the rest as inert tensorplay.Stub objects: "
                 "tensorplay.load(f, unknown_globals=\"stub\")")
    if _torch_installed():
        lines.append("  weights_only=False would run code from the file: only for a file you made yourself.")
    return "\n".join(lines)


def _torchs_words(name: str, api: Api, stopped_at: str) -> str:
    """torch's sentence for a global outside the allowlist, as its weights-only
    unpickler writes it: ``builtins.`` dropped from the name, then where the load stopped."""
    shown = name[len("builtins."):] if name.startswith("builtins.") else name
    line = f"Weights only load failed. Unsupported global: GLOBAL {shown} was not an allowed global by default."
    if api != "cli":
        module = "torch.serialization" if api == "torch" else "tensorplay.serialization"
        line += (f" Please use `{module}.add_safe_globals([{shown}])` or the `{module}.safe_globals([{shown}])` "
                 "context manager to allowlist this global if you trust this class/function.")
    return line + stopped_at


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None
