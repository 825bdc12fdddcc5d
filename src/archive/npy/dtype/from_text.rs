//! numpy's dtype from a string, as `np.dtype(str)` parses it: type characters,
//! names, `typestr`s, datetime units and comma strings.

use super::*;

/// Python's str → the UTF-8 numpy reads a type string as.
pub(super) fn utf8(s: &PyStr) -> Result<Vec<u8>> {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        match char::from_u32(c) {
            Some(c) => out.push(c),
            None => return refused("a surrogate cannot be encoded in UTF-8"),
        }
    }
    Ok(out.into_bytes())
}

/// C's `strtol(s, &end, 10)` (blanks, a sign, digits): the value (saturated,
/// as `ERANGE` leaves it) and where it stopped, `None` when it read no digit.
pub(super) fn strtol(s: &[u8]) -> (i64, Option<usize>) {
    let mut i = 0;
    while s
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
    {
        i += 1;
    }
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits_start = i;
    let mut value: i64 = 0;
    while let Some(d) = s.get(i).filter(|b| b.is_ascii_digit()) {
        value = value.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        i += 1;
    }
    if i == digits_start {
        return (0, None);
    }
    (
        if negative {
            value.saturating_neg()
        } else {
            value
        },
        Some(i),
    )
}

pub(super) fn is_byteorder(b: u8) -> bool {
    matches!(b, b'>' | b'<' | b'|' | b'=')
}

/// `_check_for_commastring`: a leading digit or `()`, or a comma outside `[]`.
pub(super) fn is_commastring(t: &[u8]) -> bool {
    let at = |i: usize| t.get(i).copied().unwrap_or(0);
    if at(0).is_ascii_digit() || (t.len() > 1 && is_byteorder(at(0)) && at(1).is_ascii_digit()) {
        return true;
    }
    if (t.len() > 1 && at(0) == b'(' && at(1) == b')')
        || (t.len() > 3 && is_byteorder(at(0)) && at(1) == b'(' && at(2) == b')')
    {
        return true;
    }
    let mut sq: i64 = 0;
    for &b in t {
        match b {
            b',' if sq == 0 => return true,
            b'[' => sq += 1,
            b']' => sq -= 1,
            _ => {}
        }
    }
    false
}

/// `numpy.dtype(str)` (`_convert_from_str`).
pub fn from_str(s: &PyStr, depth: usize) -> Result<DType> {
    let full = utf8(s)?;
    if full.is_empty() {
        return refused("data type '' not understood");
    }
    if is_commastring(&full) {
        return commastring(s, depth);
    }
    let t = match full.first() {
        Some(&b) if is_byteorder(b) => full.get(1..).unwrap_or_default(),
        _ => &full[..],
    };
    if t.is_empty() {
        return refused("a byte order alone is no data type");
    }
    if is_datetime(t) {
        return datetime(t);
    }
    if let [c] = t {
        return match from_type_char(*c) {
            Some(d) => Ok(d),
            None => by_name(&full),
        };
    }
    // C reads the string up to its NUL: an embedded one ends it early.
    let c_len = t.iter().position(|b| *b == 0).unwrap_or(t.len());
    let (result, end) = strtol(t.get(1..c_len).unwrap_or_default());
    if !(0..=INT_MAX).contains(&result) {
        return refused("a data type size out of range");
    }
    let parsed = end.is_some_and(|e| e + 1 == c_len) && result <= INT_MAX;
    if parsed && c_len == t.len() {
        let kind = t.first().copied().unwrap_or(0);
        let elsize = result;
        match kind {
            b'S' => return Ok(DType::base(Family::Bytes, elsize)),
            b'U' => {
                if elsize > INT_MAX / 4 {
                    return refused("a str size out of range");
                }
                return Ok(DType::base(Family::Unicode, elsize * 4));
            }
            b'V' => return Ok(DType::base(Family::Void, elsize)),
            _ if elsize != 0 => {
                if let Some(d) = typestr_convert(elsize, kind) {
                    return Ok(d);
                }
            }
            _ => {}
        }
    } else if parsed {
        return refused("data type not understood");
    }
    by_name(&full)
}

