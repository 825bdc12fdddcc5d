use super::*;

fn eval(s: &str) -> Result<Value> {
    literal_eval(&s.chars().collect::<Vec<_>>())
}

fn s(v: &str) -> Value {
    Value::str(v)
}

#[test]
fn strings_in_every_spelling() {
    assert_eq!(eval("'O'"), Ok(s("O")));
    assert_eq!(eval("\"O\""), Ok(s("O")));
    assert_eq!(eval("'''O'''"), Ok(s("O")));
    assert_eq!(eval("r'\\x4f'"), Ok(s("\\x4f")));
    assert_eq!(eval("'\\x4f'"), Ok(s("O")));
    assert_eq!(eval("'\\117'"), Ok(s("O")));
    assert_eq!(eval("'\\u004f'"), Ok(s("O")));
    assert_eq!(eval("'\\U0000004f'"), Ok(s("O")));
    assert_eq!(eval("'|' 'O'"), Ok(s("|O")));
    assert_eq!(eval("('|'\n 'O')"), Ok(s("|O")));
    assert_eq!(eval("'|' u\"O\""), Ok(s("|O")));
    assert_eq!(eval("'a\\\nb'"), Ok(s("ab")));
    assert_eq!(eval("'\\q'"), Ok(s("\\q")));
    assert_eq!(eval("b'\\777'"), Ok(Value::Bytes(vec![0xff])));
    assert_eq!(eval("Rb'\\n'"), Ok(Value::Bytes(b"\\n".to_vec())));
    assert!(matches!(eval("'a' b'b'"), Err(Fail::Refused(_))));
    assert!(matches!(eval("f'a'"), Err(Fail::Refused(_))));
    assert!(matches!(eval("ur'a'"), Err(Fail::Refused(_))));
    assert!(matches!(eval("'a\nb'"), Err(Fail::Refused(_))));
    assert!(matches!(eval("'\\x4'"), Err(Fail::Refused(_))));
    assert!(matches!(eval("'\\N{DIGIT ONE}'"), Err(Fail::Unsure(_))));
}

#[test]
fn numbers_as_python_reads_them() {
    assert_eq!(eval("0_0"), Ok(Value::Int(Int::Small(0))));
    assert_eq!(eval("0x_1f"), Ok(Value::Int(Int::Small(31))));
    assert_eq!(eval("-(3)"), Ok(Value::Int(Int::Small(-3))));
    assert_eq!(eval("01.5"), Ok(Value::Float(1.5)));
    assert_eq!(eval("1+2j"), Ok(Value::Complex(1.0, 2.0)));
    assert_eq!(eval("(-1)+(2j)"), Ok(Value::Complex(-1.0, 2.0)));
    assert_eq!(
        eval("0x1ffffffffffffffffffffffffffffffffff"),
        Ok(Value::Int(Int::Big { negative: false }))
    );
    for bad in [
        "0777", "1__0", "1e", "1L", "--1", "-True", "1+2j+3j", "1+-2j", "1*2", "2**3",
    ] {
        assert!(matches!(eval(bad), Err(Fail::Refused(_))), "{bad}");
    }
}

#[test]
fn containers_lines_and_comments() {
    let d = eval("{'a': 1, 'a': 2, # c\n 1.0: 3, True: 4}\n\n").unwrap();
    assert_eq!(
        d,
        Value::Dict(vec![
            (s("a"), Value::Int(Int::Small(2))),
            (Value::Float(1.0), Value::Int(Int::Small(4)))
        ])
    );
    assert_eq!(eval("set()"), Ok(Value::Set(vec![])));
    assert_eq!(
        eval("{(1,), (1,)}"),
        Ok(Value::Set(vec![Value::Tuple(vec![Value::Int(
            Int::Small(1)
        )])]))
    );
    assert_eq!(
        eval("\\\n1"),
        Err(Fail::Unsure(
            "a line continuation at the start of a line".into()
        ))
    );
    assert_eq!(
        eval("  \t(1,\r2)"),
        Ok(Value::Tuple(vec![
            Value::Int(Int::Small(1)),
            Value::Int(Int::Small(2))
        ]))
    );
    assert_eq!(eval("\x0c..."), Ok(Value::Ellipsis));
    for bad in [
        "\x0c  1",
        "1\n  ",
        "1\n2",
        "{[1]: 2}",
        "{**{}}",
        "[1,,2]",
        "(1",
        "1)",
        "x",
        "1 2",
        "{1: 2, 3}",
    ] {
        assert!(matches!(eval(bad), Err(Fail::Refused(_))), "{bad:?}");
    }
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(eval(&deep(MAX_NESTING)).is_ok());
    assert!(matches!(
        eval(&deep(MAX_NESTING + 1)),
        Err(Fail::Refused(_))
    ));
}

#[test]
fn python2_long_suffixes_are_dropped_as_numpy_drops_them() {
    let filter = |t: &str| {
        drop_long_suffixes(&t.chars().collect::<Vec<_>>())
            .map(|o| o.map(|v| v.into_iter().collect::<String>()))
    };
    assert_eq!(filter("(3L, 4L)"), Ok(Some("(3 , 4 )".into())));
    assert_eq!(filter("(3 L L,)"), Ok(Some("(3    ,)".into())));
    assert_eq!(filter("('3L', 3La)"), Ok(None));
    assert_eq!(filter("(3,)"), Ok(None));
}
