"""torch.export archives (``.pt2``), from real ``torch.export.save`` outputs of
small modules (static shapes, dynamic shapes, args/kwargs/dict inputs with a
float and a str, a buffer and constants, many symbols) and the torch 2.6/2.7
layout (``serialized_exported_program.json`` at the top), edited as attackers
edit them:

- one string of the program JSON or of the weights/constants configs, chosen
  at random (nested JSON too: the pytree specs and their contexts; the names
  that are keys of a map), made a payload: an expression, a parameter default,
  a string closed and reopened, a breakout of the line and the brackets that
  leaves a statement at the top of the code torch generates;
- structural edits: a union's ``type`` changed (``as_int`` to ``as_expr``,
  ``as_tensor`` to ``as_custom_obj`` or ``as_graph``), a nested subgraph, a
  node's ``target`` another callable, an attribute renamed everywhere, a weight
  or constant made a pickle (``use_pickle``, ``opaque_obj_``), the sample inputs
  or a legacy ``data/weights/model.pt`` a hostile torch archive, members added
  (another program, a program under another spelling of ``models/*.json``,
  the 2.6/2.7 layout beside the new one, ``data/aotinductor/``), pytree
  contexts that import ``oracle.planted`` (an enum, a defaultdict factory)
  written in JSON only Python's reader reads (``NaN``, ``1e400``, a lone
  surrogate);
- benign but unusual archives that must stay clean: deflated, extra members,
  another root folder, no stack traces, a constant size spelt as an expression.

The readers are ``torch.export.load`` and ``torch.export.load(...).module()``
(readers.py): which of the two ran the payload tells load from ``module()``."""
from __future__ import annotations

import copy
import functools
import io
import json
import os
import random
import shutil
import tempfile
import warnings

from . import gen_torch, payloads, zipfmt
from .cases import Case

NAME = "export"
KIND = "export"
NAMES = ("model.pt2", "model.pt2", "model.pt2", "exported.pt2", "model.pt")
PLANTED = "oracle.planted"  # importing it creates the marker (planted.py)
# The payload as an expression without a dot (a name torch splits on dots keeps it whole).
RUN = f"getattr(__import__('os'),'system')('{payloads.COMMAND}')"
RUN_DQ = f'getattr(__import__("os"),"system")("{payloads.COMMAND}")'
BASES = ("static", "dynamic", "kwargs", "buffers", "symbols", "old:static", "old:kwargs")
# Maps whose keys are names (of values, weights, symbols), not schema fields.
NAME_MAPS = ("tensor_values", "sym_int_values", "sym_float_values", "sym_bool_values", "custom_obj_values",
             "config", "range_constraints", "opset_version", "treespec_namedtuple_fields")
OLD_PROGRAM = "serialized_exported_program.json"


# --- the base archives, written once per campaign by the pinned torch ---------------------

def _modules() -> dict:
    import torch

    class Lin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.lin(x).relu()

    class Kw(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x, opts, *, scale=2.0, mode="fast"):
            y = self.lin(x) * scale + opts["bias"]
            if mode == "fast":
                y = y + opts["shift"]
            return {"out": y, "parts": (y.sum(), opts["bias"])}

    class Buf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", torch.zeros(3))
            self.register_buffer("scratch", torch.ones(3), persistent=False)
            self.const = torch.arange(3.0)
            self.w = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            self.running.add_(1)
            return x * self.w + self.running + self.scratch + self.const

    class Sym(torch.nn.Module):
        def forward(self, a, b, c):
            return (a[:, :4] * 2).sum(1), torch.cat([b, c], 0), b.shape[0] + a.shape[1]

    x = torch.randn(2, 4)
    batch, n = torch.export.Dim("batch", min=2, max=512), torch.export.Dim("n", min=5, max=1024)
    return {
        "static": (Lin(), (x,), {}, None),
        "dynamic": (Lin(), (x,), {}, {"x": {0: torch.export.Dim("batch", min=1, max=64)}}),
        "kwargs": (Kw(), (x, {"bias": torch.ones(3), "shift": torch.zeros(3)}), {"scale": 3.0, "mode": "fast"}, None),
        "buffers": (Buf(), (torch.randn(3),), {}, None),
        "symbols": (Sym(), (torch.randn(6, 8), torch.randn(6, 3), torch.randn(7, 3)), {},
                    {"a": {0: batch, 1: n}, "b": {0: batch, 1: torch.export.Dim.STATIC}, "c": {0: batch + 1}}),
    }


