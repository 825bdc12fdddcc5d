//! The cursor over a 7z header: the format's numbers, counts checked against the
//! bytes that could hold them, bit vectors and digests.

use crate::archive::sevenzip::Budget;
use crate::error::{Error, Location};

/// A cursor over header bytes; `base` is where they start in the file, or, for a
/// decoded header, in the decoded bytes (`decoded`).
pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) base: u64,
    pub(super) decoded: bool,
}

impl<'a> Reader<'a> {
    pub(super) fn location(&self) -> Location {
        let offset = self.base.saturating_add(self.pos as u64);
        if self.decoded {
            Location {
                entry: Some("7z encoded header".to_owned()),
                offset: Some(offset),
                opcode: None,
            }
        } else {
            Location::at(offset)
        }
    }

    pub(super) fn error(&self, reason: impl Into<String>) -> Error {
        Error::archive(reason, self.location())
    }

    pub(super) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub(super) fn bytes(&mut self, n: u64, what: &str) -> Result<&'a [u8], Error> {
        let slice = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .and_then(|end| self.data.get(self.pos..end));
        match slice {
            Some(slice) => {
                self.pos += slice.len();
                Ok(slice)
            }
            None => Err(self.error(format!(
                "{what} of {n} bytes reaches past the {} bytes left of the header",
                self.remaining()
            ))),
        }
    }

    pub(super) fn byte(&mut self, what: &str) -> Result<u8, Error> {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.error(format!("the header ends before {what}"))),
        }
    }

    pub(super) fn u32_le(&mut self, what: &str) -> Result<u32, Error> {
        let b = self.bytes(4, what)?;
        Ok(b.try_into().map(u32::from_le_bytes).unwrap_or_default())
    }

    /// The format's variable-length UINT64: the high bits of the first byte say
    /// how many little-endian bytes follow.
    pub(super) fn number(&mut self, what: &str) -> Result<u64, Error> {
        let first = self.byte(what)?;
        let mut value = 0u64;
        let mut mask = 0x80u8;
        for i in 0..8u32 {
            if first & mask == 0 {
                let high = u64::from(first & mask.wrapping_sub(1));
                return Ok(value | (high << (8 * i)));
            }
            value |= u64::from(self.byte(what)?) << (8 * i);
            mask >>= 1;
        }
        Ok(value)
    }

    /// A count of items that take at least `each` bytes apiece of what is left.
    pub(super) fn count(&mut self, what: &str, each: u64) -> Result<usize, Error> {
        let at = self.location();
        let n = self.number(what)?;
        let room = self.remaining() as u64;
        match n.checked_mul(each) {
            Some(need) if need <= room => usize::try_from(n)
                .map_err(|_| Error::archive(format!("{what} {n} is too large"), at)),
            _ => Err(Error::archive(
                format!(
                    "{what} {n} cannot fit in the {room} bytes left of the header \
                     ({each} or more bytes each)"
                ),
                at,
            )),
        }
    }

    /// A number that must be below `bound` (a stream index, a stream count).
    pub(super) fn index(&mut self, what: &str, bound: u64) -> Result<u64, Error> {
        let at = self.location();
        let n = self.number(what)?;
        if n < bound {
            Ok(n)
        } else {
            Err(Error::archive(
                format!("{what} {n} is out of range (below {bound} expected)"),
                at,
            ))
        }
    }

    /// Read the next property id, which must be `id`: an error naming `what` otherwise.
    pub(super) fn property(&mut self, id: u8, what: &str) -> Result<(), Error> {
        let at = self.location();
        let got = self.byte(what)?;
        if got == id {
            Ok(())
        } else {
            Err(Error::archive(
                format!("expected {what} (property 0x{id:02x}), found property 0x{got:02x}"),
                at,
            ))
        }
    }

    /// The next `len` bytes as a reader of their own.
    pub(super) fn sub(&mut self, len: u64, what: &str) -> Result<Reader<'a>, Error> {
        let base = self.base.saturating_add(self.pos as u64);
        let data = self.bytes(len, what)?;
        Ok(Reader {
            data,
            pos: 0,
            base,
            decoded: self.decoded,
        })
    }

    pub(super) fn finish(&self, what: &str) -> Result<(), Error> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(self.error(format!("{} bytes follow the {what}", self.remaining())))
        }
    }

    /// `n` bits, most significant first in each byte.
    pub(super) fn bits(
        &mut self,
        n: usize,
        budget: &mut Budget,
        what: &str,
    ) -> Result<Vec<bool>, Error> {
        let bytes = self.bytes(n.div_ceil(8) as u64, what)?;
        let mut out = budget.vec(n, self)?;
        out.extend(
            bytes
                .iter()
                .flat_map(|b| (0..8).map(move |i| b & (0x80 >> i) != 0))
                .take(n),
        );
        Ok(out)
    }

    /// The Digests structure: which of `n` streams have a CRC, then the CRCs.
    pub(super) fn digests(
        &mut self,
        n: usize,
        budget: &mut Budget,
        what: &str,
    ) -> Result<Vec<Option<u32>>, Error> {
        let all_defined = self.byte(what)?;
        let defined = if all_defined != 0 {
            None
        } else {
            Some(self.bits(n, budget, what)?)
        };
        let count = defined
            .as_ref()
            .map_or(n, |d| d.iter().filter(|b| **b).count());
        if (count as u64).saturating_mul(4) > self.remaining() as u64 {
            return Err(self.error(format!(
                "{count} CRCs of {what} cannot fit in the {} bytes left of the header",
                self.remaining()
            )));
        }
        let mut out = budget.vec(n, self)?;
        for i in 0..n {
            let is_defined = defined
                .as_ref()
                .is_none_or(|d| d.get(i).copied().unwrap_or(false));
            out.push(if is_defined {
                Some(self.u32_le(what)?)
            } else {
                None
            });
        }
        Ok(out)
    }
}

