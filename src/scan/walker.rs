//! The fast path of `get_unsafe_globals_in_checkpoint`: a walk over a pickle's
//! opcodes with a shadow stack that knows only what STACK_GLOBAL and the
//! container opcodes need (which values are literal strings, which are lists,
//! dicts and sets). It builds nothing, so it runs at the speed of the opcode
//! stream.
//!
//! It answers only when its answer is the VM's: on any opcode, value or limit it
//! does not model exactly it gives up, and the caller runs the VM in scan mode.
//! The property tests hold the two to the same list on generated pickles.

use crate::limits::Limits;
use crate::pickle::cursor::Cursor;
use crate::pickle::opcodes::*;
use crate::pickle::text;
use crate::torch::policy::{
    self, Builtin, FoundGlobal, Global, Resolution, UserGlobals, COMPUTED_GLOBAL,
};

/// What the walk knows about a value, in four bytes: a string by the offset of
/// the opcode that pushed it, anything else by kind. The memo holds one per value
/// put there (GPT-2's pickle: 1,191) and the stack one per item of a container's
/// batch (up to 1,000 pairs), and a process's first scan pays a page fault for
/// every fresh page they fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shadow(u32);

impl Shadow {
    const LIST: Shadow = Shadow(u32::MAX);
    const DICT: Shadow = Shadow(u32::MAX - 1);
    const SET: Shadow = Shadow(u32::MAX - 2);
    const EMPTY_TUPLE: Shadow = Shadow(u32::MAX - 3);
    /// `collections.OrderedDict` or `collections.Counter` itself: called with no
    /// arguments, it makes an empty dict.
    const DICT_CLASS: Shadow = Shadow(u32::MAX - 4);
    /// `builtins.set` itself.
    const SET_CLASS: Shadow = Shadow(u32::MAX - 5);
    /// Anything else: a number, bytes, a tuple, an object, a tensor...
    const OTHER: Shadow = Shadow(Self::FIRST_KIND);
    /// Values from here up are kinds, so a string's opcode must lie below it.
    const FIRST_KIND: u32 = u32::MAX - 6;

    /// The string pushed by the opcode at `at`.
    fn string(at: usize) -> Option<Shadow> {
        let at = u32::try_from(at).ok()?;
        (at < Self::FIRST_KIND).then_some(Shadow(at))
    }

    fn string_opcode(self) -> Option<usize> {
        if self.0 < Self::FIRST_KIND {
            usize::try_from(self.0).ok()
        } else {
            None
        }
    }
}

const _: () = assert!(std::mem::size_of::<Shadow>() == 4);

/// The width of a string opcode's length prefix.
fn unicode_width(op: u8) -> Option<u8> {
    match op {
        SHORT_BINUNICODE => Some(1),
        BINUNICODE => Some(4),
        BINUNICODE8 => Some(8),
        _ => None,
    }
}

/// The walk of one pickle: the globals outside the allowlist, and where it ended.
pub struct Walk {
    pub found: Vec<FoundGlobal>,
    /// Offset just past STOP.
    pub end: usize,
}

struct Walker<'d, 'u> {
    data: &'d [u8],
    cursor: Cursor<'d>,
    user: &'u UserGlobals,
    limits: &'u Limits,
    stack: Vec<Shadow>,
    marks: Vec<usize>,
    memo: Vec<Shadow>,
    /// Values created, payload bytes, and items added to containers: the VM's
    /// limits are far above these in any file the walk answers for.
    values: u64,
    payload: u64,
    items: u64,
    found: Vec<FoundGlobal>,
}

/// The most memo entries reserved before the pickle asks for them.
const MAX_PRESIZED: usize = 1 << 16;

