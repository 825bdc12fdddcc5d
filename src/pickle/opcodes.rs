//! Every opcode of pickle protocols 0 to 5, with its name and the shape of its
//! argument. The VM dispatches on the byte values; the argument table lets the
//! disassembler step over an opcode without interpreting it.

pub const MARK: u8 = b'(';
pub const STOP: u8 = b'.';
pub const POP: u8 = b'0';
pub const POP_MARK: u8 = b'1';
pub const DUP: u8 = b'2';
pub const FLOAT: u8 = b'F';
pub const INT: u8 = b'I';
pub const BININT: u8 = b'J';
pub const BININT1: u8 = b'K';
pub const LONG: u8 = b'L';
pub const BININT2: u8 = b'M';
pub const NONE: u8 = b'N';
pub const PERSID: u8 = b'P';
pub const BINPERSID: u8 = b'Q';
pub const REDUCE: u8 = b'R';
pub const STRING: u8 = b'S';
pub const BINSTRING: u8 = b'T';
pub const SHORT_BINSTRING: u8 = b'U';
pub const UNICODE: u8 = b'V';
pub const BINUNICODE: u8 = b'X';
pub const APPEND: u8 = b'a';
pub const BUILD: u8 = b'b';
pub const GLOBAL: u8 = b'c';
pub const DICT: u8 = b'd';
pub const EMPTY_DICT: u8 = b'}';
pub const APPENDS: u8 = b'e';
pub const GET: u8 = b'g';
pub const BINGET: u8 = b'h';
pub const INST: u8 = b'i';
pub const LONG_BINGET: u8 = b'j';
pub const LIST: u8 = b'l';
pub const EMPTY_LIST: u8 = b']';
pub const OBJ: u8 = b'o';
pub const PUT: u8 = b'p';
pub const BINPUT: u8 = b'q';
pub const LONG_BINPUT: u8 = b'r';
pub const SETITEM: u8 = b's';
pub const TUPLE: u8 = b't';
pub const EMPTY_TUPLE: u8 = b')';
pub const SETITEMS: u8 = b'u';
pub const BINFLOAT: u8 = b'G';
// protocol 2
pub const PROTO: u8 = 0x80;
pub const NEWOBJ: u8 = 0x81;
pub const EXT1: u8 = 0x82;
pub const EXT2: u8 = 0x83;
pub const EXT4: u8 = 0x84;
pub const TUPLE1: u8 = 0x85;
pub const TUPLE2: u8 = 0x86;
pub const TUPLE3: u8 = 0x87;
pub const NEWTRUE: u8 = 0x88;
pub const NEWFALSE: u8 = 0x89;
pub const LONG1: u8 = 0x8a;
pub const LONG4: u8 = 0x8b;
// protocol 3
pub const BINBYTES: u8 = b'B';
pub const SHORT_BINBYTES: u8 = b'C';
// protocol 4
pub const SHORT_BINUNICODE: u8 = 0x8c;
pub const BINUNICODE8: u8 = 0x8d;
pub const BINBYTES8: u8 = 0x8e;
pub const EMPTY_SET: u8 = 0x8f;
pub const ADDITEMS: u8 = 0x90;
pub const FROZENSET: u8 = 0x91;
pub const NEWOBJ_EX: u8 = 0x92;
pub const STACK_GLOBAL: u8 = 0x93;
pub const MEMOIZE: u8 = 0x94;
pub const FRAME: u8 = 0x95;
// protocol 5
pub const BYTEARRAY8: u8 = 0x96;
pub const NEXT_BUFFER: u8 = 0x97;
pub const READONLY_BUFFER: u8 = 0x98;

/// The shape of an opcode's inline argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    None,
    /// A fixed number of bytes.
    Fixed(u8),
    /// One newline-terminated line.
    Line,
    /// Two newline-terminated lines (GLOBAL, INST).
    TwoLines,
    /// A little-endian length of this many bytes, then that many bytes.
    Counted(u8),
}

/// Whether an unpickler reads `op` as an opcode: a byte that is none stops every
/// reading at once ("invalid load key").
pub fn is_opcode(op: u8) -> bool {
    info(op).is_some()
}

