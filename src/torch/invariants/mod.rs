//! The invariants torch checks when it builds a sparse, nested or per-channel
//! quantized tensor, checked on the parsed checkpoint once its storages are
//! bound, so that a load and a scan refuse the same files before anything is
//! built. They are torch 2.13's:
//!
//! - sparse COO (`_validate_sparse_coo_tensor_args`, as `torch.sparse_coo_tensor(...,
//!   check_invariants=True)` runs it): indices a 2-D tensor of integers, as many
//!   as the values, every index in `0..size[d]`, the size as long as the sparse
//!   and dense dimensions, the values' dense shape that of the size, and indices
//!   said to be coalesced sorted and distinct;
//! - sparse CSR, CSC, BSR and BSC (`_validate_sparse_compressed_tensor_args`):
//!   the shapes of the indices, values and blocks; int32 or int64 indices of one
//!   dtype; compressed indices that start at 0, end at nnz and never decrease by
//!   more than the plain dimension, plain indices in range, sorted and distinct
//!   within each compressed row or column;
//! - strided nested tensors (`_nested_view_from_buffer`, as the Python builder
//!   calls it): a 1-D buffer, int64 sizes, strides and offsets of consistent
//!   shapes, and every component inside the buffer;
//! - per-channel quantized tensors (`_rebuild_qtensor`): an axis of the tensor,
//!   and 1-D floating scales and 1-D zero points with one entry per channel;
//! - every size's element count fits torch's 64-bit count.
//!
//! Index values live in storages: [`StorageBytes`] reads them. The work is
//! linear in the file ([`Budget`]): values repeated by a stride of 0 are
//! visited once, tensors with the same parts are checked once, and every byte
//! read or value visited is charged, before the work, against
//! `max_inflated_bytes` and against [`WORK_PER_BYTE`] times the bytes the file
//! holds, so a tiny file that broadcasts a small index storage to a huge index
//! tensor, or names one big index storage in many tensors, cannot make a load
//! or a scan run long.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::{Error, Location};
use crate::limits::Limit;
use crate::torch::dtype::DType;
use crate::torch::tensor::{numel_fits, Dense, Layout, QParams, StorageId, TensorKind};
use crate::torch::value::{Arena, Node, Torch};
use crate::value::NodeId;

mod nested;
mod sparse;

/// Where the checks read index values: the bytes of the bound storages.
pub trait StorageBytes<'d> {
    /// Bytes `start..start + len` of storage `id`, in this machine's byte order.
    /// The range lies inside the storage: every dense tensor's extent was checked
    /// against its storage when it was made.
    fn read(&mut self, id: StorageId, start: u64, len: u64) -> Result<Cow<'d, [u8]>, Error>;
}

/// The work the checks may do, in bytes read (inflated) and elements visited
/// (8 bytes each).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// `max_inflated_bytes`: a limit the user may raise.
    pub max_read: u64,
    /// The bytes the file holds: its length and what its compressed storages
    /// inflate to. The checks do at most [`WORK_PER_BYTE`] times that (plus
    /// [`WORK_FLOOR`]), so a small file cannot make them run long.
    pub data_bytes: u64,
}

/// How much checking one byte of a file may cost. Index tensors written by torch
/// are read once each, and each index is visited at most three times; only index
/// tensors that overlap themselves in memory (a stride of 0 or less than a row)
/// cost more than the bytes they hold.
pub const WORK_PER_BYTE: u64 = 16;
pub const WORK_FLOOR: u64 = 1 << 20;

