"""What a scan is asked to do: which files of a folder it reads
(:class:`Selection`), what fails it (:class:`Policy`), and the settings file
both can come from (:class:`Settings`)."""
from __future__ import annotations

import os
from collections.abc import Iterable

from ._findings import STDIN, GlobalFinding, Problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# What fails a scan, from the most lenient policy to the strictest (the default).
FAIL_ON = ("dangerous", "unsafe", "unreadable")
"""The levels of ``--fail-on`` (``Policy.fail_on``), most lenient first."""


class Selection:
    """Which files of a folder walk are scanned: those matching an ``include``
    pattern (all when there is none) and no ``exclude`` pattern, each an
    ``fnmatch`` glob tried on the path relative to the folder named and on the
    file's name (``*.bin``, ``snapshots/*/pytorch_model*``). A file named itself
    is always scanned. Files over ``max_file_size`` bytes are reported unreadable
    (kind ``too_large``), never passed over."""

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = (), max_file_size: int | None = None):
        self.include, self.exclude, self.max_file_size = tuple(include), tuple(exclude), max_file_size

    def wants(self, relative: str) -> bool:
        from fnmatch import fnmatch

        def matches(patterns: tuple[str, ...]) -> bool:
            name = os.path.basename(relative)
            return any(fnmatch(relative, p) or fnmatch(name, p) for p in patterns)

        return (not self.include or matches(self.include)) and not matches(self.exclude)

    def too_large(self, path: str) -> Problem | None:
        if self.max_file_size is None or path == STDIN:
            return None
        try:
            size = os.stat(path).st_size
        except OSError:
            return None  # the scan reports why it cannot be read
        if size <= self.max_file_size:
            return None
        return Problem("too_large", "", f"{size} bytes, over the {self.max_file_size}-byte maximum: not read")


EVERYTHING = Selection()
"""The selection that scans every file: no pattern, no size limit."""


class Policy:
    """What a scan was asked to do: what fails it (``fail_on``, the least finding
    that does: ``dangerous``, a denylisted global; ``unsafe``, any global outside
    the allowlist; ``unreadable``, that or a file not read to its end), the extra
    allowlist, the folder walk's selection, and whether only pickles are read."""

    def __init__(self, fail_on: str = "unreadable", allow: Iterable[str] = (), selection: Selection = EVERYTHING,
                 pickles_only: bool = False, settings_file: str | None = None):
        if fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, not {fail_on!r}")
        self.fail_on, self.allow, self.selection, self.pickles_only = fail_on, list(allow), selection, pickles_only
        self.settings_file = settings_file

    def fails(self, finding: GlobalFinding | Problem | None) -> bool:
        """Whether the policy fails a scan for this finding or problem (None: a
        file not read to its end). A file whose reader runs its code fails every policy."""
        if finding is None:
            return self.fail_on == "unreadable"
        if isinstance(finding, Problem):
            return finding.runs_code or self.fail_on == "unreadable"
        return finding.dangerous or self.fail_on != "dangerous"

    def to_json(self) -> dict[str, Any]:
        s = self.selection
        return {"fail_on": self.fail_on, "allow": self.allow, "include": list(s.include), "exclude": list(s.exclude),
                "max_file_size": s.max_file_size, "pickles_only": self.pickles_only,
                "settings_file": self.settings_file}


