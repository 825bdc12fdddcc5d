//! A safetensors file's header, checked as the safetensors library checks it
//! before it hands out a tensor: a JSON object of tensors (dtype, shape, data
//! offsets) and string metadata, whose tensors tile the data that follows
//! exactly. A file that fails is unreadable: readers would refuse it, or read
//! tensors over each other or past the file.

use serde_json::{Map, Value};

use crate::error::code;

/// The safetensors library refuses headers larger than this.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bits per element of each dtype the format names.
const DTYPE_BITS: [(&str, u64); 20] = [
    ("BOOL", 8),
    ("U8", 8),
    ("I8", 8),
    ("F8_E5M2", 8),
    ("F8_E4M3", 8),
    ("F8_E8M0", 8),
    ("F4", 4),
    ("F6_E2M3", 6),
    ("F6_E3M2", 6),
    ("I16", 16),
    ("U16", 16),
    ("F16", 16),
    ("BF16", 16),
    ("I32", 32),
    ("U32", 32),
    ("F32", 32),
    ("C64", 64),
    ("F64", 64),
    ("I64", 64),
    ("U64", 64),
];

/// Why the header of `data` (a whole file that starts like safetensors) is not
/// one a reader accepts: an `error::code` kind and the reason.
pub fn header_problem(data: &[u8]) -> Option<(&'static str, String)> {
    check(data).err()
}

type Checked<T> = Result<T, (&'static str, String)>;

fn malformed<T>(reason: impl Into<String>) -> Checked<T> {
    Err((code::MALFORMED_ARCHIVE, reason.into()))
}

fn out_of_bounds<T>(reason: String) -> Checked<T> {
    Err((code::TENSOR_BOUNDS, reason))
}

fn check(data: &[u8]) -> Checked<()> {
    let Some(len) = data.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return malformed("safetensors: shorter than its 8-byte header length");
    };
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER_BYTES {
        return malformed(format!(
            "safetensors: a {len}-byte header, over the {MAX_HEADER_BYTES}-byte maximum"
        ));
    }
    let header_end = 8 + len as usize;
    let Some(header) = data.get(8..header_end) else {
        return malformed(format!(
            "safetensors: the {len}-byte header runs past the end of the {}-byte file",
            data.len()
        ));
    };
    let header: Map<String, Value> = match serde_json::from_slice(header) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return malformed("safetensors: the header is not a JSON object"),
        Err(e) => return malformed(format!("safetensors: the header is not JSON: {e}")),
    };
    let data_len = (data.len() - header_end) as u64;
    let mut spans = Vec::with_capacity(header.len());
    for (name, info) in &header {
        if name == "__metadata__" {
            metadata(info)?;
        } else {
            spans.push((tensor(name, info)?, name));
        }
    }
    spans.sort();
    let mut end = 0u64;
    for ((begin, stop), name) in spans {
        if begin != end {
            let what = if begin < end {
                "overlaps"
            } else {
                "leaves a gap before"
            };
            return out_of_bounds(format!(
                "safetensors: tensor {name:?} at bytes {begin}..{stop} {what} the data before it (which ends at {end})"
            ));
        }
        end = stop;
    }
    if end != data_len {
        let what = if end > data_len {
            "run past the end of"
        } else {
            "do not cover"
        };
        return out_of_bounds(format!(
            "safetensors: the tensors' {end} bytes {what} the {data_len} bytes of data"
        ));
    }
    Ok(())
}

fn metadata(info: &Value) -> Checked<()> {
    match info {
        Value::Object(map) if map.values().all(Value::is_string) => Ok(()),
        _ => malformed("safetensors: __metadata__ is not an object of strings"),
    }
}

