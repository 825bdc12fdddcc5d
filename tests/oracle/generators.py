"""The generators, one module per format family. Each has ``NAME``, ``seeds()``
(a fixed list of cases, hostile and benign, for CI) and ``generate(rng)`` (a case
drawn from its grammar)."""
from __future__ import annotations

import importlib

MODULES = ("gen_pickle", "gen_torch", "gen_tar", "gen_zip", "gen_compress", "gen_numpy", "gen_joblib", "gen_pandas",
           "gen_export", "gen_dcp", "gen_sharded", "gen_tensordict", "gen_repo", "gen_corpus")


def load(names: list[str] | None = None) -> dict:
    out = {}
    for module_name in MODULES:
        if names is None or module_name[len("gen_"):] in names or module_name in names:
            module = importlib.import_module(f"oracle.{module_name}")
            out[module.NAME] = module
    return out