def _old_layout(ep, program: bytes) -> tuple[tuple[str, bytes], ...]:
    """The zip torch 2.6 and 2.7 wrote (no root folder); torch.export.load still reads it."""
    import torch
    from torch._export.serde.schema import SCHEMA_VERSION

    def saved(value) -> bytes:
        out = io.BytesIO()
        torch.save(value, out)
        return out.getvalue()

    return ((OLD_PROGRAM, program), ("serialized_state_dict.pt", saved(dict(ep.state_dict))),
            ("serialized_constants.pt", saved(dict(ep.constants))),
            ("serialized_example_inputs.pt", saved(ep.example_inputs)),
            ("version", ".".join(map(str, SCHEMA_VERSION)).encode()))


@functools.cache
def bases() -> dict[str, tuple[tuple[str, bytes], ...]]:
    """Each base's records, as the pinned torch writes them (read back with zipfile: ours, benign)."""
    import zipfile

    import torch

    folder = tempfile.mkdtemp()
    out: dict[str, tuple[tuple[str, bytes], ...]] = {}
    # The same weights every campaign, so its findings reproduce. (A raw weight record
    # whose first bytes read as an opcode that names a global is reported by the scan,
    # which does not read the weights config's use_pickle yet: a known false positive
    # these weights do not trip.)
    torch.manual_seed(45)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, (module, args, kwargs, dynamic) in _modules().items():
                ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic)
                path = os.path.join(folder, f"{name}.pt2")
                torch.export.save(ep, path)
                with zipfile.ZipFile(path) as z:
                    out[name] = tuple((i.filename, z.read(i)) for i in z.infolist())
                if f"old:{name}" in BASES:
                    out[f"old:{name}"] = _old_layout(ep, dict(out[name])[f"{name}/models/model.json"])
    finally:
        shutil.rmtree(folder)
    return out


def archive(records: dict[str, bytes], deflated: bool = False) -> bytes:
    """The records as a zip laid out as torch's writer lays them out (stored, 64-byte aligned)."""
    return zipfmt.build([zipfmt.Entry(n.encode(), d, method=8 if deflated else 0, align=0 if deflated else 64)
                         for n, d in records.items()])


class Pt2:
    """One archive being edited: its records, and the names of its parts."""

    def __init__(self, base: str):
        self.base = base
        self.records = dict(bases()[base])
        self.old = base.startswith("old:")
        self.root = "" if self.old else next(iter(self.records)).split("/")[0] + "/"
        self.program_name = OLD_PROGRAM if self.old else f"{self.root}models/model.json"

    def json(self, name: str):
        return json.loads(self.records[name])

    def set_json(self, name: str, doc) -> None:
        self.records[name] = json.dumps(doc).encode()

    @property
    def program(self) -> dict:
        return self.json(self.program_name)

    @program.setter
    def program(self, doc: dict) -> None:
        self.set_json(self.program_name, doc)

    def configs(self) -> list[str]:
        return [n for n in self.records if n.endswith("_config.json")]

    def record(self, part: str) -> str:
        return self.root + part

    def bytes(self, deflated: bool = False) -> bytes:
        return archive(self.records, deflated)


# --- payload strings -------------------------------------------------------------------

CLOSERS = ("", ")", "))", ")))", "}))", "])", "]))")


def breakout(rng: random.Random | None, orig: str = "", quote: str = "'", closers: str = ")") -> str:
    """Close the string and the brackets the value stands in, end the line (a comment
    drops its rest; a guard's message, built from the same text without its line
    breaks, keeps only what comes before it), run the payload at the top of the
    generated code, and open a function that takes in whatever follows."""
    if rng is not None:
        quote, closers = rng.choice(("", "'", '"')), rng.choice(CLOSERS)
    return f"{orig}{quote} #\n{closers}\n{RUN}\ndef _g(*a): #"


def twice(orig: str = "x") -> str:
    """For a name the generated code writes twice (a forward's parameter, then in the
    list it flattens): the first ends the def and runs the payload, a triple-quoted
    string swallows the text up to the second, whose tail is a call's arguments."""
    return f"{orig}):\n    pass\n{RUN}\n_s = '''\ndef _g():\n    print(([0"