pub(super) fn le_u32(data: &[u8], at: usize) -> u32 {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

pub(super) fn le_u64(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &[u8]) -> Reader<'_> {
        Reader {
            data,
            pos: 0,
            base: 0,
            decoded: false,
        }
    }

    #[test]
    pub(super) fn numbers_use_the_leading_ones_of_their_first_byte() {
        let cases: &[(&[u8], u64)] = &[
            (&[0x00], 0),
            (&[0x7F], 0x7F),
            (&[0x80, 0x80], 0x80),
            (&[0xBF, 0xFF], 0x3FFF),
            (&[0xC0, 0x00, 0x40], 0x4000),
            (&[0xE1, 0x02, 0x03, 0x04], 0x0104_0302),
            (&[0xFE, 1, 2, 3, 4, 5, 6, 7], 0x0007_0605_0403_0201),
            (&[0xFF, 1, 2, 3, 4, 5, 6, 7, 8], 0x0807_0605_0403_0201),
        ];
        for (bytes, value) in cases {
            let mut r = reader(bytes);
            assert_eq!(r.number("n").unwrap(), *value, "{bytes:02x?}");
            assert_eq!(r.remaining(), 0);
        }
        // Every prefix of a long number is truncated.
        for len in 0..9 {
            let bytes = [0xFF, 1, 2, 3, 4, 5, 6, 7, 8];
            assert!(reader(&bytes[..len]).number("n").is_err());
        }
    }

    #[test]
    pub(super) fn counts_are_checked_against_the_bytes_left() {
        let mut r = reader(&[0x03, 0, 0, 0]);
        assert_eq!(r.count("items", 1).unwrap(), 3);
        let mut r = reader(&[0x03, 0, 0]);
        assert!(r.count("items", 1).is_err());
        let mut r = reader(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(r.count("items", 2).is_err());
    }

    #[test]
    pub(super) fn bit_vectors_are_most_significant_bit_first() {
        let mut budget = Budget {
            left: 100,
            cap: 100,
        };
        let mut r = reader(&[0b1010_0000, 0b1000_0000]);
        let bits = r.bits(9, &mut budget, "bits").unwrap();
        assert_eq!(
            bits,
            [true, false, true, false, false, false, false, false, true]
        );
        let mut r = reader(&[0xFF]);
        assert!(r.bits(9, &mut budget, "bits").is_err());
    }
}