/// Name and argument shape of an opcode, or `None` for a byte that is no opcode.
pub fn info(op: u8) -> Option<(&'static str, Arg)> {
    use Arg::*;
    Some(match op {
        MARK => ("MARK", None),
        STOP => ("STOP", None),
        POP => ("POP", None),
        POP_MARK => ("POP_MARK", None),
        DUP => ("DUP", None),
        FLOAT => ("FLOAT", Line),
        INT => ("INT", Line),
        BININT => ("BININT", Fixed(4)),
        BININT1 => ("BININT1", Fixed(1)),
        LONG => ("LONG", Line),
        BININT2 => ("BININT2", Fixed(2)),
        NONE => ("NONE", None),
        PERSID => ("PERSID", Line),
        BINPERSID => ("BINPERSID", None),
        REDUCE => ("REDUCE", None),
        STRING => ("STRING", Line),
        BINSTRING => ("BINSTRING", Counted(4)),
        SHORT_BINSTRING => ("SHORT_BINSTRING", Counted(1)),
        UNICODE => ("UNICODE", Line),
        BINUNICODE => ("BINUNICODE", Counted(4)),
        APPEND => ("APPEND", None),
        BUILD => ("BUILD", None),
        GLOBAL => ("GLOBAL", TwoLines),
        DICT => ("DICT", None),
        EMPTY_DICT => ("EMPTY_DICT", None),
        APPENDS => ("APPENDS", None),
        GET => ("GET", Line),
        BINGET => ("BINGET", Fixed(1)),
        INST => ("INST", TwoLines),
        LONG_BINGET => ("LONG_BINGET", Fixed(4)),
        LIST => ("LIST", None),
        EMPTY_LIST => ("EMPTY_LIST", None),
        OBJ => ("OBJ", None),
        PUT => ("PUT", Line),
        BINPUT => ("BINPUT", Fixed(1)),
        LONG_BINPUT => ("LONG_BINPUT", Fixed(4)),
        SETITEM => ("SETITEM", None),
        TUPLE => ("TUPLE", None),
        EMPTY_TUPLE => ("EMPTY_TUPLE", None),
        SETITEMS => ("SETITEMS", None),
        BINFLOAT => ("BINFLOAT", Fixed(8)),
        PROTO => ("PROTO", Fixed(1)),
        NEWOBJ => ("NEWOBJ", None),
        EXT1 => ("EXT1", Fixed(1)),
        EXT2 => ("EXT2", Fixed(2)),
        EXT4 => ("EXT4", Fixed(4)),
        TUPLE1 => ("TUPLE1", None),
        TUPLE2 => ("TUPLE2", None),
        TUPLE3 => ("TUPLE3", None),
        NEWTRUE => ("NEWTRUE", None),
        NEWFALSE => ("NEWFALSE", None),
        LONG1 => ("LONG1", Counted(1)),
        LONG4 => ("LONG4", Counted(4)),
        BINBYTES => ("BINBYTES", Counted(4)),
        SHORT_BINBYTES => ("SHORT_BINBYTES", Counted(1)),
        SHORT_BINUNICODE => ("SHORT_BINUNICODE", Counted(1)),
        BINUNICODE8 => ("BINUNICODE8", Counted(8)),
        BINBYTES8 => ("BINBYTES8", Counted(8)),
        EMPTY_SET => ("EMPTY_SET", None),
        ADDITEMS => ("ADDITEMS", None),
        FROZENSET => ("FROZENSET", None),
        NEWOBJ_EX => ("NEWOBJ_EX", None),
        STACK_GLOBAL => ("STACK_GLOBAL", None),
        MEMOIZE => ("MEMOIZE", None),
        FRAME => ("FRAME", Fixed(8)),
        BYTEARRAY8 => ("BYTEARRAY8", Counted(8)),
        NEXT_BUFFER => ("NEXT_BUFFER", None),
        READONLY_BUFFER => ("READONLY_BUFFER", None),
        _ => return Option::None,
    })
}