def enum_context(token: str = "") -> str:
    """A pytree context naming an enum of the planted module; ``token`` is JSON only
    Python's reader reads (NaN, 1e400...), put beside it."""
    pad = f', "pad": {token}' if token else ""
    return f'[{{"__enum__": true, "fqn": "{PLANTED}:Color", "name": "RED"{pad}}}]'


TEMPLATES = {
    "expression": lambda rng, orig: RUN,
    "expression in arithmetic": lambda rng, orig: f"{RUN} + 2",
    "parameter default": lambda rng, orig: f"{orig or 'x'}={RUN}",
    "string closed '": lambda rng, orig: f"{orig}'+str({RUN})+'",
    'string closed "': lambda rng, orig: f'{orig}"+str({RUN_DQ})+"',
    "breakout": lambda rng, orig: breakout(rng, orig),
    "written twice": lambda rng, orig: twice(orig or "x"),
    "getattr breakout": lambda rng, orig: f'{orig}"),{RUN_DQ},getattr(self,"{orig}',
    "module name": lambda rng, orig: PLANTED,
    "module:attribute": lambda rng, orig: f"{PLANTED}:Color",
    "enum context": lambda rng, orig: enum_context(),
    "enum context, Python-only JSON": lambda rng, orig: enum_context(rng.choice(PYTHON_ONLY)),
}
# JSON that Python's json module reads and a strict reader refuses.
PYTHON_ONLY = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", '"\\ud800"', '"\\udfff x"')


# --- every string of a JSON document, nested JSON included --------------------------------

def _nested(text: str):
    if not text or text[0] not in "[{":
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, (dict, list)) else None


def slots(value, label: str = "", path: tuple = ()):
    """(label, path) of every string: a label is bounded (indices and names dropped)."""
    if isinstance(value, dict):
        names = label.rsplit(".", 1)[-1] in NAME_MAPS
        for key, child in value.items():
            sub = f"{label}.{'*' if names else key}"
            if names:
                yield f"{sub} (the name)", path + (("key", key),)
            yield from slots(child, sub, path + (("at", key),))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from slots(child, label + "[]", path + (("at", i),))
    elif isinstance(value, str):
        yield label, path
        inner = _nested(value)
        if inner is not None:
            yield from slots(inner, label + "<json>", path + (("json",),))


def replace(value, path: tuple, new):
    """A copy of ``value`` with the string at ``path`` replaced by ``new(old)``."""
    if not path:
        return new(value)
    (step, *arg), rest = path[0], path[1:]
    if step == "json":
        return json.dumps(replace(json.loads(value), rest, new))
    if step == "key":
        return {(new(k) if k == arg[0] else k): v for k, v in value.items()}
    out = copy.copy(value)
    out[arg[0]] = replace(value[arg[0]], rest, new)
    return out


def string_edit(pt2: Pt2, rng: random.Random) -> str:
    """One string of the program or a config, chosen by label first (a rare field
    is as likely as a common one), made a payload."""
    documents = [pt2.program_name] + pt2.configs()
    by_label: dict[str, list[tuple[str, tuple]]] = {}
    for name in documents:
        prefix = "program" if name == pt2.program_name else name.rsplit("/", 1)[-1].replace("model_", "")
        for label, path in slots(pt2.json(name)):
            by_label.setdefault(prefix + label, []).append((name, path))
    label = rng.choice(sorted(by_label))
    name, path = rng.choice(by_label[label])
    template = rng.choice(sorted(TEMPLATES))
    pt2.set_json(name, replace(pt2.json(name), path, lambda old: TEMPLATES[template](rng, old)))
    return f"string {label}: {template}"


# --- structural edits ---------------------------------------------------------------------

