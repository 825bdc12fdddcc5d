//! numpy arrays and scalars inside a checkpoint. numpy pickles an array as
//! `_reconstruct(ndarray, (0,), b'b')` followed by a BUILD with
//! `(1, shape, dtype, is_fortran, raw_bytes)`, and a dtype as
//! `dtype('f4', False, True)` with a BUILD of its byte order. We recognise exactly
//! that pattern for plain numeric dtypes and keep the raw bytes; numpy's own
//! reconstruct is never called on file data. Object arrays carry pickles: refused.

use crate::error::{Error, Location};
use crate::torch::args::Args;
use crate::torch::policy::{Builtin, Global};
use crate::torch::numpy_values::{NdArrayNode, NdArrayState, NpDtype};
use crate::torch::tensor::Dims;
use crate::torch::value::{Arena, Node, Torch};
use crate::value::NodeId;

fn refuse(what: &str, at: &Location) -> Error {
    Error::forbidden(
        format!("numpy: {what}; only plain numeric arrays and scalars are built"),
        at.clone(),
    )
}

/// `numpy.dtype(code, align, copy)`.
pub fn dtype(a: &Args) -> Result<Node, Error> {
    a.arity(1, 3)?;
    let code = a.str(0, "dtype code")?;
    let dtype = NpDtype::parse(code).ok_or_else(|| {
        refuse(
            &format!("dtype {code:?} is not a plain numeric dtype"),
            a.at,
        )
    })?;
    Ok(Node::Domain(Torch::NpDtype(dtype)))
}

/// BUILD of a dtype: `(version, byteorder, subarray, names, fields, elsize, alignment, flags[, metadata])`.
pub fn build_dtype(
    arena: &Arena,
    dtype: &mut NpDtype,
    state: NodeId,
    at: &Location,
) -> Result<(), Error> {
    let items = arena
        .tuple(state)
        .ok_or_else(|| refuse("a dtype state that is not a tuple", at))?;
    if !(8..=9).contains(&items.len()) {
        return Err(refuse("a dtype state of unexpected length", at));
    }
    let item = |i: usize| items.get(i).map_or(&Node::Opaque, |id| arena.get(*id));
    let order = match item(1) {
        Node::Str(s) if matches!(arena.payload(*s), b"<" | b">" | b"|" | b"=") => {
            arena.payload(*s).first().copied().unwrap_or(b'=')
        }
        _ => return Err(refuse("a dtype byte order that is not one of < > | =", at)),
    };
    let plain = matches!(
        (item(2), item(3), item(4)),
        (Node::None, Node::None, Node::None)
    );
    let flags_zero = matches!(item(7), Node::Int(0));
    if !plain || !flags_zero {
        return Err(refuse("a structured, subarray or object dtype", at));
    }
    dtype.order = if dtype.size == 1 { b'|' } else { order };
    Ok(())
}

/// `_reconstruct(ndarray, (0,), b'b')`: an empty array waiting for its BUILD.
pub fn reconstruct(a: &Args) -> Result<Node, Error> {
    a.arity(3, 3)?;
    if !matches!(
        a.node(0)?,
        Node::Domain(Torch::Global(Global::Builtin(Builtin::NumpyNdarray)))
    ) {
        return Err(refuse(
            "_reconstruct of a class other than numpy.ndarray",
            a.at,
        ));
    }
    Ok(Node::Domain(Torch::NdArray(Box::new(NdArrayNode {
        state: None,
    }))))
}

/// BUILD of an array: `(1, shape, dtype, is_fortran, raw_bytes)`.
pub fn build_array(
    arena: &Arena,
    state: NodeId,
    max_ndim: u64,
    at: &Location,
) -> Result<NdArrayState, Error> {
    let a = Args::new(arena, state, at, "numpy.ndarray.__setstate__")?;
    a.arity(5, 5)?;
    if a.int(0, "version")? != 1 {
        return Err(refuse("an array state of an unknown version", at));
    }
    let shape = a.dims(1, "shape", max_ndim)?;
    let dtype = match a.node(2)? {
        Node::Domain(Torch::NpDtype(d)) => *d,
        _ => {
            return Err(refuse(
                "an array whose dtype is not a plain numpy dtype",
                at,
            ))
        }
    };
    let fortran = a.bool(3, "is_fortran")?;
    checked_state(&a, 4, shape, dtype, fortran)
}

/// The data argument `i` must be bytes of exactly the array's size.
fn checked_state(
    a: &Args,
    i: usize,
    shape: Dims,
    dtype: NpDtype,
    fortran: bool,
) -> Result<NdArrayState, Error> {
    let data = match a.node(i)? {
        Node::Bytes(b) | Node::ByteArray(b) => b.len() as u64,
        Node::List(_) => return Err(refuse("an object array (its items are pickles)", a.at)),
        other => {
            return Err(refuse(
                &format!("array data of type {}", other.kind_name()),
                a.at,
            ))
        }
    };
    let numel = shape.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d));
    let expected = numel.and_then(|n| n.checked_mul(u64::from(dtype.size)));
    if expected != Some(data) {
        return Err(Error::tensor(
            format!("a numpy array of shape {shape:?} and dtype {} needs {expected:?} bytes, its data has {data}", dtype.descr()),
            a.at.clone(),
        ));
    }
    Ok(NdArrayState {
        shape,
        dtype,
        fortran,
        data: a.id(i)?,
    })
}

/// `_frombuffer(buffer, dtype, shape, order)`, protocol 5's in-band array form.
pub fn frombuffer(a: &Args, max_ndim: u64) -> Result<Node, Error> {
    a.arity(4, 4)?;
    let dtype = match a.node(1)? {
        Node::Domain(Torch::NpDtype(d)) => *d,
        _ => {
            return Err(refuse(
                "an array whose dtype is not a plain numpy dtype",
                a.at,
            ))
        }
    };
    let shape = a.dims(2, "shape", max_ndim)?;
    let fortran = match a.str(3, "order")? {
        "C" => false,
        "F" => true,
        other => return Err(refuse(&format!("array order {other:?}"), a.at)),
    };
    let state = checked_state(a, 0, shape, dtype, fortran)?;
    Ok(Node::Domain(Torch::NdArray(Box::new(NdArrayNode {
        state: Some(state),
    }))))
}

/// `scalar(dtype, raw_bytes)`.
pub fn scalar(a: &Args) -> Result<Node, Error> {
    a.arity(2, 2)?;
    let dtype = match a.node(0)? {
        Node::Domain(Torch::NpDtype(d)) => *d,
        _ => {
            return Err(refuse(
                "a scalar whose dtype is not a plain numpy dtype",
                a.at,
            ))
        }
    };
    match a.node(1)? {
        Node::Bytes(b) if b.len() == usize::from(dtype.size) => {
            Ok(Node::Domain(Torch::NpScalar(dtype, a.id(1)?)))
        }
        _ => Err(refuse("scalar data that does not match its dtype", a.at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_numeric_codes_parse() {
        assert_eq!(NpDtype::parse("f4").map(|d| d.descr()), Some("=f4".into()));
        assert_eq!(NpDtype::parse("b1").map(|d| d.descr()), Some("|b1".into()));
        assert_eq!(NpDtype::parse("c16").map(|d| d.size), Some(16));
        for bad in ["O8", "V8", "U5", "S3", "f3", "i16", "", "f", "M8"] {
            assert_eq!(NpDtype::parse(bad), None, "{bad}");
        }
    }
}