/// How many bytes an opcode's argument of shape `arg` takes at the start of
/// `rest`, read as its shape says and nothing more; `None` when `rest` ends first.
pub fn arg_len(arg: Arg, rest: &[u8]) -> Option<usize> {
    let line = |bytes: &[u8]| bytes.iter().position(|b| *b == b'\n').map(|n| n + 1);
    match arg {
        Arg::None => Some(0),
        Arg::Fixed(n) => (rest.len() >= usize::from(n)).then_some(usize::from(n)),
        Arg::Line => line(rest),
        Arg::TwoLines => line(rest).and_then(|first| first.checked_add(line(rest.get(first..)?)?)),
        Arg::Counted(width) => {
            let width = usize::from(width);
            let mut le = [0u8; 8];
            le.get_mut(..width)?.copy_from_slice(rest.get(..width)?);
            let len = usize::try_from(u64::from_le_bytes(le))
                .ok()?
                .checked_add(width)?;
            (rest.len() >= len).then_some(len)
        }
    }
}

/// Where a reader of a file goes on when an opcode of the frame `start..end` of
/// `data` reads past the frame's end, if one does (a STOP, an unknown byte or a
/// nested FRAME ends the look; those are judged elsewhere). CPython's C
/// unpickler holds the frame in a buffer; a read the buffer cannot satisfy is
/// made afresh from the file, which stands at the frame's end: the bytes left
/// in the frame are skipped and the read takes its bytes (or its line) from
/// there. A reader of memory reads straight across instead.
pub fn crossing(data: &[u8], start: usize, end: usize) -> Option<usize> {
    let line_end = |from: usize| {
        let rest = data.get(from..).unwrap_or_default();
        rest.iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |n| from + n + 1)
    };
    let mut pos = start;
    while pos < end {
        let op = *data.get(pos)?;
        let (_, arg) = info(op)?;
        if matches!(op, STOP | FRAME) {
            return None;
        }
        let mut at = pos + 1;
        // One read of `n` bytes at `at`: on past it, or the crossing's outcome.
        let sized = |at: usize, n: usize| -> Result<usize, Option<usize>> {
            if at >= end {
                Err(None)
            } else if at.checked_add(n).is_some_and(|stop| stop <= end) {
                Ok(at + n)
            } else {
                Err(Some(end.saturating_add(n)))
            }
        };
        let line = |at: usize| -> Result<usize, Option<usize>> {
            let frame = data.get(at..end).unwrap_or_default();
            match frame.iter().position(|b| *b == b'\n') {
                _ if at >= end => Err(None),
                Some(n) => Ok(at + n + 1),
                None => Err(Some(line_end(end))),
            }
        };
        let step = match arg {
            Arg::None => Ok(at),
            Arg::Fixed(n) => sized(at, usize::from(n)),
            Arg::Line => line(at),
            Arg::TwoLines => line(at).and_then(line),
            Arg::Counted(width) => {
                let width = usize::from(width);
                sized(at, width).and_then(|body| {
                    let mut le = [0u8; 8];
                    let prefix = data.get(at..body).unwrap_or_default();
                    le.get_mut(..width)
                        .unwrap_or_default()
                        .copy_from_slice(prefix);
                    let len = usize::try_from(u64::from_le_bytes(le)).unwrap_or(usize::MAX);
                    sized(body, len)
                })
            }
        };
        match step {
            Ok(next) => at = next,
            Err(outcome) => return outcome,
        }
        pos = at;
    }
    None
}

/// The opcode's name, or `unknown` for a byte that is no opcode.
pub fn opcode_name(op: u8) -> &'static str {
    info(op).map_or("unknown", |(name, _)| name)
}

/// The opcode `op`, named for error locations.
pub fn opcode(op: u8) -> crate::error::Opcode {
    crate::error::Opcode {
        byte: op,
        name: opcode_name(op),
    }
}

/// Every opcode byte, for tests and the fuzzing dictionary.
pub fn all() -> impl Iterator<Item = u8> {
    (0u8..=255).filter(|op| info(*op).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_all_68_opcodes_of_protocols_0_to_5() {
        assert_eq!(all().count(), 68);
        assert_eq!(opcode_name(0xff), "unknown");
        assert_eq!(opcode_name(FRAME), "FRAME");
    }
}
