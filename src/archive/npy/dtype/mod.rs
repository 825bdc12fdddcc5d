//! numpy 2.4's `descr_to_dtype` (`numpy.lib.format`) and the parts of
//! `numpy.dtype(...)` it reaches (`descriptor.c`), as far as one question needs:
//! does the dtype hold objects (`dtype.hasobject`), which is when `numpy.load`
//! unpickles the file. Sizes and kinds are kept because they decide what numpy
//! accepts: a subarray's size must fit a C int, `(old, new)` tuples must agree
//! in size, and `(void, new)` takes the new dtype's flags wholesale.
//!
//! Every spelling of the object dtype numpy 2.4.6 accepts as a string was found
//! by asking it (the tables below; `tests/test_npy_model.py` checks them):
//! `O`, `O4`, `O8` (with blanks or a sign before the size, as `strtol` reads
//! it), `object`, `object_`, byte-order prefixes, the type number `\x11`, the
//! StringDType `T` (which numpy pickles too), and comma strings and subarray
//! prefixes that hold any of them.

use super::literal::{Fail, Int, Key, PyStr, Result, Value};

mod from_text;

pub use from_text::from_str;

/// How deep `descr_to_dtype` and `numpy.dtype` recurse into a descr: the
/// literal's own nesting is capped at [`super::literal::MAX_NESTING`]; this
/// bounds the model's recursion independently of that.
pub const MAX_DTYPE_DEPTH: usize = 2 * super::literal::MAX_NESTING + 8;

/// numpy's largest number of dimensions (`NPY_MAXDIMS`).
const MAX_DIMS: usize = 64;

const INT_MAX: i64 = i32::MAX as i64;

fn refused<T>(why: impl Into<String>) -> Result<T> {
    Err(Fail::Refused(why.into()))
}

fn unsure<T>(why: impl Into<String>) -> Result<T> {
    Err(Fail::Unsure(why.into()))
}

/// What numpy's type number says about a dtype, for the rules below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// kind `O`
    Object,
    /// `T`: numpy 2's variable-width strings, not a legacy dtype.
    StringDType,
    /// `V`: raw bytes, structured dtypes and subarrays.
    Void,
    Bytes,
    Unicode,
    Datetime,
    Number,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DType {
    pub family: Family,
    /// `itemsize`: numpy keeps it in a C int.
    pub elsize: i64,
    /// `NPY_ITEM_HASOBJECT`: what `dtype.hasobject` reads.
    pub hasobject: bool,
    /// Its fields (`names` is set) and whether its only field is of kind `O`.
    pub fields: Option<(usize, bool)>,
    /// Whether it has a metadata dict (from a dict spec with `metadata`).
    pub metadata: bool,
}

impl DType {
    fn base(family: Family, elsize: i64) -> DType {
        DType {
            family,
            elsize,
            hasobject: matches!(family, Family::Object | Family::StringDType),
            fields: None,
            metadata: false,
        }
    }

    /// `PyDataType_ISUNSIZED`: `S0`, `U0`, `V0` (and zero-size subarrays).
    fn is_unsized(&self) -> bool {
        self.elsize == 0 && self.fields.is_none()
    }

    /// What `descr_to_dtype` drops as padding: a void without fields.
    fn is_padding(&self) -> bool {
        self.family == Family::Void && self.fields.is_none()
    }
}

/// The builtin dtypes by type number (`_builtin_descrs`), 0 to 23.
const BY_NUMBER: [(Family, i64); 24] = {
    use Family::*;
    [
        (Number, 1),
        (Number, 1),
        (Number, 1),
        (Number, 2),
        (Number, 2),
        (Number, 4),
        (Number, 4),
        (Number, 8),
        (Number, 8),
        (Number, 8),
        (Number, 8),
        (Number, 4),
        (Number, 8),
        (Number, 16),
        (Number, 8),
        (Number, 16),
        (Number, 32),
        (Object, 8),
        (Bytes, 0),
        (Unicode, 0),
        (Void, 0),
        (Datetime, 8),
        (Datetime, 8),
        (Number, 2),
    ]
};

