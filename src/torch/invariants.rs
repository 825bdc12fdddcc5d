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

    /// `sparse_coo_tensor(indices, values, size, is_coalesced, check_invariants=True)`.
    fn coo(
        &mut self,
        parts: &[NodeId],
        size: &[u64],
        coalesced: Option<bool>,
    ) -> Result<(), Error> {
        const WHAT: &str = "sparse COO tensor";
        let [indices, values] = parts else {
            return Err(self.fail(WHAT, "expected indices and values"));
        };
        let ind = self.strided(*indices, WHAT, "indices")?;
        if !integral(ind.dtype) {
            return Err(self.fail(
                WHAT,
                format!("indices must be integers, got {}", ind.dtype.name()),
            ));
        }
        let (&[sparse_dim, nnz], &[s0, s1]) = (ind.shape, ind.stride) else {
            return Err(self.fail(
                WHAT,
                format!("indices must be sparse_dim x nnz, but got: {:?}", ind.shape),
            ));
        };
        let val = self.strided_values(*values, WHAT, false)?;
        // A 0-d value tensor is expanded to one value.
        let vshape: &[u64] = if val.shape.is_empty() {
            &[1]
        } else {
            val.shape
        };
        let (&values_nnz, dense_shape) = vshape.split_first().unwrap_or((&0, &[]));
        if values_nnz != nnz {
            return Err(self.fail(
                WHAT,
                format!("indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from values: {values_nnz}"),
            ));
        }
        let sparse = usize::try_from(sparse_dim).unwrap_or(usize::MAX);
        if sparse.checked_add(dense_shape.len()) != Some(size.len()) {
            return Err(self.fail(
                WHAT,
                format!(
                    "'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = {}, sparse_dim = {sparse_dim}, dense_dim = {}",
                    size.len(),
                    dense_shape.len()
                ),
            ));
        }
        let Some((sparse_size, dense_size)) = size.split_at_checked(sparse) else {
            return Err(self.fail(WHAT, "more sparse dimensions than the size has"));
        };
        if dense_shape != dense_size {
            return Err(self.fail(
                WHAT,
                format!(
                    "values has incorrect size, expected {:?}, got {vshape:?}",
                    [&[nnz], dense_size].concat()
                ),
            ));
        }
        if !numel_fits(size) {
            return Err(self.fail(WHAT, numel_overflow(size)));
        }
        if sparse_dim == 0 || nnz == 0 {
            return Ok(());
        }
        let ints = self.ints(&ind)?;
        let base = ind.dense.map_or(0, |d| d.offset);
        let at = |d: u64, j: u64| {
            base.saturating_add(d.saturating_mul(s0))
                .saturating_add(j.saturating_mul(s1))
        };
        const UNCOALESCED: &str =
            "cannot set is_coalesced to true if indices correspond to uncoalesced COO tensor";
        // With a stride of 0 along nnz every index of a dimension is one value:
        // it is checked once (and such indices are never coalesced).
        let distinct = if s1 == 0 { 1 } else { nnz };
        let coalesced_check = coalesced == Some(true) && nnz > 1;
        if coalesced_check && s1 == 0 {
            return Err(self.fail(WHAT, UNCOALESCED));
        }
        self.visit(
            sparse_dim
                .saturating_mul(distinct)
                .saturating_mul(1 + u64::from(coalesced_check)),
        )?;
        for (d, &dim_size) in (0u64..).zip(sparse_size) {
            for j in 0..distinct {
                let v = self.value(&ints, at(d, j), "indices")?;
                if v < 0 {
                    return Err(self.fail(WHAT, format!("found negative index {v} for dim {d}")));
                }
                if v as u64 >= dim_size {
                    return Err(self.fail(
                        WHAT,
                        format!("size is inconsistent with indices: for dim {d}, size is {dim_size} but found index {v}"),
                    ));
                }
            }
        }
        if coalesced_check {
            // torch flattens each index to its row-major position in the sparse
            // dimensions (with int64 arithmetic, wrapping as its kernel does) and
            // wants strictly increasing positions.
            let mut mult = vec![0i64; sparse_size.len()];
            let mut m = 1i64;
            for (slot, &s) in mult.iter_mut().zip(sparse_size).rev() {
                *slot = m;
                m = m.wrapping_mul(s as i64);
            }
            let mut previous: Option<i64> = None;
            for j in 0..nnz {
                let mut flat = 0i64;
                for (d, &k) in (0u64..).zip(&mult) {
                    let v = self.value(&ints, at(d, j), "indices")?;
                    flat = flat.wrapping_add(v.wrapping_mul(k));
                }
                if previous.is_some_and(|p| flat.wrapping_sub(p) <= 0) {
                    return Err(self.fail(WHAT, UNCOALESCED));
                }
                previous = Some(flat);
            }
        }
        Ok(())
    }

    /// The values of a sparse tensor: strided (a compressed tensor's may be quantized).
    fn strided_values(
        &self,
        id: NodeId,
        what: &str,
        quantized_ok: bool,
    ) -> Result<Operand<'a>, Error> {
        let op = resolve(self.arena, id);
        match op.kind {
            Kind::Strided => Ok(op),
            Kind::Quantized if quantized_ok => Ok(op),
            Kind::Quantized => Err(self.fail(what, "values must not be quantized")),
            Kind::Other(kind) => Err(self.fail(
                what,
                format!("values must be a strided CPU tensor, got a {kind} tensor"),
            )),
        }
    }

    /// `sparse_compressed_tensor(compressed, plain, values, size, layout,
    /// check_invariants=True)`.
    fn compressed(&mut self, layout: Layout, parts: &[NodeId], size: &[u64]) -> Result<(), Error> {
        let what = format!(
            "sparse {} tensor",
            layout.name().trim_start_matches("sparse_").to_uppercase()
        );
        let what = what.as_str();
        let rows = matches!(layout, Layout::SparseCsr | Layout::SparseBsr);
        let (c_name, p_name) = if rows {
            ("crow_indices", "col_indices")
        } else {
            ("ccol_indices", "row_indices")
        };
        let [compressed, plain, values] = parts else {
            return Err(self.fail(
                what,
                "expected compressed indices, plain indices and values",
            ));
        };
        let c = self.strided(*compressed, what, c_name)?;
        let p = self.strided(*plain, what, p_name)?;
        let v = self.strided_values(*values, what, true)?;
        let Some(batch) = c.dim().checked_sub(1) else {
            return Err(self.fail(
                what,
                format!("{c_name} must have dimensionality >= 1 but got 0"),
            ));
        };
        if p.dim() != c.dim() {
            return Err(self.fail(
                what,
                format!(
                    "{c_name} and {p_name} dimensionalities must be equal but got {} and {}",
                    c.dim(),
                    p.dim()
                ),
            ));
        }
        let block = if matches!(layout, Layout::SparseBsr | Layout::SparseBsc) {
            2
        } else {
            0
        };
        let Some(dense) = v.dim().checked_sub(batch + block + 1) else {
            return Err(self.fail(
                what,
                format!("values must have dimensionality > sum of batch and block dimensionalities (={batch} + {block}) but got {}", v.dim()),
            ));
        };
        for (op, name) in [(&p, p_name), (&c, c_name)] {
            if op.stride.last() != Some(&1) {
                return Err(self.fail(
                    what,
                    format!("expected {name} to be a contiguous tensor per batch"),
                ));
            }
        }
        if size.len() != batch + 2 + dense {
            return Err(self.fail(
                what,
                format!("tensor dimensionality must be sum of batch, base, and dense dimensionalities (={batch} + 2 + {dense}) but got {}", size.len()),
            ));
        }
        let dim_at = |shape: &[u64], i: usize| shape.get(i).copied().unwrap_or(0);
        let blocksize = if block == 2 {
            [
                dim_at(v.shape, batch + 1).max(1),
                dim_at(v.shape, batch + 2).max(1),
            ]
        } else {
            [1, 1]
        };
        let batch_size = size.get(..batch).unwrap_or_default();
        let batch_of = |shape: &'a [u64]| shape.get(..batch).unwrap_or_default();
        if batch_of(c.shape) != batch_size
            || batch_of(p.shape) != batch_size
            || batch_of(v.shape) != batch_size
        {
            return Err(self.fail(
                what,
                format!(
                    "all batch dimensions of {c_name} (={:?}), {p_name} (={:?}), and values (={:?}) must be equal to tensor batch dimensions (={batch_size:?})",
                    batch_of(c.shape), batch_of(p.shape), batch_of(v.shape)
                ),
            ));
        }
        let (rows_size, cols_size) = (dim_at(size, batch), dim_at(size, batch + 1));
        for (i, (n, b)) in [(rows_size, blocksize[0]), (cols_size, blocksize[1])]
            .into_iter()
            .enumerate()
        {
            if n % b != 0 {
                return Err(self.fail(
                    what,
                    format!("tensor shape[{}] (={n}) must be divisible with blocksize[{i}] (={b}) as defined by values shape", batch + i),
                ));
            }
        }
        let (nrows, ncols) = (rows_size / blocksize[0], cols_size / blocksize[1]);
        let (cdim, pdim) = if rows { (nrows, ncols) } else { (ncols, nrows) };
        if dim_at(c.shape, batch) != cdim + 1 {
            return Err(self.fail(
                what,
                format!("{c_name}.shape[-1] must be equal to the number of compressed dimensions + 1 (={}), but got {}", cdim + 1, dim_at(c.shape, batch)),
            ));
        }
        let nnz = dim_at(v.shape, batch);
        if dim_at(p.shape, batch) != nnz {
            return Err(self.fail(
                what,
                format!("{p_name}.shape[-1] must be equal to nnz (={nnz}) as defined by values.shape[{batch}], but got {}", dim_at(p.shape, batch)),
            ));
        }
        if c.dtype != p.dtype {
            return Err(self.fail(
                what,
                format!(
                    "{c_name} and {p_name} must have the same dtype, but got {} and {}",
                    c.dtype.name(),
                    p.dtype.name()
                ),
            ));
        }
        let narrow = match c.dtype {
            DType::Int32 => true,
            DType::Int64 => false,
            other => {
                return Err(self.fail(
                    what,
                    format!(
                        "{c_name} and {p_name} dtype must be int32 or int64, but got {}",
                        other.name()
                    ),
                ))
            }
        };
        if !numel_fits(size) {
            return Err(self.fail(what, numel_overflow(size)));
        }
        // The index invariants, in the index dtype's arithmetic (torch's
        // `_validate_compressed_sparse_indices`).
        let limit = if narrow {
            i32::MAX as u64
        } else {
            i64::MAX as u64
        };
        for (n, name) in [
            (pdim, "plain dimension"),
            (cdim, "compressed dimension"),
            (nnz, "nnz"),
        ] {
            if n > limit {
                return Err(self.fail(
                    what,
                    format!(
                        "{}-bit integer overflow in {name} = {n}",
                        if narrow { 32 } else { 64 }
                    ),
                ));
            }
        }
        let (pdim, nnz_i) = (pdim as i64, nnz as i64);
        let ci = self.ints(&c)?;
        let pi = self.ints(&p)?;
        let c_offset = c.dense.map_or(0, |d| d.offset);
        let p_offset = p.dense.map_or(0, |d| d.offset);
        // A dimension of stride 0 repeats the same values: visited once. Batches
        // broadcast in both index tensors are one batch.
        let once = |shape: &[u64], strides: &[&[u64]]| -> Vec<u64> {
            (shape.iter().enumerate())
                .map(|(k, &n)| {
                    let repeated = strides.iter().all(|s| s.get(k) == Some(&0));
                    if repeated {
                        n.min(1)
                    } else {
                        n
                    }
                })
                .collect()
        };
        let p_visited = once(p.shape, &[p.stride]);
        let batches = once(batch_size, &[c.stride, p.stride]);
        let count = |shape: &[u64]| shape.iter().fold(1u64, |acc, n| acc.saturating_mul(*n));
        let per_batch = (cdim.saturating_add(1))
            .saturating_mul(2)
            .saturating_add(nnz);
        self.visit(count(&p_visited).saturating_add(count(&batches).saturating_mul(per_batch)))?;
        for_each_index(&p_visited, |index| {
            let v = self.value(&pi, element(p_offset, p.stride, index), p_name)?;
            if v < 0 || v >= pdim {
                return Err(self.fail(
                    what,
                    format!(
                        "`0 <= {p_name} < {}` is not satisfied (found {v})",
                        if rows { "ncols" } else { "nrows" }
                    ),
                ));
            }
            Ok(())
        })?;
        let (c_batch_stride, p_batch_stride) = (
            c.stride.get(..batch).unwrap_or_default(),
            p.stride.get(..batch).unwrap_or_default(),
        );
        for_each_index(&batches, |b| {
            let c_base = element(c_offset, c_batch_stride, b);
            let p_base = element(p_offset, p_batch_stride, b);
            let cidx = |i: u64| self.value(&ci, c_base.saturating_add(i), c_name);
            if cidx(0)? != 0 {
                return Err(self.fail(what, format!("`{c_name}[..., 0] == 0` is not satisfied")));
            }
            if cidx(cdim)? != nnz_i {
                return Err(self.fail(what, format!("`{c_name}[..., -1] == nnz` is not satisfied")));
            }
            for i in 0..cdim {
                let (cur, next) = (cidx(i)?, cidx(i + 1)?);
                // Exact arithmetic, where torch's kernel subtracts in the index
                // dtype: int32 indices that wrap around (0, 2**31-1, -2**31, -1, 0)
                // pass its check and then crash torch 2.13 (a segfault, even
                // with nnz 0). Exact steps keep every index in 0..=nnz.
                let step = next.checked_sub(cur);
                if !step.is_some_and(|s| (0..=pdim).contains(&s)) {
                    return Err(self.fail(
                        what,
                        format!(
                            "`0 <= {c_name}[..., 1:] - {c_name}[..., :-1] <= {}` is not satisfied",
                            if rows { "ncols" } else { "nrows" }
                        ),
                    ));
                }
            }
            // Steps from 0 that never decrease, up to nnz: each row's cur..next
            // lies in 0..nnz.
            for i in 0..cdim {
                let (cur, next) = (cidx(i)?, cidx(i + 1)?);
                let mut previous = None;
                for k in cur..next {
                    let v = self.value(&pi, p_base.saturating_add(k as u64), p_name)?;
                    if previous.is_some_and(|p| p >= v) {
                        return Err(self.fail(
                            what,
                            format!("`{p_name}[..., {c_name}[..., i - 1]:{c_name}[..., i]] for all i = 1, ..., {} are sorted and distinct along the last dimension values` is not satisfied", if rows { "nrows" } else { "ncols" }),
                        ));
                    }
                    previous = Some(v);
                }
            }
            Ok(())
        })
    }

    /// `_nested_view_from_buffer(buffer, sizes, strides, offsets)`, with the
    /// Python builder's checks: every component inside the buffer.
    fn nested(
        &mut self,
        buffer: NodeId,
        sizes: NodeId,
        strides: NodeId,
        offsets: NodeId,
    ) -> Result<(), Error> {
        const WHAT: &str = "nested tensor";
        let b = resolve(self.arena, buffer);
        if let Kind::Quantized | Kind::Other(_) = b.kind {
            return Err(self.fail(WHAT, "the buffer must be a strided CPU tensor"));
        }
        let s = self.strided(sizes, WHAT, "sizes")?;
        let st = self.strided(strides, WHAT, "strides")?;
        let o = self.strided(offsets, WHAT, "offsets")?;
        let count = s.shape.first().copied();
        if b.dim() != 1
            || s.dim() != 2
            || st.shape != s.shape
            || count.is_none_or(|n| o.shape != [n])
        {
            return Err(self.fail(
                WHAT,
                format!(
                    "inconsistent metadata shapes: buffer {:?}, sizes {:?}, strides {:?}, offsets {:?}",
                    b.shape, s.shape, st.shape, o.shape
                ),
            ));
        }
        for (op, name) in [(&s, "sizes"), (&st, "strides"), (&o, "offsets")] {
            if op.dtype != DType::Int64 {
                return Err(self.fail(
                    WHAT,
                    format!("{name} must be int64, got {}", op.dtype.name()),
                ));
            }
            // torch reads them as flat arrays, whatever their strides.
            if !op.is_contiguous() {
                return Err(self.fail(WHAT, format!("{name} must be contiguous")));
            }
        }
        let n = b.numel();
        let (si, sti, oi) = (self.ints(&s)?, self.ints(&st)?, self.ints(&o)?);
        // Contiguous: each value is visited once.
        self.visit(s.numel().saturating_mul(2).saturating_add(o.numel()))?;
        let first = |op: &Operand| op.dense.map_or(0, |d| d.offset);
        let (s0, st0, o0) = (first(&s), first(&st), first(&o));
        let ndim = s.shape.get(1).copied().unwrap_or(0);
        for i in 0..count.unwrap_or(0) {
            let offset = self.value(&oi, o0.saturating_add(i), "offsets")?;
            let mut extent = Some(
                u64::try_from(offset)
                    .map_err(|_| self.fail(WHAT, "negative nested tensor metadata"))?,
            );
            let mut empty = false;
            let row = i.saturating_mul(ndim);
            for j in 0..ndim {
                let size = self.value(&si, s0.saturating_add(row).saturating_add(j), "sizes")?;
                let stride =
                    self.value(&sti, st0.saturating_add(row).saturating_add(j), "strides")?;
                let (Ok(size), Ok(stride)) = (u64::try_from(size), u64::try_from(stride)) else {
                    return Err(self.fail(WHAT, "negative nested tensor metadata"));
                };
                empty |= size == 0;
                extent =
                    extent.and_then(|e| e.checked_add(size.checked_sub(1)?.checked_mul(stride)?));
            }
            if empty {
                continue;
            }
            match extent.and_then(|e| e.checked_add(1)) {
                Some(e) if e <= n => {}
                Some(e) => {
                    return Err(self.fail(
                        WHAT,
                        format!("component {i} needs {e} elements, the buffer has {n}"),
                    ))
                }
                None => {
                    return Err(self.fail(WHAT, format!("the extent of component {i} overflows")))
                }
            }
        }
        Ok(())
    }

    /// `_rebuild_qtensor` with per-channel parameters: the checks of torch's
    /// Python code and of `make_per_channel_affine_quantizer`.
    fn per_channel(
        &mut self,
        dense: &Dense,
        scales: NodeId,
        zero_points: NodeId,
        axis: i64,
    ) -> Result<(), Error> {
        const WHAT: &str = "per-channel quantized tensor";
        let channels = usize::try_from(axis)
            .ok()
            .and_then(|a| dense.shape.get(a))
            .copied();
        let Some(channels) = channels else {
            return Err(self.fail(
                WHAT,
                format!(
                    "per_channel axis {axis} out of range for size {:?}",
                    dense.shape
                ),
            ));
        };
        let s = resolve(self.arena, scales);
        let z = resolve(self.arena, zero_points);
        for (op, name) in [(&s, "scales"), (&z, "zero_points")] {
            if let Kind::Quantized | Kind::Other(_) = op.kind {
                return Err(self.fail(WHAT, format!("{name} must be a strided CPU tensor")));
            }
        }
        if s.numel() != channels || z.numel() != channels {
            return Err(self.fail(
                WHAT,
                format!("per_channel scales/zero_points length must equal size[axis]={channels}, got scales={}, zero_points={}", s.numel(), z.numel()),
            ));
        }
        if s.dim() != 1 || z.dim() != 1 {
            return Err(self.fail(WHAT, "scale and zero_point tensors must have dimension 1"));
        }
        if !floating(s.dtype) {
            return Err(self.fail(
                WHAT,
                format!(
                    "scale tensor must be floating point, got {}",
                    s.dtype.name()
                ),
            ));
        }
        if !convertible(z.dtype) {
            return Err(self.fail(
                WHAT,
                format!(
                    "zero points of dtype {} cannot be converted",
                    z.dtype.name()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::torch::tensor::{Dims, TensorNode};

    /// Storages in memory, by index.
    struct Mem(Vec<Vec<u8>>);

    impl<'d> StorageBytes<'d> for Mem {
        fn read(&mut self, id: StorageId, start: u64, len: u64) -> Result<Cow<'d, [u8]>, Error> {
            let bytes = &self.0[id.index()];
            Ok(Cow::Owned(
                bytes[start as usize..(start + len) as usize].to_vec(),
            ))
        }
    }

    struct File {
        arena: Arena,
        mem: Vec<Vec<u8>>,
    }

    fn bytes_of(dtype: DType, values: &[i64]) -> Vec<u8> {
        values
            .iter()
            .flat_map(|v| match dtype {
                DType::Int64 => v.to_ne_bytes().to_vec(),
                DType::Int32 => (*v as i32).to_ne_bytes().to_vec(),
                DType::Int16 => (*v as i16).to_ne_bytes().to_vec(),
                DType::UInt8 | DType::Bool | DType::QInt8 => vec![*v as u8],
                DType::Float32 => (*v as f32).to_ne_bytes().to_vec(),
                DType::Float64 => (*v as f64).to_ne_bytes().to_vec(),
                other => panic!("no test values for {other:?}"),
            })
            .collect()
    }

    fn contiguous(shape: &[u64]) -> Vec<u64> {
        let mut stride = vec![1u64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1] * shape[i + 1].max(1);
        }
        stride
    }

    impl File {
        fn new() -> File {
            File {
                arena: Arena::new(&Limits::default()),
                mem: Vec::new(),
            }
        }

        /// A strided view of a new storage holding `values`.
        fn view(
            &mut self,
            dtype: DType,
            values: &[i64],
            offset: u64,
            shape: &[u64],
            stride: &[u64],
        ) -> NodeId {
            self.mem.push(bytes_of(dtype, values));
            let dense = Dense {
                storage: StorageId(self.mem.len() as u32 - 1),
                dtype,
                offset,
                shape: shape.into(),
                stride: stride.into(),
            };
            self.arena
                .push_tensor(TensorNode::new(TensorKind::Dense(dense), false))
                .unwrap()
        }

        fn tensor(&mut self, dtype: DType, values: &[i64], shape: &[u64]) -> NodeId {
            self.view(dtype, values, 0, shape, &contiguous(shape))
        }

        fn i64s(&mut self, values: &[i64], shape: &[u64]) -> NodeId {
            self.tensor(DType::Int64, values, shape)
        }

        /// `n` float values of shape `shape` (leading `n`).
        fn values(&mut self, shape: &[u64]) -> NodeId {
            let n: u64 = shape.iter().product();
            self.tensor(DType::Float32, &vec![1; n as usize], shape)
        }

        fn sparse(
            &mut self,
            layout: Layout,
            parts: &[NodeId],
            size: &[u64],
            coalesced: Option<bool>,
        ) {
            let node = TensorNode::new(
                TensorKind::Sparse {
                    layout,
                    parts: parts.into(),
                    size: size.into(),
                    coalesced,
                },
                false,
            );
            self.arena.push_tensor_to_check(node, 7).unwrap();
        }

        fn check(self) -> Result<(), Error> {
            self.check_with_budget(u64::MAX, u64::MAX)
        }

        fn check_with_budget(self, max_read: u64, data_bytes: u64) -> Result<(), Error> {
            let budget = Budget {
                max_read,
                data_bytes,
            };
            check(&self.arena, &mut Mem(self.mem), budget, "archive/data.pkl")
        }
    }

    fn message(r: Result<(), Error>) -> String {
        match r {
            Ok(()) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    /// A COO tensor of `indices` (sparse_dim x nnz, int64) with float values.
    fn coo(indices: &[&[i64]], size: &[u64], coalesced: Option<bool>) -> Result<(), Error> {
        let mut f = File::new();
        let nnz = indices.first().map_or(0, |r| r.len()) as u64;
        let flat: Vec<i64> = indices.iter().flat_map(|r| r.iter().copied()).collect();
        let i = f.i64s(&flat, &[indices.len() as u64, nnz]);
        let v = f.values(&[nnz]);
        f.sparse(Layout::SparseCoo, &[i, v], size, coalesced);
        f.check()
    }

    #[test]
    fn coo_indices_must_lie_inside_the_size() {
        coo(&[&[0, 2, 1]], &[3], None).unwrap();
        coo(&[&[0, 1], &[4, 0]], &[2, 5], None).unwrap();
        let e = message(coo(&[&[0, 3]], &[3], None));
        assert!(e.contains("for dim 0, size is 3 but found index 3"), "{e}");
        assert!(
            e.contains("archive/data.pkl") && e.contains("byte offset 7"),
            "{e}"
        );
        let e = message(coo(&[&[0, 1], &[0, -1]], &[2, 2], None));
        assert!(e.contains("found negative index -1 for dim 1"), "{e}");
        // No index at all: nothing to check, whatever the size.
        coo(&[&[], &[]], &[0, 0], None).unwrap();
    }

    #[test]
    fn coo_shapes_must_agree() {
        let mut f = File::new();
        let i = f.i64s(&[0, 1], &[2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        assert!(message(f.check()).contains("sparse_dim x nnz"));

        let mut f = File::new();
        let i = f.i64s(&[0, 1, 2], &[1, 3]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        assert!(message(f.check()).contains("same nnz"));

        let mut f = File::new();
        let i = f.i64s(&[0, 1], &[1, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3, 3], None);
        assert!(message(f.check()).contains("sparse_dim + dense_dim"));

        let mut f = File::new();
        let i = f.i64s(&[0, 1], &[1, 2]);
        let v = f.values(&[2, 3]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3, 4], None);
        assert!(message(f.check()).contains("values has incorrect size"));

        let mut f = File::new();
        let i = f.i64s(&[0, 1], &[1, 2]);
        let v = f.values(&[2, 3]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3, 3], None);
        f.check().unwrap();

        // A 0-d value is one value.
        let mut f = File::new();
        let i = f.i64s(&[2], &[1, 1]);
        let v = f.values(&[]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        f.check().unwrap();

        // No sparse dimension: the values are the tensor.
        let mut f = File::new();
        let i = f.i64s(&[], &[0, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[], None);
        f.check().unwrap();
    }

    #[test]
    fn coo_sizes_must_fit_torchs_count() {
        let big = 1u64 << 62;
        assert!(message(coo(&[&[0], &[0]], &[big, 2], None)).contains("overflows"));
        coo(&[&[0], &[0]], &[big, 1], None).unwrap();
    }

    #[test]
    fn coo_index_dtypes() {
        for (dtype, ok) in [
            (DType::Int32, true),
            (DType::Int16, true),
            (DType::UInt8, true),
            (DType::Float32, false),
        ] {
            let mut f = File::new();
            let i = f.tensor(dtype, &[0, 2], &[1, 2]);
            let v = f.values(&[2]);
            f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
            assert_eq!(f.check().is_ok(), ok, "{dtype:?}");
        }
        // int32 indices are read as int32.
        let mut f = File::new();
        let i = f.tensor(DType::Int32, &[0, 3], &[1, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        assert!(message(f.check()).contains("found index 3"));
    }

    #[test]
    fn coo_indices_are_read_through_their_strides() {
        // [[0, 1], [2, 3]] stored transposed after one unused element: the rows
        // are (0, 1) and (2, 3).
        let mut f = File::new();
        let i = f.view(DType::Int64, &[9, 0, 2, 1, 3], 1, &[2, 2], &[1, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[2, 4], None);
        f.check().unwrap();
        let mut f = File::new();
        let i = f.view(DType::Int64, &[9, 0, 2, 1, 3], 1, &[2, 2], &[1, 2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[2, 3], None);
        assert!(message(f.check()).contains("for dim 1, size is 3 but found index 3"));
    }

    #[test]
    fn coalesced_coo_indices_must_be_sorted_and_distinct() {
        coo(&[&[0, 1, 1], &[2, 0, 1]], &[2, 3], Some(true)).unwrap();
        coo(&[&[1, 0]], &[3], Some(false)).unwrap();
        coo(&[&[1, 1]], &[3], None).unwrap();
        for indices in [
            &[&[1i64, 0][..]][..],
            &[&[1, 1]],
            &[&[0, 0], &[1, 1]],
            &[&[0, 0], &[2, 1]],
        ] {
            let e = message(coo(indices, &[3, 3][..indices.len()], Some(true)));
            assert!(e.contains("uncoalesced"), "{e}");
        }
    }

    #[test]
    fn sparse_parts_must_be_strided_tensors() {
        let mut f = File::new();
        let i = f.i64s(&[0, 1], &[1, 2]);
        let meta = f
            .arena
            .push_tensor(TensorNode::new(
                TensorKind::Meta {
                    dtype: DType::Float32,
                    shape: Dims::from(&[2u64][..]),
                    stride: Dims::from(&[1u64][..]),
                },
                false,
            ))
            .unwrap();
        f.sparse(Layout::SparseCoo, &[i, meta], &[3], None);
        assert!(message(f.check()).contains("got a meta tensor"));

        // Indices with a lazy negative bit hold other values than torch reads.
        let mut f = File::new();
        let mut neg = TensorNode::new(
            TensorKind::Dense(Dense {
                storage: StorageId(0),
                dtype: DType::Int64,
                offset: 0,
                shape: Dims::from(&[1u64, 1][..]),
                stride: Dims::from(&[1u64, 1][..]),
            }),
            false,
        );
        neg.neg = true;
        f.mem.push(bytes_of(DType::Int64, &[0]));
        let i = f.arena.push_tensor(neg).unwrap();
        let v = f.values(&[1]);
        f.sparse(Layout::SparseCoo, &[i, v], &[3], None);
        assert!(message(f.check()).contains("lazy"));

        // A Parameter is its data.
        let mut f = File::new();
        let data = f.i64s(&[0, 1], &[1, 2]);
        let i = f
            .arena
            .push_tensor(TensorNode::new(
                TensorKind::Parameter { data, state: None },
                false,
            ))
            .unwrap();
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCoo, &[i, v], &[2], None);
        f.check().unwrap();
    }

    /// A compressed tensor over int64 (or int32) indices and float values of
    /// shape `values`.
    fn compressed(
        layout: Layout,
        dtype: DType,
        cidx: (&[i64], &[u64]),
        pidx: (&[i64], &[u64]),
        values: &[u64],
        size: &[u64],
    ) -> Result<(), Error> {
        let mut f = File::new();
        let c = f.tensor(dtype, cidx.0, cidx.1);
        let p = f.tensor(dtype, pidx.0, pidx.1);
        let v = f.values(values);
        f.sparse(layout, &[c, p, v], size, None);
        f.check()
    }

    fn csr(cidx: &[i64], pidx: &[i64], size: &[u64]) -> Result<(), Error> {
        let (nc, np) = (cidx.len() as u64, pidx.len() as u64);
        compressed(
            Layout::SparseCsr,
            DType::Int64,
            (cidx, &[nc]),
            (pidx, &[np]),
            &[np],
            size,
        )
    }

    #[test]
    fn compressed_indices_start_at_0_end_at_nnz_and_never_decrease() {
        csr(&[0, 1, 2], &[0, 1], &[2, 2]).unwrap();
        csr(&[0, 0, 0], &[], &[2, 2]).unwrap();
        csr(&[0, 2, 2], &[0, 1], &[2, 2]).unwrap();
        assert!(message(csr(&[1, 1, 2], &[0, 1], &[2, 2])).contains("crow_indices[..., 0] == 0"));
        assert!(message(csr(&[0, 1, 1], &[0, 1], &[2, 2])).contains("crow_indices[..., -1] == nnz"));
        assert!(message(csr(&[1, 1, 1], &[], &[2, 2])).contains("[..., 0] == 0"));
        let e = message(csr(&[0, 2, 1, 2], &[0, 1], &[3, 2]));
        assert!(
            e.contains("crow_indices[..., 1:] - crow_indices[..., :-1] <= ncols"),
            "{e}"
        );
        // A row holds at most ncols entries.
        let e = message(csr(&[0, 3, 3], &[0, 0, 1], &[2, 2]));
        assert!(e.contains("<= ncols"), "{e}");
        // int32 indices that wrap around pass torch's own check, then crash it.
        let m = i64::from(i32::MAX);
        let e = message(compressed(
            Layout::SparseCsr,
            DType::Int32,
            (&[0, m, -m - 1, -1, 0], &[5]),
            (&[], &[0]),
            &[0],
            &[4, m as u64],
        ));
        assert!(e.contains("<= ncols"), "{e}");
    }

    #[test]
    fn plain_indices_lie_in_range_sorted_and_distinct_within_a_row() {
        assert!(message(csr(&[0, 1, 2], &[0, 2], &[2, 2])).contains("0 <= col_indices < ncols"));
        assert!(message(csr(&[0, 1, 2], &[0, -1], &[2, 2])).contains("0 <= col_indices < ncols"));
        assert!(message(csr(&[0, 2, 2], &[1, 0], &[2, 2])).contains("sorted and distinct"));
        assert!(message(csr(&[0, 2, 2], &[1, 1], &[2, 2])).contains("sorted and distinct"));
        // Sorted within each row, not across rows.
        csr(&[0, 1, 2], &[1, 0], &[2, 2]).unwrap();
        // CSC: row indices against the rows.
        let ccol = |p: &[i64], size: &[u64]| {
            compressed(
                Layout::SparseCsc,
                DType::Int64,
                (&[0, 1, 2], &[3]),
                (p, &[2]),
                &[2],
                size,
            )
        };
        ccol(&[2, 0], &[3, 2]).unwrap();
        assert!(message(ccol(&[3, 0], &[3, 2])).contains("0 <= row_indices < nrows"));
    }

    #[test]
    fn compressed_shapes_and_dtypes() {
        // Batched: each batch has its own rows.
        compressed(
            Layout::SparseCsr,
            DType::Int64,
            (&[0, 1, 2, 0, 0, 2], &[2, 3]),
            (&[0, 1, 0, 1], &[2, 2]),
            &[2, 2],
            &[2, 2, 2],
        )
        .unwrap();
        let e = message(compressed(
            Layout::SparseCsr,
            DType::Int64,
            (&[0, 1, 2, 0, 3, 2], &[2, 3]),
            (&[0, 1, 0, 1], &[2, 2]),
            &[2, 2],
            &[2, 2, 2],
        ));
        assert!(e.contains("<= ncols"), "{e}");
        // Blocks: values (nnz, 2, 2) over a 4 x 4 tensor of 2 x 2 blocks.
        compressed(
            Layout::SparseBsr,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2, 2, 2],
            &[4, 4],
        )
        .unwrap();
        compressed(
            Layout::SparseBsc,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2, 2, 3],
            &[4, 6],
        )
        .unwrap();
        let e = message(compressed(
            Layout::SparseBsr,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (&[0, 2], &[2]),
            &[2, 2, 2],
            &[4, 4],
        ));
        assert!(e.contains("0 <= col_indices < ncols"), "{e}");
        let e = message(compressed(
            Layout::SparseBsr,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2, 2, 2],
            &[4, 5],
        ));
        assert!(e.contains("divisible"), "{e}");
        // int32 indices, one dtype for both, and only int32 or int64.
        compressed(
            Layout::SparseCsr,
            DType::Int32,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2],
            &[2, 2],
        )
        .unwrap();
        let e = message(compressed(
            Layout::SparseCsr,
            DType::Int16,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2],
            &[2, 2],
        ));
        assert!(e.contains("int32 or int64"), "{e}");
        let mut f = File::new();
        let c = f.tensor(DType::Int32, &[0, 1, 2], &[3]);
        let p = f.i64s(&[0, 1], &[2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCsr, &[c, p, v], &[2, 2], None);
        assert!(message(f.check()).contains("same dtype"));
        // The plain dimension must fit the index dtype.
        let e = message(compressed(
            Layout::SparseCsr,
            DType::Int32,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[2],
            &[2, 1 << 31],
        ));
        assert!(e.contains("32-bit integer overflow"), "{e}");
        // Shapes.
        assert!(message(csr(&[0, 1, 2, 2], &[0, 1], &[2, 2]))
            .contains("number of compressed dimensions + 1"));
        assert!(message(csr(&[0, 1, 2], &[0, 1], &[2])).contains("dimensionality must be sum"));
        let e = message(compressed(
            Layout::SparseCsr,
            DType::Int64,
            (&[0, 1, 2], &[3]),
            (&[0, 1], &[2]),
            &[3],
            &[2, 2],
        ));
        assert!(e.contains("must be equal to nnz"), "{e}");
        assert!(message(csr(&[0, 1, 2], &[0, 1], &[2, 1 << 62])).contains("overflows"));
        // Indices must be contiguous in their last dimension.
        let mut f = File::new();
        let c = f.view(DType::Int64, &[0, 9, 1, 9, 2], 0, &[3], &[2]);
        let p = f.i64s(&[0, 1], &[2]);
        let v = f.values(&[2]);
        f.sparse(Layout::SparseCsr, &[c, p, v], &[2, 2], None);
        assert!(message(f.check()).contains("contiguous tensor per batch"));
    }

    fn nested(
        buffer_len: u64,
        sizes: &[i64],
        strides: &[i64],
        offsets: &[i64],
        ndim: u64,
    ) -> Result<(), Error> {
        let mut f = File::new();
        let n = offsets.len() as u64;
        let b = f.values(&[buffer_len]);
        let s = f.i64s(sizes, &[n, ndim]);
        let st = f.i64s(strides, &[n, ndim]);
        let o = f.i64s(offsets, &[n]);
        let node = TensorNode::new(
            TensorKind::Nested {
                buffer: b,
                sizes: s,
                strides: st,
                offsets: o,
            },
            false,
        );
        f.arena.push_tensor_to_check(node, 0).unwrap();
        f.check()
    }

    #[test]
    fn nested_components_lie_inside_their_buffer() {
        nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, 4], 2).unwrap();
        nested(10, &[2, 2, 2, 3], &[2, 1, 3, 1], &[0, 4], 2).unwrap();
        let e = message(nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, 8], 2));
        assert!(
            e.contains("component 1 needs 11 elements, the buffer has 10"),
            "{e}"
        );
        assert!(
            message(nested(10, &[2, 2, 1, 3], &[2, 1, 3, 1], &[0, -1], 2)).contains("negative")
        );
        assert!(
            message(nested(10, &[2, -2, 1, 3], &[2, 1, 3, 1], &[0, 4], 2)).contains("negative")
        );
        assert!(
            message(nested(10, &[2, 2, 1, 3], &[2, -1, 3, 1], &[0, 4], 2)).contains("negative")
        );
        // An empty component may start anywhere.
        nested(10, &[2, 0], &[1, 1], &[100], 2).unwrap();
        // No component at all.
        nested(10, &[], &[], &[], 2).unwrap();
        let e = message(nested(
            10,
            &[1 << 40, 1 << 40],
            &[1 << 40, 1 << 40],
            &[0],
            2,
        ));
        assert!(e.contains("needs") || e.contains("overflows"), "{e}");
    }

    #[test]
    fn nested_metadata_shapes_and_dtypes() {
        let mut f = File::new();
        let b = f.values(&[10]);
        let s = f.tensor(DType::Int32, &[2, 2], &[1, 2]);
        let st = f.i64s(&[2, 1], &[1, 2]);
        let o = f.i64s(&[0], &[1]);
        let node = TensorNode::new(
            TensorKind::Nested {
                buffer: b,
                sizes: s,
                strides: st,
                offsets: o,
            },
            false,
        );
        f.arena.push_tensor_to_check(node, 0).unwrap();
        assert!(message(f.check()).contains("sizes must be int64"));

        let mut f = File::new();
        let b = f.values(&[10]);
        let s = f.i64s(&[2, 2], &[1, 2]);
        let st = f.i64s(&[2, 1], &[1, 2]);
        let o = f.i64s(&[0, 0], &[2]);
        let node = TensorNode::new(
            TensorKind::Nested {
                buffer: b,
                sizes: s,
                strides: st,
                offsets: o,
            },
            false,
        );
        f.arena.push_tensor_to_check(node, 0).unwrap();
        assert!(message(f.check()).contains("inconsistent metadata shapes"));

        let mut f = File::new();
        let b = f.values(&[2, 5]);
        let s = f.i64s(&[2, 2], &[1, 2]);
        let st = f.i64s(&[2, 1], &[1, 2]);
        let o = f.i64s(&[0], &[1]);
        let node = TensorNode::new(
            TensorKind::Nested {
                buffer: b,
                sizes: s,
                strides: st,
                offsets: o,
            },
            false,
        );
        f.arena.push_tensor_to_check(node, 0).unwrap();
        assert!(message(f.check()).contains("inconsistent metadata shapes"));

        // torch reads the metadata as flat arrays: a strided view of them is refused.
        let mut f = File::new();
        let b = f.values(&[10]);
        let s = f.view(DType::Int64, &[2, 9, 2], 0, &[1, 2], &[2, 2]);
        let st = f.i64s(&[2, 1], &[1, 2]);
        let o = f.i64s(&[0], &[1]);
        let node = TensorNode::new(
            TensorKind::Nested {
                buffer: b,
                sizes: s,
                strides: st,
                offsets: o,
            },
            false,
        );
        f.arena.push_tensor_to_check(node, 0).unwrap();
        assert!(message(f.check()).contains("contiguous"));
    }

    fn per_channel(
        shape: &[u64],
        scales: (DType, &[u64]),
        zero_points: (DType, &[u64]),
        axis: i64,
    ) -> Result<(), Error> {
        let mut f = File::new();
        let numel = |s: &[u64]| s.iter().product::<u64>() as usize;
        let s = f.tensor(scales.0, &vec![1; numel(scales.1)], scales.1);
        let z = f.tensor(zero_points.0, &vec![0; numel(zero_points.1)], zero_points.1);
        f.mem.push(vec![0; numel(shape)]);
        let dense = Dense {
            storage: StorageId(f.mem.len() as u32 - 1),
            dtype: DType::QInt8,
            offset: 0,
            shape: shape.into(),
            stride: contiguous(shape)[..].into(),
        };
        let params = QParams::PerChannel {
            qscheme: crate::torch::policy::QScheme::PerChannelAffine,
            scales: s,
            zero_points: z,
            axis,
        };
        let node = TensorNode::new(TensorKind::Quantized { dense, params }, false);
        f.arena.push_tensor_to_check(node, 0).unwrap();
        f.check()
    }

    #[test]
    fn per_channel_parameters_have_one_entry_per_channel() {
        let (f64_, i64_) = (DType::Float64, DType::Int64);
        per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 0).unwrap();
        per_channel(&[3, 4], (f64_, &[4]), (i64_, &[4]), 1).unwrap();
        per_channel(&[3, 4], (DType::Float32, &[3]), (DType::Float32, &[3]), 0).unwrap();
        per_channel(&[0, 4], (f64_, &[0]), (i64_, &[0]), 0).unwrap();
        let e = message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 1));
        assert!(
            e.contains("size[axis]=4, got scales=3, zero_points=3"),
            "{e}"
        );
        assert!(
            message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[4]), 0)).contains("zero_points=4")
        );
        assert!(message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), 2))
            .contains("axis 2 out of range"));
        assert!(
            message(per_channel(&[3, 4], (f64_, &[3]), (i64_, &[3]), -1))
                .contains("axis -1 out of range")
        );
        assert!(message(per_channel(&[], (f64_, &[0]), (i64_, &[0]), 0)).contains("out of range"));
        assert!(
            message(per_channel(&[3, 4], (f64_, &[3, 1]), (i64_, &[3]), 0)).contains("dimension 1")
        );
        assert!(
            message(per_channel(&[3, 4], (i64_, &[3]), (i64_, &[3]), 0)).contains("floating point")
        );
        assert!(
            message(per_channel(&[3, 4], (f64_, &[3]), (DType::QInt8, &[3]), 0))
                .contains("cannot be converted")
        );
    }

    #[test]
    fn reading_is_charged_against_the_budget() {
        // 2 x 1000 int64 indices: 16,000 bytes read, 2,000 values visited.
        let build = || {
            let mut f = File::new();
            let values: Vec<i64> = (0..2000).map(|i| i % 1000).collect();
            let i = f.i64s(&values, &[2, 1000]);
            let v = f.values(&[1000]);
            f.sparse(Layout::SparseCoo, &[i, v], &[1000, 1000], None);
            f
        };
        build().check_with_budget(32_000, u64::MAX).unwrap();
        let e = build().check_with_budget(31_999, u64::MAX).unwrap_err();
        assert!(e.is_limit(), "{e}");
    }

    #[test]
    fn broadcast_indices_are_visited_once() {
        // (2, 2**40) indices of stride 0 over one int64: one value per dimension.
        let coo = |coalesced| {
            let mut f = File::new();
            let i = f.view(DType::Int64, &[0], 0, &[2, 1 << 40], &[0, 0]);
            let v = f.view(DType::Float32, &[1], 0, &[1 << 40], &[0]);
            f.sparse(Layout::SparseCoo, &[i, v], &[1, 1], coalesced);
            f.check_with_budget(u64::MAX, 64)
        };
        coo(None).unwrap();
        assert!(message(coo(Some(true))).contains("uncoalesced"));
        // CSR batches broadcast in both index tensors are one batch.
        let mut f = File::new();
        let c = f.view(DType::Int64, &[0, 1, 2], 0, &[1 << 40, 3], &[0, 1]);
        let p = f.view(DType::Int64, &[0, 1], 0, &[1 << 40, 2], &[0, 1]);
        let v = f.view(DType::Float32, &[1], 0, &[1 << 40, 2], &[0, 0]);
        f.sparse(Layout::SparseCsr, &[c, p, v], &[1 << 40, 2, 2], None);
        f.check_with_budget(u64::MAX, 64).unwrap();
    }

    #[test]
    fn index_tensors_that_overlap_themselves_cost_at_most_a_multiple_of_the_file() {
        // CSR batches whose rows overlap (a batch stride of 1 over rows of
        // 2**16 + 1): 2**32 values visited over a storage of about 1 MiB.
        let n = 1u64 << 16;
        let mut f = File::new();
        let cidx: Vec<i64> = vec![0; (2 * n) as usize];
        let c = f.view(DType::Int64, &cidx, 0, &[n, n + 1], &[1, 1]);
        let p = f.view(DType::Int64, &[], 0, &[n, 0], &[1, 1]);
        let v = f.view(DType::Float32, &[], 0, &[n, 0], &[1, 1]);
        f.sparse(Layout::SparseCsr, &[c, p, v], &[n, n, 1], None);
        let e = message(f.check_with_budget(u64::MAX, 2 << 20));
        assert!(e.contains("overlap themselves"), "{e}");
    }

    #[test]
    fn dense_and_per_tensor_quantized_tensors_are_not_checked_here() {
        let mut f = File::new();
        f.i64s(&[-5], &[1]);
        f.check().unwrap();
    }
}