/// `is_datetime_typestr`
pub(super) fn is_datetime(t: &[u8]) -> bool {
    (t.len() >= 2 && t.get(1) == Some(&b'8') && matches!(t.first(), Some(b'M' | b'm')))
        || t.starts_with(b"datetime64")
        || t.starts_with(b"timedelta64")
}

/// `parse_dtype_from_datetime_typestr`: never objects; plain or refused.
pub(super) fn datetime(t: &[u8]) -> Result<DType> {
    let meta = if t.starts_with(b"M8") || t.starts_with(b"m8") {
        t.get(2..)
    } else if t.starts_with(b"timedelta64") {
        t.get(11..)
    } else {
        t.get(10..)
    }
    .unwrap_or_default();
    let bad = || {
        refused(format!(
            "invalid datetime metadata {:?}",
            String::from_utf8_lossy(t)
        ))
    };
    if meta.is_empty() {
        return Ok(DType::base(Family::Datetime, 8));
    }
    if meta.len() < 3 || meta.first() != Some(&b'[') {
        return bad();
    }
    let Some(close) = meta.iter().skip(1).position(|b| *b == b']').map(|p| p + 1) else {
        return bad();
    };
    if close == 1 || close + 1 != meta.len() {
        return bad();
    }
    // The C string goes on past the unit (to `]`, then NUL).
    let inner_c = meta.get(1..).unwrap_or_default();
    let inner_len = close - 1;
    let (num, num_end) = strtol(inner_c);
    let unit_start = match num_end {
        Some(e) if e <= inner_len => {
            if !(0..=INT_MAX).contains(&num) {
                return bad();
            }
            e
        }
        Some(_) => return bad(),
        None => 0,
    };
    let rest = inner_c.get(unit_start..inner_len).unwrap_or_default();
    let slash = rest.iter().position(|b| *b == b'/');
    let unit = rest.get(..slash.unwrap_or(rest.len())).unwrap_or_default();
    let base = match unit {
        b"Y" => 0,
        b"M" => 1,
        b"W" => 2,
        b"D" => 4,
        b"h" => 5,
        b"m" => 6,
        b"s" => 7,
        b"ms" => 8,
        b"us" | b"\xce\xbcs" => 9,
        b"ns" => 10,
        b"ps" => 11,
        b"fs" => 12,
        b"as" => 13,
        b"generic" => 14,
        _ => return bad(),
    };
    let Some(slash) = slash else {
        return Ok(DType::base(Family::Datetime, 8));
    };
    let after = rest.get(slash + 1..).unwrap_or_default();
    let (den, den_end) = strtol(inner_c.get(unit_start + slash + 1..).unwrap_or_default());
    if den_end != Some(after.len()) {
        return bad();
    }
    if den == 1 {
        return Ok(DType::base(Family::Datetime, 8));
    }
    if base == 14 || den == 0 {
        return refused("a divisor with generic units, or of zero");
    }
    let tries: &[i64] = match base {
        0 => &[12, 52, 365],
        1 => &[4, 30, 720],
        2 => &[7, 168, 10080, 0],
        4 => &[24, 1440, 86400],
        5 | 6 => &[60, if base == 5 { 3600 } else { 60000 }],
        12 => &[1000],
        13 => &[],
        _ => &[1000, 1_000_000],
    };
    if tries.iter().any(|t| t % den == 0) {
        Ok(DType::base(Family::Datetime, 8))
    } else {
        refused("a datetime divisor that divides no smaller unit")
    }
}