/// `PyArray_DescrFromType` for a one-character type code (after any byte order):
/// small values are type numbers, letters are type characters.
fn from_type_char(c: u8) -> Option<DType> {
    use Family::*;
    if let Some(&(family, elsize)) = BY_NUMBER.get(usize::from(c)) {
        return Some(DType::base(family, elsize));
    }
    let (family, elsize) = match c {
        b'?' | b'b' | b'B' => (Number, 1),
        b'h' | b'H' | b'e' => (Number, 2),
        b'i' | b'I' | b'f' => (Number, 4),
        b'l' | b'L' | b'q' | b'Q' | b'n' | b'N' | b'p' | b'P' | b'd' | b'F' => (Number, 8),
        b'g' | b'D' => (Number, 16),
        b'G' => (Number, 32),
        b'O' => (Object, 8),
        b'T' => (StringDType, 16),
        b'S' => (Bytes, 0),
        b'c' => (Bytes, 1),
        b'U' => (Unicode, 0),
        b'V' => (Void, 0),
        b'M' | b'm' => (Datetime, 8),
        _ => return None,
    };
    Some(DType::base(family, elsize))
}

/// `np.sctypeDict`'s names (what `numpy.dtype(name)` looks up last), with the
/// dtype each gives. Only `object` and `object_` hold objects.
const NAMES: [(&str, Family, i64); 52] = {
    use Family::*;
    [
        ("a", Bytes, 0),
        ("bool", Number, 1),
        ("bool_", Number, 1),
        ("byte", Number, 1),
        ("bytes", Bytes, 0),
        ("bytes_", Bytes, 0),
        ("cdouble", Number, 16),
        ("clongdouble", Number, 32),
        ("complex", Number, 16),
        ("complex128", Number, 16),
        ("complex256", Number, 32),
        ("complex64", Number, 8),
        ("csingle", Number, 8),
        ("datetime64", Datetime, 8),
        ("double", Number, 8),
        ("float", Number, 8),
        ("float128", Number, 16),
        ("float16", Number, 2),
        ("float32", Number, 4),
        ("float64", Number, 8),
        ("half", Number, 2),
        ("int", Number, 8),
        ("int16", Number, 2),
        ("int32", Number, 4),
        ("int64", Number, 8),
        ("int8", Number, 1),
        ("int_", Number, 8),
        ("intc", Number, 4),
        ("intp", Number, 8),
        ("long", Number, 8),
        ("longdouble", Number, 16),
        ("longlong", Number, 8),
        ("object", Object, 8),
        ("object_", Object, 8),
        ("short", Number, 2),
        ("single", Number, 4),
        ("str", Unicode, 0),
        ("str_", Unicode, 0),
        ("timedelta64", Datetime, 8),
        ("ubyte", Number, 1),
        ("uint", Number, 8),
        ("uint16", Number, 2),
        ("uint32", Number, 4),
        ("uint64", Number, 8),
        ("uint8", Number, 1),
        ("uintc", Number, 4),
        ("uintp", Number, 8),
        ("ulong", Number, 8),
        ("ulonglong", Number, 8),
        ("unicode", Unicode, 0),
        ("ushort", Number, 2),
        ("void", Void, 0),
    ]
};

/// The names and type characters the model knows, for the differential test.
pub fn known_names() -> impl Iterator<Item = &'static str> {
    NAMES.iter().map(|(name, _, _)| *name)
}

fn by_name(s: &[u8]) -> Result<DType> {
    match NAMES.iter().find(|(name, _, _)| name.as_bytes() == s) {
        Some(&(_, family, elsize)) => Ok(DType::base(family, elsize)),
        None => refused(format!(
            "data type {:?} not understood",
            String::from_utf8_lossy(s)
        )),
    }
}

/// `PyArray_TypestrConvert`: a kind letter and a size (x86-64's long double).
fn typestr_convert(elsize: i64, kind: u8) -> Option<DType> {
    use Family::*;
    let ok = match kind {
        b'b' => elsize == 1,
        b'i' | b'u' => matches!(elsize, 1 | 2 | 4 | 8),
        b'f' => matches!(elsize, 2 | 4 | 8 | 16),
        b'c' => matches!(elsize, 8 | 16 | 32),
        b'O' => matches!(elsize, 4 | 8),
        _ => false,
    };
    if !ok {
        return None;
    }
    Some(match kind {
        b'O' => DType::base(Object, 8),
        _ => DType::base(Number, elsize),
    })
}

