"""The seam between the Rust builder and ``tensorplay._build``, for type checkers,
not pytest: the builder calls the module's functions by name (``_core._BuildHelpers``
lists them), so a callback missing or taking other arguments fails `.ci/typing`
here instead of a load of the one checkpoint that needs it."""
# The seam is private to the package; this file checks it from outside.
# pyright: reportPrivateUsage=false
from __future__ import annotations

from tensorplay import _build, _core

contract: _core._BuildHelpers = _build
