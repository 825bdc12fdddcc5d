//! Numbers as CPython 3.11.7 reads them in a tar archive: `int()` of a header's
//! octal text and of a PAX record's decimal text, and GNU's base-256 fields.
//!
//! Values are kept as `i128`, clamped to a little over ±[`HUGE`]: every seek
//! or read tarfile makes with a number past that fails alike, however large
//! Python's int is. Only its remainder modulo [`KEPT_MODULUS`] still shows (in
//! `copyfileobj`'s copy of a negative count), so the clamp keeps it.

/// Magnitude past which a number is "too large for any file": every seek, read
/// or allocation with it fails the same way in CPython.
pub const HUGE: i128 = 1 << 100;

/// What a clamped number still agrees with the real one modulo: 16 KiB
/// (`copyfileobj`'s buffer), and so 512 (a block) too.
pub const KEPT_MODULUS: i128 = 16 * 1024;

/// CPython's `sys.int_max_str_digits` default: `int()` of a decimal text with
/// more digits raises `ValueError` (power-of-two bases have no such limit).
const MAX_STR_DIGITS: usize = 4300;

/// `value` if its magnitude is at most [`HUGE`], else [`HUGE`] plus the
/// magnitude's remainder modulo [`KEPT_MODULUS`], with `value`'s sign: the same
/// remainders as `value`, and as far past any file.
pub fn clamp(value: i128) -> i128 {
    if (-HUGE..=HUGE).contains(&value) {
        return value;
    }
    let magnitude = HUGE + value.abs() % KEPT_MODULUS;
    if value < 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// `tarfile.nti`: a header's number field. `None` is tarfile's
/// `InvalidHeaderError`.
pub fn nti(field: &[u8]) -> Option<i128> {
    match field.first() {
        Some(&first @ (0o200 | 0o377)) => {
            let digits = field.get(1..).unwrap_or_default();
            // At most 11 bytes: below 2^88.
            let n = digits.iter().fold(0i128, |n, b| (n << 8) | i128::from(*b));
            Some(if first == 0o377 {
                n - (1i128 << (8 * digits.len()))
            } else {
                n
            })
        }
        // `nts(s, "ascii", "strict")`, then `int(s.strip() or "0", 8)`.
        Some(_) => {
            let text = until_nul(field);
            if !text.is_ascii() {
                return None;
            }
            let stripped = strip_str_whitespace(text);
            if stripped.is_empty() {
                Some(0)
            } else {
                int_ascii(stripped, 8)
            }
        }
        // `s[0]` of an empty slice: only a short sparse block gets here, and
        // its caller raises IndexError first.
        None => None,
    }
}

/// `tarfile.nts`: the bytes before the first NUL.
pub fn until_nul(field: &[u8]) -> &[u8] {
    match field.iter().position(|b| *b == 0) {
        Some(end) => field.get(..end).unwrap_or_default(),
        None => field,
    }
}

/// `str.strip()` on ASCII text: Python's `str.isspace` also counts the
/// separators 0x1c-0x1f, which `int()` itself does not skip.
fn strip_str_whitespace(text: &[u8]) -> &[u8] {
    let space = |b: &u8| matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f | b' ');
    let start = text.iter().position(|b| !space(b)).unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| !space(b))
        .map_or(start, |e| e + 1);
    text.get(start..end).unwrap_or_default()
}

/// `int(text)` of a `bytes` object (base 10): ASCII only.
pub fn int_bytes(text: &[u8]) -> Option<i128> {
    int_ascii(text, 10)
}

/// `int(text)` of a `str` decoded from `raw` (base 10), as tarfile decodes PAX
/// values: UTF-8, or with `surrogateescape` when that fails, whose lone
/// surrogates no `int()` accepts. Non-ASCII whitespace and decimal digits of
/// any script count, as CPython maps them to ASCII first.
pub fn int_str(raw: &[u8]) -> Option<i128> {
    let text = std::str::from_utf8(raw).ok()?;
    if text.is_ascii() {
        return int_ascii(text.as_bytes(), 10);
    }
    // `_PyUnicode_TransformDecimalAndSpaceToASCII`: below 127 as is, then
    // whitespace and decimal digits; the first other character ends the text
    // as a '?', which no int has.
    let mut ascii = Vec::with_capacity(text.len());
    for c in text.chars() {
        let mapped = match u32::from(c) {
            code @ 0..=126 => u8::try_from(code).ok(),
            _ if is_unicode_space(c) => Some(b' '),
            _ => decimal_value(c).map(|d| b'0' + d),
        };
        match mapped {
            Some(b) => ascii.push(b),
            None => return None,
        }
    }
    int_ascii(&ascii, 10)
}

/// `PyLong_FromString` on the whole of `text` (a NUL inside is an error): ASCII
/// whitespace around, a sign, base 8's `0o` prefix (then one underscore),
/// digits with single underscores between them.
fn int_ascii(text: &[u8], base: u32) -> Option<i128> {
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut rest = text;
    while let [b, tail @ ..] = rest {
        if !space(*b) {
            break;
        }
        rest = tail;
    }
    let negative = match rest {
        [b'+', tail @ ..] => {
            rest = tail;
            false
        }
        [b'-', tail @ ..] => {
            rest = tail;
            true
        }
        _ => false,
    };
    if base == 8 {
        if let [b'0', b'o' | b'O', tail @ ..] = rest {
            rest = tail.strip_prefix(b"_").unwrap_or(tail);
        }
    }
    if rest.first() == Some(&b'_') {
        return None;
    }
    let mut value: i128 = 0;
    let mut digits = 0usize;
    let mut previous = 0u8;
    let mut used = 0usize;
    for &b in rest {
        if b == b'_' {
            if previous == b'_' {
                return None;
            }
        } else {
            match char::from(b).to_digit(base) {
                Some(d) => {
                    digits += 1;
                    value = clamp(value.saturating_mul(i128::from(base)) + i128::from(d));
                }
                None => break,
            }
        }
        previous = b;
        used += 1;
    }
    if previous == b'_' || digits == 0 || (base == 10 && digits > MAX_STR_DIGITS) {
        return None;
    }
    let tail = rest.get(used..).unwrap_or_default();
    if !tail.iter().all(|b| space(*b)) {
        return None;
    }
    Some(if negative { -value } else { value })
}

