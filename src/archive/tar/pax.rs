//! PAX records (`_proc_pax`'s regular expressions, byte for byte) and the three
//! GNU sparse maps they may announce.

use super::header::{HeaderError, BLOCK};
use super::number::{clamp, int_bytes, int_str, HUGE};
use super::file::File;
use super::{PyException, Raise};

/// The keywords that change where a member's data is or what it is called,
/// or announce a sparse map. tarfile keeps every keyword; the others change
/// nothing the model reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Path,
    LinkPath,
    Size,
    SparseName,
    SparseSize,
    SparseRealSize,
    SparseMap,
    SparseMajor,
    SparseMinor,
}

impl Key {
    fn of(keyword: &[u8]) -> Option<Key> {
        Some(match keyword {
            b"path" => Key::Path,
            b"linkpath" => Key::LinkPath,
            b"size" => Key::Size,
            b"GNU.sparse.name" => Key::SparseName,
            b"GNU.sparse.size" => Key::SparseSize,
            b"GNU.sparse.realsize" => Key::SparseRealSize,
            b"GNU.sparse.map" => Key::SparseMap,
            b"GNU.sparse.major" => Key::SparseMajor,
            b"GNU.sparse.minor" => Key::SparseMinor,
            _ => return None,
        })
    }
}

/// A `pax_headers` dict, in insertion order: a keyword set again keeps its
/// place, which decides which of two size keywords `_apply_pax_info` applies
/// last.
#[derive(Debug, Clone, Default)]
pub struct Headers {
    entries: Vec<(Key, Vec<u8>)>,
}

impl Headers {
    fn set(&mut self, key: Key, value: &[u8]) {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => value.clone_into(old),
            None => self.entries.push((key, value.to_vec())),
        }
    }

    pub fn get(&self, key: Key) -> Option<&[u8]> {
        (self.entries.iter())
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_slice())
    }

    pub fn iter(&self) -> impl Iterator<Item = (Key, &[u8])> {
        self.entries.iter().map(|(k, v)| (*k, v.as_slice()))
    }
}

fn value_error() -> Raise {
    Raise::Python(PyException::ValueError)
}

/// `re.search(br"\d+ hdrcharset=([^\n]+)\n", buf)`, then the group decoded as
/// strict UTF-8: the only way the charset changes anything here is by failing.
pub fn check_hdrcharset(buf: &[u8]) -> Result<(), Raise> {
    const NEEDLE: &[u8] = b" hdrcharset=";
    let mut newline = Forward::new(buf, b'\n');
    for at in 1..buf.len().saturating_sub(NEEDLE.len() - 1) {
        let preceded_by_digit = buf.get(at - 1).is_some_and(u8::is_ascii_digit);
        if !preceded_by_digit || !buf.get(at..).is_some_and(|b| b.starts_with(NEEDLE)) {
            continue;
        }
        let value_start = at + NEEDLE.len();
        let Some(end) = newline.first_from(value_start) else {
            return Ok(());
        };
        if end > value_start {
            let value = buf.get(value_start..end).unwrap_or_default();
            return match std::str::from_utf8(value) {
                Ok(_) => Ok(()),
                Err(_) => Err(Raise::Python(PyException::UnicodeDecodeError)),
            };
        }
    }
    Ok(())
}

/// The first `byte` at or after a position, for positions that only grow:
/// each byte is looked at once, however many records share one far '='.
struct Forward<'b> {
    buf: &'b [u8],
    byte: u8,
    found: Option<usize>,
    exhausted: bool,
}

impl<'b> Forward<'b> {
    fn new(buf: &'b [u8], byte: u8) -> Self {
        Forward {
            buf,
            byte,
            found: None,
            exhausted: false,
        }
    }

    fn first_from(&mut self, from: usize) -> Option<usize> {
        if self.exhausted {
            return None;
        }
        if let Some(found) = self.found.filter(|f| *f >= from) {
            return Some(found);
        }
        let rest = self.buf.get(from..).unwrap_or_default();
        self.found = rest.iter().position(|b| *b == self.byte).map(|p| from + p);
        self.exhausted = self.found.is_none();
        self.found
    }
}