/// Check every tensor of `arena` that has invariants beyond its extent (those
/// made by [`Arena::push_tensor_to_check`]); `entry` is the pickle's, for
/// messages. Tensors with the same parts (by storage, offset, shape and
/// stride) are checked once.
pub fn check<'d>(
    arena: &Arena,
    storages: &mut dyn StorageBytes<'d>,
    budget: Budget,
    entry: &str,
) -> Result<(), Error> {
    let mut checker = Checker {
        arena,
        storages,
        read: 0,
        budget,
        at: Location::default(),
    };
    let mut done: HashSet<Vec<u64>> = HashSet::new();
    for (t, offset) in arena.tensors_to_check() {
        checker.at = Location {
            entry: Some(entry.to_owned()),
            offset: Some(offset),
            opcode: None,
        };
        let key = match &t.kind {
            TensorKind::Sparse {
                layout,
                parts,
                size,
                coalesced,
            } => {
                let extra = [*layout as u64, coalesced.map_or(2, u64::from)];
                checker.key(parts, &[&extra, size])
            }
            TensorKind::Nested {
                buffer,
                sizes,
                strides,
                offsets,
            } => checker.key(&[*buffer, *sizes, *strides, *offsets], &[&[u64::MAX]]),
            _ => Vec::new(),
        };
        if !key.is_empty() && done.contains(&key) {
            continue;
        }
        match &t.kind {
            TensorKind::Sparse {
                layout: Layout::SparseCoo,
                parts,
                size,
                coalesced,
            } => checker.coo(parts, size, *coalesced)?,
            TensorKind::Sparse {
                layout,
                parts,
                size,
                ..
            } => checker.compressed(*layout, parts, size)?,
            TensorKind::Nested {
                buffer,
                sizes,
                strides,
                offsets,
            } => checker.nested(*buffer, *sizes, *strides, *offsets)?,
            TensorKind::Quantized {
                dense,
                params:
                    QParams::PerChannel {
                        scales,
                        zero_points,
                        axis,
                        ..
                    },
            } => checker.per_channel(dense, *scales, *zero_points, *axis)?,
            _ => {}
        }
        if !key.is_empty() {
            done.insert(key);
        }
    }
    Ok(())
}

/// What a tensor argument is to torch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A strided CPU tensor (a Parameter or a subclass of one counts as its data).
    Strided,
    /// A quantized tensor: strided, but not a plain one.
    Quantized,
    /// Anything else: sparse, nested, meta, made by a torch call.
    Other(&'static str),
}

/// A tensor argument, resolved to the strided view torch would be handed.
struct Operand<'a> {
    kind: Kind,
    dtype: DType,
    shape: &'a [u64],
    stride: &'a [u64],
    /// `None` for a fresh empty tensor, which has no storage.
    dense: Option<&'a Dense>,
    /// A lazy conjugate or negative bit: the stored values are not what torch reads.
    lazy: bool,
}

impl Operand<'_> {
    fn dim(&self) -> usize {
        self.shape.len()
    }

    fn numel(&self) -> u64 {
        // Every strided tensor's count was checked when it was made.
        (self.shape.iter()).fold(1u64, |acc, d| acc.saturating_mul(*d))
    }

    fn is_contiguous(&self) -> bool {
        let mut expected = 1u64;
        for (size, stride) in self.shape.iter().zip(self.stride).rev() {
            if *size != 1 && *stride != expected {
                return false;
            }
            expected = expected.saturating_mul(*size);
        }
        true
    }
}

fn resolve(arena: &Arena, mut id: NodeId) -> Operand<'_> {
    let mut lazy = false;
    loop {
        let Node::Domain(Torch::Tensor(t)) = arena.get(id) else {
            return other(arena.get(id).kind_name());
        };
        let t = arena.tensor(*t);
        lazy |= t.conj || t.neg;
        let (kind, d) = match &t.kind {
            TensorKind::Dense(d) => (Kind::Strided, d),
            TensorKind::Quantized { dense, .. } => (Kind::Quantized, dense),
            TensorKind::Empty { dtype } => {
                return Operand {
                    kind: Kind::Strided,
                    dtype: *dtype,
                    shape: &[0],
                    stride: &[1],
                    dense: None,
                    lazy,
                }
            }
            TensorKind::Parameter { data: inner, .. }
            | TensorKind::FromType { base: inner, .. } => {
                id = *inner;
                continue;
            }
            _ => return other(t.kind_name()),
        };
        return Operand {
            kind,
            dtype: d.dtype,
            shape: &d.shape,
            stride: &d.stride,
            dense: Some(d),
            lazy,
        };
    }
}

fn other(name: &'static str) -> Operand<'static> {
    Operand {
        kind: Kind::Other(name),
        dtype: DType::UInt8,
        shape: &[],
        stride: &[],
        dense: None,
        lazy: false,
    }
}

/// The integer values of an index tensor, read from its storage.
struct Ints<'d> {
    bytes: Cow<'d, [u8]>,
    dtype: DType,
    /// The storage element `bytes` starts at.
    first: u64,
}

