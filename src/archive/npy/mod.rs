//! numpy's `.npy` header, read as `numpy.load(path, allow_pickle=True)` reads it
//! (numpy 2.4, `numpy.lib.format.read_array`): the magic and version, the
//! header's length and text, the Python literal it is (`ast.literal_eval`, with
//! numpy's fallback for Python 2's `10L`), the dict's keys and types, and the
//! dtype its `descr` makes. What matters is one answer: whether numpy then
//! `pickle.load`s the rest of the file (an object dtype), and from where.
//!
//! `.npz` members are read by the same function, whatever their name.
//!
//! Where the model cannot settle what numpy does, the answer is
//! [`Outcome::Unsure`]: a scanner then never calls the file clean.

mod dtype;
mod literal;

pub use dtype::{descr_to_dtype, known_names, DType, Family, MAX_DTYPE_DEPTH};
pub use literal::{drop_long_suffixes, literal_eval, untokenized, Fail, Int, Value, MAX_NESTING};

/// What every `.npy` starts with.
pub const MAGIC: &[u8] = b"\x93NUMPY";

/// The longest header the model reads. With `allow_pickle=True` numpy reads
/// any length (`max_header_size` is lifted); np.save writes a few hundred
/// bytes, and even a dtype of thousands of fields stays far below this.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What `numpy.load(path, allow_pickle=True)` does with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An object dtype: the rest of the file, from `data_offset`, is unpickled.
    Object,
    /// Plain data: read as bytes, nothing unpickled.
    Plain,
    /// numpy raises before it reads any data: nothing unpickled.
    Refused(String),
    /// numpy might unpickle; the model cannot tell.
    Unsure(String),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Object => "object",
            Outcome::Plain => "plain",
            Outcome::Refused(_) => "refused",
            Outcome::Unsure(_) => "unsure",
        }
    }
}

/// A header as numpy reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub outcome: Outcome,
    /// Where the header ends: the array's data, or its pickle. `None` when the
    /// header is not all there.
    pub data_offset: Option<usize>,
}

fn header(outcome: Outcome, data_offset: Option<usize>) -> Header {
    Header {
        outcome,
        data_offset,
    }
}

/// Read the header of the `.npy` that `data` is (from its magic on).
pub fn read_header(data: &[u8]) -> Header {
    let refused = |why: String| header(Outcome::Refused(why), None);
    if !data.starts_with(MAGIC) {
        return refused("the magic string is not correct".into());
    }
    let (Some(&major), Some(&minor)) = (data.get(6), data.get(7)) else {
        return refused("EOF: reading magic string".into());
    };
    let (len_bytes, utf8) = match (major, minor) {
        (1, 0) => (2, false),
        (2, 0) => (4, false),
        (3, 0) => (4, true),
        _ => {
            return refused(format!(
                "numpy reads format versions 1.0, 2.0 and 3.0, not {major}.{minor}"
            ))
        }
    };
    let start = 8 + len_bytes;
    let Some(len_field) = data.get(8..start) else {
        return refused("EOF: reading array header length".into());
    };
    let len = len_field
        .iter()
        .rev()
        .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
    let Some(end) = start.checked_add(len) else {
        return refused("EOF: reading array header".into());
    };
    let Some(bytes) = data.get(start..end) else {
        return refused(format!("EOF: reading array header, expected {len} bytes"));
    };
    if len > MAX_HEADER_BYTES {
        let why =
            format!("a header of {len} bytes, more than the model reads ({MAX_HEADER_BYTES})");
        return header(Outcome::Unsure(why), Some(end));
    }
    let text: Vec<char> = if utf8 {
        match std::str::from_utf8(bytes) {
            Ok(s) => s.chars().collect(),
            Err(e) => return refused(format!("the header is not UTF-8: {e}")),
        }
    } else {
        bytes.iter().map(|b| char::from(*b)).collect()
    };
    header(header_outcome(&text, major < 3), Some(end))
}

