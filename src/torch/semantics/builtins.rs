//! What each allowlisted built-in does when a pickle calls it: torch's and
//! Python's constructors (sizes, devices, dtypes, bytes, collections...) built as
//! values, never by calling anything.

use super::*;

impl TorchHooks<'_> {
    pub(super) fn call_builtin(
        &mut self,
        arena: &mut Arena,
        b: Builtin,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error> {
        let name = b.full_name();
        if let Builtin::Rebuild(f) = b {
            return rebuild::call(self, arena, f, args, at);
        }
        let a = Args::new(arena, args, at, &name)?;
        let node = match b {
            Builtin::OrderedDict | Builtin::Counter => {
                a.arity(0, 1)?;
                let class = if b == Builtin::Counter {
                    DictClass::Counter
                } else {
                    DictClass::OrderedDict
                };
                let (base, inherited, items) = match a.len() {
                    0 => (None, 0, Vec::new()),
                    _ => match a.node(0)? {
                        Node::None if b == Builtin::Counter => (None, 0, Vec::new()),
                        Node::Dict(_, d) => {
                            let d = arena.dict(*d);
                            (
                                Some((a.id(0)?, d.items.len())),
                                d.inherited() + d.items.len() as u64,
                                Vec::new(),
                            )
                        }
                        // How Python 2 pickled an OrderedDict: `OrderedDict([[k, v], ...])`.
                        // (Counter counts an iterable's items instead: not supported.)
                        Node::List(_) | Node::Tuple(_) if b == Builtin::OrderedDict => {
                            (None, 0, pairs(&a)?)
                        }
                        other if is_empty_iterable(arena, other) => (None, 0, Vec::new()),
                        other => {
                            return Err(a.fail(format!("expects a dict, got {}", other.kind_name())))
                        }
                    },
                };
                // The new dict holds a copy of every item the snapshot sees.
                arena.charge_nodes((2 * inherited).saturating_add(2 * items.len() as u64))?;
                return arena.push_dict(class, DictNode::snapshot(base, inherited, items));
            }
            Builtin::Set => {
                a.arity(0, 1)?;
                let (base, inherited) = match a.len() {
                    0 => (None, 0),
                    _ => {
                        let (own, inherited) = snapshot_len(a.node(0)?)
                            .ok_or_else(|| a.fail("expects a list, tuple or set"))?;
                        (Some((a.id(0)?, own)), inherited + own as u64)
                    }
                };
                arena.charge_nodes(inherited)?;
                Node::Set(Box::new(SetNode {
                    frozen: false,
                    base,
                    inherited,
                    items: Vec::new(),
                }))
            }
            Builtin::Size => {
                a.arity(0, 1)?;
                let len = if a.is_empty() { 0 } else { size_len(&a)? };
                // A copy of every entry, charged before it is made.
                arena.charge_nodes(len as u64)?;
                let a = Args::new(arena, args, at, &name)?;
                let dims = if a.is_empty() {
                    Vec::new()
                } else {
                    size_entries(&a)?
                };
                if let Some(done) = self.sizes.get(&dims) {
                    return Ok(*done);
                }
                let id = arena.push(Node::Domain(Torch::Size(Box::new(dims.clone()))))?;
                self.sizes.insert(dims, id);
                return Ok(id);
            }
            Builtin::Device => {
                a.arity(1, 2)?;
                let device = match (a.len(), a.node(0)?) {
                    // torch.device(n) is CUDA device n.
                    (1, Node::Int(_)) => format!("cuda:{}", a.uint(0, "device index")?),
                    (1, _) => a.str(0, "device type")?.to_owned(),
                    _ => format!(
                        "{}:{}",
                        a.str(0, "device type")?,
                        a.uint(1, "device index")?
                    ),
                };
                if !valid_device(&device) {
                    return Err(a.fail(format!("invalid device string {device:?}")));
                }
                // torch keeps a device index in 8 signed bits, so it would make
                // cuda:195 into cuda:-61 (and cuda:255 into plain cuda).
                let index = device.split_once(':').map(|(_, i)| i.parse::<u64>());
                if let Some(Ok(index @ 128..)) = index {
                    return Err(a.fail(format!(
                        "device index {index} does not fit torch's 8-bit device index"
                    )));
                }
                Node::Domain(Torch::Device(Box::new(device)))
            }
            Builtin::GetLayout => {
                a.arity(1, 1)?;
                let layout = a.str(0, "layout name")?;
                Node::Domain(Torch::Layout(
                    Layout::from_name(layout)
                        .ok_or_else(|| a.fail(format!("unknown layout {layout:?}")))?,
                ))
            }
            Builtin::CodecsEncode => {
                a.arity(1, 2)?;
                if !matches!(a.node(0)?, Node::Str(_)) {
                    return Err(a.fail("encodes a str only"));
                }
                let text = a.str(0, "text")?;
                let codec = if a.len() == 2 {
                    a.str(1, "encoding")?
                } else {
                    "utf-8"
                };
                let key = (a.id(0)?, codec.to_owned());
                if let Some(done) = self.encoded.get(&key) {
                    return Ok(*done);
                }
                let bytes = encode(text, codec)
                    .ok_or_else(|| a.fail(format!("cannot encode with codec {codec:?}")))?;
                let id = arena.push_bytes(&bytes)?;
                self.encoded.insert(key, id);
                return Ok(id);
            }
            Builtin::ByteArray | Builtin::Bytes => {
                a.arity(0, 2)?;
                let bytes: Vec<u8> = match (a.len(), a.node(0)) {
                    (0, _) => Vec::new(),
                    // bytes are immutable: bytes(b) is b itself, shared, not a copy.
                    (1, Ok(Node::Bytes(_))) if b == Builtin::Bytes => return a.id(0),
                    (1, Ok(Node::Bytes(b) | Node::ByteArray(b))) => a.arena.payload(*b).to_vec(),
                    (1, Ok(Node::Tuple(_) | Node::List(_))) => byte_values(&a)?,
                    (1, Ok(Node::Bool(b))) => vec![0; usize::from(*b)],
                    // (A str needs an encoding, even an empty one.)
                    (1, Ok(other))
                        if !matches!(other, Node::Str(_)) && is_empty_iterable(a.arena, other) =>
                    {
                        Vec::new()
                    }
                    (1, Ok(Node::Int(n))) => {
                        let n = u64::try_from(*n).map_err(|_| a.fail("negative count"))?;
                        // Charged before allocating: `bytearray(n)` is an allocation request.
                        if n > arena_budget(&a) {
                            return Err(Error::limit(
                                Limit::PayloadBytes,
                                self.limits.max_payload_bytes,
                                at.clone(),
                            ));
                        }
                        vec![0; usize::try_from(n).map_err(|_| a.fail("count too large"))?]
                    }
                    (2, _) => {
                        let text = a.str(0, "text")?;
                        let codec = a.str(1, "encoding")?;
                        encode(text, codec)
                            .ok_or_else(|| a.fail(format!("cannot encode with codec {codec:?}")))?
                    }
                    (_, Ok(other)) => {
                        return Err(a.fail(format!("cannot build from {}", other.kind_name())))
                    }
                    (_, Err(e)) => return Err(e),
                };
                return if b == Builtin::Bytes {
                    arena.push_bytes(&bytes)
                } else {
                    arena.push_bytearray(&bytes)
                };
            }
            Builtin::Complex => {
                a.arity(0, 2)?;
                // CPython's complex(real, imag): either part may itself be complex.
                let part = |i: usize, what: &str| match a.node(i)? {
                    Node::Complex(c) => Ok((c.0, Some(c.1))),
                    _ => a.float(i, what).map(|v| (v, None)),
                };
                let (mut re, re_imag) = if a.is_empty() {
                    (0.0, None)
                } else {
                    part(0, "real part")?
                };
                let im = if a.len() == 2 {
                    let (mut im, im_imag) = part(1, "imaginary part")?;
                    if let Some(v) = im_imag {
                        re -= v;
                    }
                    if let Some(v) = re_imag {
                        im += v;
                    }
                    im
                } else {
                    re_imag.unwrap_or(0.0)
                };
                Node::Complex(Box::new((re, im)))
            }
            Builtin::NumpyReconstruct => numpy::reconstruct(&a)?,
            Builtin::NumpyDtype => numpy::dtype(&a)?,
            Builtin::NumpyScalar => numpy::scalar(&a)?,
            Builtin::NumpyFrombuffer => numpy::frombuffer(&a, self.limits.max_ndim)?,
            // The value itself, as TorchScript's unpickler keeps it (the type tag
            // only matters to the TorchScript runtime).
            Builtin::JitBuilder(JitBuilder::RestoreTypeTag) => {
                a.arity(2, 2)?;
                if !matches!(a.node(1)?, Node::Str(_)) {
                    return Err(a.fail(format!("the type tag must be a str, got {}", a.kind(1))));
                }
                return a.id(0);
            }
            Builtin::JitBuilder(_) => {
                a.arity(1, 1)?;
                if !matches!(a.node(0)?, Node::List(_)) {
                    return Err(a.fail(format!("expects a list, got {}", a.kind(0))));
                }
                return a.id(0);
            }
            Builtin::Parameter => {
                a.arity(0, 2)?;
                let items = a.items.to_vec();
                return self.parameter(arena, &items, args, at);
            }
            Builtin::Tensor | Builtin::LegacyTensorType { sparse: false, .. } => {
                if !a.is_empty() {
                    return Err(Error::forbidden(
                        format!("{name} called with arguments would allocate uninitialised memory; refused"),
                        at.clone(),
                    ));
                }
                let dtype = match b {
                    Builtin::LegacyTensorType { dtype, .. } => dtype,
                    _ => DType::Float32,
                };
                return arena.push_tensor(TensorNode::new(TensorKind::Empty { dtype }, false));
            }
            Builtin::TypedStorageClass | Builtin::UntypedStorageClass => {
                return Err(Error::forbidden(
                    format!("{name} called: storages come only from persistent ids (a call with a size allocates uninitialised memory); refused"),
                    at.clone(),
                ));
            }
            _ => {
                return Err(Error::forbidden(
                    format!("Trying to call reduce for unrecognized function {name}"),
                    at.clone(),
                ));
            }
        };
        arena.push(node)
    }
}

