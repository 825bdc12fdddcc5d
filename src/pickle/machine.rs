//! The pickle VM: every opcode of protocols 0 to 5, interpreted over borrowed bytes
//! into an [`Arena`]. It never imports or calls anything; what GLOBAL, REDUCE,
//! NEWOBJ, BUILD and persistent ids mean is decided by [`Hooks`].

use std::collections::HashMap;

use crate::error::{check_limit, Error, Location};
use crate::limits::{Limit, Limits};
use crate::pickle::cursor::Cursor;
use crate::pickle::opcodes::*;
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

/// Memo slots hold ids. Picklers number the memo densely from 0, which the vector
/// serves; any other index goes to the map, so a huge index never allocates.
#[derive(Default)]
struct Memo {
    dense: Vec<NodeId>,
    sparse: HashMap<u64, NodeId>,
}

impl Memo {
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    fn put(&mut self, index: u64, id: NodeId) {
        let dense_len = self.dense.len() as u64;
        if index < dense_len {
            if let Some(slot) = self.dense.get_mut(index as usize) {
                *slot = id;
            }
        } else if index == dense_len && !self.sparse.contains_key(&index) {
            self.dense.push(id);
        } else {
            self.sparse.insert(index, id);
        }
    }

    fn get(&self, index: u64) -> Option<NodeId> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.dense.get(i).copied())
            .or_else(|| self.sparse.get(&index).copied())
    }
}

pub struct Machine<'a, 'h, H: Hooks> {
    cursor: Cursor<'a>,
    hooks: &'h mut H,
    arena: &'h mut Arena<H::Domain>,
    limits: Limits,
    encoding: StringEncoding,
    stack: Vec<NodeId>,
    marks: Vec<usize>,
    memo: Memo,
    protocol: Option<u8>,
    /// Offset and byte of the opcode being run, for error locations.
    op_offset: usize,
    op: u8,
}

/// Run one pickle from the start of `data` to its STOP.
pub fn run<H: Hooks>(
    data: &[u8],
    hooks: &mut H,
    arena: &mut Arena<H::Domain>,
    limits: &Limits,
    encoding: StringEncoding,
) -> Result<Parsed, Error> {
    check_limit(
        Limit::PickleBytes,
        data.len() as u64,
        limits.max_pickle_bytes,
        Location::default,
    )?;
    arena.reserve_for_pickle(data.len());
    hooks.reserve_for_pickle(data.len());
    let mut machine = Machine {
        cursor: Cursor::new(data),
        hooks,
        arena,
        limits: *limits,
        encoding,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
        protocol: None,
        op_offset: 0,
        op: 0,
    };
    machine.run_to_stop()
}

