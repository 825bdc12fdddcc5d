"""Random programs over every opcode of pickle protocols 0 to 5, run by tensorplay
and by a reference: Python's own (pure-Python) unpickler held to the rules torch's
weights-only unpickler adds.

torch's weights-only loader implements 34 opcodes, so test_random_pickles.py can
take it as the reference only for those. What the others mean (text ints, floats
and strings, memo by line and MEMOIZE, FRAME, the stack ops, sets and frozensets,
bytes, STACK_GLOBAL, INST, OBJ, NEWOBJ_EX) Python's pickle defines; what may be
called, built, appended to or filled, torch's rules do. Those rules are a few
checks, written out in `WeightsOnlyRules`, and checked against torch itself on the
opcodes it has. Plain data only: what tensors mean is test_random_pickles.py's."""
from __future__ import annotations

import _codecs
import io
import pathlib
import pickle
import struct
import tempfile
import warnings
from collections import Counter, OrderedDict

import pytest
import tensorplay
from describe import describe
from expectations import assert_same_description
from hypothesis import given, settings
from hypothesis import strategies as st
from pickle_programs import MUTATIONS, NO_ARGUMENT, assemble, encode, mutate, write_checkpoint
from tensorplay import scanner
from weights_only_differential import refused_on_purpose

torch = pytest.importorskip("torch")

# --- the reference ----------------------------------------------------------------

GLOBALS = {
    "collections.OrderedDict": OrderedDict, "collections.Counter": Counter, "builtins.set": set,
    "builtins.complex": complex, "builtins.bytearray": bytearray, "_codecs.encode": _codecs.encode,
    # Not in torch's allowlist: tensorplay adds it, so that b'' pickled by protocols
    # 0 to 2 (as `builtins.bytes`) loads.
    "builtins.bytes": bytes,
}
PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}
DICT_TYPES = (dict, OrderedDict, Counter)


class Refused(pickle.UnpicklingError):
    pass


def _allowed(obj) -> bool:
    return any(obj is value for value in GLOBALS.values())