/// A Python value as a C int (`PyArray_PyIntAsInt`): ints only, not bools.
fn c_int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(Int::Small(i)) if (i128::from(i32::MIN)..=i128::from(i32::MAX)).contains(i) => {
            Ok(*i as i64)
        }
        _ => refused("an integer is required"),
    }
}

/// `PyArray_IntpConverter`: an int or a sequence of ints (not bools).
fn intp_dims(v: &Value) -> Result<Vec<i64>> {
    let one = |v: &Value| -> Result<i64> {
        match v {
            Value::Int(Int::Small(i)) => {
                i64::try_from(*i).or_else(|_| refused("Maximum allowed dimension exceeded"))
            }
            Value::Int(Int::Big { .. }) => refused("Maximum allowed dimension exceeded"),
            _ => refused("expected a sequence of integers or a single integer"),
        }
    };
    let items: Vec<Value> = match v {
        Value::None => return refused("Use () not None as shape arguments"),
        Value::Tuple(items) | Value::List(items) => items.clone(),
        Value::Str(s) => s.iter().map(|c| Value::Str(vec![*c])).collect(),
        Value::Bytes(b) => b
            .iter()
            .map(|b| Value::Int(Int::Small(i128::from(*b))))
            .collect(),
        other => return Ok(vec![one(other)?]),
    };
    if items.len() > MAX_DIMS {
        return refused("maximum supported dimension exceeded");
    }
    items.iter().map(one).collect()
}

/// `numpy.dtype((base, val))` with `base` a dtype (`_convert_from_tuple`).
pub fn dtype_tuple(base: DType, val: &Value, depth: usize) -> Result<DType> {
    if depth > MAX_DTYPE_DEPTH {
        return refused("maximum recursion depth exceeded");
    }
    let ints =
        matches!(val, Value::Tuple(items) if items.iter().all(|i| matches!(i, Value::Int(_))));
    if !ints {
        // `(old, new)`: the second item read as a dtype, if it is one.
        match raw_dtype(val, depth + 1) {
            Err(Fail::Unsure(why)) => return unsure(why),
            Err(Fail::Refused(_)) => {}
            Ok(conv)
                if base.family == Family::StringDType || conv.family == Family::StringDType => {}
            Ok(conv) => return inherit(base, &conv),
        }
    }
    if base.is_unsized() {
        let mut size = c_int(val).or_else(|_| refused("invalid itemsize in generic type tuple"))?;
        if base.family == Family::Unicode {
            size = if size > INT_MAX / 4 { -1 } else { size * 4 };
        }
        if size < 0 {
            return refused("invalid itemsize in generic type tuple");
        }
        return Ok(DType {
            elsize: size,
            ..base
        });
    }
    if base.metadata && matches!(val, Value::Dict(_)) {
        return unsure("a metadata dict merged into a dtype");
    }
    let dims = intp_dims(val).or_else(|_| refused("invalid shape in fixed-type tuple"))?;
    if dims.is_empty() && matches!(val, Value::Tuple(_)) {
        return Ok(base);
    }
    let mut items: i64 = 1;
    for d in &dims {
        if !(0..=INT_MAX).contains(d) {
            return refused("invalid shape in fixed-type tuple");
        }
        items = items.saturating_mul(*d);
    }
    let nbytes = if items > INT_MAX {
        None
    } else {
        base.elsize.checked_mul(items).filter(|n| *n <= INT_MAX)
    };
    let Some(nbytes) = nbytes else {
        return refused(
            "invalid shape in fixed-type tuple: dtype size in bytes must fit into a C int",
        );
    };
    Ok(DType {
        family: Family::Void,
        elsize: nbytes,
        hasobject: base.hasobject,
        fields: None,
        metadata: false,
    })
}

