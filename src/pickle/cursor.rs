//! Bounds-checked reads over borrowed pickle bytes. Every length is checked
//! against the bytes that remain before anything is read or allocated.

use crate::error::{Error, Location};

pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

/// Why a read failed. Small and `Copy`: a reader that only asks whether a read
/// worked (the scan's walk) never builds a message, and the VM builds one, through
/// `?`, only on the error path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    Truncated {
        at: usize,
        wanted: u64,
        remaining: usize,
    },
    NoNewline {
        at: usize,
    },
}

impl From<ReadError> for Error {
    #[cold]
    fn from(e: ReadError) -> Error {
        match e {
            ReadError::Truncated {
                at,
                wanted,
                remaining,
            } => Error::pickle(
                format!("truncated: the argument at byte {at} needs {wanted} more bytes, {remaining} remain"),
                Location::default(),
            ),
            ReadError::NoNewline { at } => Error::pickle(
                format!("the line at byte {at} has no terminating newline"),
                Location::default(),
            ),
        }
    }
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub fn is_at_end(&self) -> bool {
        self.remaining() == 0
    }

    fn eof(&self, wanted: u64) -> ReadError {
        ReadError::Truncated {
            at: self.pos,
            wanted,
            remaining: self.remaining(),
        }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.data.len());
        match end.and_then(|end| self.data.get(self.pos..end).map(|s| (s, end))) {
            Some((slice, end)) => {
                self.pos = end;
                Ok(slice)
            }
            None => Err(self.eof(n as u64)),
        }
    }

    /// Take a length read from the input: checked against what remains before use.
    pub fn take_counted(&mut self, n: u64) -> Result<&'a [u8], ReadError> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => self.take(n),
            _ => Err(self.eof(n)),
        }
    }

    pub fn u8(&mut self) -> Result<u8, ReadError> {
        let b = self.take(1)?;
        b.first().copied().ok_or_else(|| self.eof(1))
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], ReadError> {
        let slice = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    pub fn u16_le(&mut self) -> Result<u16, ReadError> {
        self.array::<2>().map(u16::from_le_bytes)
    }

    pub fn u32_le(&mut self) -> Result<u32, ReadError> {
        self.array::<4>().map(u32::from_le_bytes)
    }

    pub fn i32_le(&mut self) -> Result<i32, ReadError> {
        self.array::<4>().map(i32::from_le_bytes)
    }

    pub fn u64_le(&mut self) -> Result<u64, ReadError> {
        self.array::<8>().map(u64::from_le_bytes)
    }

    /// A little-endian unsigned count of `width` bytes (1, 4 or 8).
    pub fn count(&mut self, width: u8) -> Result<u64, ReadError> {
        match width {
            1 => self.u8().map(u64::from),
            2 => self.u16_le().map(u64::from),
            4 => self.u32_le().map(u64::from),
            _ => self.u64_le(),
        }
    }

    /// One line without its terminating newline. A missing newline is an error, as in pickle.
    pub fn line(&mut self) -> Result<&'a [u8], ReadError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        match memchr::memchr(b'\n', rest) {
            Some(n) => {
                let line = self.take(n)?;
                self.pos += 1;
                Ok(line)
            }
            None => Err(ReadError::NoNewline { at: self.pos }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounds_checked() {
        let mut c = Cursor::new(b"\x01\x02\x03");
        assert_eq!(c.u8().unwrap(), 1);
        assert!(c.u32_le().is_err());
        assert_eq!(c.u16_le().unwrap(), 0x0302);
        assert!(c.is_at_end());
        assert!(c.take_counted(u64::MAX).is_err());
    }

    #[test]
    fn a_failed_read_becomes_an_error_naming_where() {
        let mut c = Cursor::new(b"\x01\x02\x03");
        c.u8().unwrap();
        let truncated = Error::from(c.u32_le().unwrap_err()).to_string();
        assert!(
            truncated.contains("truncated: the argument at byte 1 needs 4 more bytes, 2 remain"),
            "{truncated}"
        );
        let no_newline = Error::from(c.line().unwrap_err()).to_string();
        assert!(
            no_newline.contains("the line at byte 1 has no terminating newline"),
            "{no_newline}"
        );
    }

    #[test]
    fn lines_need_their_newline() {
        let mut c = Cursor::new(b"torch\nSize\nx");
        assert_eq!(c.line().unwrap(), b"torch");
        assert_eq!(c.line().unwrap(), b"Size");
        assert!(c.line().is_err());
    }
}