class WeightsOnlyRules(pickle._Unpickler):
    """Python's unpickler, with torch's weights-only checks where torch makes them:
    globals from the allowlist only (names mapped from Python 2 always, as torch
    maps them); REDUCE, NEWOBJ, INST and OBJ only of allowlisted objects; BUILD only
    on an OrderedDict (its __dict__) or an instance of an allowlisted type (as
    pickle builds); APPEND(S) only on lists, SETITEM(S) on dicts, OrderedDicts and
    Counters, ADDITEMS on sets. No persistent ids, extensions or out-of-band
    buffers. NEWOBJ_EX takes no keywords (pickle writes them only for classes with
    keyword-only `__new__` arguments, none of them allowlisted), and
    READONLY_BUFFER only marks bytes, which are read-only already."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes, encoding: str):
        super().__init__(io.BytesIO(data), encoding=encoding)

    def find_class(self, module, name):
        full = f"{PY2_MODULES.get(module, module)}.{name}"
        if full not in GLOBALS:
            raise Refused(f"not allowlisted: {full}")
        return GLOBALS[full]

    def persistent_load(self, pid):
        raise Refused("persistent id")

    def _instantiate(self, klass, args):
        if not _allowed(klass):
            raise Refused(f"calls {klass!r}")
        super()._instantiate(klass, args)

    def load_reduce(self):
        args = self.stack.pop()
        if not _allowed(self.stack[-1]):
            raise Refused(f"calls {self.stack[-1]!r}")
        self.stack[-1] = self.stack[-1](*args)

    def load_newobj(self):
        args = self.stack.pop()
        cls = self.stack.pop()
        if not (_allowed(cls) and isinstance(cls, type)):
            raise Refused(f"makes a {cls!r}")
        self.append(cls.__new__(cls, *args))

    def load_newobj_ex(self):
        kwargs = self.stack.pop()
        if not (type(kwargs) is dict and not kwargs):
            raise Refused("keyword arguments")
        self.load_newobj()

    def load_build(self):
        inst = self.stack[-2]
        if type(inst) is OrderedDict:
            inst.__dict__.update(self.stack.pop())
            return
        if not any(type(inst) is value for value in GLOBALS.values()):
            raise Refused(f"builds a {type(inst)}")
        super().load_build()

    def _check_target(self, types):
        if type(self.stack[-1]) not in types:
            raise Refused(f"fills a {type(self.stack[-1])}")

    def load_append(self):
        value = self.stack.pop()
        self._check_target((list,))
        self.stack[-1].append(value)

    def load_appends(self):
        items = self.pop_mark()
        self._check_target((list,))
        self.stack[-1].extend(items)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self._check_target(DICT_TYPES)
        self.stack[-1][key] = value

    def load_setitems(self):
        items = self.pop_mark()
        self._check_target(DICT_TYPES)
        for i in range(0, len(items), 2):
            self.stack[-1][items[i]] = items[i + 1]

    def load_additems(self):
        items = self.pop_mark()
        self._check_target((set,))
        self.stack[-1].update(items)

    def load_readonly_buffer(self):
        if type(self.stack[-1]) is not bytes:
            raise Refused("a read-only view of what is not bytes")

    def get_extension(self, code):
        raise Refused("extension code")


for _name in ("reduce", "newobj", "newobj_ex", "build", "append", "appends", "setitem", "setitems", "additems",
              "readonly_buffer"):
    WeightsOnlyRules.dispatch[getattr(pickle, _name.upper())[0]] = getattr(WeightsOnlyRules, f"load_{_name}")
for _name in ("ext1", "ext2", "ext4"):
    WeightsOnlyRules.dispatch[getattr(pickle, _name.upper())[0]] = lambda self: self.get_extension(0)


def reference_load(data: bytes, encoding: str = "utf-8"):
    """(object, None), or (None, the exception) where the reference refuses."""
    try:
        return WeightsOnlyRules(data, encoding).load(), None
    except Exception as error:  # noqa: BLE001 - any exception is a refusal
        return None, error


# --- the generator ----------------------------------------------------------------

def _line(texts):
    return st.one_of(st.sampled_from(texts), st.binary(max_size=6)).map(lambda b: b.replace(b"\n", b""))


_INT_TEXTS = [b"0", b"00", b"01", b"000", b"7", b"-12", b"+5", b" 12 ", b"0x1F", b"0o17", b"0b101", b"1_000",
              b"012", b"-0", b"9" * 25, b"1.5", b"", b"abc", b"\xd9\xa3"]
_FLOAT_TEXTS = [b"1.5", b"-0.0", b"inf", b"-Infinity", b"nan", b"NaN", b"1e308", b"1e309", b"1_0.5", b" 1.5",
                b".5", b"5.", b"1.5e", b"0x1p3", b"", b"2.2250738585072014e-308", b"4.9e-324"]
_STRING_TEXTS = [b"'abc'", b'"abc"', b"''", b"'a\\x41'", b"'\\n\\t\\\\'", b"'\\x4'", b"'\\u1234'", b"'\\101'",
                 b"'\xc3\xa9'", b"'\xff'", b"'unterminated", b"abc", b"'mixed\"", b"'"]
_UNICODE_TEXTS = [b"abc", b"", b"\\u00e9", b"\\U0001F600", b"\\u12", b"\xe9", b"a\\nb", b"\\ud800", b"\\U00110000"]
_INDEX_TEXTS = [b"0", b"1", b"2", b"3", b" 1", b"+1", b"1_0", b"-1", b"-0", b"x", b""]


def _one(name, arg_strategy):
    return arg_strategy.map(lambda arg: [(name, arg)])


def _long_bytes(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)


_text = st.text(st.characters(exclude_categories=()), max_size=5)
_utf8 = _text.map(lambda t: t.encode("utf-8", "surrogatepass"))

# Each kind of value twice: from the opcodes torch's loader has, and from all.
_torch_scalars = st.one_of(
    st.sampled_from([[("NONE",)], [("NEWTRUE",)], [("NEWFALSE",)]]),
    _one("LONG1", st.one_of(st.binary(max_size=10), st.integers(-(2**70), 2**70).map(_long_bytes))),
    _one("BININT1", st.integers(0, 255)),
    _one("BININT2", st.integers(0, 65535)),
    _one("BININT", st.integers(-(2**31), 2**31 - 1)),
    _one("BINFLOAT", st.floats().map(lambda f: struct.pack(">d", f))),
    _one("BINUNICODE", _utf8),
    _one("SHORT_BINSTRING", st.binary(max_size=5)),
)
_bytes = st.one_of(*(_one(name, st.binary(max_size=5))
                     for name in ("SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8")))
_scalars = st.one_of(
    _torch_scalars,
    _one("INT", st.one_of(_line(_INT_TEXTS), st.integers(-(2**70), 2**70).map(lambda v: str(v).encode()))),
    _one("LONG", st.tuples(_line(_INT_TEXTS), st.booleans()).map(lambda t: t[0] + (b"L" if t[1] else b""))),
    _one("LONG4", st.one_of(st.binary(max_size=10), st.integers(-(2**90), 2**90).map(_long_bytes))),
    _one("FLOAT", st.one_of(_line(_FLOAT_TEXTS), st.floats().map(lambda f: repr(f).encode()))),
    _one("STRING", _line(_STRING_TEXTS)),
    _one("UNICODE", _line(_UNICODE_TEXTS)),
    _one("SHORT_BINUNICODE", st.one_of(_utf8, st.binary(max_size=5))),
    _one("BINUNICODE8", _utf8),
    _one("BINSTRING", st.binary(max_size=5)),
    _bytes,
)

_GLOBALS = [("collections", "OrderedDict"), ("collections", "Counter"), ("builtins", "set"), ("__builtin__", "set"),
            ("builtins", "complex"), ("builtins", "bytearray"), ("builtins", "bytes"), ("__builtin__", "bytes"),
            ("_codecs", "encode"), ("builtins", "frozenset"), ("copy_reg", "_reconstructor"), ("builtins", "eval"),
            ("os", "system"), ("builtins", "list")]
_global_names = st.sampled_from(_GLOBALS)
_torch_globals = _global_names.map(lambda g: [("GLOBAL", g)])
_globals = st.one_of(
    _torch_globals,
    _global_names.map(lambda g: [("SHORT_BINUNICODE", g[0].encode()), ("SHORT_BINUNICODE", g[1].encode()),
                                 ("STACK_GLOBAL",)]),
)
_memo_index = st.integers(0, 3)
_torch_memo_gets = st.one_of(_memo_index.map(lambda i: [("BINGET", i)]),
                             _memo_index.map(lambda i: [("LONG_BINGET", i)]))
_memo_gets = st.one_of(_torch_memo_gets, _one("GET", _line(_INDEX_TEXTS)))


def _flat(values):
    return [op for value in values for op in value]


def _marked(items, closer):
    return [("MARK",)] + _flat(items) + [(closer,)]


def _tuple_of(items):
    if not items:
        return [("EMPTY_TUPLE",)]
    return _flat(items) + [(f"TUPLE{len(items)}",)] if len(items) <= 3 else _marked(items, "TUPLE")


def _containers(values, scalars, globals_, every_opcode):
    items = st.lists(values, max_size=4)
    pairs = st.lists(st.tuples(st.one_of(scalars, values), values), max_size=3).map(lambda kv: [*sum(kv, ())])
    memo_puts = [_memo_index.map(lambda i: [("BINPUT", i)]), _memo_index.map(lambda i: [("LONG_BINPUT", i)])]
    kinds = [
        items.map(_tuple_of),
        items.map(lambda xs: _marked(xs, "TUPLE")),
        items.map(lambda xs: [("EMPTY_LIST",)] + _marked(xs, "APPENDS")),
        items.map(lambda xs: [("EMPTY_LIST",)] + _flat([x + [("APPEND",)] for x in xs])),
        pairs.map(lambda kv: [("EMPTY_DICT",)] + _marked(kv, "SETITEMS")),
        pairs.map(lambda kv: [("EMPTY_DICT",)] + _flat([kv[i] + kv[i + 1] + [("SETITEM",)]
                                                         for i in range(0, len(kv), 2)])),
        st.just([("EMPTY_SET",)]),
        st.tuples(values, st.one_of(*memo_puts)).map(lambda v: v[0] + v[1]),
        st.tuples(globals_, items).map(lambda g: g[0] + _tuple_of(g[1]) + [("REDUCE",)]),
        st.tuples(globals_, items).map(lambda g: g[0] + _tuple_of(g[1]) + [("NEWOBJ",)]),
        st.tuples(values, values).map(lambda v: v[0] + v[1] + [("BUILD",)]),
    ]
    if every_opcode:
        memo_puts += [_line(_INDEX_TEXTS).map(lambda t: [("PUT", t)]), st.just([("MEMOIZE",)])]
        kinds += [
            items.map(lambda xs: _marked(xs, "LIST")),
            pairs.map(lambda kv: _marked(kv, "DICT")),
            items.map(lambda xs: [("EMPTY_SET",)] + _marked(xs, "ADDITEMS")),
            items.map(lambda xs: _marked(xs, "FROZENSET")),
            st.tuples(values, st.one_of(*memo_puts)).map(lambda v: v[0] + v[1]),
            values.map(lambda v: v + [("DUP",), ("TUPLE2",)]),
            st.tuples(values, values).map(lambda v: v[0] + v[1] + [("POP",)]),
            st.tuples(values, values).map(lambda v: [("MARK",)] + v[0] + [("POP_MARK",)] + v[1]),
            st.tuples(globals_, items, pairs).map(
                lambda g: g[0] + _tuple_of(g[1]) + [("EMPTY_DICT",)] + _marked(g[2], "SETITEMS") + [("NEWOBJ_EX",)]),
            st.tuples(_global_names, items).map(lambda g: _marked(g[1], "INST")[:-1] + [("INST", g[0])]),
            st.tuples(globals_, items).map(lambda g: [("MARK",)] + g[0] + _flat(g[1]) + [("OBJ",)]),
            _bytes.map(lambda b: b + [("READONLY_BUFFER",)]),
        ]
    return st.one_of(*kinds)


_values = st.recursive(st.one_of(_scalars, _memo_gets, _globals),
                       lambda v: _containers(v, _scalars, _globals, every_opcode=True), max_leaves=10)
_torch_values = st.recursive(st.one_of(_torch_scalars, _torch_memo_gets, _torch_globals),
                             lambda v: _containers(v, _torch_scalars, _torch_globals, every_opcode=False),
                             max_leaves=10)

_single_ops = st.one_of(
    st.sampled_from(sorted(NO_ARGUMENT)).map(lambda name: (name,)),
    st.one_of(_scalars, _memo_gets, _globals).map(lambda ops: ops[0]),
    st.sampled_from([("EXT1", 1), ("PERSID", b"0"), ("PROTO", 4)]),
)


def _framed(ops, breaks) -> bytes:
    """Protocol 4 framing: FRAME headers before runs of whole ops. (Python's two
    unpicklers disagree on frames that end mid-opcode or past the pickle:
    test_frames_are_read_as_pickle_loads_reads_them pins tensorplay's reading.)"""
    chunks, start = [], 0
    for end in sorted({b % (len(ops) + 1) for b in breaks} | {len(ops)}):
        body = assemble(ops[start:end])
        if body:
            chunks.append(encode(("FRAME", len(body))) + body)
        start = end
    return b"".join(chunks)


@st.composite
def _pickles(draw) -> bytes:
    proto = draw(st.sampled_from([0, 1, 2, 3, 4, 5, None]))
    ops = draw(_values) + [("STOP",)]
    if draw(st.booleans()):
        ops = mutate(ops, draw(st.lists(st.tuples(st.sampled_from(MUTATIONS),
                                                   st.integers(0, 10**6), _single_ops), max_size=3)))
    head = b"" if proto is None else encode(("PROTO", proto))
    if proto is not None and proto >= 4 and draw(st.booleans()):
        return head + _framed(ops, draw(st.lists(st.integers(0, 10**6), max_size=3)))
    return head + assemble(ops)


# --- the checks -------------------------------------------------------------------

def _tensorplay_load(path, **options):
    try:
        return tensorplay.load(path, **options), None
    except tensorplay.CheckpointError as error:
        return None, error


def _compare(path: pathlib.Path, data: bytes, encoding: str = "utf-8") -> None:
    """`encoding` decodes Python 2 strings (STRING, BINSTRING, SHORT_BINSTRING), as
    pickle's and torch.load's argument of that name does."""
    expected, reference_error = reference_load(data, encoding)
    loaded, our_error = _tensorplay_load(path, backend="torch", encoding=encoding)
    if reference_error is None and not refused_on_purpose(our_error):
        assert our_error is None, f"the reference loads {expected!r}, tensorplay refuses: {our_error}"
        expected = describe(expected)
        assert_same_description(describe(loaded), expected)
        arrays, error = _tensorplay_load(path, backend="numpy", encoding=encoding)
        assert error is None, error
        assert_same_description(describe(arrays), expected)
    elif reference_error is not None:
        assert our_error is not None, f"the reference refuses it ({reference_error!r}), tensorplay loads {loaded!r}"
    if encoding == "utf-8":  # what a scan assumes
        assert (scanner.scan(path).verdict == "clean") == (our_error is None), our_error


@settings(max_examples=500, deadline=None)
@given(data=_pickles(), encoding=st.sampled_from(["utf-8", "utf-8", "latin1", "ascii", "bytes"]))
def test_random_pickles_of_every_protocol_load_as_pickle_reads_them_under_torchs_rules(data, encoding):
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        write_checkpoint(torch, path, data, {})
        _compare(path, data, encoding)


# The reference against torch itself, on the opcodes torch has.
@settings(max_examples=300, deadline=None)
@given(value=_torch_values)
def test_the_reference_loads_what_torchs_weights_only_loader_loads(value):
    if ("GLOBAL", ("builtins", "bytes")) in value or ("GLOBAL", ("__builtin__", "bytes")) in value:
        return  # the global tensorplay adds to torch's allowlist
    data = assemble([("PROTO", 2)] + value + [("STOP",)])
    expected, reference_error = reference_load(data)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder, "ckpt.pt")
        write_checkpoint(torch, path, data, {})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                theirs, torch_error = torch.load(path, weights_only=True), None
            except Exception as error:  # noqa: BLE001 - any exception is torch refusing the file
                theirs, torch_error = None, error
    assert (reference_error is None) == (torch_error is None), (reference_error, torch_error)
    if torch_error is None:
        assert_same_description(describe(expected), describe(theirs))


