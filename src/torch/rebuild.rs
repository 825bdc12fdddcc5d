//! The `torch._utils._rebuild_*` functions: each turns its argument tuple into a
//! tensor description, validated against its storage before anything is built.

use crate::error::{Error, Location};
use crate::torch::args::Args;
use crate::torch::dtype::DType;
use crate::torch::policy::{Builtin, Global, QScheme, RebuildFn};
use crate::limits::Limits;
use crate::torch::storages::{valid_device, IdFormat, Storages};
use crate::torch::tensor::{numel_fits, numel_overflow, Dense, QParams, TensorKind, TensorNode};
use crate::torch::value::{Arena, Node, TensorId, Torch};
use crate::value::NodeId;

/// What the rebuild functions need of the hooks that run them: the limits, how
/// persistent ids name storages, the storages so far, and a call of a callable
/// the rules allow (`_rebuild_from_type_v2` calls its `func`).
pub trait RebuildHooks {
    fn limits(&self) -> &Limits;
    fn id_format(&self) -> IdFormat;
    fn storages(&mut self) -> &mut Storages;
    fn call(
        &mut self,
        arena: &mut Arena,
        func: NodeId,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error>;
}

pub fn call(
    h: &mut impl RebuildHooks,
    arena: &mut Arena,
    f: RebuildFn,
    args: NodeId,
    at: &Location,
) -> Result<NodeId, Error> {
    let name = Builtin::Rebuild(f).full_name();
    let a = Args::new(arena, args, at, &name)?;
    let node = match f {
        RebuildFn::Tensor => {
            a.arity(4, 4)?;
            let dense = dense(h, &a, None)?;
            TensorNode::new(TensorKind::Dense(dense), false)
        }
        RebuildFn::TensorV2 | RebuildFn::TensorV3 => {
            let v3 = f == RebuildFn::TensorV3;
            let base = if v3 { 7 } else { 6 };
            a.arity(base, base + 1)?;
            let dtype = if v3 { Some(a.dtype(6)?) } else { None };
            let requires_grad = a.bool(4, "requires_grad")?;
            hooks_arg(&a, 5)?;
            let dense = dense(h, &a, dtype)?;
            check_grad(&a, dense.dtype, requires_grad)?;
            let mut t = TensorNode::new(TensorKind::Dense(dense), requires_grad);
            if a.len() == base + 1 {
                metadata(&a, base, &mut t)?;
            }
            t
        }
        RebuildFn::Parameter | RebuildFn::ParameterWithState => {
            let with_state = f == RebuildFn::ParameterWithState;
            let n = if with_state { 4 } else { 3 };
            a.arity(n, n)?;
            let data = a.tensor(0, "data")?;
            let requires_grad = a.bool(1, "requires_grad")?;
            if let Some(dtype) = tensor_dtype(arena, data) {
                check_grad(&a, dtype, requires_grad)?;
            }
            hooks_arg(&a, 2)?;
            let state = if with_state { Some(a.id(3)?) } else { None };
            TensorNode::new(TensorKind::Parameter { data, state }, requires_grad)
        }
        RebuildFn::QTensor => {
            a.arity(7, 7)?;
            let dense = dense(h, &a, None)?;
            if !dense.dtype.is_quantized() {
                return Err(a.fail(format!(
                    "the storage of a quantized tensor has dtype {}",
                    dense.dtype.name()
                )));
            }
            let params = qparams(&a, 4)?;
            let requires_grad = a.bool(5, "requires_grad")?;
            check_grad(&a, dense.dtype, requires_grad)?;
            hooks_arg(&a, 6)?;
            let per_channel = matches!(params, QParams::PerChannel { .. });
            let node = TensorNode::new(TensorKind::Quantized { dense, params }, requires_grad);
            // Per-channel parameters are tensors, checked against the size once
            // their storages are bound.
            return if per_channel {
                arena.push_tensor_to_check(node, offset_of(at))
            } else {
                arena.push_tensor(node)
            };
        }
        RebuildFn::SparseTensor => {
            a.arity(2, 2)?;
            let layout = match a.node(0)? {
                Node::Domain(Torch::Layout(l)) => *l,
                other => {
                    return Err(a.fail(format!(
                        "layout must be a torch.layout, got {}",
                        other.kind_name()
                    )))
                }
            };
            let data = Args::new(arena, a.id(1)?, at, &name)?;
            let node = sparse(&data, layout, h.limits().max_ndim)?;
            return arena.push_tensor_to_check(node, offset_of(at));
        }
        RebuildFn::MetaTensorNoStorage => {
            a.arity(4, 4)?;
            let dtype = a.dtype(0)?;
            let shape = a.dims(1, "size", h.limits().max_ndim)?;
            let stride = a.dims(2, "stride", h.limits().max_ndim)?;
            if shape.len() != stride.len() {
                return Err(a.fail("size and stride differ in length"));
            }
            if !numel_fits(&shape) {
                return Err(numel_overflow(&shape, at));
            }
            let requires_grad = a.bool(3, "requires_grad")?;
            check_grad(&a, dtype, requires_grad)?;
            TensorNode::new(
                TensorKind::Meta {
                    dtype,
                    shape,
                    stride,
                },
                requires_grad,
            )
        }
        RebuildFn::NestedTensor => {
            a.arity(4, 4)?;
            let node = TensorNode::new(
                TensorKind::Nested {
                    buffer: a.tensor(0, "buffer")?,
                    sizes: a.tensor(1, "nested sizes")?,
                    strides: a.tensor(2, "nested strides")?,
                    offsets: a.tensor(3, "storage offsets")?,
                },
                false,
            );
            return arena.push_tensor_to_check(node, offset_of(at));
        }
        RebuildFn::FromTypeV2 => {
            a.arity(4, 4)?;
            let (func, cls, inner, state) = (a.id(0)?, a.id(1)?, a.id(2)?, a.id(3)?);
            let cls_ok = matches!(
                a.node(1)?,
                Node::Domain(Torch::Global(
                    Global::Builtin(Builtin::Tensor) | Global::User(_) | Global::Stub(_)
                ))
            );
            if !cls_ok {
                return Err(
                    a.fail("the tensor type must be torch.Tensor or an allowlisted subclass")
                );
            }
            // A stubbed subclass leaves the plain tensor: its class is never
            // imported, so the tensor is what can be given back.
            let stubbed = matches!(a.node(1)?, Node::Domain(Torch::Global(Global::Stub(_))));
            let plain = matches!(
                a.node(1)?,
                Node::Domain(Torch::Global(Global::Builtin(Builtin::Tensor)))
            );
            let no_state = match a.node(3)? {
                Node::None => true,
                Node::Dict(_, d) => {
                    let d = arena.dict(*d);
                    d.items.is_empty() && d.base().is_none()
                }
                _ => false,
            };
            // `func(*args)` runs inside this call: a nested _rebuild_from_type_v2 would
            // recurse as deep as the file likes.
            if matches!(
                arena.get(func),
                Node::Domain(Torch::Global(Global::Builtin(Builtin::Rebuild(
                    RebuildFn::FromTypeV2
                ))))
            ) {
                return Err(Error::tensor(
                    format!("{name}: nested _rebuild_from_type_v2 calls"),
                    at.clone(),
                ));
            }
            let base = h.call(arena, func, inner, at)?;
            // A tensor, or what an allowlisted function returns when it is called
            // (torch allowlists `_rebuild_njt`, whose jagged NestedTensor comes back
            // here); the scan's dry run cannot know which.
            let made_by_call = matches!(
                (arena.get(func), arena.get(base)),
                (
                    Node::Domain(Torch::Global(Global::User(_) | Global::Stub(_))),
                    Node::Object(_)
                )
            );
            if !(matches!(
                arena.get(base),
                Node::Domain(Torch::Tensor(_)) | Node::Opaque
            ) || made_by_call)
            {
                return Err(Error::tensor(
                    format!("{name}: the rebuild function did not make a tensor"),
                    at.clone(),
                ));
            }
            if (plain && no_state) || stubbed {
                return Ok(base);
            }
            TensorNode::new(TensorKind::FromType { base, cls, state }, false)
        }
        RebuildFn::WrapperSubclass => {
            wrapper_subclass(&a, h.limits().max_ndim)?;
            TensorNode::new(TensorKind::TorchCall { func: f, args }, false)
        }
        RebuildFn::DeviceTensorFromNumpy | RebuildFn::DeviceTensorFromCpuTensor => {
            device_tensor(&a, f)?;
            TensorNode::new(TensorKind::TorchCall { func: f, args }, false)
        }
    };
    arena.push_tensor(node)
}

fn offset_of(at: &Location) -> u64 {
    at.offset.unwrap_or(0)
}

/// `_rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout,
/// device, requires_grad)`: `torch.Tensor._make_wrapper_subclass(cls, ...)`,
/// which only a subclass of `torch.Tensor` can go through. The only such classes
/// a file can name are the user's (torch's own DTensor comes that way too); a
/// built-in class or function is refused here, before torch could fail on it.
fn wrapper_subclass(a: &Args, max_ndim: u64) -> Result<(), Error> {
    a.arity(8, 8)?;
    match a.node(0)? {
        Node::Domain(Torch::Global(Global::User(_))) => {}
        Node::Domain(Torch::Global(Global::Builtin(b))) => {
            return Err(a.fail(format!(
                "{} is not a tensor subclass torch can make a wrapper of",
                b.full_name()
            )))
        }
        other => {
            return Err(a.fail(format!(
                "the class must be an allowlisted tensor subclass, got {}",
                other.kind_name()
            )))
        }
    }
    let dtype = a.dtype(1)?;
    let size = a.dims(2, "size", max_ndim)?;
    let stride = a.dims(3, "stride", max_ndim)?;
    if size.len() != stride.len() {
        return Err(a.fail("size and stride differ in length"));
    }
    if !numel_fits(&size) {
        return Err(numel_overflow(&size, a.at));
    }
    a.uint(4, "storage_offset")?;
    if !matches!(a.node(5)?, Node::Domain(Torch::Layout(_))) {
        return Err(a.fail(format!("layout must be a torch.layout, got {}", a.kind(5))));
    }
    device_arg(a, 6)?;
    check_grad(a, dtype, a.bool(7, "requires_grad")?)
}

/// `_rebuild_device_tensor_from_numpy(data, dtype, device, requires_grad)` and
/// `_rebuild_device_tensor_from_cpu_tensor(...)`: `data` (an array, a tensor)
/// converted to `dtype` on `device`.
fn device_tensor(a: &Args, f: RebuildFn) -> Result<(), Error> {
    a.arity(4, 4)?;
    let data_ok = matches!(
        (f, a.node(0)?),
        (
            RebuildFn::DeviceTensorFromNumpy,
            Node::Domain(Torch::NdArray(_))
        ) | (
            RebuildFn::DeviceTensorFromCpuTensor,
            Node::Domain(Torch::Tensor(_))
        )
    );
    if !data_ok {
        let wanted = match f {
            RebuildFn::DeviceTensorFromNumpy => "a numpy array",
            _ => "a tensor",
        };
        return Err(a.fail(format!("data must be {wanted}, got {}", a.kind(0))));
    }
    let dtype = a.dtype(1)?;
    device_arg(a, 2)?;
    check_grad(a, dtype, a.bool(3, "requires_grad")?)
}

/// A device argument: a `torch.device` or a device string.
fn device_arg(a: &Args, i: usize) -> Result<(), Error> {
    match a.node(i)? {
        Node::Domain(Torch::Device(_)) => Ok(()),
        Node::Str(_) | Node::Bytes(_) => {
            let device = a.str(i, "device")?;
            if valid_device(device) {
                Ok(())
            } else {
                Err(a.fail(format!("invalid device string {device:?}")))
            }
        }
        other => Err(a.fail(format!(
            "device must be a torch.device or a str, got {}",
            other.kind_name()
        ))),
    }
}

/// Refuse what torch cannot build: a tensor of integers or bools that requires grad.
pub(crate) fn check_grad(a: &Args, dtype: DType, requires_grad: bool) -> Result<(), Error> {
    if requires_grad && !dtype.can_require_grad() {
        return Err(a.fail(format!(
            "a {} tensor cannot require gradients (only floating point and complex ones can)",
            dtype.name()
        )));
    }
    Ok(())
}

/// The dtype of a tensor node, where the file fixes it.
pub(crate) fn tensor_dtype(arena: &Arena, mut id: NodeId) -> Option<DType> {
    loop {
        let Node::Domain(Torch::Tensor(t)) = arena.get(id) else {
            return None;
        };
        match &arena.tensor(*t).kind {
            TensorKind::Dense(d) | TensorKind::Quantized { dense: d, .. } => return Some(d.dtype),
            TensorKind::Empty { dtype } | TensorKind::Meta { dtype, .. } => return Some(*dtype),
            // A Parameter's or a subclass's data was made before it: the walk ends.
            TensorKind::Parameter { data: inner, .. }
            | TensorKind::FromType { base: inner, .. } => id = *inner,
            _ => return None,
        }
    }
}

/// `Tensor.__setstate__` of a pre-1.0 file: an empty tensor (`torch.Tensor()`,
/// `torch.FloatTensor()`) built with `(storage, storage_offset, size, stride)`
/// becomes that view of the storage, as torch's `set_` makes it, which takes
/// only a storage of the tensor's own dtype.
pub fn set_state(
    h: &mut impl RebuildHooks,
    arena: &mut Arena,
    t: TensorId,
    state: NodeId,
    at: &Location,
) -> Result<(), Error> {
    let TensorKind::Empty { dtype } = arena.tensor(t).kind else {
        return Err(Error::unsupported(
            "BUILD on a tensor that already has data",
            at.clone(),
        ));
    };
    let dense = {
        let a = Args::new(arena, state, at, "torch.Tensor.__setstate__")?;
        if a.len() != 4 {
            // Five items are a pre-1.0 Variable's state, which carries its data as a tensor.
            return Err(Error::unsupported(
                "BUILD on a tensor with a state other than (storage, storage_offset, size, stride) (a pre-1.0 pickle format)",
                at.clone(),
            ));
        }
        let dense = dense(h, &a, None)?;
        if dense.dtype != dtype {
            return Err(a.fail(format!(
                "expected a storage of dtype {}, got one of dtype {}",
                dtype.name(),
                dense.dtype.name()
            )));
        }
        dense
    };
    let node = arena
        .tensor_mut(t)
        .ok_or_else(|| Error::pickle("BUILD on a tensor the arena does not hold", at.clone()))?;
    node.kind = TensorKind::Dense(dense);
    Ok(())
}

/// The `(storage, storage_offset, size, stride)` head shared by the dense rebuilds.
fn dense(h: &mut impl RebuildHooks, a: &Args, dtype: Option<DType>) -> Result<Dense, Error> {
    let storage = a.storage(0)?;
    let offset = a.uint(1, "storage_offset")?;
    let shape = a.dims(2, "size", h.limits().max_ndim)?;
    let stride = a.dims(3, "stride", h.limits().max_ndim)?;
    // torch's legacy loader allocates each storage resizable, and `set_` grows it
    // to fit the tensor; the file must then hold the grown size. A view is a
    // slice, and cannot grow.
    let grows = h.id_format() == IdFormat::Legacy && !h.storages().is_view(storage);
    let decl = h
        .storages()
        .get_mut(storage)
        .ok_or_else(|| a.fail("unknown storage"))?;
    let dense = Dense {
        storage,
        dtype: dtype.unwrap_or(decl.dtype),
        offset,
        shape,
        stride,
    };
    if grows {
        if let Some(extent) = dense.extent_bytes() {
            decl.nbytes = decl.nbytes.max(extent);
        }
    }
    dense.validate(decl, a.at)?;
    // Remember the element size of the views: a big-endian file swaps in that unit.
    let itemsize = dense.dtype.swap_unit();
    decl.view_itemsize = match decl.view_itemsize {
        None => Some(itemsize),
        Some(seen) if seen == itemsize || dense.numel() == Some(0) => Some(seen),
        Some(_) => Some(0),
    };
    decl.view_alignment = decl.view_alignment.max(dense.dtype.itemsize());
    Ok(dense)
}

/// `backward_hooks`: torch always writes an empty OrderedDict; hooks cannot be loaded.
fn hooks_arg(a: &Args, i: usize) -> Result<(), Error> {
    match a.node(i)? {
        Node::None => Ok(()),
        Node::Dict(_, d) => {
            let d = a.arena.dict(*d);
            if d.items.is_empty() && d.base().is_none() {
                Ok(())
            } else {
                Err(a.fail("backward hooks cannot be loaded"))
            }
        }
        other => Err(a.fail(format!(
            "backward_hooks must be an OrderedDict, got {}",
            other.kind_name()
        ))),
    }
}

/// The optional metadata dict of `_rebuild_tensor_v2/v3`: `{'conj': bool, 'neg': bool}`.
fn metadata(a: &Args, i: usize, t: &mut TensorNode) -> Result<(), Error> {
    let items = match a.node(i)? {
        Node::None => return Ok(()),
        Node::Dict(_, d) if a.arena.dict(*d).base().is_none() => &a.arena.dict(*d).items,
        other => {
            return Err(a.fail(format!(
                "tensor metadata must be a dict, got {}",
                other.kind_name()
            )))
        }
    };
    for (k, v) in items {
        let flag = match a.arena.get(*v) {
            Node::Bool(b) => *b,
            _ => return Err(a.fail("tensor metadata values must be bools")),
        };
        match a.arena.str(*k) {
            Some(b"conj") => t.conj = flag,
            Some(b"neg") => t.neg = flag,
            _ => return Err(a.fail("tensor metadata keys must be 'conj' or 'neg'")),
        }
    }
    Ok(())
}

fn qparams(a: &Args, i: usize) -> Result<QParams, Error> {
    let p = Args::new(a.arena, a.id(i)?, a.at, a.func)?;
    let qscheme = match p.node(0)? {
        Node::Domain(Torch::Global(Global::Builtin(Builtin::QScheme(q)))) => *q,
        _ => return Err(a.fail("quantizer parameters must start with a qscheme")),
    };
    match qscheme {
        QScheme::PerTensorAffine => {
            p.arity(3, 3)?;
            Ok(QParams::PerTensor {
                qscheme,
                scale: p.float(1, "scale")?,
                zero_point: p.int(2, "zero_point")?,
            })
        }
        QScheme::PerChannelAffine | QScheme::PerChannelAffineFloatQParams => {
            p.arity(4, 4)?;
            Ok(QParams::PerChannel {
                qscheme,
                scales: p.tensor(1, "scales")?,
                zero_points: p.tensor(2, "zero_points")?,
                axis: p.int(3, "axis")?,
            })
        }
        other => Err(a.fail(format!(
            "Can't deserialize quantized tensor with qscheme torch.{}",
            other.name()
        ))),
    }
}

/// `_rebuild_sparse_tensor(layout, data)`: COO `(indices, values, size[, is_coalesced])`,
/// compressed `(compressed_indices, plain_indices, values, size)`.
fn sparse(
    data: &Args,
    layout: crate::torch::tensor::Layout,
    max_ndim: u64,
) -> Result<TensorNode, Error> {
    use crate::torch::tensor::Layout::*;
    let (parts, size_at, coalesced) = match layout {
        SparseCoo => {
            data.arity(3, 4)?;
            let coalesced = if data.len() == 4 {
                Some(data.bool(3, "is_coalesced")?)
            } else {
                None
            };
            (
                vec![data.tensor(0, "indices")?, data.tensor(1, "values")?],
                2,
                coalesced,
            )
        }
        SparseCsr | SparseCsc | SparseBsr | SparseBsc => {
            data.arity(4, 4)?;
            (
                vec![
                    data.tensor(0, "compressed indices")?,
                    data.tensor(1, "plain indices")?,
                    data.tensor(2, "values")?,
                ],
                3,
                None,
            )
        }
        other => {
            return Err(data.fail(format!(
                "cannot rebuild a sparse tensor with layout {}",
                other.name()
            )))
        }
    };
    let size = data.dims(size_at, "size", max_ndim)?;
    Ok(TensorNode::new(
        TensorKind::Sparse {
            layout,
            parts: parts.into(),
            size,
            coalesced,
        },
        false,
    ))
}
