//! Typed access to the argument tuple of an allowlisted call, with an error that
//! names the function and the argument whenever the file passes the wrong thing.

use crate::error::{Error, Location};
use crate::limits::Limit;
use crate::torch::dtype::DType;
use crate::torch::policy::{Builtin, Global};
use crate::torch::tensor::{Dims, StorageId};
use crate::torch::value::{Arena, Node, Torch};
use crate::value::NodeId;

pub struct Args<'a> {
    pub arena: &'a Arena,
    pub items: &'a [NodeId],
    pub at: &'a Location,
    pub func: &'a str,
}

impl<'a> Args<'a> {
    /// The items of `args`, which must be a tuple (pickle calls `func(*args)`).
    pub fn new(
        arena: &'a Arena,
        args: NodeId,
        at: &'a Location,
        func: &'a str,
    ) -> Result<Self, Error> {
        match arena.get(args) {
            Node::Tuple(items) => Ok(Args {
                arena,
                items: arena.items(*items),
                at,
                func,
            }),
            other => Err(Error::pickle(
                format!(
                    "{func}: arguments must be a tuple, got {}",
                    other.kind_name()
                ),
                at.clone(),
            )),
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn fail(&self, reason: impl std::fmt::Display) -> Error {
        Error::tensor(format!("{}: {reason}", self.func), self.at.clone())
    }

    /// Require between `min` and `max` arguments.
    pub fn arity(&self, min: usize, max: usize) -> Result<(), Error> {
        if self.len() < min || self.len() > max {
            let expected = if min == max {
                min.to_string()
            } else {
                format!("{min} to {max}")
            };
            return Err(self.fail(format!("takes {expected} arguments, got {}", self.len())));
        }
        Ok(())
    }

    pub fn id(&self, i: usize) -> Result<NodeId, Error> {
        self.items
            .get(i)
            .copied()
            .ok_or_else(|| self.fail(format!("missing argument {i}")))
    }

    /// The kind of argument `i`, for messages ("missing" when there is none).
    pub fn kind(&self, i: usize) -> &'static str {
        self.node(i).map_or("missing", Node::kind_name)
    }

    pub fn node(&self, i: usize) -> Result<&'a Node, Error> {
        Ok(self.arena.get(self.id(i)?))
    }

    pub fn int(&self, i: usize, what: &str) -> Result<i64, Error> {
        match self.node(i)? {
            Node::Int(v) => Ok(*v),
            Node::Bool(b) => Ok(i64::from(*b)),
            other => Err(self.fail(format!("{what} must be an int, got {}", other.kind_name()))),
        }
    }

    pub fn uint(&self, i: usize, what: &str) -> Result<u64, Error> {
        let v = self.int(i, what)?;
        u64::try_from(v).map_err(|_| self.fail(format!("{what} must not be negative, got {v}")))
    }

