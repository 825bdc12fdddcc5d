//! The fast path of `get_unsafe_globals_in_checkpoint`: the VM's decoder, run
//! with stack slots that know only what STACK_GLOBAL and the container opcodes
//! need (which values are literal strings, which are lists, dicts and sets). It
//! builds nothing, so it runs at the speed of the opcode stream.
//!
//! It answers only when its answer is the VM's: on any opcode, value or limit it
//! does not model exactly it gives up, and the caller runs the VM recording
//! refusals. The property tests hold the two to the same list on generated pickles.

use crate::error::{Error, Location};
use crate::limits::Limits;
use crate::pickle::cursor::Cursor;
use crate::pickle::decoder::{Decoder, Divergence, Interpret, Op};
use crate::pickle::opcodes::{BINUNICODE, BINUNICODE8, SHORT_BINUNICODE, TUPLE};
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
    /// The globals inside it, when the walk was asked to list them.
    pub allowed: Vec<FoundGlobal>,
    /// Offset just past STOP.
    pub end: usize,
    pub divergences: Vec<Divergence>,
}

struct Walker<'u> {
    user: &'u UserGlobals,
    limits: &'u Limits,
    checked_from: usize,
    /// Values created, payload bytes, and items added to containers: the VM's
    /// limits are far above these in any file the walk answers for.
    values: u64,
    payload: u64,
    items: u64,
    found: Vec<FoundGlobal>,
    allowed: Option<Vec<FoundGlobal>>,
}

/// Walk the pickle at the start of `data`; `None` when only the VM can tell.
/// `list_allowed` lists the globals inside the allowlist too.
pub fn walk(data: &[u8], user: &UserGlobals, limits: &Limits, list_allowed: bool) -> Option<Walk> {
    if data.len() as u64 > limits.max_pickle_bytes {
        return None;
    }
    let mut walker = Walker {
        user,
        limits,
        checked_from: limits_out_of_reach_below(limits),
        values: 0,
        payload: 0,
        items: 0,
        found: Vec::new(),
        allowed: list_allowed.then(Vec::new),
    };
    let mut decoder = Decoder::new(data, limits);
    decoder.read_on_as_c();
    decoder.run(&mut walker).ok()?;
    Some(Walk {
        found: walker.found,
        allowed: walker.allowed.unwrap_or_default(),
        end: decoder.position(),
        divergences: decoder.divergences().to_vec(),
    })
}

/// The offset below which no walk can be near a limit the decoder does not
/// check itself, so the full check after each opcode (a fifth of a small walk's
/// instructions) is needed only past it. An opcode takes at least a byte and
/// adds at most one value and two container items (one popped off the stack,
/// one counted by the container); payload bytes come out of the pickle itself.
fn limits_out_of_reach_below(l: &Limits) -> usize {
    let below = (l.max_nodes / 4)
        .min(l.max_payload_bytes / 2)
        .min(l.max_container_len / 2);
    usize::try_from(below).unwrap_or(usize::MAX)
}

/// Where the walk stops and leaves the pickle to the VM. Never seen by a caller:
/// [`walk`] answers `None`.
#[cold]
fn give_up() -> Error {
    Error::pickle("the walk leaves this pickle to the VM", Location::default())
}

/// Go on only if `modelled`: the walk knows the VM would do the same.
#[inline(always)]
fn require(modelled: bool) -> Result<(), Error> {
    if modelled {
        Ok(())
    } else {
        Err(give_up())
    }
}

