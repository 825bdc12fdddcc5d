use super::*;

/// Counts what reaches it; each value is its opcode's offset.
#[derive(Default)]
struct Ops(Vec<String>);

impl<'a> Interpret<'a, usize> for Ops {
    fn op(&mut self, d: &mut Decoder<'a, usize>, op: Op<'a, usize>) -> Result<(), Error> {
        self.0.push(format!("{op:?}"));
        match op {
            Op::Tuple { start } | Op::List { start } => d.truncate(start),
            _ => {}
        }
        d.push(d.op_offset())
    }
}

fn run(pickle: &[u8]) -> Result<(usize, Vec<String>), Error> {
    let mut ops = Ops::default();
    let root = Decoder::new(pickle, &Limits::default()).run(&mut ops)?;
    Ok((root, ops.0))
}

#[test]
fn stack_mark_and_memo_opcodes_never_reach_the_interpreter() {
    // PROTO 2, MARK, NONE, PUT 0 (text), POP, GET 0, BINPUT 1, LIST, STOP
    let (root, ops) = run(b"\x80\x02(Np0\n0g0\nq\x01l.").unwrap();
    assert_eq!(ops, ["None", "List { start: 0 }"]);
    assert_eq!(root, 13);
}

#[test]
fn malformed_input_is_an_error_naming_the_opcode() {
    let e = run(b"(0.").unwrap_err().to_string();
    assert!(e.contains("STOP with an empty stack"), "{e}");
    let e = run(b"N\xff.").unwrap_err().to_string();
    assert!(e.contains("unknown opcode 0xff"), "{e}");
    assert!(e.contains("byte offset 1"), "{e}");
    let e = run(b"h\x05.").unwrap_err().to_string();
    assert!(
        e.contains("memo key 5 not found") && e.contains("BINGET"),
        "{e}"
    );
    let e = run(b"N").unwrap_err().to_string();
    assert!(e.contains("no STOP opcode"), "{e}");
}

#[test]
fn a_pickle_is_measured_by_what_it_reads() {
    let limits = Limits {
        max_pickle_bytes: 3,
        ..Limits::default()
    };
    // The first pickle stops within the limit; what follows it is not read.
    let mut ops = Ops::default();
    assert!(Decoder::new(b"NN.NNNN", &limits).run(&mut ops).is_ok());
    let e = Decoder::new(b"NNNN.", &limits)
        .run(&mut Ops::default())
        .unwrap_err();
    assert!(e.is_limit(), "{e}");
}

#[test]
fn the_stack_limit_is_charged_on_every_push() {
    let limits = Limits {
        max_stack_depth: 2,
        ..Limits::default()
    };
    let e = Decoder::new(b"NNN.", &limits)
        .run(&mut Ops::default())
        .unwrap_err();
    assert!(e.is_limit(), "{e}");
}
