"""A torch.export program is JSON, yet ``torch.export.load`` runs parts of it as
Python: a symbolic expression goes through ``sympy.sympify`` (``eval``), a graph
input's name is written into the ``forward`` it generates and executes, a pytree
context names a module it imports; ``ExportedProgram.module()`` executes each
guard. Each hostile archive here is built as an attacker builds it (a real
``torch.export.save`` archive, its ``models/model.json`` edited), the pinned
torch runs its payload in a sandbox, and tensorplay refuses it, scans it
unsafe and runs nothing. The archives torch writes stay clean and load."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import sandboxed
import tensorplay
from tensorplay import scanner

torch = pytest.importorskip("torch")

# Seeded: the scan still reads a raw weight record as a pickle from byte 0 (it does not
# model the weights config's use_pickle yet), so random weights whose first bytes are an
# opcode naming a global would make a benign archive unsafe now and then.
WRITER = """
import sys, torch
torch.manual_seed(45)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
    def forward(self, x):
        return self.lin(x).relu()
x = torch.randn(2, 4)
torch.export.save(torch.export.export(M(), (x,)), sys.argv[1] + "/static.pt2")
dynamic = {"x": {0: torch.export.Dim("batch", min=1, max=64)}}
torch.export.save(torch.export.export(M(), (x,), dynamic_shapes=dynamic), sys.argv[1] + "/dynamic.pt2")
"""
RUN = f"__import__('os').system('{sandboxed.COMMAND}')"
MODULE = "tp_export_marker_module"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """Archives the pinned torch writes: a static and a dynamic-shape export."""
    folder = tmp_path_factory.mktemp("exports")
    done = subprocess.run([sys.executable, "-c", WRITER, str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # What a pytree context imports: a module whose import leaves the marker.
    (folder / f"{MODULE}.py").write_text(f"import os\nos.system({sandboxed.COMMAND!r})\n")
    return folder


def _edited(base: Path, out: Path, edit) -> Path:
    """``base`` with its program JSON rewritten by ``edit``, every other record as it was."""
    with zipfile.ZipFile(base) as z, zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            data = z.read(info.filename)
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                edit(program)
                data = json.dumps(program).encode()
            w.writestr(info.filename, data)
    return out


def _sympify_in_a_size(program: dict) -> None:
    sizes = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"]
    sizes[0] = {"as_expr": {"expr_str": f"{RUN} + 2", "hint": {"as_int": 2}}}


def _code_in_an_input_name(program: dict) -> None:
    evil = f"x={RUN}"

    def rename(value):
        if isinstance(value, dict):
            return {(evil if key == "x" and isinstance(v, dict) and "dtype" in v else key):
                    (evil if key == "name" and v == "x" else rename(v)) for key, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return value

    program.update(rename(program))


def _enum_in_a_pytree_context(program: dict) -> None:
    signature = program["graph_module"]["module_call_graph"][0]["signature"]
    spec = json.loads(signature["in_spec"])
    kwargs = spec[1]["children_spec"][1]
    kwargs["context"] = json.dumps([{"__enum__": True, "fqn": f"{MODULE}:anything", "name": "x"}])
    kwargs["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
    signature["in_spec"] = json.dumps(spec)


def _code_in_a_guard(program: dict) -> None:
    program["guards_code"] = [f"1 #\n, 'a')\n{RUN}\ndef _g(*args):\n  (1"]


# case: (base archive, edit, what the oracle runs, what the scan reports)
CASES = {
    "sympify of a dynamic size": ("dynamic", _sympify_in_a_size, "load"),
    "sympify of a static size": ("static", _sympify_in_a_size, "load"),
    "an input's name in generated code": ("static", _code_in_an_input_name, "load"),
    "an enum a pytree context imports": ("static", _enum_in_a_pytree_context, "load"),
    "a guard module() executes": ("dynamic", _code_in_a_guard, "module"),
}
ORACLE = {
    "load": "import sys; sys.path.insert(0, folder); import torch; torch.export.load(path)",
    "module": "import sys; sys.path.insert(0, folder); import torch; torch.export.load(path).module()",
}


def _hostile(written: Path, tmp_path: Path, case: str) -> Path:
    base, edit, _ = CASES[case]
    return _edited(written / f"{base}.pt2", tmp_path / "hostile.pt2", edit)


@pytest.mark.parametrize("case", list(CASES))
def test_torch_runs_the_program_s_payload(written, tmp_path, case):
    path = _hostile(written, tmp_path, case)
    assert sandboxed.runs_payload(ORACLE[CASES[case][2]], path=str(path), folder=str(written))


@pytest.mark.parametrize("case", list(CASES))
def test_the_scan_calls_it_unsafe_and_names_the_field(written, tmp_path, case):
    path = _hostile(written, tmp_path, case)
    for pickles_only in (False, True):
        report = scanner.scan(path, pickles_only=pickles_only)
        assert report.verdict == "unsafe", report
        kinds = [p.kind for p in report.problems]
        assert "export_program_code" in kinds, report
        assert any("models/model.json" in p.location for p in report.problems), report


@pytest.mark.parametrize("case", list(CASES))
def test_no_reader_of_tensorplay_salvages_it_or_runs_it(written, tmp_path, case, monkeypatch):
    path = _hostile(written, tmp_path, case)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(written))
    for read in (lambda: tensorplay.load(path, unknown_globals="stub"), lambda: tensorplay.export_state_dict(path),
                 lambda: tensorplay.export_constants(path)):
        with pytest.raises(tensorplay.UnsafeCheckpointError, match="models/model.json"):
            read()
    assert not (tmp_path / sandboxed.MARKER).exists()
    assert MODULE not in sys.modules


@pytest.mark.parametrize("base", ["static", "dynamic"])
def test_what_torch_writes_stays_clean_and_loads(written, base):
    path = written / f"{base}.pt2"
    report = scanner.scan(path)
    assert report.verdict == "clean", report
    assert set(tensorplay.export_state_dict(path)) == {"lin.weight", "lin.bias"}


def test_a_program_that_is_not_json_is_never_clean(written, tmp_path):
    path = tmp_path / "broken.pt2"
    with zipfile.ZipFile(written / "static.pt2") as z, zipfile.ZipFile(path, "w") as w:
        for info in z.infolist():
            data = z.read(info.filename)
            w.writestr(info.filename, data[: len(data) // 2] if info.filename.endswith("models/model.json") else data)
    assert scanner.scan(path).verdict in ("unreadable", "unsafe")
