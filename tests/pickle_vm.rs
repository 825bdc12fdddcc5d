//! The pickle VM, opcode by opcode, with the byte streams Python's pickler writes.

mod common;

use common::{eval, fail, limit_name, run, run_with};
use tensorplay::error::ErrorKind;
use tensorplay::error::Refusal;
use tensorplay::pickle::machine::StringEncoding;
use tensorplay::pickle::opcodes;
use tensorplay::{Error, Limits};

fn refusal(e: &Error) -> &Refusal {
    match e.kind() {
        ErrorKind::Unsafe(refusal) => refusal,
        _ => panic!("expected a refusal, got {e}"),
    }
}

fn is_malformed(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Pickle { .. })
}

#[test]
fn constants_and_protocol() {
    assert_eq!(eval(b"\x80\x02N."), "None");
    assert_eq!(eval(b"\x80\x02\x88."), "True");
    assert_eq!(eval(b"\x80\x02\x89."), "False");
    // PROTO is optional, and its number is read past as torch reads past it.
    assert_eq!(eval(b"K\x07."), "7");
    assert_eq!(eval(b"\x80\x06N."), "None");
    assert_eq!(eval(b"\x80\xfdN."), "None");
}

#[test]
fn binary_ints() {
    assert_eq!(eval(b"K\xff."), "255");
    assert_eq!(eval(b"M\xff\xff."), "65535");
    assert_eq!(eval(b"J\xd4\xfe\xff\xff."), "-300");
    // LONG1: empty is 0, two's complement, sign extension trimmed.
    assert_eq!(eval(b"\x8a\x00."), "0");
    assert_eq!(eval(b"\x8a\x01\xff."), "-1");
    assert_eq!(eval(b"\x8a\x06\x00\x00\x00\x00\x00\x01."), "1099511627776");
    assert_eq!(
        eval(b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\xff."),
        "-9223372036854775808"
    );
    assert_eq!(
        eval(b"\x8a\x0d\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\x00."),
        "bigint(000000000000000000000010)"
    );
    // LONG4 with a negative count is malformed; a huge one is truncation.
    assert!(is_malformed(&fail(b"\x8b\xff\xff\xff\xff.")));
    assert!(is_malformed(&fail(b"\x8b\xff\xff\xff\x7f.")));
}

#[test]
fn text_ints_floats_and_bools() {
    assert_eq!(eval(b"I42\n."), "42");
    assert_eq!(eval(b"I01\n."), "True");
    assert_eq!(eval(b"I00\n."), "False");
    assert_eq!(
        eval(b"I99999999999999999999999\n."),
        "99999999999999999999999"
    );
    assert_eq!(eval(b"L-5L\n."), "-5");
    assert_eq!(eval(b"F0.25\n."), "0.25");
    assert_eq!(eval(b"Finf\n."), "inf");
    assert_eq!(eval(b"G?\xd0\x00\x00\x00\x00\x00\x00."), "0.25");
    assert!(is_malformed(&fail(b"Ix\n.")));
    assert!(is_malformed(&fail(b"F1.5")));
}

#[test]
fn unicode_strings() {
    assert_eq!(eval(b"X\x03\x00\x00\x00abc."), "\"abc\"");
    assert_eq!(eval(b"\x8c\x02\xc3\xa9."), "\"é\"");
    assert_eq!(eval(b"\x8d\x01\x00\x00\x00\x00\x00\x00\x00z."), "\"z\"");
    assert_eq!(eval(b"Va\\u00e9\n."), "\"aé\"");
    // surrogatepass: a lone surrogate is accepted, invalid UTF-8 is not.
    assert!(run(b"X\x03\x00\x00\x00\xed\xa0\x80.").is_ok());
    assert!(is_malformed(&fail(b"X\x01\x00\x00\x00\xff.")));
    // A length beyond the data is truncation, not an allocation.
    assert!(is_malformed(&fail(b"X\xff\xff\xff\xff.")));
    assert!(is_malformed(&fail(
        b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff."
    )));
}

#[test]
fn python2_strings_follow_the_encoding() {
    let short = b"U\x03h\xc3\xa9.";
    assert_eq!(eval(short), "\"hé\"");
    let latin1 = run_with(short, &Limits::default(), StringEncoding::Latin1).unwrap();
    assert_eq!(common::render::render(&latin1.0, latin1.1), "\"hÃ©\"");
    let bytes = run_with(short, &Limits::default(), StringEncoding::Bytes).unwrap();
    assert_eq!(common::render::render(&bytes.0, bytes.1), "b'68c3a9'");
    assert!(run_with(short, &Limits::default(), StringEncoding::Ascii).is_err());
    assert_eq!(eval(b"T\x02\x00\x00\x00ab."), "\"ab\"");
    assert_eq!(eval(b"S'a\\nb'\n."), "\"a\\nb\"");
    assert!(is_malformed(&fail(b"Sabc\n.")));
}

#[test]
fn bytes_and_bytearrays() {
    assert_eq!(eval(b"C\x02\x00\xff."), "b'00ff'");
    assert_eq!(eval(b"B\x01\x00\x00\x00a."), "b'61'");
    assert_eq!(eval(b"\x8e\x01\x00\x00\x00\x00\x00\x00\x00a."), "b'61'");
    assert_eq!(
        eval(b"\x96\x01\x00\x00\x00\x00\x00\x00\x00a."),
        "bytearray(b'61')"
    );
}

#[test]
fn tuples() {
    assert_eq!(eval(b")."), "()");
    assert_eq!(eval(b"K\x01\x85."), "(1,)");
    assert_eq!(eval(b"K\x01K\x02\x86."), "(1, 2)");
    assert_eq!(eval(b"K\x01K\x02K\x03\x87."), "(1, 2, 3)");
    assert_eq!(eval(b"(K\x01K\x02K\x03K\x04t."), "(1, 2, 3, 4)");
    assert!(is_malformed(&fail(b"K\x01\x86.")));
    // Items below a MARK are out of reach, as in pickle.
    assert!(is_malformed(&fail(b"K\x01(\x85.")));
}

#[test]
fn lists() {
    assert_eq!(eval(b"]K\x01a."), "[1]");
    assert_eq!(eval(b"](K\x01K\x02e."), "[1, 2]");
    assert_eq!(eval(b"(K\x01K\x02l."), "[1, 2]");
    let e = fail(b")K\x01a.");
    assert!(matches!(refusal(&e), Refusal::Forbidden(m) if m.contains("Can only append to lists")));
}

#[test]
fn dicts() {
    assert_eq!(eval(b"}K\x01K\x02s."), "{1: 2}");
    assert_eq!(eval(b"}(K\x01K\x02K\x03K\x04u."), "{1: 2, 3: 4}");
    assert_eq!(eval(b"(K\x01K\x02d."), "{1: 2}");
    assert!(is_malformed(&fail(b"}(K\x01u.")));
    let e = fail(b"]K\x01K\x02s.");
    assert!(matches!(refusal(&e), Refusal::Forbidden(m) if m.contains("Can only SETITEM")));
}

#[test]
fn sets_and_frozensets() {
    assert_eq!(eval(b"\x8f(K\x01K\x02\x90."), "set{1, 2}");
    assert_eq!(eval(b"(K\x01\x91."), "frozenset{1}");
    assert!(matches!(fail(b"](K\x01\x90.").kind(), ErrorKind::Unsafe(_)));
}

#[test]
fn memo_and_stack_manipulation() {
    // BINPUT/BINGET share one object: appending through either shows in both.
    assert_eq!(eval(b"]q\x00h\x00K\x01a\x86."), "([1], [1])");
    assert_eq!(
        eval(b"]r\x00\x01\x00\x00j\x00\x01\x00\x00\x86."),
        "([], [])"
    );
    assert_eq!(eval(b"]p7\ng7\n\x86."), "([], [])");
    assert_eq!(eval(b"]\x94h\x00\x86."), "([], [])");
    assert!(is_malformed(&fail(b"h\x05.")));
    assert_eq!(eval(b"K\x01K\x020."), "1");
    assert_eq!(eval(b"K\x01(K\x02K\x031."), "1");
    assert_eq!(eval(b"K\x012\x86."), "(1, 1)");
    // A huge memo index is a map entry, not an allocation.
    assert_eq!(eval(b"Nr\xff\xff\xff\xffj\xff\xff\xff\xff."), "None");
}

#[test]
fn stop_frame_and_buffers() {
    assert!(is_malformed(&fail(b".")));
    assert!(is_malformed(&fail(b"N")));
    // Trailing bytes after STOP are not interpreted, as in torch.
    assert_eq!(eval(b"N.garbage"), "None");
    assert_eq!(
        eval(b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00N."),
        "None"
    );
    assert!(is_malformed(&fail(
        b"\x95\xff\x00\x00\x00\x00\x00\x00\x00N."
    )));
    assert!(is_malformed(&fail(b"\x97.")));
    assert_eq!(eval(b"C\x01a\x98."), "b'61'");
}

#[test]
fn unknown_opcodes_name_their_byte_and_offset() {
    let e = fail(b"N\xff.");
    let text = e.to_string();
    assert!(text.contains("unknown opcode 0xff"), "{text}");
    assert!(text.contains("byte offset 1"), "{text}");
    for op in 0u8..=255 {
        if opcodes::info(op).is_none() {
            assert!(is_malformed(&fail(&[op, b'.'])), "byte {op:#x}");
        }
    }
}

#[test]
fn globals_resolve_against_the_allowlist_only() {
    assert_eq!(eval(b"ctorch\nfloat16\n."), "torch.float16");
    assert_eq!(eval(b"c__builtin__\nset\n."), "builtins.set");
    let e = fail(b"cos\nsystem\n.");
    assert!(matches!(refusal(&e), Refusal::BlockedGlobal { module, .. } if module == "os"));
    let e = fail(b"cbuiltins\nprint\n.");
    assert!(matches!(refusal(&e), Refusal::UnsupportedGlobal { name, .. } if name == "print"));
    assert!(e
        .to_string()
        .contains("GLOBAL print was not an allowed global"));
    // STACK_GLOBAL takes its names from the stack, memo included.
    assert_eq!(
        eval(b"\x8c\x05torch\x94\x8c\x04Size\x94\x93."),
        "torch.Size"
    );
    let e = fail(b"\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93.");
    assert!(matches!(refusal(&e), Refusal::BlockedGlobal { .. }));
    assert!(is_malformed(&fail(b"K\x01K\x02\x93.")));
    // torch's aliases are not names.
    assert!(matches!(
        fail(b"ctorch\nfloat\n.").kind(),
        ErrorKind::Unsafe(_)
    ));
}

#[test]
fn extension_codes_are_refused() {
    for code in [
        &b"\x82\x01."[..],
        b"\x83\x01\x00.",
        b"\x84\x01\x00\x00\x00.",
    ] {
        assert!(matches!(
            refusal(&fail(code)),
            Refusal::ExtensionCode { code: 1 }
        ));
    }
}

#[test]
fn reduce_calls_allowlisted_callables_only() {
    assert_eq!(eval(b"ctorch\nSize\nK\x02K\x03\x86\x85R."), "Size([2, 3])");
    assert_eq!(
        eval(b"ctorch\ndevice\nX\x04\x00\x00\x00cudaK\x01\x86R."),
        "device(cuda:1)"
    );
    assert_eq!(eval(b"c__builtin__\ncomplex\nG?\xf0\x00\x00\x00\x00\x00\x00G@\x00\x00\x00\x00\x00\x00\x00\x86R."), "(1.0+2.0j)");
    assert_eq!(
        eval(b"c_codecs\nencode\nX\x02\x00\x00\x00\xc3\xbfX\x06\x00\x00\x00latin1\x86R."),
        "b'ff'"
    );
    assert_eq!(eval(b"c__builtin__\nset\n]K\x01a\x85R."), "set{}");
    assert_eq!(eval(b"c__builtin__\nbytes\n)R."), "b''");
    // A dtype is not callable; calling a non-global is refused.
    assert!(matches!(
        fail(b"ctorch\nfloat32\n)R.").kind(),
        ErrorKind::Unsafe(_)
    ));
    assert!(matches!(fail(b"K\x01)R.").kind(), ErrorKind::Unsafe(_)));
    // torch.Tensor(n) would allocate uninitialised memory.
    assert!(matches!(
        fail(b"ctorch\nTensor\nK\x05\x85R.").kind(),
        ErrorKind::Unsafe(_)
    ));
}

#[test]
fn inst_and_obj_call_their_class() {
    assert_eq!(eval(b"(K\x02K\x03\x86itorch\nSize\n."), "Size([2, 3])");
    assert_eq!(eval(b"(ctorch\nSize\nK\x02\x85o."), "Size([2])");
    assert!(matches!(
        refusal(&fail(b"(ios\nsystem\n.")),
        Refusal::BlockedGlobal { .. }
    ));
}

#[test]
fn newobj_and_build_follow_torchs_rules() {
    // NEWOBJ of OrderedDict, then BUILD with the state dict (how state dicts keep _metadata).
    assert_eq!(
        eval(b"ccollections\nOrderedDict\n)\x81}X\x01\x00\x00\x00aK\x01sb."),
        "OrderedDict{}"
    );
    // Other allowlisted types build as pickle builds them: an empty state sets
    // nothing; a set has no attributes to set.
    assert_eq!(eval(b"cbuiltins\nset\n)R}b."), "set{}");
    let e = fail(b"cbuiltins\nset\n)R}X\x01\x00\x00\x00aK\x01sb.");
    assert!(
        e.to_string().contains("cannot set attributes of a set"),
        "{e}"
    );
    let e = fail(b"}}b.");
    assert!(matches!(refusal(&e), Refusal::Forbidden(m) if m.contains("<class 'dict'>")));
    let e = fail(b"ctorch\nfloat32\n)\x81.");
    assert!(
        matches!(refusal(&e), Refusal::Forbidden(m) if m.contains("Can only create new object"))
    );
    assert_eq!(
        eval(b"ctorch.nn.parameter\nParameter\n)}\x92."),
        "tensor<Discriminant(6)>"
    );
}

#[test]
fn persistent_ids_must_be_storages() {
    let storage = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ.";
    assert_eq!(eval(storage), "storage#0");
    assert!(matches!(
        refusal(&fail(b"X\x01\x00\x00\x00xQ.")),
        Refusal::Forbidden(_)
    ));
    assert!(
        matches!(refusal(&fail(b"(X\x03\x00\x00\x00fooK\x01tQ.")), Refusal::Forbidden(m) if m.contains("storage"))
    );
    assert!(matches!(refusal(&fail(b"P0\n.")), Refusal::Forbidden(_)));
}

const TENSOR_PREFIX: &[u8] = b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x06tQ";

fn tensor_pickle(rest: &[u8]) -> Vec<u8> {
    let mut p = TENSOR_PREFIX.to_vec();
    p.extend_from_slice(rest);
    p
}

#[test]
fn rebuild_tensor_checks_the_extent_against_the_storage() {
    let hooks = b"\x89ccollections\nOrderedDict\n)RtR.";
    let ok = tensor_pickle(&[&b"K\x00K\x02K\x03\x86K\x03K\x01\x86"[..], hooks].concat());
    assert_eq!(eval(&ok), "tensor(float32 s0 +0 [2, 3] [3, 1])");
    for bad in [
        &b"K\x01K\x02K\x03\x86K\x03K\x01\x86"[..], // offset 1 reaches past 6 elements
        b"K\x00K\x03K\x03\x86K\x03K\x01\x86",      // 3x3 does not fit
        b"J\xff\xff\xff\xffK\x02\x85K\x01\x85",    // negative offset
        b"K\x00K\x02\x85J\xff\xff\xff\xff\x85",    // negative stride
        b"K\x00K\x02K\x02\x86K\x01\x85",           // stride of the wrong rank
    ] {
        let e = fail(&tensor_pickle(&[bad, hooks].concat()));
        assert!(matches!(e.kind(), ErrorKind::Tensor { .. }), "{e}");
    }
}

#[test]
fn every_limit_is_enforced_and_named() {
    let tight = |f: fn(&mut Limits)| {
        let mut l = Limits::default();
        f(&mut l);
        l
    };
    let cases: Vec<(Limits, Vec<u8>, &str)> = vec![
        (
            tight(|l| l.max_nodes = 3),
            b"NNNN\x87.".to_vec(),
            "max_nodes",
        ),
        (
            tight(|l| l.max_payload_bytes = 4),
            b"X\x05\x00\x00\x00abcde.".to_vec(),
            "max_payload_bytes",
        ),
        (
            tight(|l| l.max_stack_depth = 2),
            b"NNN.".to_vec(),
            "max_stack_depth",
        ),
        (
            tight(|l| l.max_mark_depth = 2),
            b"(((N.".to_vec(),
            "max_mark_depth",
        ),
        (
            tight(|l| l.max_memo_entries = 1),
            b"Nq\x00q\x01.".to_vec(),
            "max_memo_entries",
        ),
        (
            tight(|l| l.max_container_len = 2),
            b"(NNNl.".to_vec(),
            "max_container_len",
        ),
        (
            tight(|l| l.max_ndim = 1),
            tensor_pickle(b"K\x00K\x02K\x03\x86K\x03K\x01\x86\x89ccollections\nOrderedDict\n)RtR."),
            "max_ndim",
        ),
        (
            tight(|l| l.max_pickle_bytes = 2),
            b"NN.".to_vec(),
            "max_pickle_bytes",
        ),
    ];
    for (limits, data, name) in cases {
        let e = run_with(&data, &limits, StringEncoding::Utf8).expect_err(name);
        assert_eq!(limit_name(&e), name);
        assert!(e.to_string().contains(name));
    }
    let mut storages = Vec::new();
    storages.extend_from_slice(b"(");
    for key in [b'0', b'1'] {
        storages
            .extend_from_slice(b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00");
        storages.extend_from_slice(&[key]);
        storages.extend_from_slice(b"X\x03\x00\x00\x00cpuK\x01tQ");
    }
    storages.extend_from_slice(b"t.");
    let limits = Limits {
        max_storages: 1,
        ..Limits::default()
    };
    assert_eq!(
        limit_name(&run_with(&storages, &limits, StringEncoding::Utf8).unwrap_err()),
        "max_storages"
    );
}

#[test]
fn a_million_levels_of_nesting_neither_overflow_nor_drop_recursively() {
    let depth = 1_000_000;
    let mut data = Vec::with_capacity(depth * 2 + 2);
    data.extend(std::iter::repeat_n(b']', depth));
    data.extend(std::iter::repeat_n(b'a', depth - 1));
    data.push(b'.');
    let (arena, _) = run(&data).unwrap();
    assert_eq!(arena.len(), depth);
    drop(arena);
    let mut tuples = vec![b'N'];
    tuples.extend(std::iter::repeat_n(0x85u8, depth));
    tuples.push(b'.');
    assert!(run(&tuples).is_ok());
}

#[test]
fn memo_bombs_stay_linear() {
    // One list referenced 2**20 times through nested tuples: a few bytes per level,
    // one node per level, no copies.
    let mut data = b"]q\x00".to_vec();
    for _ in 0..20 {
        data.extend_from_slice(b"2\x86");
    }
    data.push(b'.');
    let (arena, _) = run(&data).unwrap();
    assert!(arena.len() <= 21);
}

#[test]
fn numpy_arrays_are_built_from_their_bytes_and_object_arrays_refused() {
    // np.arange(2, dtype='<i4') as numpy pickles it under protocol 3.
    let dtype = b"cnumpy\ndtype\nX\x02\x00\x00\x00i4\x89\x88\x87R(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb";
    let head = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R(K\x01K\x02\x85";
    let array = |data: &[u8]| [&head[..], &dtype[..], b"\x89", data, b"tb."].concat();
    assert_eq!(
        eval(&array(b"C\x08\x00\x00\x00\x00\x01\x00\x00\x00")),
        "ndarray(<i4 [2])"
    );
    assert!(matches!(
        fail(&array(b"C\x04\x00\x00\x00\x00")).kind(),
        ErrorKind::Tensor { .. }
    ));
    assert!(matches!(fail(&array(b"]")).kind(), ErrorKind::Unsafe(_)));
    assert!(matches!(
        fail(b"cnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87R.").kind(),
        ErrorKind::Unsafe(_)
    ));
    assert!(matches!(
        fail(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nmatrix\nK\x00\x85C\x01b\x87R.").kind(),
        ErrorKind::Unsafe(_)
    ));
}

#[test]
fn reference_counts_say_how_many_values_use_each_node() {
    use tensorplay::value::refs::MANY;
    use tensorplay::value::Node;

    let count = |data: &[u8]| {
        let c = tensorplay::raw::open_pickle(
            data,
            "t",
            &tensorplay::checkpoint::LoadOptions::default(),
        )
        .expect("loads");
        (c.references.clone(), c)
    };
    // ([s, s], t), s memoized: the list uses s twice; the root is used by none.
    let (refs, c) = count(b"\x80\x02]q\x00(X\x01\x00\x00\x00aq\x01h\x01eX\x01\x00\x00\x00b\x86.");
    let Node::Tuple(items) = c.arena.get(c.root) else {
        panic!("a tuple")
    };
    let [list, t] = c.arena.items(*items) else {
        panic!("two items")
    };
    let Node::List(s) = c.arena.get(*list) else {
        panic!("a list")
    };
    assert_eq!(refs[c.root.index()], 0);
    assert_eq!((refs[list.index()], refs[t.index()]), (1, 1));
    assert_eq!((s[0], refs[s[0].index()]), (s[1], 2));
    // (d, Counter(d)): the snapshot uses d, and reads d's items again without
    // a reference of its own, so they are never let go.
    let (refs, c) =
        count(b"\x80\x02}q\x00X\x01\x00\x00\x00kK\x01sccollections\nCounter\nh\x00\x85R\x86.");
    let Node::Tuple(items) = c.arena.get(c.root) else {
        panic!("a tuple")
    };
    let [d, _] = c.arena.items(*items) else {
        panic!("two items")
    };
    let (k, v) = c.arena.as_dict(*d).expect("a dict").items[0];
    // The root, the snapshot, and the argument tuple (d,): a bare pickle's arena
    // is not compacted, and a user no walk reaches only keeps a value longer.
    assert_eq!(refs[d.index()], 3);
    assert_eq!((refs[k.index()], refs[v.index()]), (MANY, MANY));
}

#[test]
fn values_python_has_one_object_for_share_one_node_and_every_use_still_counts() {
    // (0, 0, (), (), None, None, True, True, 257, 257), protocol 2.
    let data = b"\x80\x02(K\x00K\x00))NN\x88\x88M\x01\x01M\x01\x01t.";
    let (arena, root) = run(data).expect("loads");
    let items = arena.tuple(root).expect("a tuple").to_vec();
    assert_eq!(items.len(), 10);
    for pair in items.chunks_exact(2).take(4) {
        assert_eq!(
            pair[0],
            pair[1],
            "one node for {}",
            arena.get(pair[0]).kind_name()
        );
    }
    assert_ne!(
        items[8], items[9],
        "257 is outside CPython's small-int cache"
    );
    assert_eq!(
        eval(data),
        "(0, 0, (), (), None, None, True, True, 257, 257)"
    );
    // Eleven values (the ten items and the tuple), as before they were shared.
    let limits = |max_nodes| Limits {
        max_nodes,
        ..Limits::default()
    };
    assert!(run_with(data, &limits(11), StringEncoding::Utf8).is_ok());
    let e = run_with(data, &limits(10), StringEncoding::Utf8).expect_err("over max_nodes");
    assert_eq!(limit_name(&e), "max_nodes");
}

#[test]
fn equal_torch_sizes_share_one_node() {
    // (Size((2, 3)), Size((2, 3)), Size((3, 2))), protocol 2.
    let data = b"\x80\x02ctorch\nSize\nq\x00K\x02K\x03\x86\x85Rh\x00K\x02K\x03\x86\x85Rh\x00K\x03K\x02\x86\x85R\x87.";
    let (arena, root) = run(data).expect("loads");
    let [a, b, c] = arena.tuple(root).expect("a tuple") else {
        panic!("three items")
    };
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_eq!(eval(data), "(Size([2, 3]), Size([2, 3]), Size([3, 2]))");
}
