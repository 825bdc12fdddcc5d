//! The file object tarfile reads from, as a model of `io.BytesIO`, with the
//! reads it has made counted against the archive's size.

use super::header::BLOCK;
use super::{PyException, Raise};

/// Bytes tarfile may read for headers and their records, per byte of the
/// archive, before the model stops. An archive read front to back reads each
/// byte once; only headers whose negative sizes point back make tarfile read
/// them again, and again, forever.
const READS_PER_BYTE: u64 = 4;

const SSIZE_MAX: i128 = i64::MAX as i128;
const SSIZE_MIN: i128 = i64::MIN as i128;

/// `io.BytesIO` over the archive: reads past the end return nothing, seeks
/// past it are allowed, and a count that no `ssize_t` holds overflows.
pub struct File<'d> {
    data: &'d [u8],
    position: u64,
    read: u64,
    max_read: u64,
}

impl<'d> File<'d> {
    pub fn new(data: &'d [u8]) -> File<'d> {
        let len = data.len() as u64;
        File {
            data,
            position: 0,
            read: 0,
            max_read: len
                .saturating_add(BLOCK as u64)
                .saturating_mul(READS_PER_BYTE),
        }
    }

    pub fn tell(&self) -> u64 {
        self.position
    }

    pub fn read(&mut self, count: i128) -> Result<&'d [u8], Raise> {
        if !(SSIZE_MIN..=SSIZE_MAX).contains(&count) {
            return Err(Raise::Python(PyException::OverflowError));
        }
        let len = self.data.len() as u64;
        if self.position >= len {
            return Ok(&[]);
        }
        let start = self.position;
        let end = match u64::try_from(count) {
            Ok(count) => start.saturating_add(count).min(len),
            Err(_) => len,
        };
        self.read = self.read.saturating_add(end - start);
        if self.read > self.max_read {
            return Err(Raise::Limit(
                "tarfile would read the archive's headers over and over (sizes that point back)",
            ));
        }
        self.position = end;
        let range = usize::try_from(start).ok().zip(usize::try_from(end).ok());
        Ok(range
            .and_then(|(s, e)| self.data.get(s..e))
            .unwrap_or_default())
    }

    pub fn seek(&mut self, to: i128) -> Result<(), Raise> {
        if !(SSIZE_MIN..=SSIZE_MAX).contains(&to) {
            return Err(Raise::Python(PyException::OverflowError));
        }
        self.position = u64::try_from(to).map_err(|_| Raise::Python(PyException::ValueError))?;
        Ok(())
    }
}