def _unions(value, path: tuple = ()):
    """Paths of the single-key ``as_*`` dicts: the schema's unions (Argument, SymInt...)."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith("as_"):
            yield path
        for key, child in value.items():
            yield from _unions(child, path + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _unions(child, path + (i,))


def _at(doc, path: tuple):
    for step in path:
        doc = doc[step]
    return doc


def _graph() -> dict:
    """A subgraph of one node: the shape of a cond's branch."""
    meta = {"dtype": 7, "sizes": [{"as_int": 3}], "requires_grad": False, "device": {"type": "cpu", "index": None},
            "strides": [{"as_int": 1}], "storage_offset": {"as_int": 0}, "layout": 7}
    node = {"target": "torch.ops.aten.relu.default", "name": "relu", "metadata": {},
            "inputs": [{"name": "self", "arg": {"as_tensor": {"name": "arg0_1"}}, "kind": 1}],
            "outputs": [{"as_tensor": {"name": "relu"}}]}
    return {"inputs": [{"as_tensor": {"name": "arg0_1"}}], "outputs": [{"as_tensor": {"name": "relu"}}],
            "nodes": [node], "tensor_values": {"arg0_1": meta, "relu": meta}, "sym_int_values": {},
            "sym_float_values": {}, "sym_bool_values": {}, "is_single_tensor_return": False, "custom_obj_values": {}}


def _union_value(kind: str, rng: random.Random, old):
    name = "subgraph_0"
    if isinstance(old, dict) and isinstance(old.get("name"), str):
        name = old["name"]
    values = {
        "as_expr": lambda: {"expr_str": rng.choice((RUN, "s0 + 1", "Symbol('s0', positive=True, integer=True)")),
                            "hint": {"as_int": 2}},
        "as_custom_obj": lambda: {"name": name, "class_fqn": rng.choice((f"{PLANTED}.Color", "__torch__.torch.classes."
                                                                         "_TorchScriptTesting._Foo", RUN))},
        "as_graph": lambda: {"name": rng.choice((name, "subgraph_0", breakout(rng))), "graph": _graph()},
        "as_string": lambda: rng.choice((RUN, breakout(rng), breakout(None, "", "'", ")"))),
        "as_operator": lambda: rng.choice(TARGETS),
        "as_sym_int": lambda: {"as_expr": {"expr_str": "s0", "hint": {"as_int": 2}}},
        "as_int": lambda: 2,
        "as_float": lambda: float("nan") if rng.random() < 0.3 else 2.5,
        "as_none": lambda: True,
        "as_tensor": lambda: {"name": name},
        "as_ints": lambda: [1, 2],
        "as_device": lambda: {"type": rng.choice(("cpu", "meta", RUN)), "index": None},
    }
    return values[kind]()


UNION_KINDS = ("as_expr", "as_custom_obj", "as_graph", "as_string", "as_operator", "as_sym_int", "as_int",
               "as_float", "as_none", "as_tensor", "as_ints", "as_device")
# Other callables for a node's target: what deserialize_operator resolves by getattr
# from torch, operator and math, an extension's namespace, and others it leaves as text.
TARGETS = ("torch.os.system", "torch.load", "torch.hub.load", "torch.export.load", "torch._C._import_ir_module",
           "torch.utils.cpp_extension.load_inline", "torch.ops.higher_order.cond", "torch.ops.higher_order.map_impl",
           "torch.ops.aten.sym_size.int", "_operator.getitem", "_operator.attrgetter", "math.sqrt",
           "builtins.exec", "#tp:op", "torch.fx.graph_module.exec", "torch.ops.aten.add.Tensor", RUN)


def union_edit(pt2: Pt2, rng: random.Random) -> str:
    program = pt2.program
    path = rng.choice(list(_unions(program)))
    holder = _at(program, path)
    old_kind, old_value = next(iter(holder.items()))
    kind = rng.choice([k for k in UNION_KINDS if k != old_kind])
    holder.clear()
    holder[kind] = _union_value(kind, rng, old_value)
    pt2.program = program
    return f"union {old_kind} -> {kind}"


def subgraph_edit(pt2: Pt2, rng: random.Random) -> str:
    """A node given a subgraph argument (its graph the main graph, one string of it a payload)."""
    program = pt2.program
    graph = program["graph_module"]["graph"]
    inner = copy.deepcopy(graph)
    where = [p for label, p in slots(inner) if label.endswith(".name") or "expr_str" in label or "target" in label]
    if where:
        inner = replace(inner, rng.choice(where), lambda old: TEMPLATES[rng.choice(sorted(TEMPLATES))](rng, old))
    node = rng.choice(graph["nodes"])
    node["inputs"].append({"name": "branch", "arg": {"as_graph": {"name": "true_graph_0", "graph": inner}},
                           "kind": 1})
    if rng.random() < 0.5:
        node["target"] = rng.choice(("torch.ops.higher_order.cond", "torch.ops.higher_order.map_impl",
                                     "torch.ops.higher_order.wrap_with_set_grad_enabled"))
    pt2.program = program
    return "nested subgraph"


