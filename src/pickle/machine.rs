//! The pickle VM: every opcode of protocols 0 to 5, read by the [`Decoder`] and
//! interpreted into an [`Arena`]. It never imports or calls anything; what GLOBAL,
//! REDUCE, NEWOBJ, BUILD and persistent ids mean is decided by [`Hooks`].

use crate::error::{check_limit, Error, Location};
use crate::limits::{Limit, Limits};
use crate::pickle::decoder::{Decoder, Divergence, Interpret, Op};
use crate::pickle::opcodes::{APPENDS, SETITEMS};
use crate::pickle::text;
use crate::value::{Arena, DictClass, DictNode, Domain, Mutation, Node, NodeId, SetNode};

/// What GLOBAL, REDUCE, NEWOBJ, BUILD and persistent ids mean. The VM itself only
/// moves values; these hooks decide what may be built.
pub trait Hooks {
    /// The kinds of value these hooks build beyond Python's own.
    type Domain: Domain;

    /// A GLOBAL or STACK_GLOBAL (or INST's class) naming `module.name`.
    fn global(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        module: &str,
        name: &str,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// `func(*args)`: REDUCE, and INST/OBJ.
    fn reduce(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        func: NodeId,
        args: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// `cls.__new__(cls, *args, **kwargs)`: NEWOBJ and NEWOBJ_EX.
    fn new_object(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        cls: NodeId,
        args: NodeId,
        kwargs: Option<NodeId>,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// BUILD: apply `state` to `inst`.
    fn build(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        inst: NodeId,
        state: NodeId,
        at: &Location,
    ) -> Result<(), Error>;
    /// PERSID and BINPERSID.
    fn persistent_load(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        pid: NodeId,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// STACK_GLOBAL whose module or name is not a plain string (built at run time).
    fn unresolved_global(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// EXT1, EXT2 and EXT4: a global named by copyreg's extension registry.
    fn extension(
        &mut self,
        arena: &mut Arena<Self::Domain>,
        code: u32,
        at: &Location,
    ) -> Result<NodeId, Error>;
    /// Called once with the pickle's length before it runs, as the arena is sized.
    fn reserve_for_pickle(&mut self, _len: usize) {}
    /// Whether the pickle is read on as CPython's C unpickler reads it where
    /// pickle.py refuses it (a scan); else such a pickle is refused.
    fn reads_on_as_c(&self) -> bool {
        false
    }
    /// Called once the pickle has run (to its STOP or to an error) with each
    /// place CPython's own readers would read it differently: a scan records
    /// them; a load refuses those where readers read other opcodes (frames), and
    /// reads text as pickle.py parses it.
    fn diverged(&mut self, divergence: Divergence) -> Result<(), Error> {
        if divergence.changes_the_stream {
            Err(divergence.error())
        } else {
            Ok(())
        }
    }
}

/// How the py2 `str` opcodes (STRING, BINSTRING, SHORT_BINSTRING) decode: pickle's
/// `encoding` argument. torch passes `utf-8` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StringEncoding {
    #[default]
    Utf8,
    Latin1,
    Ascii,
    /// Keep them as bytes (`encoding='bytes'`).
    Bytes,
}

impl StringEncoding {
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().replace('_', "-").as_str() {
            "utf-8" | "utf8" => Some(StringEncoding::Utf8),
            "latin1" | "latin-1" | "iso-8859-1" | "iso8859-1" => Some(StringEncoding::Latin1),
            "ascii" | "us-ascii" => Some(StringEncoding::Ascii),
            "bytes" => Some(StringEncoding::Bytes),
            _ => None,
        }
    }
}

/// The result of running one pickle.
#[derive(Debug)]
pub struct Parsed {
    pub root: NodeId,
    /// The protocol named by PROTO, if any.
    pub protocol: Option<u8>,
    /// Offset just past STOP: anything after it was not interpreted.
    pub end: usize,
}

struct Machine<'h, H: Hooks> {
    hooks: &'h mut H,
    arena: &'h mut Arena<H::Domain>,
    encoding: StringEncoding,
    max_container_len: u64,
}

/// Run one pickle from the start of `data` to its STOP.
pub fn run<H: Hooks>(
    data: &[u8],
    hooks: &mut H,
    arena: &mut Arena<H::Domain>,
    limits: &Limits,
    encoding: StringEncoding,
) -> Result<Parsed, Error> {
    // `data` may run on past the pickle (a legacy file's storages follow its
    // pickles): the decoder measures what the pickle consumes against
    // max_pickle_bytes, and the arena is sized for at most that.
    let len =
        usize::try_from(limits.max_pickle_bytes).map_or(data.len(), |max| data.len().min(max));
    arena.reserve_for_pickle(len);
    hooks.reserve_for_pickle(len);
    let mut machine = Machine {
        hooks,
        arena,
        encoding,
        max_container_len: limits.max_container_len,
    };
    let mut decoder = Decoder::new(data, limits);
    if machine.hooks.reads_on_as_c() {
        decoder.read_on_as_c();
    }
    let root = decoder.run(&mut machine);
    // A scan records the divergences before a break too: a reader that went on
    // past them may reach what this one did not.
    let diverged = (decoder.divergences().iter()).try_for_each(|d| machine.hooks.diverged(*d));
    let root = root?;
    diverged?;
    Ok(Parsed {
        root,
        protocol: decoder.protocol(),
        end: decoder.position(),
    })
}

impl<H: Hooks> Machine<'_, H> {
    fn push_new(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        node: Node<H::Domain>,
    ) -> Result<(), Error> {
        let id = self.arena.push(node)?;
        d.push(id)
    }

    fn push_constant(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        node: Node<H::Domain>,
    ) -> Result<(), Error> {
        let id = self.arena.push_constant(node)?;
        d.push(id)
    }

    /// A tuple of the stack items from `start` up, which leave the stack.
    fn tuple_from_stack(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        start: usize,
    ) -> Result<NodeId, Error> {
        let id = self.arena.push_tuple(d.items(start))?;
        d.truncate(start);
        Ok(id)
    }

    /// The py2 `str` opcodes decode with the caller's encoding, as pickle's `encoding=` does.
    fn py2_string(&mut self, d: &mut Decoder<'_, NodeId>, bytes: &[u8]) -> Result<(), Error> {
        let id = match self.encoding {
            StringEncoding::Bytes => self.arena.push_bytes(bytes)?,
            StringEncoding::Latin1 => self.arena.push_str(&text::latin1_to_utf8(bytes))?,
            StringEncoding::Ascii if bytes.is_ascii() => self.arena.push_str(bytes)?,
            StringEncoding::Utf8 if std::str::from_utf8(bytes).is_ok() => {
                self.arena.push_str(bytes)?
            }
            enc => return Err(d.err(format!("string cannot be decoded as {enc:?}"))),
        };
        d.push(id)
    }

    fn int_from_le_bytes(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        // Strip sign-extension bytes so small values written long still become i64.
        let mut len = bytes.len();
        while len > 1 {
            let (Some(&last), Some(&prev)) = (bytes.get(len - 1), bytes.get(len - 2)) else {
                break;
            };
            let redundant =
                (last == 0x00 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0);
            if !redundant {
                break;
            }
            len -= 1;
        }
        let bytes = bytes.get(..len).unwrap_or_default();
        if bytes.len() <= 8 {
            let mut buf = if negative { [0xffu8; 8] } else { [0u8; 8] };
            if let Some(dst) = buf.get_mut(..bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            self.push_new(d, Node::Int(i64::from_le_bytes(buf)))
        } else {
            self.push_new(d, Node::BigInt(Box::new(bytes.to_vec())))
        }
    }

    fn call_global(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        module: &str,
        name: &str,
    ) -> Result<NodeId, Error> {
        let at = d.here();
        self.hooks.global(self.arena, module, name, &at)
    }

    fn reduce(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        func: NodeId,
        args: NodeId,
    ) -> Result<NodeId, Error> {
        let at = d.here();
        self.hooks.reduce(self.arena, func, args, &at)
    }

    fn append(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        target: NodeId,
        items: Vec<NodeId>,
    ) -> Result<(), Error> {
        let kind = self.arena.get(target).kind_name();
        let max_len = self.max_container_len;
        match self.arena.get_mut(target) {
            Some(Node::List(list)) => {
                check_limit(
                    Limit::ContainerLen,
                    (list.len() + items.len()) as u64,
                    max_len,
                    Location::default,
                )?;
                list.extend(items);
                Ok(())
            }
            Some(Node::Object(obj)) => {
                obj.mutations
                    .extend(items.into_iter().map(Mutation::Append));
                Ok(())
            }
            Some(Node::Opaque) => Ok(()),
            _ => {
                let op = if d.op() == APPENDS {
                    "extend"
                } else {
                    "append to"
                };
                Err(Error::forbidden(
                    format!("Can only {op} lists, but got <class '{kind}'>"),
                    d.here(),
                ))
            }
        }
    }

    fn set_items(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        target: NodeId,
        flat: &[NodeId],
    ) -> Result<(), Error> {
        if !flat.len().is_multiple_of(2) {
            return Err(d.err("odd number of items for SETITEMS"));
        }
        let kind = self.arena.get(target).kind_name();
        let max_len = self.max_container_len;
        let pairs = flat
            .chunks_exact(2)
            .filter_map(|kv| Some((*kv.first()?, *kv.get(1)?)));
        if let Node::Dict(_, dict) = *self.arena.get(target) {
            let Some(dict) = self.arena.dict_mut(dict) else {
                return Err(d.err("a dict that is not in the arena"));
            };
            check_limit(
                Limit::ContainerLen,
                (dict.items.len() + flat.len() / 2) as u64,
                max_len,
                Location::default,
            )?;
            if dict.items.is_empty() {
                // The usual dict gets all its items at once (an object's state):
                // room for exactly them. Later batches grow it as a vector grows.
                dict.items.reserve_exact(flat.len() / 2);
            }
            dict.items.extend(pairs);
            return Ok(());
        }
        match self.arena.get_mut(target) {
            Some(Node::Object(obj)) => {
                obj.mutations
                    .extend(pairs.map(|(k, v)| Mutation::SetItem(k, v)));
                Ok(())
            }
            Some(Node::Opaque) => Ok(()),
            _ => {
                let op = if d.op() == SETITEMS {
                    "SETITEMS"
                } else {
                    "SETITEM"
                };
                Err(Error::forbidden(
                    format!("Can only {op} for dict, collections.OrderedDict, collections.Counter, but got <class '{kind}'>"),
                    d.here(),
                ))
            }
        }
    }

    /// SETITEMS and DICT: the items above `start` leave the stack into `target`.
    fn set_items_from_stack(
        &mut self,
        d: &mut Decoder<'_, NodeId>,
        target: NodeId,
        start: usize,
    ) -> Result<(), Error> {
        let flat = d.split_off(start);
        self.set_items(d, target, &flat)
    }
}

impl<'a, H: Hooks> Interpret<'a, NodeId> for Machine<'_, H> {
    #[inline(always)]
    fn op(&mut self, d: &mut Decoder<'a, NodeId>, op: Op<'a, NodeId>) -> Result<(), Error> {
        match op {
            Op::None => self.push_constant(d, Node::None)?,
            Op::Bool(b) => self.push_constant(d, Node::Bool(b))?,
            Op::Int(v) => self.push_constant(d, Node::Int(v))?,
            Op::DecimalInt(text) => {
                self.push_new(d, Node::DecimalInt(Box::new(text.to_owned())))?
            }
            Op::LongBytes(bytes) => self.int_from_le_bytes(d, bytes)?,
            Op::Float(v) => self.push_new(d, Node::Float(v))?,
            Op::Py2String(bytes) => self.py2_string(d, bytes)?,
            Op::Py2StringEscaped(escaped) => {
                let bytes = text::escape_decode(escaped)
                    .ok_or_else(|| d.err("invalid escape in STRING"))?;
                self.py2_string(d, &bytes)?;
            }
            Op::Unicode(text) => {
                let id = self.arena.push_str(text)?;
                d.push(id)?;
            }
            Op::UnicodeEscaped(escaped) => {
                let decoded = text::raw_unicode_escape(escaped)
                    .ok_or_else(|| d.err("invalid raw-unicode-escape in UNICODE"))?;
                let id = self.arena.push_str(&decoded)?;
                d.push(id)?;
            }
            Op::Bytes(bytes) => {
                let id = self.arena.push_bytes(bytes)?;
                d.push(id)?;
            }
            Op::ByteArray(bytes) => {
                let id = self.arena.push_bytearray(bytes)?;
                d.push(id)?;
            }
            Op::EmptyTuple => {
                let id = self.arena.push_empty_tuple()?;
                d.push(id)?;
            }
            Op::Tuple { start } => {
                let id = self.tuple_from_stack(d, start)?;
                d.push(id)?;
            }
            Op::EmptyList => self.push_new(d, Node::List(Box::default()))?,
            Op::List { start } => {
                let items = d.split_off(start);
                self.push_new(d, Node::List(Box::new(items)))?;
            }
            Op::EmptyDict => {
                let id = self.arena.push_dict(DictClass::Dict, DictNode::empty())?;
                d.push(id)?;
            }
            Op::Dict { start } => {
                let id = self.arena.push_dict(DictClass::Dict, DictNode::empty())?;
                self.set_items_from_stack(d, id, start)?;
                d.push(id)?;
            }
            Op::EmptySet => self.push_new(
                d,
                Node::Set(Box::new(SetNode {
                    frozen: false,
                    base: None,
                    inherited: 0,
                    items: Vec::new(),
                })),
            )?,
            Op::FrozenSet { start } => {
                let items = d.split_off(start);
                self.push_new(
                    d,
                    Node::Set(Box::new(SetNode {
                        frozen: true,
                        base: None,
                        inherited: 0,
                        items,
                    })),
                )?;
            }
            Op::Append { item } => {
                let target = d.top()?;
                self.append(d, target, vec![item])?;
            }
            Op::Appends { start } => {
                let items = d.split_off(start);
                let target = d.top()?;
                self.append(d, target, items)?;
            }
            Op::SetItem { key, value } => {
                let target = d.top()?;
                self.set_items(d, target, &[key, value])?;
            }
            Op::SetItems { start } => {
                let flat = d.split_off(start);
                let target = d.top()?;
                self.set_items(d, target, &flat)?;
            }
            Op::AddItems { start } => {
                let items = d.split_off(start);
                let target = d.top()?;
                let kind = self.arena.get(target).kind_name();
                let max_len = self.max_container_len;
                match self.arena.get_mut(target) {
                    Some(Node::Set(set)) if !set.frozen => {
                        check_limit(
                            Limit::ContainerLen,
                            (set.items.len() + items.len()) as u64,
                            max_len,
                            Location::default,
                        )?;
                        set.items.extend(items);
                    }
                    Some(Node::Opaque) => {}
                    _ => {
                        return Err(Error::forbidden(
                            format!("Can only add items to sets, but got <class '{kind}'>"),
                            d.here(),
                        ))
                    }
                }
            }
            Op::Global { module, name } => {
                let id = self.call_global(d, module, name)?;
                d.push(id)?;
            }
            Op::StackGlobal { module, name } => {
                let (module, name) = match (self.arena.str(module), self.arena.str(name)) {
                    (Some(m), Some(n)) => (m.to_vec(), n.to_vec()),
                    _ => {
                        let at = d.here();
                        let id = self.hooks.unresolved_global(self.arena, &at)?;
                        return d.push(id);
                    }
                };
                let (Ok(module), Ok(name)) =
                    (std::str::from_utf8(&module), std::str::from_utf8(&name))
                else {
                    return Err(d.err("STACK_GLOBAL name is not UTF-8"));
                };
                let id = self.call_global(d, module, name)?;
                d.push(id)?;
            }
            Op::Extension(code) => {
                let at = d.here();
                let id = self.hooks.extension(self.arena, code, &at)?;
                d.push(id)?;
            }
            Op::Reduce { func, args } => {
                let id = self.reduce(d, func, args)?;
                d.push(id)?;
            }
            Op::Inst {
                module,
                name,
                start,
            } => {
                let cls = self.call_global(d, module, name)?;
                let args = self.tuple_from_stack(d, start)?;
                let id = self.reduce(d, cls, args)?;
                d.push(id)?;
            }
            Op::Obj { start } => {
                let cls = d.item(start).ok_or_else(|| d.err("OBJ without a class"))?;
                let args = self.tuple_from_stack(d, start + 1)?;
                d.truncate(start);
                let id = self.reduce(d, cls, args)?;
                d.push(id)?;
            }
            Op::NewObj { cls, args } => {
                let at = d.here();
                let id = self.hooks.new_object(self.arena, cls, args, None, &at)?;
                d.push(id)?;
            }
            Op::NewObjEx { cls, args, kwargs } => {
                let at = d.here();
                let id = (self.hooks).new_object(self.arena, cls, args, Some(kwargs), &at)?;
                d.push(id)?;
            }
            Op::Build { state } => {
                let inst = d.top()?;
                let at = d.here();
                self.hooks.build(self.arena, inst, state, &at)?;
            }
            Op::PersId(line) => {
                let pid = self.arena.push_str(line)?;
                let at = d.here();
                let id = self.hooks.persistent_load(self.arena, pid, &at)?;
                d.push(id)?;
            }
            Op::BinPersId(pid) => {
                let at = d.here();
                let id = self.hooks.persistent_load(self.arena, pid, &at)?;
                d.push(id)?;
            }
            Op::ReadonlyBuffer => {
                // Bytes are read-only already; pickle would turn anything else
                // into a memoryview, or fail.
                let top = d.top()?;
                match self.arena.get(top) {
                    Node::Bytes(_) | Node::Opaque => {}
                    Node::ByteArray(_) => {
                        return Err(Error::unsupported(
                            "READONLY_BUFFER on a bytearray (a read-only memoryview of it)",
                            d.here(),
                        ))
                    }
                    other => {
                        return Err(d.err(format!(
                            "READONLY_BUFFER needs bytes, got {}",
                            other.kind_name()
                        )))
                    }
                }
            }
        }
        Ok(())
    }
}