/// A value an allowlisted callable returned, untouched since: what an allowlisted
/// `getattr(C, name)` fetched (a nested class, a method) is one. A REDUCE or NEWOBJ
/// on it is kept for the builder, which makes it only when the value it holds is
/// allowlisted itself, as torch checks `func in allowed.values()`.
pub(super) fn made_by_user_call(arena: &Arena, id: NodeId) -> bool {
    match arena.get(id) {
        Node::Object(o) => {
            o.mutations.is_empty()
                && matches!(o.constructor, Constructor::Call { func, .. }
                    if matches!(arena.get(func), Node::Domain(Torch::Global(Global::User(_)))))
        }
        _ => false,
    }
}

/// Payload bytes the arena may still hand out.
pub(super) fn arena_budget(a: &Args) -> u64 {
    a.arena.payload_left()
}

/// How many of its own items a list, tuple or set has now, and how many it
/// inherits from a snapshot of its own.
pub(super) fn snapshot_len(node: &Node) -> Option<(usize, u64)> {
    match node {
        Node::List(items) => Some((items.len(), 0)),
        Node::Tuple(items) => Some((items.len(), 0)),
        Node::Set(s) => Some((s.items.len(), s.inherited)),
        _ => None,
    }
}

/// The `(key, value)` items of a list or tuple of 2-item lists and tuples.
pub(super) fn pairs(a: &Args) -> Result<Vec<(NodeId, NodeId)>, Error> {
    let items = sequence(a.arena, a.node(0)?)
        .ok_or_else(|| a.fail(format!("expects pairs, got {}", a.kind(0))))?;
    items
        .iter()
        .map(|id| {
            let node = a.arena.get(*id);
            let pair = sequence(a.arena, node)
                .ok_or_else(|| a.fail(format!("expects pairs, got a {}", node.kind_name())))?;
            match pair {
                [key, value] => Ok((*key, *value)),
                _ => Err(a.fail(format!(
                    "expects pairs, got an item of {} values",
                    pair.len()
                ))),
            }
        })
        .collect()
}