def target_edit(pt2: Pt2, rng: random.Random) -> str:
    program = pt2.program
    nodes = program["graph_module"]["graph"]["nodes"]
    target = rng.choice(TARGETS)
    if not nodes or rng.random() < 0.3:
        # The callables the metadata names: torch_fn and source_fn_stack.
        for node in nodes or [{}]:
            node.setdefault("metadata", {})["source_fn_stack"] = f"relu,{target}"
        pt2.program = program
        return f"metadata target {target if target != RUN else 'payload'}"
    rng.choice(nodes)["target"] = target
    pt2.program = program
    return f"target {target if target != RUN else 'payload'}"


def rename_edit(pt2: Pt2, rng: random.Random) -> str:
    """A weight's, buffer's or constant's name changed everywhere: the program's
    input spec and the config (module() registers it and writes get_attr code for it)."""
    program = pt2.program
    specs = program["graph_module"]["signature"]["input_specs"]
    named = [(s, k, f) for s in specs for k, v in s.items() if isinstance(v, dict)
             for f in ("parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name") if f in v]
    if not named:
        return string_edit(pt2, rng)
    spec, kind, field = rng.choice(named)
    old = spec[kind][field]
    leaf = old.rsplit(".", 1)[-1]
    new = rng.choice((breakout(None, leaf, '"', ")"), breakout(rng, leaf), f'{leaf}"),{RUN_DQ},getattr(self,"{leaf}'))
    new = old[: len(old) - len(leaf)] + new
    spec[kind][field] = new
    pt2.program = program
    for name in pt2.configs():
        config = pt2.json(name)
        if old in config.get("config", {}):
            config["config"] = {(new if k == old else k): v for k, v in config["config"].items()}
            pt2.set_json(name, config)
    return f"renamed {field}"


def _hostile_archive(rng: random.Random | None) -> bytes:
    pickle_bytes = payloads.random_hostile(rng)[0] if rng else payloads.hostile_pickle()
    return gen_torch.rebuild(gen_torch.SMALL[0], None, "replace data.pkl", pickle_bytes)[0]


PICKLES = ("weight use_pickle", "constant use_pickle", "opaque constant", "sample inputs", "legacy weights file",
           "legacy constants file", "custom_obj constant")
OLD_PICKLES = tuple(f"old layout: {n}" for n in ("serialized_state_dict.pt", "serialized_constants.pt",
                                                 "serialized_example_inputs.pt"))


def pickle_edit(pt2: Pt2, rng: random.Random | None, what: str) -> bool | None:
    """A pickled part made hostile; whether a reader should run it."""
    hostile = _hostile_archive(rng)
    if what in OLD_PICKLES:
        pt2.records[what.split(": ")[1]] = hostile
        return True
    weights = pt2.record("data/weights/model_weights_config.json")
    constants = pt2.record("data/constants/model_constants_config.json")
    if what in ("weight use_pickle", "constant use_pickle"):
        order = [(weights, "data/weights/"), (constants, "data/constants/")]
        held = [(n, f) for n, f in (order if what.startswith("weight") else order[::-1]) if pt2.json(n)["config"]]
        if not held:  # a module of no weight and no constant
            return pickle_edit(pt2, rng, "legacy weights file")
        config_name, folder = held[0]
        config = pt2.json(config_name)
        entry = next(iter(config["config"].values()))
        entry["use_pickle"] = True
        pt2.records[pt2.record(folder + entry["path_name"])] = hostile
        pt2.set_json(config_name, config)
    elif what in ("opaque constant", "custom_obj constant"):
        config = pt2.json(constants)
        path_name = "opaque_obj_0" if what.startswith("opaque") else "custom_obj_0"
        meta = {"path_name": path_name, "is_param": False, "use_pickle": True, "tensor_meta": None}
        config["config"]["extra"] = meta
        pt2.set_json(constants, config)
        raw = payloads.random_hostile(rng)[0] if rng else payloads.hostile_pickle()
        pt2.records[pt2.record("data/constants/" + path_name)] = raw if path_name.startswith("opaque") else hostile
        return True if path_name.startswith("opaque") else None
    elif what == "sample inputs":
        pt2.records[pt2.record("data/sample_inputs/model.pt")] = hostile
    elif what == "legacy weights file":
        pt2.records[pt2.record("data/weights/model.pt")] = hostile
    else:
        pt2.records[pt2.record("data/constants/model.pt")] = hostile
    return True