@pytest.mark.parametrize("data", [
    b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00M\x00\x00\x95\x02\x00\x00\x00\x00\x00\x00\x00\x85.",
    b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8f2\x86.",
])
def test_frames_are_read_apart_are_refused(data, tmp_path):
    """A frame that ends mid-opcode (pickle.loads reads through it, the pure-Python
    unpickler refuses it, the C unpickler reading a file re-reads from the frame's
    end) and one that claims more bytes than follow (pickle.loads refuses; the
    pure-Python unpickler reads what is there). Readers that read other opcodes
    may reach other globals: tensorplay refuses both, saying where."""
    path = tmp_path / "ckpt.pt"
    write_checkpoint(torch, path, data, {})
    with pytest.raises(tensorplay.MalformedCheckpointError, match="FRAME|frame"):
        tensorplay.load(path)


# Cases the random programs found, each once loaded differently from the reference.
FOUND = [
    b"\x80\x00\x96\x00\x00\x00\x00\x00\x00\x00\x00\x982\x86.",  # READONLY_BUFFER on a bytearray
    b"\x80\x00cbuiltins\nbytearray\nX\x00\x00\x00\x00\x85R.",  # bytearray('') needs an encoding
    b"\x80\x00F1_0.5\n.",  # float text with an underscore
    b"\x80\x00F \t1.5\x0b\n.",  # and with Python's whitespace
    b"\x80\x00C\x00\x98)b.",  # BUILD with an empty state on bytes
    b"\x80\x00cbuiltins\ncomplex\ncbuiltins\ncomplex\n)R\x85R.",  # complex(0j)
    b"\x80\x00cbuiltins\ncomplex\nG?\xf0\x00\x00\x00\x00\x00\x00cbuiltins\ncomplex\nK\x02K\x03\x86R\x86R.",
    b"\x80\x00c_codecs\nencode\nC\x00\x98\x85R2\x86.",  # _codecs.encode(b'')
    b"\x80\x00\x8fp1_0\ng10\n\x86.",  # memo keys as int() reads them
    b"\x80\x00\x8fp010\ng+10\n\x86.",
]


@pytest.mark.parametrize("data", FOUND)
def test_programs_found_load_as_the_reference_loads_them(data, tmp_path):
    path = tmp_path / "ckpt.pt"
    write_checkpoint(torch, path, data, {})
    _compare(path, data)


@pytest.mark.parametrize("encoding", ["utf-8", "latin1", "ascii", "bytes"])
@pytest.mark.parametrize("data", [
    b"\x80\x02U\x02\xc3\xa9.",  # SHORT_BINSTRING
    b"\x80\x01T\x02\x00\x00\x00\xc3\xa9.",  # BINSTRING
    b"S'\\xc3\\xa9'\n.",  # STRING, escaped
    b"\x80\x02U\x01\xff.",  # not UTF-8
])
def test_python2_strings_decode_as_the_encoding_says(data, encoding, tmp_path):
    path = tmp_path / "ckpt.pt"
    write_checkpoint(torch, path, data, {})
    _compare(path, data, encoding)
    if reference_load(data, encoding)[1] is None:
        assert tensorplay.load(path, encoding=encoding) == reference_load(data, encoding)[0]