/// Python's `str.isspace` above ASCII (Unicode 14.0, CPython 3.11's database).
fn is_unicode_space(c: char) -> bool {
    matches!(
        u32::from(c),
        0x85 | 0xa0 | 0x1680 | 0x2000..=0x200a | 0x2028 | 0x2029 | 0x202f | 0x205f | 0x3000
    )
}

/// The first digit (zero) of every run of ten decimal digits above ASCII, in
/// Unicode 14.0 (CPython 3.11's `unicodedata.decimal`).
const DECIMAL_ZEROS: [u32; 65] = [
    0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66, 0xDE6,
    0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90, 0x1B50,
    0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

fn decimal_value(c: char) -> Option<u8> {
    let code = u32::from(c);
    let run = DECIMAL_ZEROS.partition_point(|zero| *zero <= code);
    let zero = DECIMAL_ZEROS.get(run.checked_sub(1)?)?;
    u8::try_from(code - zero).ok().filter(|d| *d < 10)
}

/// `TarInfo._block`: `count` rounded up to whole 512-byte blocks (Python's
/// floor division, so a negative count rounds towards zero blocks).
pub fn block(count: i128) -> i128 {
    let blocks = count.div_euclid(512) + i128::from(count.rem_euclid(512) != 0);
    blocks * 512
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_fields_read_as_python_int_reads_them() {
        assert_eq!(nti(b"0000644\0"), Some(0o644));
        assert_eq!(nti(b"  644 \0\0"), Some(0o644));
        assert_eq!(
            nti(b"\x1c644\x1f\0"),
            Some(0o644),
            "str.strip() skips 0x1c-0x1f"
        );
        assert_eq!(nti(b"6\x1c44\0"), None);
        assert_eq!(nti(b"-17\0"), Some(-0o17));
        assert_eq!(nti(b"+0o_17\0"), Some(0o17));
        assert_eq!(nti(b"1_7\0"), Some(0o17));
        assert_eq!(nti(b"1__7\0"), None);
        assert_eq!(nti(b"17_\0"), None);
        assert_eq!(nti(b"_17\0"), None);
        assert_eq!(nti(b"8\0"), None);
        assert_eq!(
            nti(b"\0garbage"),
            Some(0),
            "cut at the first NUL, empty is 0"
        );
        assert_eq!(nti(b"        "), Some(0));
        assert_eq!(nti(b"7\xff\0"), None, "not ASCII");
        assert_eq!(nti(b"7\0\xff"), Some(7), "past the NUL is not read");
        assert_eq!(nti(b"0x7\0"), None);
    }

    #[test]
    fn base_256_fields_are_big_endian_and_signed() {
        assert_eq!(nti(b"\x80\0\0\0\0\0\x01\x00"), Some(256));
        assert_eq!(nti(b"\xff\xff\xff\xff\xff\xff\xff\xff"), Some(-1));
        let mut twelve = [0xffu8; 12];
        twelve[0] = 0o200;
        assert_eq!(nti(&twelve), Some((1i128 << 88) - 1));
    }

    #[test]
    fn decimal_text_reads_as_python_int_reads_a_str() {
        assert_eq!(int_str(b"42"), Some(42));
        assert_eq!(int_str(b" -4_2\n"), Some(-42));
        assert_eq!(int_str("\u{661}\u{662}".as_bytes()), Some(12));
        assert_eq!(int_str("\u{a0}7\u{3000}".as_bytes()), Some(7));
        assert_eq!(int_str(b"\x1c7"), None);
        assert_eq!(int_str(b"0o7"), None);
        assert_eq!(int_str(b"7\0"), None);
        assert_eq!(int_str(b"\xff7"), None);
        assert_eq!(int_str("7\u{10ffff}".as_bytes()), None);
        // Past HUGE, the remainders modulo 16 KiB are the real number's.
        assert_eq!(int_str("1".repeat(4300).as_bytes()), Some(HUGE + 12743));
        assert_eq!(int_str("1".repeat(4301).as_bytes()), None);
        let minus_60_nines = int_str(format!("-{}", "9".repeat(60)).as_bytes());
        assert_eq!(minus_60_nines, Some(-HUGE - 16383));
        assert_eq!(minus_60_nines.map(|n| n.rem_euclid(KEPT_MODULUS)), Some(1));
        assert_eq!(
            int_bytes("\u{661}".as_bytes()),
            None,
            "bytes are ASCII only"
        );
    }

    #[test]
    fn blocks_round_as_python_divmod_does() {
        assert_eq!(block(0), 0);
        assert_eq!(block(1), 512);
        assert_eq!(block(512), 512);
        assert_eq!(block(-1), 0);
        assert_eq!(block(-512), -512);
        assert_eq!(block(-513), -512);
    }
}