def _sympify_payload(program: dict) -> dict:
    """The known class: a symbolic size that sympify evaluates."""
    program = copy.deepcopy(program)
    graph = program["graph_module"]["graph"]
    meta = next(v for v in graph["tensor_values"].values() if v["sizes"])
    meta["sizes"][0] = {"as_expr": {"expr_str": f"{RUN} + 2", "hint": {"as_int": 2}}}
    return program


def _clone_model(pt2: Pt2, model: str, program: dict) -> None:
    """Another program, with the records torch reads for it (its sample inputs and configs)."""
    for part, new in (("models/model.json", f"models/{model}.json"),
                      ("data/sample_inputs/model.pt", f"data/sample_inputs/{model}.pt"),
                      ("data/weights/model_weights_config.json", f"data/weights/{model}_weights_config.json"),
                      ("data/constants/model_constants_config.json", f"data/constants/{model}_constants_config.json")):
        pt2.records[pt2.record(new)] = pt2.records[pt2.record(part)]
    pt2.set_json(pt2.record(f"models/{model}.json"), program)


MEMBERS = ("another program", "program as models/model.JSON", "program as models/model.jso_",
           "program under models/sub/", "old layout beside", "aotinductor files", "extra files")


def member_edit(pt2: Pt2, rng: random.Random | None, what: str) -> bool | None:
    """Members added; whether a reader should run what they carry."""
    hostile = _sympify_payload(pt2.program)
    if what == "another program":
        _clone_model(pt2, "extra", hostile)
    elif what in ("program as models/model.JSON", "program as models/model.jso_"):
        # torch takes the model's name as the member's name less 5 characters.
        pt2.records[pt2.record("models/model" + what[-5:])] = json.dumps(hostile).encode()
        if rng is not None and rng.random() < 0.5:
            del pt2.records[pt2.program_name]
    elif what == "program under models/sub/":
        _clone_model(pt2, "sub/model", hostile)
    elif what == "old layout beside":
        # Top-level members make torch's archive reader fail, and torch.export.load
        # then reads the file as the 2.6/2.7 layout.
        old = dict(_old_layout_records(pt2))
        old[OLD_PROGRAM] = json.dumps(hostile).encode()
        pt2.records.update(old)
    elif what == "aotinductor files":
        folder = pt2.record("data/aotinductor/model/")
        pt2.records[folder + "model.so"] = b"\x7fELF" + bytes(60)
        pt2.records[folder + "model_metadata.json"] = b'{"AOTI_DEVICE_KEY": "cpu"}'
        pt2.records[folder + "model.wrapper.cpp"] = b"// compiled\n"
        return None
    else:
        pt2.records[pt2.record("extra/notes.txt")] = b"notes"
        return False
    return True


def _old_layout_records(pt2: Pt2) -> tuple[tuple[str, bytes], ...]:
    source = "old:kwargs" if pt2.base == "kwargs" else "old:static"
    return bases()[source]


TOKEN = "tp-python-only-token"


def spec_edit(pt2: Pt2, factory: bool, where: str, token: str) -> None:
    """A pytree node that imports the planted module: a dict whose context (JSON in a
    string) names an enum of it, or a defaultdict whose context (a JSON object, as
    torch writes it) names a factory of it; ``token``, JSON only Python reads, put
    in that context or in the spec around it."""
    program = pt2.program
    signature = program["graph_module"]["module_call_graph"][0]["signature"]
    spec = json.loads(signature["in_spec"])
    node = spec[1]
    while node["children_spec"] and node["children_spec"][-1]["type"] is not None:
        node = node["children_spec"][-1]
    if factory:
        # torch checks the context's keys before it imports: the token goes in its list of keys.
        node["type"] = "collections.defaultdict"
        node["context"] = {"default_factory_module": PLANTED, "default_factory_name": "factory",
                           "dict_context": [TOKEN] if token and where == "context" else []}
        node["children_spec"] = [{"type": None, "context": None, "children_spec": []}] if token else []
    else:
        node["type"] = "builtins.dict"
        node["context"] = enum_context(token if where == "context" else "")
        node["children_spec"] = [{"type": None, "context": None, "children_spec": []}]
    if where == "spec" and token:
        node["pad"] = TOKEN
    signature["in_spec"] = json.dumps(spec).replace(json.dumps(TOKEN), token)
    pt2.program = program