/// Walk the pickle at the start of `data`; `None` when only the VM can tell.
pub fn walk(data: &[u8], user: &UserGlobals, limits: &Limits) -> Option<Walk> {
    if data.len() as u64 > limits.max_pickle_bytes {
        return None;
    }
    // Sized for a typical state dict up front: growing them one doubling at a
    // time was a third of a small walk's allocator calls.
    let memo_guess = (data.len() / 12).min(MAX_PRESIZED);
    let mut w = Walker {
        data,
        cursor: Cursor::new(data),
        user,
        limits,
        stack: Vec::with_capacity(64),
        marks: Vec::with_capacity(16),
        memo: Vec::with_capacity(memo_guess),
        values: 0,
        payload: 0,
        items: 0,
        found: Vec::new(),
    };
    let checked_from = limits_out_of_reach_below(limits);
    loop {
        let at = w.cursor.position();
        let op = w.cursor.u8().ok()?;
        if op == STOP {
            w.pop()?;
            return Some(Walk {
                found: w.found,
                end: w.cursor.position(),
            });
        }
        w.step(op, at)?;
        if w.cursor.position() >= checked_from && !w.far_from_limits() {
            return None;
        }
    }
}

/// The offset below which no walk can be near a limit, so the full check after
/// each opcode (a fifth of a small walk's instructions) is needed only past it.
/// An opcode takes at least a byte and adds at most one value, stack slot, mark or
/// memo entry and two container items (one popped off the stack, one counted by
/// the container); payload bytes come out of the pickle itself.
fn limits_out_of_reach_below(l: &Limits) -> usize {
    let below = (l.max_nodes / 4)
        .min(l.max_payload_bytes / 2)
        .min(l.max_container_len / 2)
        .min(l.max_stack_depth)
        .min(l.max_mark_depth)
        .min(l.max_memo_entries);
    usize::try_from(below).unwrap_or(usize::MAX)
}