impl<'a, H: Hooks> Machine<'a, '_, H> {
    fn here(&self) -> Location {
        Location::op(self.op_offset as u64, opcode(self.op))
    }

    fn err(&self, reason: impl Into<String>) -> Error {
        Error::pickle(reason, self.here())
    }

    /// Give errors from helpers (cursor, arena, hooks) this opcode's location.
    fn locate(&self, mut e: Error) -> Error {
        if let Some(loc) = e.location_mut() {
            if loc.offset.is_none() {
                loc.offset = Some(self.op_offset as u64);
            }
            if loc.opcode.is_none() {
                loc.opcode = Some(opcode(self.op));
            }
        }
        e
    }

    fn new_node(&mut self, node: Node<H::Domain>) -> Result<NodeId, Error> {
        self.arena.push(node)
    }

    fn push(&mut self, id: NodeId) -> Result<(), Error> {
        check_limit(
            Limit::StackDepth,
            self.stack.len() as u64 + 1,
            self.limits.max_stack_depth,
            Location::default,
        )?;
        self.stack.push(id);
        Ok(())
    }

    fn push_new(&mut self, node: Node<H::Domain>) -> Result<(), Error> {
        let id = self.new_node(node)?;
        self.push(id)
    }

    /// The stack floor: items below the innermost MARK are out of reach, as in pickle.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<NodeId, Error> {
        if self.stack.len() <= self.floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    fn top(&self) -> Result<NodeId, Error> {
        if self.stack.len() <= self.floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    /// Pop the innermost MARK; the items above it are `self.stack[start..]`.
    fn pop_mark_start(&mut self) -> Result<usize, Error> {
        let mark = self.marks.pop().ok_or_else(|| self.err("MARK not found"))?;
        let start = mark.min(self.stack.len());
        self.arena.check_len(self.stack.len() - start)?;
        Ok(start)
    }

    /// Pop everything down to the innermost MARK, and the MARK.
    fn pop_mark(&mut self) -> Result<Vec<NodeId>, Error> {
        let start = self.pop_mark_start()?;
        Ok(self.stack.split_off(start))
    }

    /// A tuple of the stack items from `start` up, which leave the stack.
    fn tuple_from_stack(&mut self, start: usize) -> Result<NodeId, Error> {
        let items = self.stack.get(start..).unwrap_or_default();
        let id = self.arena.push_tuple(items)?;
        self.stack.truncate(start);
        Ok(id)
    }

    fn memo_put(&mut self, index: u64) -> Result<(), Error> {
        let top = self.top()?;
        // The usual case: picklers number memo slots densely from 0.
        if index == self.memo.dense.len() as u64
            && self.memo.sparse.is_empty()
            && index < self.limits.max_memo_entries
        {
            self.memo.dense.push(top);
            return Ok(());
        }
        if self.memo.get(index).is_none() {
            check_limit(
                Limit::MemoEntries,
                self.memo.len() as u64 + 1,
                self.limits.max_memo_entries,
                Location::default,
            )?;
        }
        self.memo.put(index, top);
        Ok(())
    }

    fn memo_get(&mut self, index: u64) -> Result<(), Error> {
        let id = self
            .memo
            .get(index)
            .ok_or_else(|| self.err(format!("memo key {index} not found")))?;
        self.push(id)
    }

    fn text_line(&mut self) -> Result<&'a str, Error> {
        let line = self.cursor.line()?;
        std::str::from_utf8(line).map_err(|_| self.err("a text argument that is not UTF-8"))
    }

    fn unicode(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if !text::is_utf8_surrogatepass(bytes) {
            return Err(self.err("string is not valid UTF-8"));
        }
        let id = self.arena.push_str(bytes)?;
        self.push(id)
    }

    /// The py2 `str` opcodes decode with the caller's encoding, as pickle's `encoding=` does.
    fn py2_string(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let id = match self.encoding {
            StringEncoding::Bytes => self.arena.push_bytes(bytes)?,
            StringEncoding::Latin1 => self.arena.push_str(&text::latin1_to_utf8(bytes))?,
            StringEncoding::Ascii if bytes.is_ascii() => self.arena.push_str(bytes)?,
            StringEncoding::Utf8 if std::str::from_utf8(bytes).is_ok() => {
                self.arena.push_str(bytes)?
            }
            enc => return Err(self.err(format!("string cannot be decoded as {enc:?}"))),
        };
        self.push(id)
    }

    fn int_from_le_bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
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
            self.push_new(Node::Int(i64::from_le_bytes(buf)))
        } else {
            self.push_new(Node::BigInt(Box::new(bytes.to_vec())))
        }
    }

    fn int_literal(&mut self, text: &str) -> Result<(), Error> {
        match text::parse_int_literal(text) {
            Ok(Some(v)) => self.push_new(Node::Int(v)),
            Ok(None) => self.push_new(Node::DecimalInt(Box::new(text.trim().to_owned()))),
            Err(()) => Err(self.err(format!("invalid int literal {text:?}"))),
        }
    }

    fn call_global(&mut self, module: &str, name: &str) -> Result<NodeId, Error> {
        let at = self.here();
        self.hooks.global(self.arena, module, name, &at)
    }

    fn read_global_lines(&mut self) -> Result<(&'a str, &'a str), Error> {
        let module = self.text_line()?;
        let name = self.text_line()?;
        Ok((module, name))
    }

    fn reduce(&mut self, func: NodeId, args: NodeId) -> Result<NodeId, Error> {
        let at = self.here();
        self.hooks.reduce(self.arena, func, args, &at)
    }

    fn append(&mut self, target: NodeId, items: Vec<NodeId>) -> Result<(), Error> {
        let kind = self.arena.get(target).kind_name();
        let max_len = self.limits.max_container_len;
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
                let op = if self.op == APPENDS {
                    "extend"
                } else {
                    "append to"
                };
                Err(Error::forbidden(
                    format!("Can only {op} lists, but got <class '{kind}'>"),
                    self.here(),
                ))
            }
        }
    }

    fn set_items(&mut self, target: NodeId, flat: Vec<NodeId>) -> Result<(), Error> {
        if flat.len() % 2 != 0 {
            return Err(self.err("odd number of items for SETITEMS"));
        }
        let kind = self.arena.get(target).kind_name();
        let max_len = self.limits.max_container_len;
        let pairs = flat
            .chunks_exact(2)
            .filter_map(|kv| Some((*kv.first()?, *kv.get(1)?)));
        if let Node::Dict(_, dict) = *self.arena.get(target) {
            let Some(dict) = self.arena.dict_mut(dict) else {
                return Err(self.err("a dict that is not in the arena"));
            };
            check_limit(
                Limit::ContainerLen,
                (dict.items.len() + flat.len() / 2) as u64,
                max_len,
                Location::default,
            )?;
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
                let op = if self.op == SETITEMS {
                    "SETITEMS"
                } else {
                    "SETITEM"
                };
                Err(Error::forbidden(
                    format!("Can only {op} for dict, collections.OrderedDict, collections.Counter, but got <class '{kind}'>"),
                    self.here(),
                ))
            }
        }
    }

    fn run_to_stop(&mut self) -> Result<Parsed, Error> {
        loop {
            self.op_offset = self.cursor.position();
            self.op = match self.cursor.u8() {
                Ok(op) => op,
                Err(_) => return Err(self.err("pickle data was truncated: no STOP opcode")),
            };
            if self.op == STOP {
                let root = self
                    .pop()
                    .map_err(|_| self.err("STOP with an empty stack"))?;
                return Ok(Parsed {
                    root,
                    protocol: self.protocol,
                    end: self.cursor.position(),
                });
            }
            if let Err(e) = self.step() {
                return Err(self.locate(e));
            }
            // A pickle is measured by what it consumes: legacy streams run on the rest of the file.
            if self.cursor.position() as u64 > self.limits.max_pickle_bytes {
                return Err(Error::limit(
                    Limit::PickleBytes,
                    self.limits.max_pickle_bytes,
                    self.here(),
                ));
            }
        }
    }

    fn step(&mut self) -> Result<(), Error> {
        match self.op {
            PROTO => {
                // torch reads on past any protocol number (with a warning): what a
                // later protocol adds would be new opcodes, which are refused.
                self.protocol = Some(self.cursor.u8()?);
            }
            FRAME => {
                let len = self.cursor.u64_le()?;
                if len > self.cursor.remaining() as u64 {
                    return Err(self.err(format!(
                        "FRAME of {len} bytes runs past the end of the pickle"
                    )));
                }
            }
            MARK => {
                check_limit(
                    Limit::MarkDepth,
                    self.marks.len() as u64 + 1,
                    self.limits.max_mark_depth,
                    Location::default,
                )?;
                self.marks.push(self.stack.len());
            }
            POP => {
                if self.stack.len() > self.floor() {
                    self.stack.pop();
                } else {
                    // POP right after MARK discards the mark, as pickle does.
                    self.pop_mark()?;
                }
            }
            POP_MARK => {
                self.pop_mark()?;
            }
            DUP => {
                let top = self.top()?;
                self.push(top)?;
            }

            NONE => self.push_new(Node::None)?,
            NEWTRUE => self.push_new(Node::Bool(true))?,
            NEWFALSE => self.push_new(Node::Bool(false))?,
            INT => {
                let line = self.text_line()?;
                match line {
                    "00" => self.push_new(Node::Bool(false))?,
                    "01" => self.push_new(Node::Bool(true))?,
                    _ => self.int_literal(line)?,
                }
            }
            LONG => {
                let line = self.text_line()?;
                let line = line.strip_suffix('L').unwrap_or(line);
                self.int_literal(line)?;
            }
            BININT => {
                let v = self.cursor.i32_le()?;
                self.push_new(Node::Int(i64::from(v)))?;
            }
            BININT1 => {
                let v = self.cursor.u8()?;
                self.push_new(Node::Int(i64::from(v)))?;
            }
            BININT2 => {
                let v = self.cursor.u16_le()?;
                self.push_new(Node::Int(i64::from(v)))?;
            }
            LONG1 | LONG4 => {
                let n = if self.op == LONG1 {
                    u64::from(self.cursor.u8()?)
                } else {
                    let n = self.cursor.i32_le()?;
                    u64::try_from(n).map_err(|_| self.err("LONG pickle has negative byte count"))?
                };
                let bytes = self.cursor.take_counted(n)?;
                self.int_from_le_bytes(bytes)?;
            }
            FLOAT => {
                let line = self.text_line()?;
                let v = text::parse_float_literal(line)
                    .ok_or_else(|| self.err(format!("invalid float literal {line:?}")))?;
                self.push_new(Node::Float(v))?;
            }
            BINFLOAT => {
                let v = f64::from_be_bytes(self.cursor.array::<8>()?);
                self.push_new(Node::Float(v))?;
            }

            STRING => {
                let line = self.cursor.line()?;
                let body = match line {
                    [q @ (b'\'' | b'"'), body @ .., last] if last == q => body,
                    _ => return Err(self.err("the STRING opcode argument must be quoted")),
                };
                let bytes = text::escape_decode(body)
                    .ok_or_else(|| self.err("invalid escape in STRING"))?;
                self.py2_string(&bytes)?;
            }
            BINSTRING | SHORT_BINSTRING => {
                let n = if self.op == SHORT_BINSTRING {
                    u64::from(self.cursor.u8()?)
                } else {
                    let n = self.cursor.i32_le()?;
                    u64::try_from(n)
                        .map_err(|_| self.err("BINSTRING pickle has negative byte count"))?
                };
                let bytes = self.cursor.take_counted(n)?;
                self.py2_string(bytes)?;
            }
            UNICODE => {
                let line = self.cursor.line()?;
                let decoded = text::raw_unicode_escape(line)
                    .ok_or_else(|| self.err("invalid raw-unicode-escape in UNICODE"))?;
                let id = self.arena.push_str(&decoded)?;
                self.push(id)?;
            }
            BINUNICODE | SHORT_BINUNICODE | BINUNICODE8 => {
                let width = match self.op {
                    SHORT_BINUNICODE => 1,
                    BINUNICODE => 4,
                    _ => 8,
                };
                let n = self.cursor.count(width)?;
                let bytes = self.cursor.take_counted(n)?;
                self.unicode(bytes)?;
            }
            BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                let width = match self.op {
                    SHORT_BINBYTES => 1,
                    BINBYTES => 4,
                    _ => 8,
                };
                let n = self.cursor.count(width)?;
                let bytes = self.cursor.take_counted(n)?;
                let id = if self.op == BYTEARRAY8 {
                    self.arena.push_bytearray(bytes)?
                } else {
                    self.arena.push_bytes(bytes)?
                };
                self.push(id)?;
            }

            EMPTY_TUPLE => {
                let id = self.arena.push_tuple(&[])?;
                self.push(id)?;
            }
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(self.op - TUPLE1 + 1);
                if self.stack.len() < self.floor() + n {
                    return Err(self.err("stack underflow"));
                }
                let id = self.tuple_from_stack(self.stack.len() - n)?;
                self.push(id)?;
            }
            TUPLE => {
                let start = self.pop_mark_start()?;
                let id = self.tuple_from_stack(start)?;
                self.push(id)?;
            }
            EMPTY_LIST => self.push_new(Node::List(Box::default()))?,
            LIST => {
                let items = self.pop_mark()?;
                self.push_new(Node::List(Box::new(items)))?;
            }
            EMPTY_DICT => {
                let id = self.arena.push_dict(DictClass::Dict, DictNode::empty())?;
                self.push(id)?;
            }
            DICT => {
                let flat = self.pop_mark()?;
                let id = self.arena.push_dict(DictClass::Dict, DictNode::empty())?;
                self.set_items(id, flat)?;
                self.push(id)?;
            }
            EMPTY_SET => self.push_new(Node::Set(Box::new(SetNode {
                frozen: false,
                base: None,
                inherited: 0,
                items: Vec::new(),
            })))?,
            FROZENSET => {
                let items = self.pop_mark()?;
                self.push_new(Node::Set(Box::new(SetNode {
                    frozen: true,
                    base: None,
                    inherited: 0,
                    items,
                })))?;
            }
            APPEND => {
                let item = self.pop()?;
                let target = self.top()?;
                self.append(target, vec![item])?;
            }
            APPENDS => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, items)?;
            }
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                let target = self.top()?;
                self.set_items(target, vec![key, value])?;
            }
            SETITEMS => {
                let flat = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, flat)?;
            }
            ADDITEMS => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                let kind = self.arena.get(target).kind_name();
                let max_len = self.limits.max_container_len;
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
                            self.here(),
                        ))
                    }
                }
            }

            PUT => {
                let line = self.text_line()?;
                let index = text::parse_memo_key(line)
                    .ok_or_else(|| self.err(format!("invalid memo key {line:?}")))?;
                self.memo_put(index)?;
            }
            BINPUT => {
                let index = self.cursor.u8()?;
                self.memo_put(u64::from(index))?;
            }
            LONG_BINPUT => {
                let index = self.cursor.u32_le()?;
                self.memo_put(u64::from(index))?;
            }
            MEMOIZE => {
                let index = self.memo.len() as u64;
                self.memo_put(index)?;
            }
            GET => {
                let line = self.text_line()?;
                let index = text::parse_memo_key(line)
                    .ok_or_else(|| self.err(format!("invalid memo key {line:?}")))?;
                self.memo_get(index)?;
            }
            BINGET => {
                let index = self.cursor.u8()?;
                self.memo_get(u64::from(index))?;
            }
            LONG_BINGET => {
                let index = self.cursor.u32_le()?;
                self.memo_get(u64::from(index))?;
            }

            GLOBAL => {
                let (module, name) = self.read_global_lines()?;
                let id = self.call_global(module, name)?;
                self.push(id)?;
            }
            STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (module, name) = match (self.arena.str(module), self.arena.str(name)) {
                    (Some(m), Some(n)) => (m.to_vec(), n.to_vec()),
                    _ => {
                        let at = self.here();
                        let id = self.hooks.unresolved_global(self.arena, &at)?;
                        return self.push(id);
                    }
                };
                let (Ok(module), Ok(name)) =
                    (std::str::from_utf8(&module), std::str::from_utf8(&name))
                else {
                    return Err(self.err("STACK_GLOBAL name is not UTF-8"));
                };
                let id = self.call_global(module, name)?;
                self.push(id)?;
            }
            EXT1 | EXT2 | EXT4 => {
                let code = match self.op {
                    EXT1 => u32::from(self.cursor.u8()?),
                    EXT2 => u32::from(self.cursor.u16_le()?),
                    _ => self.cursor.u32_le()?,
                };
                let at = self.here();
                let id = self.hooks.extension(self.arena, code, &at)?;
                self.push(id)?;
            }
            REDUCE => {
                let args = self.pop()?;
                let func = self.pop()?;
                let id = self.reduce(func, args)?;
                self.push(id)?;
            }
            INST => {
                let (module, name) = self.read_global_lines()?;
                let start = self.pop_mark_start()?;
                let cls = self.call_global(module, name)?;
                let args = self.tuple_from_stack(start)?;
                let id = self.reduce(cls, args)?;
                self.push(id)?;
            }
            OBJ => {
                let start = self.pop_mark_start()?;
                let cls = *self
                    .stack
                    .get(start)
                    .ok_or_else(|| self.err("OBJ without a class"))?;
                let args = self.tuple_from_stack(start + 1)?;
                self.stack.truncate(start);
                let id = self.reduce(cls, args)?;
                self.push(id)?;
            }
            NEWOBJ => {
                let args = self.pop()?;
                let cls = self.pop()?;
                let at = self.here();
                let id = self.hooks.new_object(self.arena, cls, args, None, &at)?;
                self.push(id)?;
            }
            NEWOBJ_EX => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let cls = self.pop()?;
                let at = self.here();
                let id = self
                    .hooks
                    .new_object(self.arena, cls, args, Some(kwargs), &at)?;
                self.push(id)?;
            }
            BUILD => {
                let state = self.pop()?;
                let inst = self.top()?;
                let at = self.here();
                self.hooks.build(self.arena, inst, state, &at)?;
            }
            PERSID => {
                let line = self.cursor.line()?;
                if !line.is_ascii() {
                    return Err(self.err("persistent IDs in protocol 0 must be ASCII strings"));
                }
                let pid = self.arena.push_str(line)?;
                let at = self.here();
                let id = self.hooks.persistent_load(self.arena, pid, &at)?;
                self.push(id)?;
            }
            BINPERSID => {
                let pid = self.pop()?;
                let at = self.here();
                let id = self.hooks.persistent_load(self.arena, pid, &at)?;
                self.push(id)?;
            }
            NEXT_BUFFER => {
                return Err(self.err(
                    "pickle stream refers to out-of-band data, which a checkpoint cannot carry",
                ));
            }
            READONLY_BUFFER => {
                // Bytes are read-only already; pickle would turn anything else
                // into a memoryview, or fail.
                let top = self.top()?;
                match self.arena.get(top) {
                    Node::Bytes(_) | Node::Opaque => {}
                    Node::ByteArray(_) => {
                        return Err(Error::unsupported(
                            "READONLY_BUFFER on a bytearray (a read-only memoryview of it)",
                            self.here(),
                        ))
                    }
                    other => {
                        return Err(self.err(format!(
                            "READONLY_BUFFER needs bytes, got {}",
                            other.kind_name()
                        )))
                    }
                }
            }
            op => {
                return Err(Error::pickle(
                    format!("unknown opcode 0x{op:02x} ({:?})", char::from(op)),
                    Location::op(self.op_offset as u64, opcode(op)),
                ));
            }
        }
        Ok(())
    }
}