impl Walker<'_> {
    fn far_from_limits(&self) -> bool {
        // Hooks may add a value or two per call; a quarter of the budget is a
        // margin no well-formed file gets near.
        let l = self.limits;
        self.values.saturating_mul(4) < l.max_nodes
            && self.payload.saturating_mul(2) < l.max_payload_bytes
            && self.items < l.max_container_len
    }

    #[inline(always)]
    fn push(&mut self, d: &mut Decoder<'_, Shadow>, v: Shadow) -> Result<(), Error> {
        self.values += 1;
        d.push(v)
    }

    /// Take the items above a popped MARK off the stack; how many there were.
    #[inline(always)]
    fn take_items(&mut self, d: &mut Decoder<'_, Shadow>, start: usize) -> usize {
        let n = d.items(start).len();
        d.truncate(start);
        self.items = self.items.saturating_add(n as u64);
        n
    }

    fn global(&mut self, module: &str, name: &str, at: usize) -> Shadow {
        let (module, name) = policy::map_py2(module, name);
        let resolution = policy::resolve(&module, &name, self.user);
        if let (Some(allowed), Resolution::Allowed(_)) = (&mut self.allowed, &resolution) {
            allowed.push(FoundGlobal::new(&module, &name, at as u64));
        }
        match resolution {
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

    /// A container opcode may only target the kind the VM accepts for sure.
    #[inline(always)]
    fn mutate(&mut self, d: &Decoder<'_, Shadow>, kind: Shadow, added: usize) -> Result<(), Error> {
        require(d.top()? == kind)?;
        self.items = self.items.saturating_add(added as u64);
        Ok(())
    }

    #[inline(always)]
    fn step<'d>(&mut self, d: &mut Decoder<'d, Shadow>, op: Op<'d, Shadow>) -> Result<(), Error> {
        let at = d.op_offset();
        match op {
            Op::None | Op::Bool(_) | Op::Int(_) | Op::Float(_) => self.push(d, Shadow::OTHER)?,
            Op::DecimalInt(text) => {
                self.payload = self.payload.saturating_add(text.len() as u64);
                self.push(d, Shadow::OTHER)?;
            }
            Op::LongBytes(bytes) | Op::Bytes(bytes) | Op::ByteArray(bytes) => {
                self.payload = self.payload.saturating_add(bytes.len() as u64);
                self.push(d, Shadow::OTHER)?;
            }
            Op::Unicode(text) => {
                self.payload = self.payload.saturating_add(text.len() as u64);
                self.push(d, Shadow::string(at).ok_or_else(give_up)?)?;
            }
            Op::EmptyTuple => self.push(d, Shadow::EMPTY_TUPLE)?,
            Op::Tuple { start } => {
                let n = self.take_items(d, start);
                let empty = n == 0 && d.op() == TUPLE;
                self.push(
                    d,
                    if empty {
                        Shadow::EMPTY_TUPLE
                    } else {
                        Shadow::OTHER
                    },
                )?;
            }
            Op::EmptyList => self.push(d, Shadow::LIST)?,
            Op::List { start } => {
                self.take_items(d, start);
                self.push(d, Shadow::LIST)?;
            }
            Op::EmptyDict => self.push(d, Shadow::DICT)?,
            Op::Dict { start } => {
                require(self.take_items(d, start).is_multiple_of(2))?;
                self.push(d, Shadow::DICT)?;
            }
            Op::EmptySet => self.push(d, Shadow::SET)?,
            Op::FrozenSet { start } => {
                self.take_items(d, start);
                self.push(d, Shadow::OTHER)?;
            }
            Op::Append { .. } => self.mutate(d, Shadow::LIST, 1)?,
            Op::SetItem { .. } => self.mutate(d, Shadow::DICT, 1)?,
            Op::Appends { start } => {
                let n = self.take_items(d, start);
                self.mutate(d, Shadow::LIST, n)?;
            }
            Op::SetItems { start } => {
                let n = self.take_items(d, start);
                require(n.is_multiple_of(2))?;
                self.mutate(d, Shadow::DICT, n / 2)?;
            }
            Op::AddItems { start } => {
                let n = self.take_items(d, start);
                self.mutate(d, Shadow::SET, n)?;
            }
            Op::Global { module, name } => {
                let g = self.global(module, name, at);
                self.push(d, g)?;
            }
            Op::StackGlobal { module, name } => {
                let g = match (module.string_opcode(), name.string_opcode()) {
                    (Some(_), Some(_)) => {
                        let m = text(d.data(), module).ok_or_else(give_up)?;
                        let n = text(d.data(), name).ok_or_else(give_up)?;
                        self.global(m, n, at)
                    }
                    _ => {
                        (self.found).push(FoundGlobal::new(COMPUTED_GLOBAL, "", at as u64));
                        Shadow::OTHER
                    }
                };
                self.push(d, g)?;
            }
            Op::Extension(code) => {
                let name = format!("<extension code {code}>");
                self.found.push(FoundGlobal::new(&name, "", at as u64));
                self.push(d, Shadow::OTHER)?;
            }
            Op::Reduce { func, args } => {
                let made = match (func, args) {
                    (Shadow::DICT_CLASS, Shadow::EMPTY_TUPLE) => Shadow::DICT,
                    (Shadow::SET_CLASS, Shadow::EMPTY_TUPLE) => Shadow::SET,
                    // A copy of another container is charged against the limits
                    // by its size, which the walk does not know.
                    (Shadow::DICT_CLASS | Shadow::SET_CLASS, _) => return Err(give_up()),
                    _ => Shadow::OTHER,
                };
                self.push(d, made)?;
            }
            Op::NewObj { .. } | Op::NewObjEx { .. } | Op::BinPersId(_) => {
                self.push(d, Shadow::OTHER)?
            }
            Op::Build { .. } => {
                d.top()?;
            }
            Op::Inst {
                module,
                name,
                start,
            } => {
                self.take_items(d, start);
                self.global(module, name, at);
                self.push(d, Shadow::OTHER)?;
            }
            Op::Obj { start } => {
                require(self.take_items(d, start) >= 1)?;
                self.push(d, Shadow::OTHER)?;
            }
            // Python 2 strings and protocol 0 text (a STACK_GLOBAL may name
            // them), text persistent ids, buffers: the VM decides.
            Op::Py2String(_)
            | Op::Py2StringEscaped(_)
            | Op::UnicodeEscaped(_)
            | Op::PersId(_)
            | Op::ReadonlyBuffer => return Err(give_up()),
        }
        Ok(())
    }
}

impl<'d> Interpret<'d, Shadow> for Walker<'_> {
    #[inline(always)]
    fn op(&mut self, d: &mut Decoder<'d, Shadow>, op: Op<'d, Shadow>) -> Result<(), Error> {
        self.step(d, op)?;
        require(d.position() < self.checked_from || self.far_from_limits())
    }
}

/// A string's text, read again from the opcode at its offset (which the decoder
/// checked then); `None` for a value that is no string.
fn text(data: &[u8], s: Shadow) -> Option<&str> {
    let mut opcode = Cursor::new(data.get(s.string_opcode()?..)?);
    let width = unicode_width(opcode.u8().ok()?)?;
    let n = opcode.count(width).ok()?;
    std::str::from_utf8(opcode.take_counted(n).ok()?).ok()
}