def byte_size(text: str | int) -> int:
    """``1024``, ``"10K"``, ``"512M"`` or ``"2G"`` (powers of 1024) as bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        size = text
    elif isinstance(text, str):
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        number, unit = (text[:-1], units[text[-1].upper()]) if text[-1:].upper() in units else (text, 1)
        try:
            size = int(number) * unit
        except ValueError:
            raise ValueError(f"not a size: {text!r} (say 1024, 10K, 512M or 2G)") from None
    else:
        raise ValueError(f"not a size: {text!r} (say 1024, 10K, 512M or 2G)")
    if size < 0:
        raise ValueError(f"not a size: {text!r}")
    return size


class SettingsError(ValueError):
    """A settings file that cannot be read, or holds a key or value a scan does not know."""


class Settings:
    """A scan's settings, from a TOML file: the ``[tool.tensorplay.scan]`` table
    of a ``pyproject.toml``, or a file of its own (that table, or the keys at its
    top level). Keys: ``allow`` (``module.name`` entries added to the allowlist),
    ``fail-on`` (``dangerous``, ``unsafe`` or ``unreadable``), ``include`` and
    ``exclude`` (glob patterns for folder walks) and ``max-file-size`` (bytes, or
    ``"512M"``). A key a scan does not know is an error, never ignored: a
    misspelt policy must not pass files the user meant to fail."""

    KEYS = ("allow", "fail-on", "include", "exclude", "max-file-size")

    def __init__(self, allow: Iterable[str] = (), fail_on: str | None = None, include: Iterable[str] = (),
                 exclude: Iterable[str] = (), max_file_size: int | None = None, path: str | None = None):
        if fail_on is not None and fail_on not in FAIL_ON:
            raise SettingsError(f"fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
        self.allow, self.fail_on, self.path = list(allow), fail_on, path
        self.include, self.exclude, self.max_file_size = list(include), list(exclude), max_file_size

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Settings:
        import tomllib

        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                document = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SettingsError(f"cannot read the settings file {path}: {e}") from None
        table: Any = document
        for key in ("tool", "tensorplay", "scan"):
            table = table.get(key) if isinstance(table, dict) else None
        if table is None:
            table = {} if os.path.basename(path) == "pyproject.toml" else document
        return cls._from_table(table, path)

    @classmethod
    def find(cls, start: str | os.PathLike[str] = ".") -> Settings | None:
        """The settings of the nearest ``pyproject.toml`` at or above ``start`` (as
        ruff and black find theirs), or None when it has no ``[tool.tensorplay.scan]``.
        A file that never names tensorplay is not parsed: most projects' have no such
        table, and parsing TOML (``tomllib`` imports ``typing``) was a fifth of a
        ``tensorplay scan FILE`` process. A name spelt with ``\\u`` escapes is parsed."""
        folder = os.path.abspath(start)
        while True:
            candidate = os.path.join(folder, "pyproject.toml")
            if os.path.isfile(candidate):
                try:
                    with open(candidate, "rb") as f:
                        text = f.read()
                    unnamed = not any(word in text for word in (b"tensorplay", b"\\u", b"\\U"))
                except OSError:
                    unnamed = False  # read() reports why
                if unnamed:
                    return None
                settings = cls.read(candidate)
                return settings if settings.path is not None else None
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent

    @classmethod
    def _from_table(cls, table: Any, path: str) -> Settings:
        where = f"the settings file {path}"
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: [tool.tensorplay.scan] is not a table")
        if not table:
            return cls()
        unknown = sorted(set(table) - set(cls.KEYS))
        if unknown:
            raise SettingsError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(cls.KEYS)})")

        def strings(key: str) -> list[str]:
            value = table.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"{where}: {key} must be a list of strings")
            return value

        fail_on = table.get("fail-on")
        if fail_on is not None and not isinstance(fail_on, str):
            raise SettingsError(f"{where}: fail-on must be a string")
        size = table.get("max-file-size")
        try:
            max_file_size = None if size is None else byte_size(size)
        except ValueError as e:
            raise SettingsError(f"{where}: max-file-size: {e}") from None
        try:
            return cls(strings("allow"), fail_on, strings("include"), strings("exclude"), max_file_size, path)
        except SettingsError as e:
            raise SettingsError(f"{where}: {e}") from None

    def selection(self) -> Selection:
        if not (self.include or self.exclude or self.max_file_size is not None):
            return EVERYTHING
        return Selection(self.include, self.exclude, self.max_file_size)

    def policy(self, pickles_only: bool = False) -> Policy:
        return Policy(self.fail_on or "unreadable", self.allow, self.selection(), pickles_only, self.path)