impl Ints<'_> {
    /// Element `elem` of the storage (inside the tensor's extent), as torch
    /// converts it to int64 (bools to 0 and 1, uint64 wrapping).
    fn get(&self, elem: u64) -> Option<i64> {
        let size = self.dtype.itemsize();
        let at = usize::try_from(elem.checked_sub(self.first)?.checked_mul(size)?).ok()?;
        let b = self
            .bytes
            .get(at..at.checked_add(usize::try_from(size).ok()?)?)?;
        Some(match self.dtype {
            DType::Int8 => i64::from(i8::from_ne_bytes(b.try_into().ok()?)),
            DType::UInt8 => i64::from(u8::from_ne_bytes(b.try_into().ok()?)),
            DType::Bool => i64::from(*b.first()? != 0),
            DType::Int16 => i64::from(i16::from_ne_bytes(b.try_into().ok()?)),
            DType::UInt16 => i64::from(u16::from_ne_bytes(b.try_into().ok()?)),
            DType::Int32 => i64::from(i32::from_ne_bytes(b.try_into().ok()?)),
            DType::UInt32 => i64::from(u32::from_ne_bytes(b.try_into().ok()?)),
            DType::Int64 => i64::from_ne_bytes(b.try_into().ok()?),
            DType::UInt64 => u64::from_ne_bytes(b.try_into().ok()?) as i64,
            _ => return None,
        })
    }
}

/// The dtypes torch converts to int64 indices exactly (a float index would be
/// truncated: refused, as no writer makes one).
fn integral(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Int8
            | DType::UInt8
            | DType::Bool
            | DType::Int16
            | DType::UInt16
            | DType::Int32
            | DType::UInt32
            | DType::Int64
            | DType::UInt64
    )
}

/// `isFloatingType`: what a per-channel scale may be.
fn floating(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Float64
            | DType::Float32
            | DType::Float16
            | DType::BFloat16
            | DType::Float8E4M3Fn
            | DType::Float8E5M2
            | DType::Float8E4M3Fnuz
            | DType::Float8E5M2Fnuz
            | DType::Float8E8M0Fnu
    )
}

/// The dtypes torch can convert to another (its `copy_` kernels): what per-channel
/// zero points may be.
fn convertible(dtype: DType) -> bool {
    floating(dtype)
        || integral(dtype)
        || matches!(
            dtype,
            DType::Complex128 | DType::Complex64 | DType::Complex32 | DType::UInt64
        )
}

fn numel_overflow(size: &[u64]) -> String {
    format!("the element count of size {size:?} overflows torch's 64-bit count")
}

/// The multi-indices of a shape, in row-major order (none when it has a 0).
fn for_each_index(
    shape: &[u64],
    mut f: impl FnMut(&[u64]) -> Result<(), Error>,
) -> Result<(), Error> {
    if shape.contains(&0) {
        return Ok(());
    }
    let mut index = vec![0u64; shape.len()];
    loop {
        f(&index)?;
        // Advance the last dimension that is not at its end.
        let mut d = shape.len();
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            let (Some(i), Some(n)) = (index.get_mut(d), shape.get(d)) else {
                return Ok(());
            };
            *i += 1;
            if *i < *n {
                break;
            }
            *i = 0;
        }
    }
}

/// The storage element at `index` of a strided view starting at `offset`.
/// In range, as the view's extent was checked.
fn element(offset: u64, stride: &[u64], index: &[u64]) -> u64 {
    (index.iter().zip(stride)).fold(offset, |acc, (i, s)| {
        acc.saturating_add(i.saturating_mul(*s))
    })
}

struct Checker<'a, 'd> {
    arena: &'a Arena,
    storages: &'a mut dyn StorageBytes<'d>,
    /// Bytes read and visited so far, and the most allowed.
    read: u64,
    budget: Budget,
    /// Where the tensor being checked was made.
    at: Location,
}