impl<'d> Walker<'d, '_> {
    fn far_from_limits(&self) -> bool {
        // Hooks may add a value or two per call; a quarter of the budget is a
        // margin no well-formed file gets near.
        let l = self.limits;
        self.values.saturating_mul(4) < l.max_nodes
            && self.payload.saturating_mul(2) < l.max_payload_bytes
            && self.items < l.max_container_len
            && (self.stack.len() as u64) < l.max_stack_depth
            && (self.marks.len() as u64) < l.max_mark_depth
            && (self.memo.len() as u64) < l.max_memo_entries
    }

    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, v: Shadow) -> Option<()> {
        self.values += 1;
        self.stack.push(v);
        Some(())
    }

    fn pop(&mut self) -> Option<Shadow> {
        if self.stack.len() <= self.floor() {
            return None;
        }
        self.stack.pop()
    }

    fn top(&self) -> Option<Shadow> {
        if self.stack.len() <= self.floor() {
            return None;
        }
        self.stack.last().copied()
    }

    /// Pop down to the innermost MARK; how many items were above it.
    fn pop_mark(&mut self) -> Option<usize> {
        let mark = self.marks.pop()?;
        let n = self.stack.len().checked_sub(mark)?;
        self.stack.truncate(mark);
        self.items = self.items.saturating_add(n as u64);
        Some(n)
    }

    fn global(&mut self, module: &str, name: &str, at: usize) -> Shadow {
        let (module, name) = policy::map_py2(module, name);
        match policy::resolve(&module, &name, self.user) {
            Resolution::Allowed(Global::Builtin(Builtin::OrderedDict | Builtin::Counter)) => {
                Shadow::DICT_CLASS
            }
            Resolution::Allowed(Global::Builtin(Builtin::Set)) => Shadow::SET_CLASS,
            Resolution::Allowed(_) => Shadow::OTHER,
            Resolution::Blocked(_) | Resolution::NotAllowed => {
                self.found.push(FoundGlobal::new(&module, &name, at as u64));
                Shadow::OTHER
            }
        }
    }

    /// A string's text, read again from the opcode that pushed it (which the
    /// walk checked then).
    fn text(&self, s: Shadow) -> Option<&'d str> {
        let mut opcode = Cursor::new(self.data.get(s.string_opcode()?..)?);
        let width = unicode_width(opcode.u8().ok()?)?;
        let n = opcode.count(width).ok()?;
        std::str::from_utf8(opcode.take_counted(n).ok()?).ok()
    }

    fn line(&mut self) -> Option<&'d str> {
        std::str::from_utf8(self.cursor.line().ok()?).ok()
    }

    /// A container opcode may only target the kind the VM accepts for sure.
    fn mutate(&mut self, kind: Shadow, added: usize) -> Option<()> {
        (self.top()? == kind).then_some(())?;
        self.items = self.items.saturating_add(added as u64);
        Some(())
    }

    fn step(&mut self, op: u8, at: usize) -> Option<()> {
        match op {
            PROTO => {
                self.cursor.u8().ok()?;
            }
            FRAME => {
                let len = self.cursor.u64_le().ok()?;
                (len <= self.cursor.remaining() as u64).then_some(())?;
            }
            MARK => self.marks.push(self.stack.len()),
            POP => {
                if self.stack.len() > self.floor() {
                    self.stack.pop();
                } else {
                    self.pop_mark()?;
                }
            }
            POP_MARK => {
                self.pop_mark()?;
            }
            DUP => {
                let top = self.top()?;
                self.stack.push(top);
            }
            NONE | NEWTRUE | NEWFALSE => self.push(Shadow::OTHER)?,
            BININT => {
                self.cursor.take(4).ok()?;
                self.push(Shadow::OTHER)?;
            }
            BININT1 => {
                self.cursor.take(1).ok()?;
                self.push(Shadow::OTHER)?;
            }
            BININT2 => {
                self.cursor.take(2).ok()?;
                self.push(Shadow::OTHER)?;
            }
            BINFLOAT => {
                self.cursor.take(8).ok()?;
                self.push(Shadow::OTHER)?;
            }
            LONG1 | LONG4 => {
                let n = if op == LONG1 {
                    u64::from(self.cursor.u8().ok()?)
                } else {
                    u64::try_from(self.cursor.i32_le().ok()?).ok()?
                };
                self.cursor.take_counted(n).ok()?;
                self.payload = self.payload.saturating_add(n);
                self.push(Shadow::OTHER)?;
            }
            BINUNICODE | SHORT_BINUNICODE | BINUNICODE8 => {
                let n = self.cursor.count(unicode_width(op)?).ok()?;
                let bytes = self.cursor.take_counted(n).ok()?;
                text::is_utf8_surrogatepass(bytes).then_some(())?;
                self.payload = self.payload.saturating_add(n);
                self.push(Shadow::string(at)?)?;
            }
            BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                let width = match op {
                    SHORT_BINBYTES => 1,
                    BINBYTES => 4,
                    _ => 8,
                };
                let n = self.cursor.count(width).ok()?;
                self.cursor.take_counted(n).ok()?;
                self.payload = self.payload.saturating_add(n);
                self.push(Shadow::OTHER)?;
            }
            EMPTY_TUPLE => self.push(Shadow::EMPTY_TUPLE)?,
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(op - TUPLE1 + 1);
                (self.stack.len() >= self.floor() + n).then_some(())?;
                self.stack.truncate(self.stack.len() - n);
                self.push(Shadow::OTHER)?;
            }
            TUPLE => {
                let n = self.pop_mark()?;
                self.push(if n == 0 {
                    Shadow::EMPTY_TUPLE
                } else {
                    Shadow::OTHER
                })?;
            }
            EMPTY_LIST => self.push(Shadow::LIST)?,
            LIST => {
                self.pop_mark()?;
                self.push(Shadow::LIST)?;
            }
            EMPTY_DICT => self.push(Shadow::DICT)?,
            DICT => {
                (self.pop_mark()? % 2 == 0).then_some(())?;
                self.push(Shadow::DICT)?;
            }
            EMPTY_SET => self.push(Shadow::SET)?,
            FROZENSET => {
                self.pop_mark()?;
                self.push(Shadow::OTHER)?;
            }
            APPEND => {
                self.pop()?;
                self.mutate(Shadow::LIST, 1)?;
            }
            APPENDS => {
                let n = self.pop_mark()?;
                self.mutate(Shadow::LIST, n)?;
            }
            SETITEM => {
                self.pop()?;
                self.pop()?;
                self.mutate(Shadow::DICT, 1)?;
            }
            SETITEMS => {
                let n = self.pop_mark()?;
                (n % 2 == 0).then_some(())?;
                self.mutate(Shadow::DICT, n / 2)?;
            }
            ADDITEMS => {
                let n = self.pop_mark()?;
                self.mutate(Shadow::SET, n)?;
            }
            BINPUT => {
                let index = usize::from(self.cursor.u8().ok()?);
                self.memo_put(index)?;
            }
            LONG_BINPUT => {
                let index = usize::try_from(self.cursor.u32_le().ok()?).ok()?;
                self.memo_put(index)?;
            }
            MEMOIZE => self.memo_put(self.memo.len())?,
            BINGET => {
                let index = usize::from(self.cursor.u8().ok()?);
                let v = *self.memo.get(index)?;
                self.stack.push(v);
            }
            LONG_BINGET => {
                let index = usize::try_from(self.cursor.u32_le().ok()?).ok()?;
                let v = *self.memo.get(index)?;
                self.stack.push(v);
            }
            GLOBAL => {
                let module = self.line()?;
                let name = self.line()?;
                let g = self.global(module, name, at);
                self.push(g)?;
            }
            STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let g = match (module.string_opcode(), name.string_opcode()) {
                    (Some(_), Some(_)) => {
                        let m = self.text(module)?;
                        let n = self.text(name)?;
                        self.global(m, n, at)
                    }
                    _ => {
                        self.found
                            .push(FoundGlobal::new(COMPUTED_GLOBAL, "", at as u64));
                        Shadow::OTHER
                    }
                };
                self.push(g)?;
            }
            EXT1 | EXT2 | EXT4 => {
                let code = match op {
                    EXT1 => u32::from(self.cursor.u8().ok()?),
                    EXT2 => u32::from(self.cursor.u16_le().ok()?),
                    _ => self.cursor.u32_le().ok()?,
                };
                let name = format!("<extension code {code}>");
                self.found.push(FoundGlobal::new(&name, "", at as u64));
                self.push(Shadow::OTHER)?;
            }
            REDUCE => {
                let args = self.pop()?;
                let func = self.pop()?;
                let made = match (func, args) {
                    (Shadow::DICT_CLASS, Shadow::EMPTY_TUPLE) => Shadow::DICT,
                    (Shadow::SET_CLASS, Shadow::EMPTY_TUPLE) => Shadow::SET,
                    // A copy of another container is charged against the limits
                    // by its size, which the walk does not know.
                    (Shadow::DICT_CLASS | Shadow::SET_CLASS, _) => return None,
                    _ => Shadow::OTHER,
                };
                self.push(made)?;
            }
            NEWOBJ => {
                self.pop()?;
                self.pop()?;
                self.push(Shadow::OTHER)?;
            }
            NEWOBJ_EX => {
                self.pop()?;
                self.pop()?;
                self.pop()?;
                self.push(Shadow::OTHER)?;
            }
            BUILD => {
                self.pop()?;
                self.top()?;
            }
            BINPERSID => {
                self.pop()?;
                self.push(Shadow::OTHER)?;
            }
            INST => {
                let module = self.line()?;
                let name = self.line()?;
                self.pop_mark()?;
                self.global(module, name, at);
                self.push(Shadow::OTHER)?;
            }
            OBJ => {
                (self.pop_mark()? >= 1).then_some(())?;
                self.push(Shadow::OTHER)?;
            }
            // Protocol 0 and 1 text opcodes, out-of-band buffers and anything
            // unknown: the VM decides.
            _ => return None,
        }
        Some(())
    }

    fn memo_put(&mut self, index: usize) -> Option<()> {
        let top = self.top()?;
        match index.cmp(&self.memo.len()) {
            std::cmp::Ordering::Less => *self.memo.get_mut(index)? = top,
            std::cmp::Ordering::Equal => self.memo.push(top),
            std::cmp::Ordering::Greater => return None,
        }
        Some(())
    }
}
