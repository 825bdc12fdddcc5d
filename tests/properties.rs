//! Properties that hold for every input: the VM never panics, and what it builds
//! stays linear in the input, memo bombs and shared references included.

mod common;

use proptest::prelude::*;
use tensorplay::pickle::machine::{self, StringEncoding};
use tensorplay::scan::walker;
use tensorplay::torch::policy::FoundGlobal;
use tensorplay::torch::policy::UserGlobals;
use tensorplay::torch::Arena;
use tensorplay::torch::IdFormat;
use tensorplay::torch::{Refusals, TorchHooks};
use tensorplay::Limits;

/// Pieces of pickle that can be strung together in any order: values, containers,
/// memo operations, allowed and refused globals, calls. Any sequence is a valid
/// byte stream for the VM to judge; most are malformed, which is the point.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"N".to_vec()),
        Just(b"\x88".to_vec()),
        any::<u8>().prop_map(|v| vec![b'K', v]),
        any::<i32>().prop_map(|v| [&[b'J'][..], &v.to_le_bytes()].concat()),
        "[a-z]{0,12}".prop_map(|s| [&[0x8c, s.len() as u8][..], s.as_bytes()].concat()),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(|b| [
            &[b'C', b.len() as u8][..],
            &b
        ]
        .concat()),
        Just(b")".to_vec()),
        Just(b"]".to_vec()),
        Just(b"}".to_vec()),
        Just(b"(".to_vec()),
        Just(b"t".to_vec()),
        Just(b"l".to_vec()),
        Just(b"d".to_vec()),
        Just(b"a".to_vec()),
        Just(b"e".to_vec()),
        Just(b"s".to_vec()),
        Just(b"u".to_vec()),
        Just(b"\x85".to_vec()),
        Just(b"\x86".to_vec()),
        Just(b"\x87".to_vec()),
        Just(b"2".to_vec()),
        Just(b"0".to_vec()),
        Just(b"1".to_vec()),
        (0u8..8).prop_map(|i| vec![b'q', i]),
        (0u8..8).prop_map(|i| vec![b'h', i]),
        Just(b"\x94".to_vec()),
        Just(b"R".to_vec()),
        Just(b"\x81".to_vec()),
        Just(b"b".to_vec()),
        Just(b"\x93".to_vec()),
        Just(b"\x8f".to_vec()),
        Just(b"\x90".to_vec()),
        Just(b"\x91".to_vec()),
        Just(b"ccollections\nCounter\n".to_vec()),
        Just(b"ccollections\nOrderedDict\n".to_vec()),
        Just(b"c__builtin__\nset\n".to_vec()),
        Just(b"c_codecs\nencode\n".to_vec()),
        Just(b"ctorch\nSize\n".to_vec()),
        Just(b"cos\nsystem\n".to_vec()),
        Just(b"cbuiltins\nprint\n".to_vec()),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(token(), 0..200).prop_map(|tokens| {
        let mut out = b"\x80\x04".to_vec();
        for t in tokens {
            out.extend(t);
        }
        out.push(b'.');
        out
    })
}

fn check_linear(data: &[u8]) {
    let limits = Limits::default();
    if let Ok((arena, _)) = common::run_with(data, &limits, StringEncoding::Utf8) {
        let n = data.len() as u64;
        // Every opcode byte makes at most two values (INST/OBJ: the args and the call).
        assert!(
            arena.len() as u64 <= 2 * n + 2,
            "{} nodes from {n} bytes",
            arena.len()
        );
        // Strings are stored once; encode results and bytes(b) are shared, not copied.
        assert!(
            arena.payload_bytes() <= 2 * n,
            "{} payload bytes from {n}",
            arena.payload_bytes()
        );
        // Copies made by snapshots never outnumber the values the file spelled out.
        assert!(arena.charged() <= arena.len() as u64);
    }
}

