//! torch's kinds of value, as a [`Domain`] of the arena: what the allowlisted
//! globals and calls build beyond Python's own values.

use crate::torch::numpy_values::{NdArrayNode, NpDtype};
use crate::torch::policy::Global;
use crate::torch::tensor::{Layout, QParams, StorageId, TensorKind, TensorNode};
use crate::value::{self, Domain, NodeId};

/// A tensor node's description, in the arena's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorId(u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A value only torch (or numpy, inside a checkpoint) has.
#[derive(Debug, Clone, PartialEq)]
pub enum Torch {
    /// An allowlisted global itself: a class, a function, a dtype, a storage type...
    Global(Global),
    /// `torch.Size`.
    Size(Box<Vec<i64>>),
    /// `torch.device(...)`: the device string.
    Device(Box<String>),
    /// A layout from `torch.serialization._get_layout`.
    Layout(Layout),
    /// A storage named by a persistent id.
    Storage(StorageId),
    /// Any kind of tensor, or a Parameter.
    Tensor(TensorId),
    /// A numpy array rebuilt from its raw bytes.
    NdArray(Box<NdArrayNode>),
    /// A plain numpy dtype.
    NpDtype(NpDtype),
    /// A numpy scalar: its dtype and a bytes node of exactly its size.
    NpScalar(NpDtype, NodeId),
}

pub type Node = value::Node<Torch>;
pub type Arena = value::Arena<Torch>;

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Node>() == 16);

/// The tensor descriptions of an arena, and which of them have invariants to
/// check once the storages are bound (with where in the pickle each was made).
#[derive(Debug, Default)]
pub struct Tensors(Vec<TensorNode>, Vec<(TensorId, u64)>);

static NO_TENSOR: TensorNode = TensorNode {
    kind: TensorKind::Empty {
        dtype: crate::torch::dtype::DType::UInt8,
    },
    requires_grad: false,
    conj: false,
    neg: false,
};

impl From<Torch> for Node {
    fn from(value: Torch) -> Node {
        Node::Domain(value)
    }
}

impl Domain for Torch {
    type Pool = Tensors;

    fn kind_name(&self) -> &'static str {
        match self {
            Torch::Global(_) => "global",
            Torch::Size(_) => "torch.Size",
            Torch::Device(_) => "torch.device",
            Torch::Layout(_) => "torch.layout",
            Torch::Storage(_) => "torch.storage.TypedStorage",
            Torch::Tensor(_) => "torch.Tensor",
            Torch::NdArray(_) => "numpy.ndarray",
            Torch::NpDtype(_) => "numpy.dtype",
            Torch::NpScalar(..) => "numpy scalar",
        }
    }

    fn adopt(&self, old: &Tensors, new: &mut Tensors) -> Torch {
        match self {
            Torch::Tensor(t) => {
                let id = TensorId(new.0.len() as u32);
                new.0.push(old.get(*t).clone());
                Torch::Tensor(id)
            }
            other => other.clone(),
        }
    }

    fn for_each_ref_mut(&mut self, pool: &mut Tensors, f: &mut impl FnMut(&mut NodeId)) {
        match self {
            Torch::Tensor(t) => {
                if let Some(t) = pool.0.get_mut(t.index()) {
                    tensor_refs_mut(&mut t.kind, f);
                }
            }
            Torch::NdArray(a) => {
                if let Some(state) = &mut a.state {
                    f(&mut state.data);
                }
            }
            Torch::NpScalar(_, data) => f(data),
            Torch::Global(_)
            | Torch::Size(_)
            | Torch::Device(_)
            | Torch::Layout(_)
            | Torch::Storage(_)
            | Torch::NpDtype(_) => {}
        }
    }

    fn reserve_for_pickle(pool: &mut Tensors, len: usize) {
        // About one tensor per 64 bytes of a state dict's pickle.
        let guess = (len / 64).min(1 << 22);
        pool.0.reserve(guess.saturating_sub(pool.0.len()));
    }
}

impl Tensors {
    /// Ids come only from `push_tensor`, so they are in range; an empty tensor
    /// stands in for a stale one rather than a panic.
    fn get(&self, id: TensorId) -> &TensorNode {
        self.0.get(id.index()).unwrap_or(&NO_TENSOR)
    }
}

impl Arena {
    pub fn push_tensor(&mut self, tensor: TensorNode) -> Result<NodeId, crate::error::Error> {
        let id = TensorId(self.pool.0.len() as u32);
        let node = self.push(Torch::Tensor(id).into())?;
        self.pool.0.push(tensor);
        Ok(node)
    }

    /// [`Arena::push_tensor`] for a sparse, nested or per-channel quantized
    /// tensor, made at `offset` of the pickle: its invariants depend on index
    /// values in storages, checked by [`crate::torch::invariants`] once the
    /// storages are bound. Dense tensors never come here.
    pub fn push_tensor_to_check(
        &mut self,
        tensor: TensorNode,
        offset: u64,
    ) -> Result<NodeId, crate::error::Error> {
        let id = TensorId(self.pool.0.len() as u32);
        let node = self.push_tensor(tensor)?;
        self.pool.1.push((id, offset));
        Ok(node)
    }

    /// The tensors [`Arena::push_tensor_to_check`] made, in the order the file made them.
    pub fn tensors_to_check(&self) -> impl Iterator<Item = (&TensorNode, u64)> {
        (self.pool.1.iter()).map(|(id, offset)| (self.pool.get(*id), *offset))
    }

    pub fn tensor(&self, id: TensorId) -> &TensorNode {
        self.pool.get(id)
    }

    /// Tensor `id`'s description, to change in place: a pre-1.0 BUILD gives an
    /// empty tensor its storage after the tensor was made.
    pub fn tensor_mut(&mut self, id: TensorId) -> Option<&mut TensorNode> {
        self.pool.0.get_mut(id.index())
    }

    /// Every tensor node, in the order the file made them.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &TensorNode)> {
        (self.pool.0.iter().enumerate()).map(|(i, t)| (TensorId(i as u32), t))
    }

    /// The torch value of node `id`, if it is one.
    pub fn torch(&self, id: NodeId) -> Option<&Torch> {
        self.domain(id)
    }
}

fn tensor_refs_mut(kind: &mut TensorKind, f: &mut impl FnMut(&mut NodeId)) {
    match kind {
        TensorKind::Dense(_) | TensorKind::Empty { .. } | TensorKind::Meta { .. } => {}
        TensorKind::Quantized { params, .. } => {
            if let QParams::PerChannel {
                scales,
                zero_points,
                ..
            } = params
            {
                f(scales);
                f(zero_points);
            }
        }
        TensorKind::Sparse { parts, .. } => parts.iter_mut().for_each(&mut *f),
        TensorKind::Nested {
            buffer,
            sizes,
            strides,
            offsets,
        } => {
            f(buffer);
            f(sizes);
            f(strides);
            f(offsets);
        }
        TensorKind::Parameter { data, state } => {
            f(data);
            if let Some(s) = state {
                f(s);
            }
        }
        TensorKind::FromType { base, cls, state } => {
            f(base);
            f(cls);
            f(state);
        }
        TensorKind::TorchCall { args, .. } => f(args),
    }
}
