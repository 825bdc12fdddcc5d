//! Bounds-checked reads over borrowed pickle bytes. Every length is checked
//! against the bytes that remain before anything is read or allocated.

use crate::error::{Error, Location};

pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
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

    fn eof(&self, wanted: u64) -> Error {
        Error::pickle(
            format!(
                "truncated: needs {wanted} more bytes, {} remain",
                self.remaining()
            ),
            Location::at(self.pos as u64),
        )
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
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
    pub fn take_counted(&mut self, n: u64) -> Result<&'a [u8], Error> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => self.take(n),
            _ => Err(self.eof(n)),
        }
    }

    pub fn u8(&mut self) -> Result<u8, Error> {
        let b = self.take(1)?;
        b.first().copied().ok_or_else(|| self.eof(1))
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let slice = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    pub fn u16_le(&mut self) -> Result<u16, Error> {
        self.array::<2>().map(u16::from_le_bytes)
    }

    pub fn u32_le(&mut self) -> Result<u32, Error> {
        self.array::<4>().map(u32::from_le_bytes)
    }

    pub fn i32_le(&mut self) -> Result<i32, Error> {
        self.array::<4>().map(i32::from_le_bytes)
    }

    pub fn u64_le(&mut self) -> Result<u64, Error> {
        self.array::<8>().map(u64::from_le_bytes)
    }

    /// A little-endian unsigned count of `width` bytes (1, 4 or 8).
    pub fn count(&mut self, width: u8) -> Result<u64, Error> {
        match width {
            1 => self.u8().map(u64::from),
            2 => self.u16_le().map(u64::from),
            4 => self.u32_le().map(u64::from),
            _ => self.u64_le(),
        }
    }

    /// One line without its terminating newline. A missing newline is an error, as in pickle.
    pub fn line(&mut self) -> Result<&'a [u8], Error> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|b| *b == b'\n') {
            Some(n) => {
                let line = self.take(n)?;
                self.pos += 1;
                Ok(line)
            }
            None => Err(Error::pickle(
                "line without a terminating newline",
                Location::at(self.pos as u64),
            )),
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
    fn lines_need_their_newline() {
        let mut c = Cursor::new(b"torch\nSize\nx");
        assert_eq!(c.line().unwrap(), b"torch");
        assert_eq!(c.line().unwrap(), b"Size");
        assert!(c.line().is_err());
    }
}