/// A tensor's entry: its bytes' span in the data, checked against its dtype and shape.
fn tensor(name: &str, info: &Value) -> Checked<(u64, u64)> {
    let field = |key: &str| info.get(key);
    let Some(dtype) = field("dtype").and_then(Value::as_str) else {
        return malformed(format!("safetensors: tensor {name:?} has no dtype"));
    };
    let Some(&(_, bits)) = DTYPE_BITS.iter().find(|(n, _)| *n == dtype) else {
        return malformed(format!(
            "safetensors: tensor {name:?} has the unknown dtype {dtype:?}"
        ));
    };
    let shape: Option<Vec<u64>> = (field("shape").and_then(Value::as_array))
        .and_then(|dims| dims.iter().map(Value::as_u64).collect());
    let Some(shape) = shape else {
        return malformed(format!(
            "safetensors: tensor {name:?} has no shape of non-negative integers"
        ));
    };
    let offsets: Option<Vec<u64>> = (field("data_offsets").and_then(Value::as_array))
        .and_then(|o| o.iter().map(Value::as_u64).collect());
    let Some(&[begin, end]) = offsets.as_deref() else {
        return malformed(format!(
            "safetensors: tensor {name:?} has no data_offsets [begin, end]"
        ));
    };
    if begin > end {
        return out_of_bounds(format!(
            "safetensors: tensor {name:?} ends (at {end}) before it begins (at {begin})"
        ));
    }
    let bytes = (shape.iter().try_fold(bits, |n, d| n.checked_mul(*d)))
        .filter(|bits| bits % 8 == 0)
        .map(|bits| bits / 8);
    if bytes != Some(end - begin) {
        return out_of_bounds(format!(
            "safetensors: tensor {name:?} ({dtype}, shape {shape:?}) does not fit its {} bytes",
            end - begin
        ));
    }
    Ok((begin, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.resize(f.len() + data, 0);
        f
    }

    fn kind(header: &str, data: usize) -> Option<&'static str> {
        header_problem(&file(header, data)).map(|(kind, _)| kind)
    }

    #[test]
    fn a_file_safetensors_writes_passes() {
        let h = r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]},"e":{"dtype":"F4","shape":[0],"data_offsets":[16,16]}}"#;
        assert_eq!(header_problem(&file(h, 16)), None);
        assert_eq!(kind("{}", 0), None);
    }

    #[test]
    fn tensors_must_tile_the_data() {
        let two = |a: &str, b: &str| {
            format!(
                r#"{{"x":{{"dtype":"U8","shape":[4],"data_offsets":{a}}},"y":{{"dtype":"U8","shape":[4],"data_offsets":{b}}}}}"#
            )
        };
        assert_eq!(kind(&two("[0,4]", "[2,6]"), 6), Some(code::TENSOR_BOUNDS));
        assert_eq!(kind(&two("[0,4]", "[5,9]"), 9), Some(code::TENSOR_BOUNDS));
        assert_eq!(kind(&two("[0,4]", "[4,8]"), 7), Some(code::TENSOR_BOUNDS));
        assert_eq!(kind(&two("[0,4]", "[4,8]"), 9), Some(code::TENSOR_BOUNDS));
        assert_eq!(kind(&two("[0,4]", "[4,8]"), 8), None);
        assert_eq!(
            kind(
                r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                8
            ),
            Some(code::TENSOR_BOUNDS)
        );
        let huge = r#"{"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
        assert_eq!(kind(huge, 8), Some(code::TENSOR_BOUNDS));
    }

    #[test]
    fn headers_that_are_not_the_format_are_malformed() {
        for h in [
            "{",
            "[]",
            r#"{"x":1}"#,
            r#"{"x":{"dtype":"F99","shape":[],"data_offsets":[0,0]}}"#,
            r#"{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}"#,
            r#"{"x":{"dtype":"U8","shape":[1],"data_offsets":[0]}}"#,
            r#"{"__metadata__":{"k":1}}"#,
        ] {
            assert_eq!(kind(h, 0), Some(code::MALFORMED_ARCHIVE), "{h}");
        }
        let mut past = file("{}", 0);
        past.get_mut(..8)
            .unwrap()
            .copy_from_slice(&100u64.to_le_bytes());
        assert_eq!(
            header_problem(&past).map(|p| p.0),
            Some(code::MALFORMED_ARCHIVE)
        );
    }
}
