//! `TarInfo.frombuf`: one 512-byte header block, as CPython 3.11.7 reads it.

use super::number::{nti, until_nul};
use super::{is_regular, Raise};

pub const BLOCK: usize = 512;

pub const AREGTYPE: u8 = 0;
pub const LNKTYPE: u8 = b'1';
pub const SYMTYPE: u8 = b'2';
pub const DIRTYPE: u8 = b'5';
pub const LONGNAME: u8 = b'L';
pub const LONGLINK: u8 = b'K';
pub const SPARSE: u8 = b'S';
pub const PAX_EXTENDED: u8 = b'x';
pub const PAX_GLOBAL: u8 = b'g';
pub const SOLARIS_EXTENDED: u8 = b'X';

/// The header errors tarfile tells apart (`HeaderError`'s subclasses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// No bytes at all.
    Empty,
    /// Fewer than 512 bytes.
    Truncated,
    /// 512 NUL bytes: the end of the archive.
    EndOfFile,
    /// A bad checksum or a number field `int()` refuses.
    Invalid,
}

/// A member as one header describes it, before the headers around it (GNU long
/// names, PAX records) change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub name: Vec<u8>,
    pub linkname: Vec<u8>,
    pub size: i128,
    pub kind: u8,
    /// Where the member's first header starts.
    pub offset: u64,
    /// Where its data starts (set when the member is processed).
    pub offset_data: u64,
    /// A sparse file's map of `(offset, numbytes)`, when it is one.
    pub sparse: Option<Vec<(i128, i128)>>,
    /// An old GNU sparse header's own map, for `_proc_sparse` to continue.
    pub old_sparse: Option<OldSparse>,
}

/// What an old GNU sparse header holds beside the usual fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OldSparse {
    pub map: Vec<(i128, i128)>,
    /// Whether extension blocks with more of the map follow the header.
    pub extended: bool,
    pub real_size: i128,
}

impl Info {
    pub fn is_dir(&self) -> bool {
        self.kind == DIRTYPE
    }

    /// `isreg() or type not in SUPPORTED_TYPES`: its data blocks follow it, and
    /// `extractfile` hands them out.
    pub fn has_data(&self) -> bool {
        is_regular(self.kind)
    }
}

/// `TarInfo.frombuf`. `buf` is what one read of 512 bytes returned.
pub fn from_block(buf: &[u8]) -> Result<Info, Raise> {
    if buf.is_empty() {
        return Err(Raise::Header(HeaderError::Empty));
    }
    if buf.len() != BLOCK {
        return Err(Raise::Header(HeaderError::Truncated));
    }
    if buf.iter().all(|b| *b == 0) {
        return Err(Raise::Header(HeaderError::EndOfFile));
    }
    let field = |start: usize, end: usize| buf.get(start..end).unwrap_or_default();
    let number = |start: usize, end: usize| nti(field(start, end)).ok_or(INVALID);
    let checksum = number(148, 156)?;
    if !checksums(buf).contains(&checksum) {
        return Err(INVALID);
    }
    let mut name = until_nul(field(0, 100)).to_vec();
    for (start, end) in [(100, 108), (108, 116), (116, 124)] {
        number(start, end)?;
    }
    let size = number(124, 136)?;
    number(136, 148)?;
    let mut kind = buf.get(156).copied().unwrap_or(0);
    let linkname = until_nul(field(157, 257)).to_vec();
    for (start, end) in [(329, 337), (337, 345)] {
        number(start, end)?;
    }
    let prefix = until_nul(field(345, 500));

    // V7 tar marks a directory as a regular file whose name ends in '/'.
    if kind == AREGTYPE && name.ends_with(b"/") {
        kind = DIRTYPE;
    }
    let old_sparse = if kind == SPARSE {
        let mut structs = Vec::with_capacity(4);
        for i in 0..4 {
            let at = 386 + 24 * i;
            structs.push((number(at, at + 12)?, number(at + 12, at + 24)?));
        }
        Some(OldSparse {
            map: structs,
            extended: buf.get(482).is_some_and(|b| *b != 0),
            real_size: number(483, 495)?,
        })
    } else {
        None
    };
    if kind == DIRTYPE {
        strip_trailing_slashes(&mut name);
    }
    if !prefix.is_empty() && !matches!(kind, LONGNAME | LONGLINK | SPARSE) {
        let mut joined = prefix.to_vec();
        joined.push(b'/');
        joined.extend_from_slice(&name);
        name = joined;
    }
    Ok(Info {
        name,
        linkname,
        size,
        kind,
        offset: 0,
        offset_data: 0,
        sparse: None,
        old_sparse,
    })
}

const INVALID: Raise = Raise::Header(HeaderError::Invalid);

/// `calc_chksums`: the sum of the header's bytes with the checksum field as
/// spaces, read as unsigned and as signed bytes (Sun's and NeXT's tar).
fn checksums(buf: &[u8]) -> [i128; 2] {
    let (mut unsigned, mut signed) = (256i128, 256i128);
    for (i, b) in buf.iter().enumerate() {
        if !(148..156).contains(&i) {
            unsigned += i128::from(*b);
            signed += i128::from(*b as i8);
        }
    }
    [unsigned, signed]
}

/// `str.rstrip("/")`.
pub fn strip_trailing_slashes(name: &mut Vec<u8>) {
    while name.last() == Some(&b'/') {
        name.pop();
    }
}

/// Whether a block has a checksum tarfile accepts or is all NUL: what makes
/// `tarfile.open` read on at offset 0.
pub fn may_open(block: &[u8]) -> bool {
    block.len() == BLOCK
        && (block.iter().all(|b| *b == 0)
            || nti(block.get(148..156).unwrap_or_default())
                .is_some_and(|sum| checksums(block).contains(&sum)))
}