/// The records of one PAX header into `headers`, as `_proc_pax`'s loop reads
/// them: `regex.match(br"(\d+) ([^=]+)=", buf, pos)`, then the value up to
/// one byte short of the record's declared end, whatever byte that is, and on
/// to `pos + length`.
pub fn parse_records(buf: &[u8], headers: &mut Headers) -> Result<(), Raise> {
    let mut equals = Forward::new(buf, b'=');
    let mut digits_end_cache = 0usize;
    let mut first_nonzero = 0usize;
    let mut pos = 0usize;
    while pos < buf.len() {
        // `\d+` at `pos`: the rest of a run of digits started before is known.
        let digits_end = if pos < digits_end_cache {
            digits_end_cache
        } else {
            let run = buf.get(pos..).unwrap_or_default();
            pos + run.iter().take_while(|b| b.is_ascii_digit()).count()
        };
        digits_end_cache = digits_end;
        if digits_end == pos || buf.get(digits_end) != Some(&b' ') {
            break;
        }
        let keyword_start = digits_end + 1;
        let Some(equal) = equals.first_from(keyword_start) else {
            break;
        };
        if equal == keyword_start {
            break;
        }
        // int(length): leading zeros count towards CPython's 4300 digits.
        if digits_end - pos > 4300 {
            return Err(value_error());
        }
        first_nonzero = first_nonzero.max(pos);
        while first_nonzero < digits_end && buf.get(first_nonzero) == Some(&b'0') {
            first_nonzero += 1;
        }
        let significant = buf.get(first_nonzero..digits_end).unwrap_or_default();
        let length = if significant.len() > 35 {
            HUGE
        } else {
            clamp((significant.iter()).fold(0i128, |n, d| n * 10 + i128::from(d - b'0')))
        };
        if length == 0 {
            return Err(Raise::Header(HeaderError::Invalid));
        }
        let declared_end = clamp(pos as i128 + length - 1);
        let value_end = usize::try_from(declared_end).map_or(buf.len(), |e| e.min(buf.len()));
        let value = buf.get(equal + 1..value_end).unwrap_or_default();
        if let Some(key) = Key::of(buf.get(keyword_start..equal).unwrap_or_default()) {
            headers.set(key, value);
        }
        // The next `regex.match(buf, pos)` takes `pos` as a C `ssize_t`.
        let next = pos as i128 + length;
        if next > i128::from(i64::MAX) {
            return Err(Raise::Python(PyException::OverflowError));
        }
        match usize::try_from(next) {
            Ok(next) => pos = next,
            Err(_) => break,
        }
    }
    Ok(())
}

/// `_proc_gnusparse_01`: `GNU.sparse.map`, comma-separated numbers in pairs.
pub fn sparse_map(map: &[u8]) -> Result<Vec<(i128, i128)>, Raise> {
    let numbers: Vec<i128> = (map.split(|b| *b == b','))
        .map(|n| int_str(n).ok_or_else(value_error))
        .collect::<Result<_, _>>()?;
    Ok(pairs(&numbers))
}

fn pairs(numbers: &[i128]) -> Vec<(i128, i128)> {
    (numbers.chunks_exact(2))
        .filter_map(|pair| match pair {
            [offset, numbytes] => Some((*offset, *numbytes)),
            _ => None,
        })
        .collect()
}

/// `_proc_gnusparse_00`: every `\d+ GNU.sparse.offset=(\d+)\n` in the header's
/// bytes, zipped with every `...numbytes=...`; the dots are the regular
/// expression's, any byte but a newline.
pub fn sparse_records(buf: &[u8]) -> Result<Vec<(i128, i128)>, Raise> {
    let offsets = find_all(buf, b"GNU.sparse.offset=")?;
    let numbytes = find_all(buf, b"GNU.sparse.numbytes=")?;
    Ok(offsets.into_iter().zip(numbytes).collect())
}

/// `re.finditer(rb"\d+ " + pattern + rb"(\d+)\n", buf)`, each group read by `int()`.
fn find_all(buf: &[u8], pattern: &[u8]) -> Result<Vec<i128>, Raise> {
    let digits = |from: usize| {
        (buf.get(from..).unwrap_or_default().iter())
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let matches_at = |at: usize| {
        let text = buf.get(at..at + pattern.len())?;
        let same =
            (text.iter().zip(pattern)).all(|(t, p)| if *p == b'.' { *t != b'\n' } else { t == p });
        same.then_some(at + pattern.len())
    };
    let mut found = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let run = digits(at);
        if run == 0 {
            at += 1;
            continue;
        }
        // A match starts where a run of digits does, or not in the run at all.
        let after_run = at + run;
        let value = (buf.get(after_run) == Some(&b' '))
            .then(|| matches_at(after_run + 1))
            .flatten()
            .map(|start| (start, digits(start)))
            .filter(|(start, n)| *n > 0 && buf.get(start + n) == Some(&b'\n'));
        match value {
            Some((start, n)) => {
                let text = buf.get(start..start + n).unwrap_or_default();
                found.push(int_bytes(text).ok_or_else(value_error)?);
                at = start + n + 1;
            }
            None => at = after_run,
        }
    }
    Ok(found)
}

/// `_proc_gnusparse_10`: the map in the data blocks, a count and numbers one
/// per line, read a block at a time (one more block whenever no newline is
/// left); the member's data starts after the last block read.
pub fn sparse_blocks(file: &mut File<'_>) -> Result<Vec<(i128, i128)>, Raise> {
    let mut buf = file.read(BLOCK as i128)?.to_vec();
    let mut cursor = 0;
    let fields = next_line_number(&buf, &mut cursor)?;
    let mut numbers = Vec::new();
    while (numbers.len() as i128) < fields.saturating_mul(2) {
        if !buf.get(cursor..).unwrap_or_default().contains(&b'\n') {
            buf.extend_from_slice(file.read(BLOCK as i128)?);
        }
        numbers.push(next_line_number(&buf, &mut cursor)?);
    }
    Ok(pairs(&numbers))
}

/// `number, buf = buf.split(b"\n", 1)` and `int(number)`: both raise
/// `ValueError` when there is no newline or no number.
fn next_line_number(buf: &[u8], cursor: &mut usize) -> Result<i128, Raise> {
    let rest = buf.get(*cursor..).unwrap_or_default();
    let end = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(value_error)?;
    let number = int_bytes(rest.get(..end).unwrap_or_default()).ok_or_else(value_error)?;
    *cursor += end + 1;
    Ok(number)
}