impl<'a, 'd> Checker<'a, 'd> {
    fn fail(&self, what: &str, reason: impl std::fmt::Display) -> Error {
        Error::tensor(format!("{what}: {reason}"), self.at.clone())
    }

    /// Account for `bytes` read or visited, before the work is done.
    fn charge(&mut self, bytes: u64) -> Result<(), Error> {
        self.read = self.read.saturating_add(bytes);
        if self.read > self.budget.max_read {
            return Err(Error::limit(
                Limit::InflatedBytes,
                self.budget.max_read,
                self.at.clone(),
            ));
        }
        let cap = (self.budget.data_bytes)
            .saturating_mul(WORK_PER_BYTE)
            .saturating_add(WORK_FLOOR);
        if self.read > cap {
            return Err(Error::tensor(
                format!(
                    "checking the index tensors would visit more than {cap} bytes, {WORK_PER_BYTE} times what the file holds: index tensors that overlap themselves in memory"
                ),
                self.at.clone(),
            ));
        }
        Ok(())
    }

    /// What a check depends on: for each part, how torch sees it and where its
    /// values are; then `extra`.
    fn key(&self, parts: &[NodeId], extra: &[&[u64]]) -> Vec<u64> {
        let mut key = Vec::new();
        for id in parts {
            let op = resolve(self.arena, *id);
            let kind = match op.kind {
                Kind::Strided => 0,
                Kind::Quantized => 1,
                Kind::Other(_) => 2,
            };
            key.extend([kind, u64::from(op.lazy), op.dtype as u64]);
            match op.dense {
                Some(d) => key.extend([1, u64::from(d.storage.0), d.offset]),
                None => key.push(0),
            }
            key.push(op.shape.len() as u64);
            key.extend(op.shape.iter().chain(op.stride));
        }
        for e in extra {
            key.push(e.len() as u64);
            key.extend(e.iter());
        }
        key
    }

    /// Account for visiting `elements` index values.
    fn visit(&mut self, elements: u64) -> Result<(), Error> {
        self.charge(elements.saturating_mul(8))
    }

    /// A tensor argument that must be a strided tensor torch reads as it is stored.
    fn strided(&self, id: NodeId, what: &str, tensor: &str) -> Result<Operand<'a>, Error> {
        let op = resolve(self.arena, id);
        match op.kind {
            Kind::Strided if !op.lazy => Ok(op),
            Kind::Strided => Err(self.fail(
                what,
                format!("{tensor} carry a lazy conjugate or negative bit"),
            )),
            Kind::Quantized => Err(self.fail(what, format!("{tensor} must not be quantized"))),
            Kind::Other(kind) => Err(self.fail(
                what,
                format!("{tensor} must be a strided CPU tensor, got a {kind} tensor"),
            )),
        }
    }

    /// The values of an integer tensor, read from its storage.
    fn ints(&mut self, op: &Operand) -> Result<Ints<'d>, Error> {
        let empty = Ints {
            bytes: Cow::Borrowed(&[]),
            dtype: op.dtype,
            first: 0,
        };
        let Some(d) = op.dense else {
            return Ok(empty);
        };
        let itemsize = d.dtype.itemsize();
        let overflow = || Error::tensor("index tensor extent overflows", self.at.clone());
        let end = d.extent_bytes().ok_or_else(overflow)?;
        if end == 0 {
            return Ok(empty);
        }
        let start = d.offset.checked_mul(itemsize).ok_or_else(overflow)?;
        let len = end.checked_sub(start).ok_or_else(overflow)?;
        // The bytes read (inflated, for a compressed storage: up to `end`); the
        // elements visited are charged by each check.
        self.charge(end)?;
        let bytes = self
            .storages
            .read(d.storage, start, len)
            .map_err(|e| e.in_entry(self.at.entry.as_deref().unwrap_or_default()))?;
        Ok(Ints {
            bytes,
            dtype: d.dtype,
            first: d.offset,
        })
    }

    fn value(&self, ints: &Ints, elem: u64, what: &str) -> Result<i64, Error> {
        ints.get(elem).ok_or_else(|| {
            Error::tensor(
                format!("cannot read the {what} from their storage"),
                self.at.clone(),
            )
        })
    }

}

#[cfg(test)]
mod tests;
