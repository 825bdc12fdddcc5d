//! Decoding of the text forms pickle uses: UTF-8 with lone surrogates
//! (`surrogatepass`), protocol 0's escaped strings and raw-unicode-escape, and
//! Python int literals.

/// Does `bytes` decode as UTF-8 under Python's `surrogatepass` error handler?
/// That is UTF-8 where the encoded surrogates U+D800..U+DFFF are also accepted.
pub fn is_utf8_surrogatepass(bytes: &[u8]) -> bool {
    // Checkpoint strings (keys, dtypes, devices) are ASCII: a word-at-a-time
    // check costs a third of validating UTF-8 on strings this short.
    if bytes.is_ascii() || std::str::from_utf8(bytes).is_ok() {
        return true;
    }
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let width = match b {
            0x00..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return false,
        };
        let Some(seq) = bytes.get(i..i + width) else {
            return false;
        };
        let surrogate =
            width == 3 && b == 0xed && seq.get(1).is_some_and(|c| (0xa0..=0xbf).contains(c));
        if surrogate {
            if !seq.iter().skip(1).all(|c| (0x80..=0xbf).contains(c)) {
                return false;
            }
        } else if std::str::from_utf8(seq).is_err() {
            return false;
        }
        i += width;
    }
    true
}

/// Append a code point as UTF-8, surrogates included (as `surrogatepass` encodes them).
fn push_code_point(out: &mut Vec<u8>, cp: u32) -> bool {
    if let Some(c) = char::from_u32(cp) {
        let mut buf = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        true
    } else if (0xd800..=0xdfff).contains(&cp) {
        out.push(0xe0 | (cp >> 12) as u8);
        out.push(0x80 | ((cp >> 6) & 0x3f) as u8);
        out.push(0x80 | (cp & 0x3f) as u8);
        true
    } else {
        false
    }
}

/// Latin-1 bytes to UTF-8.
pub fn latin1_to_utf8(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        push_code_point(&mut out, u32::from(b));
    }
    out
}

/// Python's `raw_unicode_escape` decoding (protocol 0's UNICODE opcode): `\uXXXX` and
/// `\UXXXXXXXX` are escapes, every other byte is a Latin-1 character.
pub fn raw_unicode_escape(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let digits = match (b, bytes.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                push_code_point(&mut out, u32::from(b));
                i += 1;
                continue;
            }
        };
        // An odd run of backslashes before `u` escapes; Python counts them, and so do we.
        let preceding = bytes
            .get(..i)
            .unwrap_or_default()
            .iter()
            .rev()
            .take_while(|c| **c == b'\\')
            .count();
        if preceding % 2 == 1 {
            push_code_point(&mut out, u32::from(b));
            i += 1;
            continue;
        }
        let hex = bytes.get(i + 2..i + 2 + digits)?;
        let text = std::str::from_utf8(hex).ok()?;
        if !text.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let cp = u32::from_str_radix(text, 16).ok()?;
        if !push_code_point(&mut out, cp) {
            return None;
        }
        i += 2 + digits;
    }
    Some(out)
}