/// `_try_convert_from_inherit_tuple` once the new dtype was read.
fn inherit(base: DType, conv: &DType) -> Result<DType> {
    let mut new = base.clone();
    if new.is_unsized() {
        new.elsize = conv.elsize;
    } else if new.elsize != conv.elsize {
        return refused("mismatch in size of old and new data-descriptor");
    } else if new.hasobject || conv.hasobject {
        // Only `('O', [('name', 'O')])` may hold objects.
        let ok = new.fields.is_none()
            && new.family == Family::Object
            && matches!(conv.fields, Some((1, true)));
        if !ok {
            return refused("dtypes of the form (old_dtype, new_dtype) containing the object dtype are not supported");
        }
    }
    if conv.fields.is_some() {
        new.fields = conv.fields;
    }
    new.metadata |= conv.metadata;
    if new.family == Family::Void {
        new.hasobject = conv.hasobject;
    }
    Ok(new)
}

/// `numpy.dtype(v)` for a value straight from the header (`_convert_from_any`).
fn raw_dtype(v: &Value, depth: usize) -> Result<DType> {
    if depth > MAX_DTYPE_DEPTH {
        return refused("maximum recursion depth exceeded");
    }
    match v {
        Value::None => Ok(DType::base(Family::Number, 8)),
        Value::Str(s) => from_str(s, depth),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => from_str(&s.chars().map(u32::from).collect(), depth),
            Err(_) => refused("data type not understood"),
        },
        Value::Tuple(items) => match items.as_slice() {
            [first, second] => {
                let base = raw_dtype(first, depth + 1)?;
                dtype_tuple(base, second, depth + 1)
            }
            _ => refused("Tuple must have size 2"),
        },
        Value::List(items) => array_descr(items, depth + 1),
        Value::Dict(_) => unsure("a dict read as a dtype"),
        _ => refused(format!(
            "Cannot interpret a {} as a data type",
            v.type_name()
        )),
    }
}

/// `_convert_from_array_descr`: a list of `(name, dtype[, shape])` read by C.
fn array_descr(items: &[Value], depth: usize) -> Result<DType> {
    let mut taken: std::collections::BTreeSet<Key> = std::collections::BTreeSet::new();
    let mut total: i64 = 0;
    let mut hasobject = false;
    let mut single_object = false;
    for (i, item) in items.iter().enumerate() {
        let Value::Tuple(parts) = item else {
            return refused("Field elements must be 2- or 3-tuples");
        };
        if parts.len() < 2 {
            return refused("Field elements must be 2- or 3-tuples");
        }
        let (title, name) = match parts.first() {
            Some(n @ Value::Str(_)) => (None, n.clone()),
            Some(Value::Tuple(tn)) => match tn.as_slice() {
                [t, n @ Value::Str(_)] => (Some(t.clone()), n.clone()),
                [_, _] => return refused("Field name must be a str"),
                _ => {
                    return refused(
                        "If a tuple, the first element of a field tuple must have two elements",
                    )
                }
            },
            _ => return refused("First element of field tuple is neither a tuple nor str"),
        };
        let name = match (&name, &title) {
            (Value::Str(s), None) if s.is_empty() => Value::str(&format!("f{i}")),
            (Value::Str(s), Some(t)) if s.is_empty() => match t {
                Value::Str(ts) if !ts.is_empty() => t.clone(),
                _ => return refused("Field titles must be non-empty strings"),
            },
            _ => name,
        };
        let conv = match parts.as_slice() {
            [_, d] => raw_dtype(d, depth + 1)?,
            [_, d, shape] => {
                let base = raw_dtype(d, depth + 1)?;
                dtype_tuple(base, shape, depth + 1)?
            }
            _ => return refused("Field elements must be tuples with at most 3 elements"),
        };
        let key = name.key()?;
        let title_key = match &title {
            Some(t @ Value::Str(_)) => Some(t.key()?),
            _ => None,
        };
        if taken.contains(&key) || title_key.as_ref().is_some_and(|t| taken.contains(t)) {
            return refused("field occurs more than once");
        }
        taken.insert(key);
        if let Some(t) = title_key {
            if !taken.insert(t) {
                return refused("title already used as a name or title");
            }
        }
        total = total.saturating_add(conv.elsize);
        hasobject |= conv.hasobject;
        single_object = conv.family == Family::Object;
    }
    if total > INT_MAX {
        return unsure("a structured dtype whose size overflows a C int");
    }
    Ok(DType {
        family: Family::Void,
        elsize: total,
        hasobject,
        fields: Some((items.len(), items.len() == 1 && single_object)),
        metadata: false,
    })
}

