//! The one way an entry's bytes are read: where its payload lies and how it is
//! stored ([`Payload`]), for an entry read at once ([`super::Entry::read`]) and
//! for one a reader keeps to read later (a checkpoint's storages, copied into
//! tensors, checked by the tensor invariants, or cut into chunks for threads).
//! Every bounds check of a payload against the file is this file's.

use std::borrow::Cow;

use super::FileBytes;
use crate::archive::decompress;
use crate::archive::inflate::inflate_prefix;
use crate::archive::method::Method;
use crate::error::{Error, Location};

/// Where an entry's payload lies, and how it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payload {
    /// Where the payload starts in the file.
    pub offset: u64,
    /// Its size as stored (compressed, for a compressed entry).
    pub stored_size: u64,
    pub method: Method,
    /// The entry's general-purpose flags (LZMA's end marker).
    pub flags: u16,
}

impl Payload {
    /// The payload as stored, checked to lie inside the file.
    pub fn stored<'d, D: FileBytes + ?Sized>(
        &self,
        data: &'d D,
        name: impl Fn() -> String,
    ) -> Result<&'d [u8], Error> {
        let range = usize::try_from(self.offset).ok().zip(
            (self.offset.checked_add(self.stored_size)).and_then(|end| usize::try_from(end).ok()),
        );
        range
            .and_then(|(start, end)| data.get(start..end))
            .ok_or_else(|| outside(&name()))
    }

    /// The whole payload decoded into `dst`, which it must fill exactly: stored
    /// bytes copied (from the file with `pread` where the source has one, see
    /// [`FileBytes::copy_into`]), others decompressed.
    pub fn read_into<D: FileBytes + ?Sized>(
        &self,
        data: &D,
        dst: &mut [u8],
        name: impl Fn() -> String,
    ) -> Result<(), Error> {
        if self.method == Method::Stored {
            decompress::check_entry(self.method, self.stored_size, dst.len() as u64, &name())?;
            return self.read_range_into(data, 0, dst, name);
        }
        let stored = self.stored(data, &name)?;
        decompress::decompress_exact(self.method, self.flags, stored, dst, &name())
    }

    /// Bytes `start..` of a stored payload into `dst` (big storages are copied
    /// in chunks by several threads).
    pub fn read_range_into<D: FileBytes + ?Sized>(
        &self,
        data: &D,
        start: u64,
        dst: &mut [u8],
        name: impl Fn() -> String,
    ) -> Result<(), Error> {
        if self.method != Method::Stored {
            return Err(Error::tensor(
                "only a stored payload can be read in ranges",
                Location::entry(&name()),
            ));
        }
        let end = (start.checked_add(dst.len() as u64)).filter(|end| *end <= self.stored_size);
        let copied = end
            .and_then(|_| self.offset.checked_add(start))
            .and_then(|at| data.copy_into(at, dst))
            .ok_or_else(|| outside(&name()))?;
        copied.map_err(|e| Error::io(format!("cannot read {}", name()), e))
    }

    /// Decoded bytes `start..end`: borrowed when stored; inflated when deflated,
    /// only as far as `end` (what the tensor invariants look at).
    pub fn range<'d, D: FileBytes + ?Sized>(
        &self,
        data: &'d D,
        start: usize,
        end: usize,
        name: impl Fn() -> String,
    ) -> Result<Cow<'d, [u8]>, Error> {
        let stored = self.stored(data, &name)?;
        match self.method {
            Method::Stored => (stored.get(start..end))
                .map(Cow::Borrowed)
                .ok_or_else(|| outside(&name())),
            Method::Deflate => {
                let mut prefix = vec![0u8; end];
                inflate_prefix(stored, &mut prefix, &name())?;
                prefix.drain(..start.min(end));
                Ok(Cow::Owned(prefix))
            }
            method => Err(decompress::unsupported(method, &name())),
        }
    }
}

fn outside(name: &str) -> Error {
    Error::archive("entry data lies outside the file", Location::entry(name))
}
