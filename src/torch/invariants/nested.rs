//! Nested tensors' sizes, strides and offsets against their buffer, and
//! per-channel quantization parameters against the tensor they quantize.

use super::*;

impl<'a, 'd> Checker<'a, 'd> {
    /// `_nested_view_from_buffer(buffer, sizes, strides, offsets)`, with the
    /// Python builder's checks: every component inside the buffer.
    pub(super) fn nested(
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
    pub(super) fn per_channel(
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