/// Python's `escape_decode` of a quoted protocol 0 STRING body (`\n`, `\x41`, `\101`...).
pub fn escape_decode(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let &c = bytes.get(i)?;
        i += 1;
        match c {
            b'\n' => {}
            b'\\' => out.push(b'\\'),
            b'\'' => out.push(b'\''),
            b'"' => out.push(b'"'),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'x' => {
                let hex = bytes.get(i..i + 2)?;
                let text = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(text, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut value = u32::from(c - b'0');
                for _ in 0..2 {
                    match bytes.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            value = value * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((value & 0xff) as u8);
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Some(out)
}

/// The whitespace Python strips from bytes it parses as a number.
fn strip_python_space(text: &str) -> &str {
    text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'))
}

/// Python's `float(text)`: surrounding whitespace, underscores between digits, and
/// `inf`, `infinity` and `nan` in any case, each with a sign.
pub fn parse_float_literal(text: &str) -> Option<f64> {
    let t = strip_python_space(text);
    let bytes = t.as_bytes();
    let digit_at = |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
    let underscores_ok = bytes
        .iter()
        .enumerate()
        .all(|(i, b)| *b != b'_' || (digit_at(i.checked_sub(1)) && digit_at(Some(i + 1))));
    if !underscores_ok {
        return None;
    }
    t.replace('_', "").parse().ok()
}

/// A memo key as Python's `int(text)` reads it (base 10: leading zeros, a sign and
/// underscores between digits allowed); `None` if it is not one or is negative.
pub fn parse_memo_key(text: &str) -> Option<u64> {
    let (negative, digits) = split_sign(strip_python_space(text));
    if !valid_digits(digits, 10) {
        return None;
    }
    let value: u64 = digits.replace('_', "").parse().ok()?;
    (!negative || value == 0).then_some(value)
}

fn split_sign(t: &str) -> (bool, &str) {
    match (t.strip_prefix('-'), t.strip_prefix('+')) {
        (Some(rest), _) => (true, rest),
        (_, Some(rest)) => (false, rest),
        _ => (false, t),
    }
}

/// Digits of `radix` with single underscores between them, as Python's int() takes.
fn valid_digits(digits: &str, radix: u32) -> bool {
    !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.chars().all(|c| c == '_' || c.is_digit(radix))
}

/// A Python int literal as `int(text, 0)` reads it, when it fits in i64. `Err(())`
/// means the text is no int literal at all; `Ok(None)` a valid literal beyond i64.
#[allow(clippy::result_unit_err)]
pub fn parse_int_literal(text: &str) -> Result<Option<i64>, ()> {
    let (negative, body) = split_sign(strip_python_space(text));
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else {
        (10, lower.as_str())
    };
    let digits = digits
        .strip_prefix('_')
        .filter(|_| radix != 10)
        .unwrap_or(digits);
    let valid = valid_digits(digits, radix);
    // Python refuses leading zeros in a non-zero decimal literal ("010").
    let leading_zero = radix == 10
        && digits.len() > 1
        && digits.starts_with('0')
        && digits.chars().any(|c| c != '0' && c != '_');
    if !valid || leading_zero {
        return Err(());
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude = match i128::from_str_radix(&clean, radix) {
        Ok(m) => m,
        Err(_) => return Ok(None),
    };
    let value = if negative { -magnitude } else { magnitude };
    Ok(i64::try_from(value).ok())
}

/// A memo index from which the C unpickler's memo array (16 bytes an index, made
/// at once) is too big to allocate on an ordinary machine: it fails where the
/// Python unpickler, whose memo is a dict, reads on.
pub const HUGE_MEMO_KEY: u32 = 1 << 26;

/// Why CPython's unpicklers (the C and the Python one, 3.9 to 3.14) read the text
/// argument `line` of opcode `op` (INT, LONG, FLOAT, PUT, GET) differently, if
/// they do: one accepts what another refuses, or they read another value.
pub fn readers_disagree(op: u8, line: &str) -> Option<&'static str> {
    use crate::pickle::opcodes::{FLOAT, GET, INT, LONG, PUT};
    // C copies the line into a NUL-terminated buffer and reads up to the NUL.
    if line.contains('\0') {
        return Some("a NUL byte in a text argument (the C unpickler reads up to it)");
    }
    let t = strip_python_space(line);
    let (_, body) = split_sign(t);
    match op {
        INT | LONG => {
            let body = if op == LONG {
                body.strip_suffix('L').unwrap_or(body)
            } else {
                body
            };
            if op == INT && matches!(line, "00" | "01") {
                return None;
            }
            let lower = body.to_ascii_lowercase();
            if ["0x", "0o", "0b"].iter().any(|p| lower.starts_with(p)) {
                return Some("a prefixed int literal (3.14 reads base 10 only)");
            }
            let digits = lower.trim_start_matches('0');
            if op == INT
                && lower.starts_with('0')
                && digits.starts_with(|c: char| c.is_ascii_digit())
            {
                return Some("an int literal with a leading zero (octal for C, refused by Python)");
            }
            // C makes any two-character INT worth 0 or 1 a bool; Python only `00`/`01`.
            let small = matches!(parse_int_literal(line), Ok(Some(0 | 1)));
            if op == INT && line.len() == 2 && small && !matches!(line, "00" | "01") {
                return Some("a two-character INT the C unpickler reads as a bool");
            }
            None
        }
        FLOAT => {
            let bare = line.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\x0b' | '\x0c'));
            if line.contains('_') || bare.len() != line.len() {
                return Some("a FLOAT with underscores or blanks (refused by the C unpickler)");
            }
            let literal = matches!(body.to_ascii_lowercase().as_str(), "inf" | "infinity");
            if parse_float_literal(line).is_some_and(f64::is_infinite) && !literal {
                return Some("a FLOAT that overflows (infinity for Python, an error for C)");
            }
            None
        }
        PUT | GET => match parse_memo_key(line) {
            Some(key) if key >= u64::from(HUGE_MEMO_KEY) => {
                Some("a memo key the C unpickler cannot allocate")
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_and_memo_key_text_reads_as_pythons_float_and_int() {
        assert_eq!(parse_float_literal(" 1_0.5\x0b"), Some(10.5));
        assert_eq!(parse_float_literal("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(parse_float_literal("nan").is_some_and(f64::is_nan));
        for bad in ["1__0", "_1", "1_", "1._5", "", "0x1p3", "\u{a0}1"] {
            assert_eq!(parse_float_literal(bad), None, "{bad:?}");
        }
        assert_eq!(parse_memo_key("010"), Some(10));
        assert_eq!(parse_memo_key(" +1_0 "), Some(10));
        assert_eq!(parse_memo_key("-0"), Some(0));
        for bad in ["-1", "0x1", "1__0", "", "x"] {
            assert_eq!(parse_memo_key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn surrogatepass_accepts_lone_surrogates_only() {
        assert!(is_utf8_surrogatepass("héllo ✓ 😀".as_bytes()));
        assert!(is_utf8_surrogatepass(b"\xed\xa0\x80"));
        assert!(!is_utf8_surrogatepass(b"\xff"));
        assert!(!is_utf8_surrogatepass(b"\xc3"));
        assert!(!is_utf8_surrogatepass(b"\xed\xa0"));
    }

    #[test]
    fn raw_unicode_escape_matches_python() {
        assert_eq!(
            raw_unicode_escape(br"a\u00e9\U0001F600").unwrap(),
            "aé😀".as_bytes()
        );
        assert_eq!(raw_unicode_escape(b"\xe9").unwrap(), "é".as_bytes());
        assert_eq!(
            raw_unicode_escape(br"\\u0041").unwrap(),
            br"\\u0041".to_vec()
        );
        assert!(raw_unicode_escape(br"\u12").is_none());
        assert!(raw_unicode_escape(br"\U00110000").is_none());
    }

    #[test]
    fn escape_decode_matches_python() {
        assert_eq!(
            escape_decode(br"a\n\x41\101\\\'").unwrap(),
            b"a\nAA\\'".to_vec()
        );
        assert!(escape_decode(br"\x4").is_none());
        assert_eq!(escape_decode(br"\q").unwrap(), br"\q".to_vec());
    }

    #[test]
    fn text_the_two_unpicklers_read_apart_is_named() {
        use crate::pickle::opcodes::{FLOAT, GET, INT, LONG, PUT};
        for (op, line) in [
            (INT, "010"),
            (INT, "+1"),
            (INT, " 1"),
            (INT, "-0"),
            (INT, "1\0zz"),
            (INT, "0x10"),
            (LONG, "7\0zL"),
            (FLOAT, "1_0.5"),
            (FLOAT, " 1.5"),
            (FLOAT, "1e500"),
            (PUT, "99999999999"),
        ] {
            assert!(readers_disagree(op, line).is_some(), "{op} {line:?}");
        }
        for (op, line) in [
            (INT, "00"),
            (INT, "01"),
            (INT, "42"),
            (INT, "1_0"),
            (LONG, "123L"),
            (LONG, "010L"),
            (FLOAT, "1.5"),
            (FLOAT, "inf"),
            (FLOAT, "-Infinity"),
            (GET, "7"),
            (PUT, " +7"),
        ] {
            assert_eq!(readers_disagree(op, line), None, "{op} {line:?}");
        }
    }

    #[test]
    fn int_literals_follow_int_base_0() {
        assert_eq!(parse_int_literal("42"), Ok(Some(42)));
        assert_eq!(parse_int_literal(" -0x10 "), Ok(Some(-16)));
        assert_eq!(parse_int_literal("1_000"), Ok(Some(1000)));
        assert_eq!(parse_int_literal("0"), Ok(Some(0)));
        assert_eq!(parse_int_literal("00"), Ok(Some(0)));
        assert_eq!(parse_int_literal("010"), Err(()));
        assert_eq!(parse_int_literal("abc"), Err(()));
        assert_eq!(parse_int_literal("99999999999999999999999"), Ok(None));
    }
}
