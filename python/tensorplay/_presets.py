"""Opt-in allowlist presets for data-only types users hit daily, never on by
default: ``add_safe_globals(tensorplay.serialization.PATHLIB_PRESET)``.

Each entry is a class built as torch's weights-only rules build an allowlisted
class (``__new__``, then its state or items; no ``__init__``), or, for omegaconf,
a stand-in registered under omegaconf's names that turns its containers into
plain dicts and lists: omegaconf itself is never imported or called."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def argparse_preset() -> list[type]:
    """``argparse.Namespace`` (how many training scripts save hyperparameters)."""
    import argparse

    return [argparse.Namespace]


def pathlib_preset() -> list[type]:
    """pathlib's paths: rebuilt by calling the class with the path's parts, which
    only parses text (no file is touched)."""
    import pathlib

    return [pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.Path, pathlib.PosixPath,
            pathlib.WindowsPath]


def lightning_preset() -> list[type]:
    """Lightning's ``AttributeDict`` (hyperparameters): a dict subclass, built with
    ``__new__`` and its items; the class of each Lightning package installed."""
    preset: list[type] = []
    for module, name in (("lightning.fabric.utilities.data", "AttributeDict"),
                         ("lightning.pytorch.utilities.parsing", "AttributeDict"),
                         ("pytorch_lightning.utilities.parsing", "AttributeDict"),
                         ("lightning_fabric.utilities.data", "AttributeDict")):
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if cls not in preset:
            preset.append(cls)
    return preset


# --- omegaconf, as plain data ------------------------------------------------------

class OmegaDict(dict):
    """An omegaconf ``DictConfig``, as the plain dict of its values. A config that
    holds no dict (``None``, a missing ``???`` or an interpolation) is empty, with
    that value in ``.content``."""

    content: Any = None

    def __setstate__(self, state: Any) -> None:
        content = state.get("_content") if isinstance(state, dict) else None
        if isinstance(content, dict):
            self.update({key: _value(node) for key, node in content.items()})
        else:
            self.content = content


class OmegaList(list):
    """An omegaconf ``ListConfig``, as the plain list of its values."""

    content: Any = None

    def __setstate__(self, state: Any) -> None:
        content = state.get("_content") if isinstance(state, dict) else None
        if isinstance(content, list):
            self.extend(_value(node) for node in content)
        else:
            self.content = content


class OmegaValue:
    """A value node (``AnyNode``, ``IntegerNode``, ...): its value, which the
    containers above take out of it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = None

    def __setstate__(self, state: Any) -> None:
        self.value = state.get("_val") if isinstance(state, dict) else None


class OmegaMetadata:
    """omegaconf's bookkeeping (types, flags, keys): read and dropped."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        pass


def _value(node: Any) -> Any:
    return node.value if isinstance(node, OmegaValue) else node


_OMEGACONF_NODES = ("AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode", "BytesNode", "PathNode",
                    "EnumNode")


def omegaconf_preset() -> list[Any]:
    """omegaconf's containers as plain dicts and lists, under omegaconf's names,
    with the plain types their metadata names (``typing.Any``, ``collections.defaultdict``,
    ``dict``, ``list``, ``int``...). An enum or a path inside needs its own entry."""
    import collections
    import typing

    preset: list[Any] = [
        (OmegaDict, "omegaconf.dictconfig.DictConfig"), (OmegaList, "omegaconf.listconfig.ListConfig"),
        (OmegaMetadata, "omegaconf.base.ContainerMetadata"), (OmegaMetadata, "omegaconf.base.Metadata"),
        (typing.Any, "typing.Any"), collections.defaultdict,
    ]
    # The types a config's metadata names for its keys and values.
    preset += [(t, f"builtins.{t.__name__}") for t in (dict, list, int, float, str, bool, bytes, object)]
    preset += [(OmegaValue, f"omegaconf.nodes.{name}") for name in _OMEGACONF_NODES]
    return preset


# --- transformers' training arguments -------------------------------------------

class DistributedState:
    """accelerate's ``PartialState`` (the process layout when the arguments were
    made), as a plain record of its fields. The real class shares one state across
    the process and sets up distributed training when made: neither happens."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update({k: v for k, v in state.items() if isinstance(k, str)})

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"DistributedState({fields})"


def _classes(module: str, names: tuple[str, ...]) -> list[type]:
    """The classes ``names`` of ``module`` that the installed version defines (none
    when it is not installed: ``from tensorplay.serialization import *`` builds
    every preset)."""
    try:
        found = importlib.import_module(module)
    except ImportError:
        return []
    return [getattr(found, name) for name in names if isinstance(getattr(found, name, None), type)]


def transformers_preset() -> list[Any]:
    """transformers' ``TrainingArguments`` (the ``training_args.bin`` Trainer saves
    beside each checkpoint) and ``Seq2SeqTrainingArguments``: the dataclass made with
    ``__new__`` and given its fields, so ``__post_init__`` (which checks and sets up
    devices and distributed state) never runs; the enums its fields hold (looked up
    by value); ``AcceleratorConfig`` (a dataclass of flags); and accelerate's
    ``PartialState`` as a :class:`DistributedState` record."""
    preset: list[Any] = _classes("transformers.training_args", ("TrainingArguments", "OptimizerNames"))
    preset += _classes("transformers.training_args_seq2seq", ("Seq2SeqTrainingArguments",))
    preset += _classes("transformers.trainer_utils", ("IntervalStrategy", "SaveStrategy", "EvaluationStrategy",
                                                      "HubStrategy", "SchedulerType", "FSDPOption"))
    preset += _classes("transformers.debug_utils", ("DebugOption",))
    preset += _classes("transformers.trainer_pt_utils", ("AcceleratorConfig",))
    preset.append((DistributedState, "accelerate.state.PartialState"))
    preset += _classes("accelerate.utils.dataclasses", ("DistributedType",))
    return preset


PRESETS: dict[str, Callable[[], list[Any]]] = {"ARGPARSE_PRESET": argparse_preset, "PATHLIB_PRESET": pathlib_preset,
           "LIGHTNING_PRESET": lightning_preset, "OMEGACONF_PRESET": omegaconf_preset,
           "TRANSFORMERS_PRESET": transformers_preset}