/// Python's `len(v)` and iteration over it, for the fields of a descr. A set's
/// order is its hashes', which the model does not know.
fn py_items(v: &Value, what: &str) -> Result<Vec<Value>> {
    Ok(match v {
        Value::Str(s) => s.iter().map(|c| Value::Str(vec![*c])).collect(),
        Value::Bytes(b) => b
            .iter()
            .map(|b| Value::Int(Int::Small(i128::from(*b))))
            .collect(),
        Value::Tuple(items) | Value::List(items) => items.clone(),
        Value::Dict(items) => items.iter().map(|(k, _)| k.clone()).collect(),
        Value::Set(items) if items.len() <= 1 || what == "descr" => items.clone(),
        Value::Set(_) => return unsure("a set unpacked in an order only its hashes decide"),
        _ => return refused(format!("a {} is not iterable", v.type_name())),
    })
}

/// numpy's `descr_to_dtype(descr)`.
pub fn descr_to_dtype(descr: &Value, depth: usize) -> Result<DType> {
    if depth > MAX_DTYPE_DEPTH {
        return refused("maximum recursion depth exceeded");
    }
    match descr {
        Value::Str(s) => return from_str(s, depth + 1),
        Value::Tuple(items) => {
            let Some(first) = items.first() else {
                return refused("tuple index out of range");
            };
            let dt = descr_to_dtype(first, depth + 1)?;
            let Some(second) = items.get(1) else {
                return refused("tuple index out of range");
            };
            return dtype_tuple(dt, second, depth + 1);
        }
        _ => {}
    }
    // A set of fields: numpy's order differs from ours, which changes only
    // offsets, never whether a field holds objects or which names clash.
    let fields = py_items(descr, "descr")?;
    let mut names: Vec<(Option<Value>, Value, DType, i64)> = Vec::with_capacity(fields.len());
    let mut offset: i64 = 0;
    for field in &fields {
        let parts = py_items(field, "field")?;
        let dt = match parts.as_slice() {
            [_, d] => descr_to_dtype(d, depth + 1)?,
            [_, d, shape] => {
                let base = descr_to_dtype(d, depth + 1)?;
                dtype_tuple(base, shape, depth + 1)?
            }
            _ => return refused("a field unpacks to neither 2 nor 3 values"),
        };
        let Some(name) = parts.first() else {
            return refused("a field with no name");
        };
        let is_pad = name.is_str("") && dt.is_padding();
        if !is_pad {
            let (title, name) = match name {
                Value::Tuple(tn) => match tn.as_slice() {
                    [t, n] => (Some(t.clone()), n.clone()),
                    _ => return refused("a (title, name) that is no pair"),
                },
                n => (None, n.clone()),
            };
            names.push((title, name, dt.clone(), offset));
        }
        offset = offset.saturating_add(dt.elsize);
    }
    // numpy.dtype({'names', 'formats', 'titles', 'offsets', 'itemsize'}).
    let mut taken: std::collections::BTreeSet<Key> = std::collections::BTreeSet::new();
    let mut hasobject = false;
    for (title, name, dt, at) in &names {
        if *at > INT_MAX {
            return refused("an offset too large for a C int");
        }
        let Value::Str(_) = name else {
            return refused("field names must be strings");
        };
        if !taken.insert(name.key()?) {
            return refused("name already used as a name or title");
        }
        if let Some(t @ Value::Str(_)) = title {
            if !taken.insert(t.key()?) {
                return refused("title already used as a name or title");
            }
        }
        hasobject |= dt.hasobject;
    }
    if offset > INT_MAX {
        return refused("a structured dtype larger than a C int");
    }
    let single = names.len() == 1
        && names
            .first()
            .is_some_and(|(_, _, d, _)| d.family == Family::Object);
    Ok(DType {
        family: Family::Void,
        elsize: offset,
        hasobject,
        fields: Some((names.len(), single)),
        metadata: false,
    })
}

#[cfg(test)]
mod tests;