/// The items of a tuple or list.
pub(super) fn sequence<'a>(arena: &'a Arena, node: &'a Node) -> Option<&'a [NodeId]> {
    match node {
        Node::Tuple(items) => Some(arena.items(*items)),
        Node::List(items) => Some(items),
        _ => None,
    }
}

/// Whether Python would iterate nothing over the value (a dict aside).
pub(super) fn is_empty_iterable(arena: &Arena, node: &Node) -> bool {
    match node {
        Node::Str(s) | Node::Bytes(s) | Node::ByteArray(s) | Node::Tuple(s) => s.is_empty(),
        Node::List(items) => items.is_empty(),
        Node::Set(s) => s.items.is_empty() && s.inherited == 0,
        Node::Domain(Torch::Size(dims)) => dims.is_empty(),
        // A fresh empty tensor (`torch.Tensor()`, `nn.Parameter()`) has one
        // dimension of size 0: iterating it yields nothing.
        Node::Domain(Torch::Tensor(t)) => match &arena.tensor(*t).kind {
            TensorKind::Empty { .. } => true,
            TensorKind::Parameter { data, .. } => is_empty_iterable(arena, arena.get(*data)),
            _ => false,
        },
        Node::Dict(_, d) => {
            let d = arena.dict(*d);
            d.items.is_empty() && d.inherited() == 0
        }
        _ => false,
    }
}