/// What numpy does once it has the header's text: `_read_array_header`, then
/// `read_array` up to the pickle.
fn header_outcome(text: &[char], python2_fallback: bool) -> Outcome {
    let mut parsed = literal_eval(text);
    if python2_fallback && matches!(parsed, Err(Fail::Refused(_))) {
        // numpy's `_filter_header`, then literal_eval again.
        let filtered = drop_long_suffixes(text)
            .map(|dropped| dropped.unwrap_or_else(|| text.to_vec()))
            .and_then(|t| untokenized(&t));
        match filtered {
            Ok(filtered) if filtered != text => parsed = literal_eval(&filtered),
            Ok(_) => {}
            Err(e) => parsed = Err(e),
        }
    }
    let d = match parsed {
        Ok(Value::Dict(d)) => d,
        Ok(other) => {
            return Outcome::Refused(format!("the header is a {}, not a dict", other.type_name()))
        }
        Err(Fail::Refused(why)) => {
            return Outcome::Refused(format!("cannot parse the header: {why}"))
        }
        Err(Fail::Unsure(why)) => return Outcome::Unsure(why),
    };
    let get = |key: &str| d.iter().find(|(k, _)| k.is_str(key)).map(|(_, v)| v);
    let (Some(descr), Some(fortran), Some(shape)) =
        (get("descr"), get("fortran_order"), get("shape"))
    else {
        return Outcome::Refused(
            "the header does not hold the keys descr, fortran_order and shape".into(),
        );
    };
    if d.len() != 3 {
        return Outcome::Refused(
            "the header holds keys other than descr, fortran_order and shape".into(),
        );
    }
    let Value::Tuple(dims) = shape else {
        return Outcome::Refused("shape is not a tuple".into());
    };
    if !dims
        .iter()
        .all(|x| matches!(x, Value::Int(_) | Value::Bool(_)))
    {
        return Outcome::Refused("shape holds something other than ints".into());
    }
    if !matches!(fortran, Value::Bool(_)) {
        return Outcome::Refused("fortran_order is not a bool".into());
    }
    let dtype = match descr_to_dtype(descr, 0) {
        Ok(d) => d,
        Err(Fail::Refused(why)) => {
            return Outcome::Refused(format!("descr is no dtype numpy accepts: {why}"))
        }
        Err(Fail::Unsure(why)) => return Outcome::Unsure(why),
    };
    // numpy.multiply.reduce(shape, dtype=int64), before it looks at the dtype.
    for x in dims {
        match x {
            // Read as uint64 past int64's end, and the product wraps.
            Value::Int(Int::Small(v)) if i64::try_from(*v).is_ok() || u64::try_from(*v).is_ok() => {
            }
            Value::Int(_) => return Outcome::Refused("a dimension too large for int64".into()),
            _ => {}
        }
    }
    if dtype.hasobject {
        Outcome::Object
    } else {
        Outcome::Plain
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(version: u8, header: &str) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend([version, 0]);
        let h = header.as_bytes();
        if version == 1 {
            out.extend(u16::try_from(h.len()).unwrap().to_le_bytes());
        } else {
            out.extend(u32::try_from(h.len()).unwrap().to_le_bytes());
        }
        out.extend(h);
        out
    }

    #[test]
    fn the_header_decides_and_the_pickle_starts_after_it() {
        let h = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }   \n";
        let file = npy(1, h);
        assert_eq!(
            read_header(&file),
            header(Outcome::Object, Some(10 + h.len()))
        );
        let h =
            "{'descr': [('O', '<i4'), ('b', '<f8')], 'fortran_order': False, 'shape': (3,), }\n";
        assert_eq!(read_header(&npy(1, h)).outcome, Outcome::Plain);
        let h = "{'descr': 'object', 'fortran_order': False, 'shape': (3L,), }\n";
        assert_eq!(read_header(&npy(2, h)).outcome, Outcome::Object);
        assert!(matches!(
            read_header(&npy(3, h)).outcome,
            Outcome::Refused(_)
        ));
        let h = "{'descr': 'O', 'fortran_order': 0, 'shape': (3,)}";
        assert!(matches!(
            read_header(&npy(1, h)).outcome,
            Outcome::Refused(_)
        ));
        let h = "{'descr': 'O', 'fortran_order': True, 'shape': (3,), 'x': 1}";
        assert!(matches!(
            read_header(&npy(1, h)).outcome,
            Outcome::Refused(_)
        ));
        let h = "{'descr': 'O', 'descr': '<f8', 'fortran_order': True, 'shape': (True, -1)}";
        assert_eq!(read_header(&npy(1, h)).outcome, Outcome::Plain);
        let h = "{'descr': 'O', 'fortran_order': True, 'shape': (2**70,)}";
        assert!(matches!(
            read_header(&npy(1, h)).outcome,
            Outcome::Refused(_)
        ));
        let h = "{'descr': 'O', 'fortran_order': True, 'shape': (0x10000000000000000,)}";
        assert!(matches!(
            read_header(&npy(1, h)).outcome,
            Outcome::Refused(_)
        ));
    }

    #[test]
    fn versions_lengths_and_encodings() {
        let h = "{'descr': 'O', 'fortran_order': False, 'shape': ()}";
        let mut v4 = npy(2, h);
        v4[6] = 4;
        assert!(matches!(read_header(&v4).outcome, Outcome::Refused(_)));
        let mut minor = npy(1, h);
        minor[7] = 1;
        assert!(matches!(read_header(&minor).outcome, Outcome::Refused(_)));
        let short = npy(1, h);
        assert!(matches!(
            read_header(&short[..short.len() - 1]).outcome,
            Outcome::Refused(_)
        ));
        let named = "{'descr': [('\u{e9}', 'O')], 'fortran_order': False, 'shape': ()}";
        assert_eq!(read_header(&npy(3, named)).outcome, Outcome::Object);
        let mut latin1 = npy(
            1,
            "{'descr': [('\u{e9}', 'O')], 'fortran_order': False, 'shape': ()}",
        );
        latin1.retain(|b| *b != 0xc3);
        latin1[8] -= 1;
        assert_eq!(read_header(&latin1).outcome, Outcome::Object);
        let mut bad_utf8 = npy(3, h);
        let last = bad_utf8.len() - 2;
        bad_utf8[last] = 0xff;
        assert!(matches!(
            read_header(&bad_utf8).outcome,
            Outcome::Refused(_)
        ));
    }
}
