"""Utilities of tensorplay's serialization layer."""

# `tensorplay.utils` is imported with its `serialization` (tensorplay's lazy
# table); this tells type checkers so.
__all__ = ["serialization"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import serialization as serialization
