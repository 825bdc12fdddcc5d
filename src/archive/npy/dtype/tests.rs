use super::*;

fn dt(s: &str) -> Result<DType> {
    let v = super::super::literal::literal_eval(&s.chars().collect::<Vec<_>>())?;
    descr_to_dtype(&v, 0)
}

fn object(s: &str) -> bool {
    dt(s).unwrap_or_else(|e| panic!("{s}: {e:?}")).hasobject
}

#[test]
fn every_string_spelling_of_object() {
    for s in [
        "'O'",
        "'|O'",
        "'=O'",
        "'<O'",
        "'>O'",
        "'O8'",
        "'O4'",
        "'O 8'",
        "'O+8'",
        "'O08'",
        "'object'",
        "'object_'",
        "'\\x11'",
        "'T'",
        "'O,'",
        "'i4,O'",
        "'(2,)O'",
        "'2O'",
        "'|(2,)O'",
    ] {
        assert!(object(s), "{s}");
    }
    for s in [
        "'<f8'",
        "'|b1'",
        "'<U10'",
        "'|S5'",
        "'V8'",
        "'<M8[ns]'",
        "'m8[15s/4]'",
        "'a'",
        "'c'",
        "'i4,f8'",
    ] {
        assert!(!object(s), "{s}");
    }
    for s in [
        "'O16'",
        "'O0'",
        "'Object'",
        "' O'",
        "'O '",
        "'!O'",
        "'|object'",
        "''",
        "'|'",
        "'M8[x]'",
    ] {
        assert!(matches!(dt(s), Err(Fail::Refused(_))), "{s}");
    }
}

#[test]
fn structured_subarray_and_inherited_descrs() {
    assert!(!object("[('O', '<i4'), ('b', '<f8')]"));
    assert!(object("[('a', '<i4'), ('b', [('c', 'O')])]"));
    assert!(object("[(('title', 'a'), 'O')]"));
    assert!(object("[('a', 'O', (2,))]"));
    assert!(object("('O', (2,))"));
    assert!(object("('O', ())"));
    assert!(object("('V', [('a', 'O')])"));
    assert!(object("('O', [('a', 'O')])"));
    assert!(!object("('S', 'O')"));
    // Padding: a nameless void field is dropped, objects and all.
    assert!(!object("[('', 'O', (2,)), ('b', '<f8')]"));
    assert!(object("[('', 'O'), ('b', '<f8')]"));
    assert!(object("{('a', 'O'): None}"));
    assert!(object("['aO']"));
    // numpy 2.4 takes StringDType in fields and subarrays (later versions refuse it).
    assert!(object("[('a', 'T')]"));
    assert!(object("('T', 2)"));
    for s in [
        "('O', 'O')",
        "('i8', 'O')",
        "[('a', 'O'), ('a', 'i4')]",
        "()",
        "('O',)",
        "5",
        "[b'ab']",
    ] {
        assert!(matches!(dt(s), Err(Fail::Refused(_))), "{s}");
    }
}