/// Well-formed pickle values: what torch and numpy write, plus refused globals by
/// GLOBAL and by STACK_GLOBAL, memoized as picklers do. Unlike `stream`, nearly
/// every one reaches STOP, so the walk answers for them.
fn value() -> impl Strategy<Value = Vec<u8>> {
    let global = prop_oneof![
        Just(b"ccollections\nOrderedDict\n".to_vec()),
        Just(b"ctorch._utils\n_rebuild_tensor_v2\n".to_vec()),
        Just(b"cos\nsystem\n".to_vec()),
        Just(b"cbuiltins\nprint\n".to_vec()),
        Just(b"\x8c\x05posix\x8c\x06systemq\x00\x93".to_vec()),
        Just(b"\x8c\x0bcollections\x94\x8c\x07Counter\x94\x93".to_vec()),
        Just(b"\x8c\x03evil\x94h\x00\x93".to_vec()),
        Just(b"X\x05\x00\x00\x00posix\x8d\x06\x00\x00\x00\x00\x00\x00\x00system\x93".to_vec()),
        Just(b"N\x8c\x01x\x93".to_vec()),
    ];
    let leaf = prop_oneof![
        Just(b"N".to_vec()),
        any::<u8>().prop_map(|v| vec![b'K', v]),
        "[a-z.]{0,12}".prop_map(|s| [&[0x8c, s.len() as u8][..], s.as_bytes()].concat()),
        Just(b")".to_vec()),
        global,
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        let items = proptest::collection::vec(inner.clone(), 0..5);
        prop_oneof![
            items
                .clone()
                .prop_map(|v| [&b"("[..], &v.concat(), b"t"].concat()),
            items
                .clone()
                .prop_map(|v| [&b"]("[..], &v.concat(), b"e"].concat()),
            items.clone().prop_map(|v| [
                &b"}("[..],
                &v.concat(),
                if v.len() % 2 == 0 { b"u" } else { b"Nu" }
            ]
            .concat()),
            (inner.clone(), items.clone())
                .prop_map(|(f, a)| [&f[..], b"(", &a.concat(), b"tR"].concat()),
            (inner.clone(), inner.clone()).prop_map(|(o, s)| [&o[..], &s, b"b"].concat()),
            inner.clone().prop_map(|v| [&v[..], b"\x94h\x00"].concat()),
            inner.prop_map(|v| [&v[..], b"Q"].concat()),
        ]
    })
}

/// Where the opcode walk answers, the VM in scan mode reads the same pickle to
/// the same end and records the same globals at the same offsets.
fn check_walk_agrees(data: &[u8]) {
    check_walk_agrees_within(data, Limits::default());
    // Limits small enough that the walk checks them after every opcode.
    let small = Limits {
        max_stack_depth: 16,
        max_mark_depth: 8,
        max_memo_entries: 8,
        ..Limits::tight()
    };
    check_walk_agrees_within(data, small);
}

fn check_walk_agrees_within(data: &[u8], limits: Limits) {
    let user = UserGlobals::default();
    let Some(walk) = walker::walk(data, &user, &limits, true) else {
        return;
    };
    let mut hooks = TorchHooks::new(Refusals::Record, &user, limits, IdFormat::Zip);
    hooks.allowed = Some(Vec::new());
    let mut arena = Arena::new(&limits);
    let parsed = machine::run(data, &mut hooks, &mut arena, &limits, StringEncoding::Utf8);
    let parsed = parsed.unwrap_or_else(|e| panic!("the walk answered, the VM failed: {e}"));
    assert_eq!(parsed.end, walk.end);
    let names = |f: &[FoundGlobal]| -> Vec<(String, u64)> {
        f.iter().map(|g| (g.name.clone(), g.offset)).collect()
    };
    assert_eq!(names(&hooks.found), names(&walk.found));
    // And the globals inside the allowlist, which `--list-globals` shows.
    assert_eq!(
        names(&hooks.allowed.unwrap_or_default()),
        names(&walk.allowed)
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = common::run(&data);
        let _ = common::run_with(&data, &Limits::tight(), StringEncoding::Latin1);
    }

    #[test]
    fn streams_of_opcodes_never_panic_and_stay_linear(data in stream()) {
        check_linear(&data);
        let _ = tensorplay::scan::scan_bytes(&data, &tensorplay::scan::ScanOptions::default());
    }

    #[test]
    fn the_fast_globals_walk_agrees_with_the_vm(data in stream(), well_formed in value()) {
        check_walk_agrees(&data);
        let well_formed = [&b"\x80\x04"[..], &well_formed, b"."].concat();
        check_walk_agrees(&well_formed);
    }

    #[test]
    fn memo_bombs_stay_linear(depth in 1usize..60, width in 2u8..4) {
        // A list put in the memo, then `depth` levels of tuples of `width` copies.
        let mut data = b"\x80\x02]q\x00".to_vec();
        for _ in 0..depth {
            data.extend(std::iter::repeat_n(b'2', usize::from(width) - 1));
            data.push(0x84 + width);
        }
        data.push(b'.');
        check_linear(&data);
    }

    #[test]
    fn repeated_encodes_and_snapshots_are_shared_or_paid_for(repeats in 1usize..200, len in 0usize..2000) {
        // One big string encoded `repeats` times; one list copied into `repeats` sets.
        let text = "x".repeat(len);
        let mut data = b"\x80\x02(".to_vec();
        data.push(b'X');
        data.extend_from_slice(&(len as u32).to_le_bytes());
        data.extend_from_slice(text.as_bytes());
        data.extend_from_slice(b"q\x00]q\x01(K\x01K\x02K\x03e");
        for _ in 0..repeats {
            data.extend_from_slice(b"c_codecs\nencode\nh\x00X\x06\x00\x00\x00latin1\x86R");
            data.extend_from_slice(b"c__builtin__\nset\nh\x01\x85R");
        }
        data.extend_from_slice(b"t.");
        check_linear(&data);
    }
}
