//! Sparse tensors as torch checks them: COO indices in range and, when it is
//! declared, coalesced; compressed layouts' offsets monotone and indices in range.

use super::*;

impl<'a, 'd> Checker<'a, 'd> {
    /// `sparse_coo_tensor(indices, values, size, is_coalesced, check_invariants=True)`.
    pub(super) fn coo(
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
    pub(super) fn strided_values(
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
    pub(super) fn compressed(&mut self, layout: Layout, parts: &[NodeId], size: &[u64]) -> Result<(), Error> {
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
}