    pub fn float(&self, i: usize, what: &str) -> Result<f64, Error> {
        match self.node(i)? {
            Node::Float(v) => Ok(*v),
            Node::Int(v) => Ok(*v as f64),
            Node::Bool(b) => Ok(f64::from(u8::from(*b))),
            Node::BigInt(bytes) => big_int_to_f64(bytes)
                .ok_or_else(|| self.fail(format!("{what}: int too large to convert to float"))),
            Node::DecimalInt(text) => text
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| self.fail(format!("{what}: int too large to convert to float"))),
            other => Err(self.fail(format!("{what} must be a float, got {}", other.kind_name()))),
        }
    }

    pub fn bool(&self, i: usize, what: &str) -> Result<bool, Error> {
        match self.node(i)? {
            Node::Bool(b) => Ok(*b),
            Node::Int(v @ (0 | 1)) => Ok(*v == 1),
            other => Err(self.fail(format!("{what} must be a bool, got {}", other.kind_name()))),
        }
    }

    pub fn str(&self, i: usize, what: &str) -> Result<&'a str, Error> {
        match self.node(i)? {
            Node::Str(s) => std::str::from_utf8(self.arena.payload(*s))
                .map_err(|_| self.fail(format!("{what} is not valid text"))),
            // encoding='bytes' leaves py2 strings as bytes; torch ascii-decodes them.
            Node::Bytes(b) if self.arena.payload(*b).is_ascii() => {
                std::str::from_utf8(self.arena.payload(*b))
                    .map_err(|_| self.fail(format!("{what} is not ASCII")))
            }
            other => Err(self.fail(format!("{what} must be a str, got {}", other.kind_name()))),
        }
    }

    /// A shape or stride: a tuple (or torch.Size) of non-negative ints, at most `max_ndim` long.
    pub fn dims(&self, i: usize, what: &str, max_ndim: u64) -> Result<Dims, Error> {
        let check_len = |n: usize| {
            if n as u64 > max_ndim {
                Err(Error::limit(Limit::Ndim, max_ndim, self.at.clone()))
            } else {
                Ok(())
            }
        };
        let items: Option<&[NodeId]> = match self.node(i)? {
            Node::Tuple(items) => Some(self.arena.items(*items)),
            Node::List(items) => Some(items.as_slice()),
            _ => None,
        };
        if let Some(items) = items {
            check_len(items.len())?;
            let mut dims = Dims::zeros(items.len());
            for (dim, id) in dims.iter_mut().zip(items) {
                *dim = match self.arena.get(*id) {
                    Node::Int(v) => u64::try_from(*v)
                        .map_err(|_| self.fail(format!("{what} has a negative entry {v}")))?,
                    other => {
                        return Err(self.fail(format!(
                            "{what} entries must be ints, got {}",
                            other.kind_name()
                        )))
                    }
                };
            }
            return Ok(dims);
        }
        match self.node(i)? {
            Node::Domain(Torch::Size(sizes)) => {
                check_len(sizes.len())?;
                let mut dims = Dims::zeros(sizes.len());
                for (dim, v) in dims.iter_mut().zip(sizes.iter()) {
                    *dim = u64::try_from(*v)
                        .map_err(|_| self.fail(format!("{what} has a negative entry {v}")))?;
                }
                Ok(dims)
            }
            other => Err(self.fail(format!(
                "{what} must be a tuple of ints, got {}",
                other.kind_name()
            ))),
        }
    }

    pub fn storage(&self, i: usize) -> Result<StorageId, Error> {
        match self.node(i)? {
            Node::Domain(Torch::Storage(s)) => Ok(*s),
            other => Err(self.fail(format!(
                "argument {i} must be a storage, got {}",
                other.kind_name()
            ))),
        }
    }

    /// A tensor argument, by id (the bindings build it).
    pub fn tensor(&self, i: usize, what: &str) -> Result<NodeId, Error> {
        match self.node(i)? {
            Node::Domain(Torch::Tensor(_)) => self.id(i),
            other => Err(self.fail(format!(
                "{what} must be a tensor, got {}",
                other.kind_name()
            ))),
        }
    }

    pub fn dtype(&self, i: usize) -> Result<DType, Error> {
        match self.node(i)? {
            Node::Domain(Torch::Global(Global::Builtin(Builtin::Dtype(d)))) => Ok(*d),
            other => Err(self.fail(format!(
                "argument {i} must be a torch.dtype, got {}",
                other.kind_name()
            ))),
        }
    }
}

/// A two's-complement little-endian int as the nearest float, rounded as Python's
/// `float(n)` rounds it; `None` past the float range (Python's OverflowError).
fn big_int_to_f64(bytes: &[u8]) -> Option<f64> {
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude = bytes.to_vec();
    if negative {
        let mut carry = true;
        for byte in &mut magnitude {
            *byte = !*byte;
            if carry {
                (*byte, carry) = byte.overflowing_add(1);
            }
        }
    }
    while magnitude.last() == Some(&0) {
        magnitude.pop();
    }
    // The top 128 bits, with one sticky bit for anything below them, round to the
    // same 53-bit mantissa as the whole number; scaling by a power of two is exact.
    let (low, high) = magnitude.split_at(magnitude.len().saturating_sub(16));
    let mut window = high
        .iter()
        .rev()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b));
    if low.iter().any(|b| *b != 0) {
        window |= 1;
    }
    let value = window as f64 * 2f64.powi(i32::try_from(low.len() * 8).ok()?);
    value
        .is_finite()
        .then_some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::big_int_to_f64;

    fn le(v: i128) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    #[test]
    fn big_ints_round_to_the_nearest_float_as_python_does() {
        for v in [
            0i128,
            1,
            -1,
            i128::MAX,
            i128::MIN,
            (1 << 53) + 1,
            (1 << 100) + (1 << 47) + 1,
            -(1 << 90) - 12345,
        ] {
            assert_eq!(big_int_to_f64(&le(v)), Some(v as f64), "{v}");
        }
        // 2**1024 overflows; 2**1023 and -(2**1023) do not.
        let mut two_1024 = vec![0u8; 129];
        two_1024[128] = 1;
        assert_eq!(
            big_int_to_f64(&{
                let mut b = two_1024.clone();
                b.push(0);
                b
            }),
            None
        );
        let mut two_1023 = vec![0u8; 129];
        two_1023[127] = 0x80;
        assert_eq!(big_int_to_f64(&two_1023), Some(2f64.powi(1023)));
        let minus_two_1023: Vec<u8> = (0..128)
            .map(|i| if i == 127 { 0x80 } else { 0 })
            .chain([0xff])
            .collect();
        assert_eq!(big_int_to_f64(&minus_two_1023), Some(-(2f64.powi(1023))));
        // 2**200 + 2**147 + 1: the window alone is a tie (to even: 2**200); the
        // 1 below it makes Python round up.
        let mut above_tie = vec![0u8; 26];
        above_tie[25] = 1;
        above_tie[18] = 8;
        above_tie[0] = 1;
        assert_eq!(
            big_int_to_f64(&above_tie),
            Some(2f64.powi(200) + 2f64.powi(148))
        );
    }
}
