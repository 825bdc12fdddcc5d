//! The one reader of pickle opcodes. It reads each opcode and its argument,
//! keeps the stack, the marks and the memo, and hands the opcodes that make or
//! change values to its caller as [`Op`]s. The VM and the scanner's walk both run
//! on it, with different stack slots (arena ids, or the little the walk needs to
//! know of a value), so they cannot disagree on what a pickle's bytes say.
//!
//! Every push, mark and memo entry is charged against the limits here, and every
//! malformed input is an error naming its offset and opcode.

use std::collections::HashMap;

use crate::error::{check_limit, Error, Location};
use crate::limits::{Limit, Limits};
use crate::pickle::cursor::{Cursor, ReadError};
use crate::pickle::opcodes::{self, *};
use crate::pickle::text;

/// An opcode that makes or changes a value, with its argument and the stack
/// slots it takes. Items above a MARK stay on the stack, from `start` up; the
/// caller takes them.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a, S> {
    None,
    Bool(bool),
    Int(i64),
    /// INT or LONG text beyond i64, as written (less blanks and the `L`).
    DecimalInt(&'a str),
    /// LONG1 or LONG4: two's-complement little-endian bytes.
    LongBytes(&'a [u8]),
    Float(f64),
    /// BINSTRING, SHORT_BINSTRING: Python 2 `str` bytes, to decode with the
    /// caller's encoding.
    Py2String(&'a [u8]),
    /// STRING: a Python 2 `str` as its quoted line, with Python's escapes inside
    /// (decoded by [`text::escape_decode`]).
    Py2StringEscaped(&'a [u8]),
    /// BINUNICODE*: valid UTF-8, lone surrogates allowed.
    Unicode(&'a [u8]),
    /// UNICODE: text with raw-unicode escapes (decoded by [`text::raw_unicode_escape`]).
    UnicodeEscaped(&'a [u8]),
    Bytes(&'a [u8]),
    ByteArray(&'a [u8]),
    EmptyTuple,
    /// TUPLE1-3 and TUPLE.
    Tuple {
        start: usize,
    },
    EmptyList,
    List {
        start: usize,
    },
    EmptyDict,
    Dict {
        start: usize,
    },
    EmptySet,
    FrozenSet {
        start: usize,
    },
    /// APPEND: the list is the top of the stack.
    Append {
        item: S,
    },
    Appends {
        start: usize,
    },
    /// SETITEM: the dict is the top of the stack.
    SetItem {
        key: S,
        value: S,
    },
    SetItems {
        start: usize,
    },
    AddItems {
        start: usize,
    },
    Global {
        module: &'a str,
        name: &'a str,
    },
    StackGlobal {
        module: S,
        name: S,
    },
    /// EXT1, EXT2, EXT4.
    Extension(u32),
    Reduce {
        func: S,
        args: S,
    },
    /// INST: the arguments are above `start`.
    Inst {
        module: &'a str,
        name: &'a str,
        start: usize,
    },
    /// OBJ: the class at `start`, its arguments above it.
    Obj {
        start: usize,
    },
    NewObj {
        cls: S,
        args: S,
    },
    NewObjEx {
        cls: S,
        args: S,
        kwargs: S,
    },
    /// BUILD: the object is the top of the stack.
    Build {
        state: S,
    },
    PersId(&'a [u8]),
    BinPersId(S),
    /// READONLY_BUFFER: on the top of the stack.
    ReadonlyBuffer,
}

/// What carries out the opcodes that make or change values, on the decoder's stack.
pub trait Interpret<'a, S> {
    fn op(&mut self, decoder: &mut Decoder<'a, S>, op: Op<'a, S>) -> Result<(), Error>;
}

/// Memo slots. Picklers number the memo densely from 0, which the vector
/// serves; any other index goes to the map, so a huge index never allocates.
struct Memo<S> {
    dense: Vec<S>,
    sparse: HashMap<u64, S>,
}

impl<S: Copy> Memo<S> {
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    fn get(&self, index: u64) -> Option<S> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.dense.get(i).copied())
            .or_else(|| self.sparse.get(&index).copied())
    }

    fn put(&mut self, index: u64, value: S) {
        let dense_len = self.dense.len() as u64;
        if index < dense_len {
            if let Some(slot) = self.dense.get_mut(index as usize) {
                *slot = value;
            }
        } else if index == dense_len && !self.sparse.contains_key(&index) {
            self.dense.push(value);
        } else {
            self.sparse.insert(index, value);
        }
    }
}

/// The most memo entries reserved before the pickle asks for them.
const MAX_PRESIZED_MEMO: usize = 1 << 16;

pub struct Decoder<'a, S> {
    data: &'a [u8],
    cursor: Cursor<'a>,
    stack: Vec<S>,
    marks: Vec<usize>,
    memo: Memo<S>,
    limits: Limits,
    protocol: Option<u8>,
    /// Offset and byte of the opcode being read, for error locations.
    op_offset: usize,
    op: u8,
    /// Where the current FRAME ends, once one was read.
    frame_end: Option<usize>,
    /// Where CPython's readers (the C and the Python unpickler, 3.9 to 3.14) would
    /// read these bytes differently, and how.
    divergences: Vec<Divergence>,
    /// Read on as CPython's C unpickler does where pickle.py refuses (a scan
    /// reports what any reader reaches); a load refuses there, as torch does.
    c_readings: bool,
}

/// A place where CPython's unpicklers part ways: one reads on where another
/// stops, or they read another value or another stream. The VM reads as the C
/// unpickler reads whole bytes (frames ignored); a scan must not call such a
/// file clean, and must look at what the other readings would reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence {
    /// The offset of the opcode, and the opcode.
    pub offset: usize,
    pub op: u8,
    pub what: &'static str,
    /// Where another reader would go on reading opcodes, when not right after
    /// this one (at or past the end of a frame).
    pub resumes_at: Option<usize>,
    /// Whether readers read other opcodes of this pickle from here on, not
    /// only another value or another next pickle: what a load refuses.
    pub changes_the_stream: bool,
}

impl Divergence {
    /// A load's refusal of the pickle.
    pub fn error(&self) -> Error {
        Error::pickle(
            format!("CPython's unpicklers read this pickle apart: {}", self.what),
            Location::op(self.offset as u64, opcode(self.op)),
        )
    }
}

impl<'a, S: Copy + PartialEq> Decoder<'a, S> {
    pub fn new(data: &'a [u8], limits: &Limits) -> Self {
        // Sized for a typical state dict up front: growing them one doubling at
        // a time was a third of a small walk's allocator calls.
        let memo_guess = (data.len() / 12).min(MAX_PRESIZED_MEMO);
        Decoder {
            data,
            cursor: Cursor::new(data),
            stack: Vec::with_capacity(64),
            marks: Vec::with_capacity(16),
            memo: Memo {
                dense: Vec::with_capacity(memo_guess),
                sparse: HashMap::new(),
            },
            limits: *limits,
            protocol: None,
            op_offset: 0,
            op: 0,
            frame_end: None,
            divergences: Vec::new(),
            c_readings: false,
        }
    }

    /// Read numbers in text on as the C unpickler does where pickle.py refuses
    /// them: what a scan does.
    pub fn read_on_as_c(&mut self) {
        self.c_readings = true;
    }

    /// The number in a text argument, as the reader this decoder follows parses
    /// it: C copies the line into a NUL-terminated buffer and parses up to the
    /// NUL; pickle.py parses the whole line (and refuses a NUL).
    fn number_text(&self, line: &'a str) -> &'a str {
        match line.find('\0') {
            Some(nul) if self.c_readings => line.get(..nul).unwrap_or(line),
            _ => line,
        }
    }

    /// Where CPython's readers would read this pickle differently, so far.
    pub fn divergences(&self) -> &[Divergence] {
        &self.divergences
    }

    #[cold]
    fn diverge(&mut self, what: &'static str, resumes_at: Option<usize>) {
        self.record(what, resumes_at, resumes_at.is_some());
    }

    #[cold]
    fn record(&mut self, what: &'static str, resumes_at: Option<usize>, changes_the_stream: bool) {
        if self.divergences.len() < 64 {
            self.divergences.push(Divergence {
                offset: self.op_offset,
                op: self.op,
                what,
                resumes_at,
                changes_the_stream,
            });
        }
    }

    /// A text argument whose value CPython's readers disagree on (3.9 to 3.14).
    fn check_text(&mut self, line: &str) {
        if let Some(what) = text::readers_disagree(self.op, line) {
            self.diverge(what, None);
        }
    }

    /// The pickle's bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Offset just past what has been read.
    pub fn position(&self) -> usize {
        self.cursor.position()
    }

    /// The protocol named by PROTO, if any.
    pub fn protocol(&self) -> Option<u8> {
        self.protocol
    }

    /// The byte and the offset of the opcode last read.
    pub fn op(&self) -> u8 {
        self.op
    }

    pub fn op_offset(&self) -> usize {
        self.op_offset
    }

    pub fn here(&self) -> Location {
        Location::op(self.op_offset as u64, opcode(self.op))
    }

    #[cold]
    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::pickle(reason, self.here())
    }

    /// Give an error from a helper (cursor, arena, hooks) this opcode's location
    /// where it has none.
    #[cold]
    pub fn locate(&self, mut e: Error) -> Error {
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

    /// The stack floor: items below the innermost MARK are out of reach, as in pickle.
    #[inline]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline(always)]
    pub fn push(&mut self, value: S) -> Result<(), Error> {
        if self.stack.len() as u64 >= self.limits.max_stack_depth {
            return Err(self.past_limit(Limit::StackDepth));
        }
        self.stack.push(value);
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn past_limit(&self, limit: Limit) -> Error {
        Error::limit(limit, self.limits.get(limit), self.here())
    }

    #[inline]
    pub fn pop(&mut self) -> Result<S, Error> {
        if self.stack.len() <= self.floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    #[inline]
    pub fn top(&self) -> Result<S, Error> {
        if self.stack.len() <= self.floor() {
            return Err(self.err("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    /// The stack items from `start` up (above a popped MARK).
    #[inline]
    pub fn items(&self, start: usize) -> &[S] {
        self.stack.get(start..).unwrap_or_default()
    }

    /// The stack item at `index`.
    #[inline]
    pub fn item(&self, index: usize) -> Option<S> {
        self.stack.get(index).copied()
    }

    /// Drop the stack items from `start` up.
    #[inline]
    pub fn truncate(&mut self, start: usize) {
        self.stack.truncate(start);
    }

    /// Take the stack items from `start` up off the stack.
    #[inline]
    pub fn split_off(&mut self, start: usize) -> Vec<S> {
        self.stack.split_off(start.min(self.stack.len()))
    }

    /// Pop the innermost MARK; the items above it are `items(start)`.
    #[inline(always)]
    fn pop_mark(&mut self) -> Result<usize, Error> {
        let mark = self.marks.pop().ok_or_else(|| self.err("MARK not found"))?;
        let start = mark.min(self.stack.len());
        check_limit(
            Limit::ContainerLen,
            (self.stack.len() - start) as u64,
            self.limits.max_container_len,
            || self.here(),
        )?;
        Ok(start)
    }

    #[inline(always)]
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
        self.memo_put_anywhere(index, top)
    }

    #[inline(never)]
    fn memo_put_anywhere(&mut self, index: u64, top: S) -> Result<(), Error> {
        if self.memo.get(index).is_none() && self.memo.len() as u64 >= self.limits.max_memo_entries
        {
            return Err(self.past_limit(Limit::MemoEntries));
        }
        self.memo.put(index, top);
        Ok(())
    }

    #[inline(always)]
    fn memo_get(&mut self, index: u64) -> Result<(), Error> {
        match self.memo.get(index) {
            Some(value) => self.push(value),
            None => Err(self.err(format!("memo key {index} not found"))),
        }
    }

    fn text_line(&mut self) -> Result<&'a str, Error> {
        let rest = self.data.len().saturating_sub(self.cursor.position());
        let line = match self.cursor.line() {
            Ok(line) => line,
            Err(ReadError::NoNewline { .. }) if rest > 0 => {
                // pickle.py's `readline()[:-1]` drops the last byte as if it were
                // the newline; C refuses the line.
                self.diverge(
                    "a last line without its newline (pickle.py drops its last byte)",
                    None,
                );
                let rest = self.cursor.take(rest)?;
                rest.get(..rest.len().saturating_sub(1)).unwrap_or_default()
            }
            Err(e) => return Err(e.into()),
        };
        std::str::from_utf8(line).map_err(|_| self.err("a text argument that is not UTF-8"))
    }

    fn memo_key(&mut self) -> Result<u64, Error> {
        let line = self.text_line()?;
        self.check_text(line);
        let line = self.number_text(line);
        text::parse_memo_key(line).ok_or_else(|| self.err(format!("invalid memo key {line:?}")))
    }

    fn int_text(&self, text: &'a str) -> Result<Op<'a, S>, Error> {
        match text::parse_int_literal(text) {
            Ok(Some(v)) => Ok(Op::Int(v)),
            Ok(None) => Ok(Op::DecimalInt(text.trim())),
            Err(()) => Err(self.err(format!("invalid int literal {text:?}"))),
        }
    }

    /// A length that a negative count makes an error, as pickle's C reader does.
    fn signed_count(&mut self, what: &str) -> Result<u64, Error> {
        let n = self.cursor.i32_le()?;
        u64::try_from(n).map_err(|_| self.err(format!("{what} pickle has negative byte count")))
    }

    /// Run the pickle to its STOP: the stack, mark and memo opcodes are carried
    /// out here, every other one is handed to `interpreter`. The pickle's result.
    #[inline(always)]
    pub fn run<I: Interpret<'a, S>>(&mut self, interpreter: &mut I) -> Result<S, Error> {
        // A pickle is measured by what it consumes (legacy streams run on the rest
        // of the file); reading stops at the data's end, so only data longer than
        // the limit needs a check after every opcode.
        if self.data.len() as u64 <= self.limits.max_pickle_bytes {
            self.run_to_stop::<false, I>(interpreter)
        } else {
            self.run_to_stop::<true, I>(interpreter)
        }
    }

    #[inline(always)]
    fn run_to_stop<const MEASURED: bool, I: Interpret<'a, S>>(
        &mut self,
        interpreter: &mut I,
    ) -> Result<S, Error> {
        loop {
            if MEASURED && self.cursor.position() as u64 >= self.limits.max_pickle_bytes {
                return Err(self.past_limit(Limit::PickleBytes));
            }
            self.op_offset = self.cursor.position();
            self.op = match self.cursor.u8() {
                Ok(op) => op,
                Err(_) => return Err(self.err("pickle data was truncated: no STOP opcode")),
            };
            match self.step(interpreter) {
                Ok(Some(root)) => return Ok(root),
                Ok(None) => {}
                Err(e) => return Err(self.locate(e)),
            }
        }
    }

    /// Read the current opcode's argument and carry it out: the pickle's result
    /// at STOP. Each opcode hands its [`Op`] to the interpreter where it is made,
    /// so that, inlined there, the interpreter's match on it folds away.
    #[inline(always)]
    fn step<I: Interpret<'a, S>>(&mut self, interpreter: &mut I) -> Result<Option<S>, Error> {
        macro_rules! emit {
            ($op:expr) => {{
                let op = $op;
                return interpreter.op(self, op).map(|()| None);
            }};
        }
        match self.op {
            STOP => {
                let root = self
                    .pop()
                    .map_err(|_| self.err("STOP with an empty stack"))?;
                // A next pickle starts after STOP for one reader, at the frame's
                // end for the others; this one reads the same either way.
                if let Some(end) = self.frame_end.filter(|e| *e > self.cursor.position()) {
                    self.record("the pickle stops inside a frame", Some(end), false);
                }
                Ok(Some(root))
            }
            PROTO => {
                // torch reads on past any protocol number (with a warning): what a
                // later protocol adds would be new opcodes, which are refused.
                self.protocol = Some(self.cursor.u8()?);
                Ok(None)
            }
            FRAME => {
                let len = self.cursor.u64_le()?;
                if len > self.cursor.remaining() as u64 {
                    return Err(self.err(format!(
                        "FRAME of {len} bytes runs past the end of the pickle"
                    )));
                }
                let start = self.cursor.position();
                // A reader of a file has the outer frame in its buffer: it reads
                // the inner frame's bytes from the outer one's end.
                if let Some(outer) = self.frame_end.filter(|end| *end > start) {
                    self.diverge("a FRAME begins before the previous frame ends", Some(outer));
                }
                let end = start + len as usize;
                // The Python unpickler stops; the C one reads across the end
                // from memory, and from a file skips to it.
                if let Some(resumes_at) = opcodes::crossing(self.data, start, end) {
                    self.diverge("an opcode crosses the end of its frame", Some(resumes_at));
                }
                self.frame_end = Some(end);
                Ok(None)
            }
            MARK => {
                check_limit(
                    Limit::MarkDepth,
                    self.marks.len() as u64 + 1,
                    self.limits.max_mark_depth,
                    Location::default,
                )?;
                self.marks.push(self.stack.len());
                Ok(None)
            }
            POP => {
                if self.stack.len() > self.floor() {
                    self.stack.pop();
                } else {
                    // POP right after MARK discards the mark, as pickle does.
                    let start = self.pop_mark()?;
                    self.stack.truncate(start);
                }
                Ok(None)
            }
            POP_MARK => {
                let start = self.pop_mark()?;
                self.stack.truncate(start);
                Ok(None)
            }
            DUP => {
                let top = self.top()?;
                self.push(top)?;
                Ok(None)
            }
            PUT => {
                let index = self.memo_key()?;
                self.memo_put(index)?;
                Ok(None)
            }
            BINPUT => {
                let index = self.cursor.u8()?;
                self.memo_put(u64::from(index))?;
                Ok(None)
            }
            LONG_BINPUT => {
                let index = self.cursor.u32_le()?;
                if index >= text::HUGE_MEMO_KEY {
                    self.diverge("a memo index the C unpickler cannot allocate", None);
                }
                self.memo_put(u64::from(index))?;
                Ok(None)
            }
            MEMOIZE => {
                self.memo_put(self.memo.len() as u64)?;
                Ok(None)
            }
            GET => {
                let index = self.memo_key()?;
                self.memo_get(index)?;
                Ok(None)
            }
            BINGET => {
                let index = self.cursor.u8()?;
                self.memo_get(u64::from(index))?;
                Ok(None)
            }
            LONG_BINGET => {
                let index = self.cursor.u32_le()?;
                self.memo_get(u64::from(index))?;
                Ok(None)
            }

            NONE => emit!(Op::None),
            NEWTRUE => emit!(Op::Bool(true)),
            NEWFALSE => emit!(Op::Bool(false)),
            INT => {
                let line = self.text_line()?;
                self.check_text(line);
                match self.number_text(line) {
                    "00" => emit!(Op::Bool(false)),
                    "01" => emit!(Op::Bool(true)),
                    line => emit!(self.int_text(line)?),
                }
            }
            LONG => {
                let line = self.text_line()?;
                self.check_text(line);
                // C drops the L before the NUL cut.
                let line = self.number_text(line.strip_suffix('L').unwrap_or(line));
                emit!(self.int_text(line)?)
            }
            BININT => emit!(Op::Int(i64::from(self.cursor.i32_le()?))),
            BININT1 => emit!(Op::Int(i64::from(self.cursor.u8()?))),
            BININT2 => emit!(Op::Int(i64::from(self.cursor.u16_le()?))),
            LONG1 => {
                let n = u64::from(self.cursor.u8()?);
                emit!(Op::LongBytes(self.cursor.take_counted(n)?))
            }
            LONG4 => {
                let n = self.signed_count("LONG")?;
                emit!(Op::LongBytes(self.cursor.take_counted(n)?))
            }
            FLOAT => {
                let line = self.text_line()?;
                self.check_text(line);
                let line = self.number_text(line);
                emit!(Op::Float(text::parse_float_literal(line).ok_or_else(
                    || self.err(format!("invalid float literal {line:?}"))
                )?,))
            }
            BINFLOAT => emit!(Op::Float(f64::from_be_bytes(self.cursor.array::<8>()?))),

            STRING => {
                let line = self.cursor.line()?;
                match line {
                    [q @ (b'\'' | b'"'), body @ .., last] if last == q => {
                        emit!(Op::Py2StringEscaped(body))
                    }
                    _ => Err(self.err("the STRING opcode argument must be quoted")),
                }
            }
            SHORT_BINSTRING => {
                let n = u64::from(self.cursor.u8()?);
                emit!(Op::Py2String(self.cursor.take_counted(n)?))
            }
            BINSTRING => {
                let n = self.signed_count("BINSTRING")?;
                emit!(Op::Py2String(self.cursor.take_counted(n)?))
            }
            UNICODE => emit!(Op::UnicodeEscaped(self.cursor.line()?)),
            SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                let width = match self.op {
                    SHORT_BINUNICODE => 1,
                    BINUNICODE => 4,
                    _ => 8,
                };
                let n = self.cursor.count(width)?;
                let bytes = self.cursor.take_counted(n)?;
                if !text::is_utf8_surrogatepass(bytes) {
                    return Err(self.err("string is not valid UTF-8"));
                }
                emit!(Op::Unicode(bytes))
            }
            SHORT_BINBYTES | BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                let width = match self.op {
                    SHORT_BINBYTES => 1,
                    BINBYTES => 4,
                    _ => 8,
                };
                let n = self.cursor.count(width)?;
                let bytes = self.cursor.take_counted(n)?;
                if self.op == BYTEARRAY8 {
                    emit!(Op::ByteArray(bytes))
                } else {
                    emit!(Op::Bytes(bytes))
                }
            }

            EMPTY_TUPLE => emit!(Op::EmptyTuple),
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let n = usize::from(self.op - TUPLE1 + 1);
                if self.stack.len() < self.floor() + n {
                    return Err(self.err("stack underflow"));
                }
                emit!(Op::Tuple {
                    start: self.stack.len() - n,
                })
            }
            TUPLE => emit!(Op::Tuple {
                start: self.pop_mark()?,
            }),
            EMPTY_LIST => emit!(Op::EmptyList),
            LIST => emit!(Op::List {
                start: self.pop_mark()?,
            }),
            EMPTY_DICT => emit!(Op::EmptyDict),
            DICT => emit!(Op::Dict {
                start: self.pop_mark()?,
            }),
            EMPTY_SET => emit!(Op::EmptySet),
            FROZENSET => emit!(Op::FrozenSet {
                start: self.pop_mark()?,
            }),
            APPEND => emit!(Op::Append { item: self.pop()? }),
            APPENDS => emit!(Op::Appends {
                start: self.pop_mark()?,
            }),
            SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                emit!(Op::SetItem { key, value })
            }
            SETITEMS => emit!(Op::SetItems {
                start: self.pop_mark()?,
            }),
            ADDITEMS => emit!(Op::AddItems {
                start: self.pop_mark()?,
            }),

            GLOBAL => {
                let module = self.text_line()?;
                let name = self.text_line()?;
                emit!(Op::Global { module, name })
            }
            STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                emit!(Op::StackGlobal { module, name })
            }
            EXT1 => emit!(Op::Extension(u32::from(self.cursor.u8()?))),
            EXT2 => emit!(Op::Extension(u32::from(self.cursor.u16_le()?))),
            EXT4 => emit!(Op::Extension(self.cursor.u32_le()?)),
            REDUCE => {
                let args = self.pop()?;
                let func = self.pop()?;
                emit!(Op::Reduce { func, args })
            }
            INST => {
                let module = self.text_line()?;
                let name = self.text_line()?;
                if self.marks.is_empty() {
                    // pickle.py resolves the class before it looks for the mark.
                    interpreter.op(self, Op::Global { module, name })?;
                }
                let start = self.pop_mark()?;
                emit!(Op::Inst {
                    module,
                    name,
                    start,
                })
            }
            OBJ => emit!(Op::Obj {
                start: self.pop_mark()?,
            }),
            NEWOBJ => {
                let args = self.pop()?;
                let cls = self.pop()?;
                emit!(Op::NewObj { cls, args })
            }
            NEWOBJ_EX => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let cls = self.pop()?;
                emit!(Op::NewObjEx { cls, args, kwargs })
            }
            BUILD => emit!(Op::Build { state: self.pop()? }),
            PERSID => {
                let line = self.cursor.line()?;
                if !line.is_ascii() {
                    return Err(self.err("persistent IDs in protocol 0 must be ASCII strings"));
                }
                emit!(Op::PersId(line))
            }
            BINPERSID => emit!(Op::BinPersId(self.pop()?)),
            NEXT_BUFFER => Err(self
                .err("pickle stream refers to out-of-band data, which a checkpoint cannot carry")),
            READONLY_BUFFER => {
                self.top()?;
                emit!(Op::ReadonlyBuffer)
            }
            op => Err(self.err(format!("unknown opcode 0x{op:02x} ({:?})", char::from(op)))),
        }
    }
}

#[cfg(test)]
mod tests;