def known_edit(pt2: Pt2, what: str) -> None:
    """The classes tensorplay already refuses (tests/test_export_program_code.py)."""
    program = pt2.program
    if what == "sympify of a size":
        program = _sympify_payload(program)
    elif what == "an input's name":
        evil = f"x={RUN}"

        def rename(value):
            if isinstance(value, dict):
                return {(evil if key == "x" and isinstance(v, dict) and "dtype" in v else key):
                        (evil if key == "name" and v == "x" else rename(v)) for key, v in value.items()}
            if isinstance(value, list):
                return [rename(v) for v in value]
            return value

        program = rename(program)
    elif what == "a guard":
        program["guards_code"] = [f"1 #\n, 'a')\n{RUN}\ndef _g(*args):\n  (1"]
    pt2.program = program


def new_class_edit(pt2: Pt2, what: str) -> None:
    """Classes this generator found, as seeds (their KNOWN_VIOLATIONS entries say why)."""
    program = pt2.program
    graph = program["graph_module"]["graph"]
    if what == "a str input's value in a guard":
        value = breakout(None, "", "'", ")")
        for spec in program["graph_module"]["signature"]["input_specs"]:
            if "as_string" in spec.get("constant_input", {}).get("value", {}):
                spec["constant_input"]["value"]["as_string"] = value
        for item in graph["inputs"]:
            if "as_string" in item:
                item["as_string"] = value
    elif what == "a forward argument name":
        names = program["graph_module"]["module_call_graph"][0]["signature"]["forward_arg_names"]
        names[0] = twice(names[0])
    elif what == "a keyword argument's name in the input spec":
        # module() writes {'name': name, ...} for the keyword arguments it flattens.
        signature = program["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(signature["in_spec"])
        kwargs = spec[1]["children_spec"][-1]
        names = json.loads(kwargs["context"])
        if names:
            names[0] = breakout(None, names[0], "'", "}))")
        kwargs["context"] = json.dumps(names)
        signature["in_spec"] = json.dumps(spec)
    pt2.program = program


# --- benign but unusual ----------------------------------------------------------------------

BENIGN = ("as written", "deflated", "extra members", "another root folder", "no stack traces",
          "a size as an expression", "unicode in the metadata")


def benign_edit(pt2: Pt2, what: str) -> None:
    if what == "extra members":
        pt2.records[pt2.record("extra/README.md")] = b"# exported\n"
        pt2.records[pt2.record(".data/notes.txt")] = b"hello"
    elif what == "another root folder" and not pt2.old:
        pt2.records = {"archive/" + n.split("/", 1)[1]: d for n, d in pt2.records.items()}
        pt2.root, pt2.program_name = "archive/", "archive/models/model.json"
    elif what == "no stack traces":
        program = pt2.program
        for node in program["graph_module"]["graph"]["nodes"]:
            node["metadata"].pop("stack_trace", None)
        pt2.program = program
    elif what == "a size as an expression":
        program = pt2.program
        meta = next(v for v in program["graph_module"]["graph"]["tensor_values"].values() if v["sizes"])
        if "as_int" in meta["sizes"][0]:
            meta["sizes"][0] = {"as_expr": {"expr_str": str(meta["sizes"][0]["as_int"]), "hint": None}}
        pt2.program = program
    elif what == "unicode in the metadata":
        program = pt2.program
        for node in program["graph_module"]["graph"]["nodes"]:
            node["metadata"]["stack_trace"] = 'File "modèle_🙂.py", line 1, in forward\n    return x  # “quoted”'
        pt2.program = program


# --- cases -------------------------------------------------------------------------------------

def _case(variant: str, pt2: Pt2, hostile: bool | None, name: str = "model.pt2", deflated: bool = False) -> Case:
    return Case(NAME, f"{pt2.base}: {variant}", KIND, hostile, name=name, data=pt2.bytes(deflated))


KNOWN = (("dynamic", "sympify of a size"), ("static", "sympify of a size"), ("static", "an input's name"),
         ("dynamic", "a guard"))
NEW_CLASSES = (("kwargs", "a str input's value in a guard"), ("static", "a forward argument name"),
               ("kwargs", "a keyword argument's name in the input spec"))


def seeds() -> list[Case]:
    out = []
    for base, what in KNOWN:
        pt2 = Pt2(base)
        known_edit(pt2, what)
        out.append(_case(f"known: {what}", pt2, True))
    pt2 = Pt2("static")
    spec_edit(pt2, False, "context", "")
    out.append(_case("known: an enum a pytree context imports", pt2, True))
    pt2 = Pt2("static")
    spec_edit(pt2, True, "context", "")
    out.append(_case("spec: a defaultdict factory", pt2, True))
    for base, what in NEW_CLASSES:
        pt2 = Pt2(base)
        new_class_edit(pt2, what)
        out.append(_case(f"found: {what}", pt2, True))
    for where, token in (("context", "1e400"), ("spec", "NaN"), ("context", '"\\ud800"')):
        pt2 = Pt2("kwargs")
        spec_edit(pt2, False, where, token)
        out.append(_case(f"spec: an enum, Python-only JSON ({token}) in the {where}", pt2, True))
    for what in ("program as models/model.jso_", "program under models/sub/", "old layout beside"):
        pt2 = Pt2("static")
        member_edit(pt2, None, what)
        out.append(_case(f"member: {what}", pt2, True))
    for base, what in (("buffers", "sample inputs"), ("buffers", "opaque constant"), ("buffers", "constant use_pickle"),
                       ("old:static", OLD_PICKLES[2])):
        pt2 = Pt2(base)
        pickle_edit(pt2, None, what)
        out.append(_case(f"pickle: {what}", pt2, True))
    for base in ("static", "kwargs", "buffers", "symbols", "old:static"):
        out.append(_case("benign: as written", Pt2(base), False))
    out.append(_case("benign: deflated", Pt2("dynamic"), False, deflated=True))
    return out


OLD_SHAPES = ("string", "union", "subgraph", "target", "rename", "pickle", "seeded", "benign")
SHAPES = OLD_SHAPES + ("member", "spec")
WEIGHTS = {"string": 8, "benign": 3}  # the others 1


def generate(rng: random.Random) -> Case:
    shape = rng.choices(SHAPES, [WEIGHTS.get(s, 1) for s in SHAPES])[0]
    pt2 = Pt2(rng.choice([b for b in BASES if shape in OLD_SHAPES or not b.startswith("old:")]))
    name, deflated = rng.choice(NAMES), rng.random() < 0.2
    edits = {"string": string_edit, "union": union_edit, "subgraph": subgraph_edit, "target": target_edit,
             "rename": rename_edit}
    if shape in edits:
        return _case(edits[shape](pt2, rng), pt2, None, name, deflated)
    if shape == "pickle":
        what = rng.choice(OLD_PICKLES if pt2.old else PICKLES)
        return _case(f"pickle: {what}", pt2, pickle_edit(pt2, rng, what), name, deflated)
    if shape == "member":
        what = rng.choice(MEMBERS)
        return _case(f"member: {what}", pt2, member_edit(pt2, rng, what), name, deflated)
    if shape == "spec":
        where, token = rng.choice(("context", "spec")), rng.choice(PYTHON_ONLY + ("",))
        factory = rng.random() < 0.3
        spec_edit(pt2, factory, where, token)
        label = ("a defaultdict factory" if factory else "an enum") + (
            f", Python-only JSON ({token}) in the {where}" if token else "")
        return _case(f"spec: {label}", pt2, True, name, deflated)
    if shape == "seeded":
        what = rng.choice([w for _, w in KNOWN + NEW_CLASSES])
        (known_edit if what in {w for _, w in KNOWN} else new_class_edit)(pt2, what)
        return _case(f"seeded: {what}", pt2, None, name, deflated)
    what = rng.choice(BENIGN)
    benign_edit(pt2, what)
    return _case(f"benign: {what}", pt2, False, name, deflated or what == "deflated")