/// Python's `str.isspace`, which `re`'s `\s` matches.
pub(super) fn py_isspace(c: u32) -> bool {
    char::from_u32(c).is_some_and(|c| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// numpy's `_commastring` then `_convert_from_list` or `_convert_from_tuple`:
/// `'O,i4'`, `'(2,)O'`, `'2O'`.
pub(super) fn commastring(s: &PyStr, depth: usize) -> Result<DType> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let is = |i: usize, c: char| i < s.len() && at(i) == u32::from(c);
    let order_at = |i: usize| -> usize {
        usize::from(
            i < s.len()
                && [
                    u32::from('<'),
                    u32::from('>'),
                    u32::from('|'),
                    u32::from('='),
                ]
                .contains(&at(i)),
        )
    };
    let mut start = 0;
    let mut items: Vec<(PyStr, Option<PyStr>)> = Vec::new();
    let mut islist = false;
    while start < s.len() {
        // format_re: order1, repeats ` *[(]?[ ,0-9]*[)]? *`, order2, dtype.
        let mut i = start;
        let o1 = order_at(i);
        let order1 = s.get(i..i + o1).map(<[u32]>::to_vec).unwrap_or_default();
        i += o1;
        let rep_start = i;
        while is(i, ' ') {
            i += 1;
        }
        if is(i, '(') {
            i += 1;
        }
        while i < s.len()
            && (at(i) == u32::from(' ')
                || at(i) == u32::from(',')
                || (u32::from('0')..=u32::from('9')).contains(&at(i)))
        {
            i += 1;
        }
        if is(i, ')') {
            i += 1;
        }
        while is(i, ' ') {
            i += 1;
        }
        let repeats = s.get(rep_start..i).map(<[u32]>::to_vec).unwrap_or_default();
        let o2 = order_at(i);
        let order2 = s.get(i..i + o2).map(<[u32]>::to_vec).unwrap_or_default();
        i += o2;
        let dt_start = i;
        let name_char = |c: u32| {
            char::from_u32(c).is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '?')
        };
        while i < s.len() && name_char(at(i)) {
            i += 1;
        }
        if is(i, '[') {
            let mut j = i + 1;
            let inner = |c: u32| {
                char::from_u32(c).is_some_and(|c| c.is_ascii_alphanumeric() || c == ',' || c == '.')
            };
            while j < s.len() && inner(at(j)) {
                j += 1;
            }
            if j > i + 1 && is(j, ']') {
                i = j + 1;
            }
        }
        let mut dtype = s.get(dt_start..i).map(<[u32]>::to_vec).unwrap_or_default();
        start = i;
        if start < s.len() {
            if s.get(start..)
                .unwrap_or_default()
                .iter()
                .all(|c| py_isspace(*c))
            {
                start = s.len();
            } else {
                let mut j = start;
                while j < s.len() && py_isspace(at(j)) {
                    j += 1;
                }
                if !is(j, ',') {
                    return refused("a comma-separated dtype string with an unrecognised format");
                }
                j += 1;
                while j < s.len() && py_isspace(at(j)) {
                    j += 1;
                }
                start = j;
                islist = true;
            }
        }
        let native = |o: &[u32]| -> PyStr {
            if o == [u32::from('=')] {
                vec![u32::from('<')]
            } else {
                o.to_vec()
            }
        };
        let order = if order2.is_empty() {
            order1
        } else if order1.is_empty() {
            order2
        } else {
            if native(&order1) != native(&order2) {
                return refused("inconsistent byte-order specification");
            }
            native(&order1)
        };
        if !(order.is_empty()
            || order == [u32::from('|')]
            || order == [u32::from('=')]
            || order == [u32::from('<')])
        {
            let mut with_order = order;
            with_order.extend(dtype);
            dtype = with_order;
        }
        items.push((dtype, (!repeats.is_empty()).then_some(repeats)));
    }
    let item = |(dtype, repeats): &(PyStr, Option<PyStr>)| -> Result<DType> {
        match repeats {
            None => from_str(dtype, depth + 1),
            Some(r) => {
                let text: Vec<char> = r.iter().filter_map(|c| char::from_u32(*c)).collect();
                let shape = crate::archive::npy::literal::literal_eval(&text)?;
                let base = from_str(dtype, depth + 1)?;
                dtype_tuple(base, &shape, depth + 1)
            }
        }
    };
    if !islist {
        return match items.first() {
            Some(first @ (_, Some(_))) => item(first),
            _ => refused("_commastring gave a str, which numpy refuses"),
        };
    }
    // `_convert_from_list` drops one trailing empty string.
    if items
        .last()
        .is_some_and(|(d, r)| d.is_empty() && r.is_none())
    {
        items.pop();
    }
    if items.is_empty() {
        return refused("Expected at least one field name");
    }
    let mut total: i64 = 0;
    let mut hasobject = false;
    for it in &items {
        let d = item(it)?;
        total = total.saturating_add(d.elsize);
        hasobject |= d.hasobject;
    }
    if total > INT_MAX {
        return unsure("a structured dtype whose size overflows a C int");
    }
    Ok(DType {
        family: Family::Void,
        elsize: total,
        hasobject,
        fields: Some((items.len(), false)),
        metadata: false,
    })
}