/// `bytes([1, 2, 3])`: the ints, each a byte.
pub(super) fn byte_values(a: &Args) -> Result<Vec<u8>, Error> {
    let items = sequence(a.arena, a.node(0)?)
        .ok_or_else(|| a.fail(format!("cannot build from {}", a.kind(0))))?;
    items
        .iter()
        .map(|id| match a.arena.get(*id) {
            Node::Int(v) => u8::try_from(*v).map_err(|_| a.fail("bytes must be in range(0, 256)")),
            Node::Bool(b) => Ok(u8::from(*b)),
            other => Err(a.fail(format!("cannot take a byte from {}", other.kind_name()))),
        })
        .collect()
}

/// How many entries `torch.Size(x)` would take from `x`.
pub(super) fn size_len(a: &Args) -> Result<usize, Error> {
    Ok(match a.node(0)? {
        other if is_empty_iterable(a.arena, other) => 0,
        Node::Domain(Torch::Size(sizes)) => sizes.len(),
        Node::Bytes(b) | Node::ByteArray(b) => b.len(),
        Node::Tuple(items) => items.len(),
        Node::List(items) => items.len(),
        _ => 0,
    })
}

/// `torch.Size(x)`: ints of any sign (as torch allows) from a tuple, list or Size,
/// or a bytes object's bytes.
pub(super) fn size_entries(a: &Args) -> Result<Vec<i64>, Error> {
    let items: &[NodeId] = match a.node(0)? {
        other if is_empty_iterable(a.arena, other) => return Ok(Vec::new()),
        Node::Domain(Torch::Size(sizes)) => return Ok(sizes.to_vec()),
        Node::Bytes(b) | Node::ByteArray(b) => {
            return Ok(a.arena.payload(*b).iter().map(|v| i64::from(*v)).collect())
        }
        Node::Tuple(items) => a.arena.items(*items),
        Node::List(items) => items,
        other => return Err(a.fail(format!("takes a tuple of ints, got {}", other.kind_name()))),
    };
    items
        .iter()
        .map(|id| match a.arena.get(*id) {
            Node::Int(v) => Ok(*v),
            Node::Bool(b) => Ok(i64::from(*b)),
            other => Err(a.fail(format!("entries must be ints, got {}", other.kind_name()))),
        })
        .collect()
}

/// `str.encode(codec)` for the codecs pickle uses to carry bytes.
pub(super) fn encode(text: &str, codec: &str) -> Option<Vec<u8>> {
    match codec.to_ascii_lowercase().replace('_', "-").as_str() {
        "latin1" | "latin-1" | "iso-8859-1" | "iso8859-1" => text
            .chars()
            .map(|c| u8::try_from(u32::from(c)).ok())
            .collect(),
        "utf-8" | "utf8" => Some(text.as_bytes().to_vec()),
        "ascii" if text.is_ascii() => Some(text.as_bytes().to_vec()),
        _ => None,
    }
}
