//! The bytes of a checkpoint: a memory map of the file, or a buffer read from a
//! file object. Mapping, and reading into memory not zeroed first, are the
//! places the core needs `unsafe`.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::Path;

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::{Error, Location};
use crate::limits::Limit;

/// Why a stream could not be read.
enum StreamRead {
    Io(std::io::Error),
    /// It goes on past the cap.
    TooLong,
}

/// `len` bytes of `file` at `offset`, read into memory that is not zeroed first:
/// zeroing it was a tenth of the instructions of a checkpoint's
/// `get_unsafe_globals_in_checkpoint`, which reads a few KiB this way. `None`
/// past the end of the file or on an error.
#[cfg(unix)]
pub fn read_exact_at(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut out = Vec::<u8>::with_capacity(len);
    while out.len() < len {
        let at = libc::off_t::try_from(offset.checked_add(out.len() as u64)?).ok()?;
        let spare = out.spare_capacity_mut();
        // SAFETY: pread writes at most `spare.len()` bytes to `spare`, memory this
        // Vec owns and nothing else refers to.
        let read =
            unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match usize::try_from(read) {
            Ok(0) => return None,
            // SAFETY: pread initialised the first `n` bytes of the spare capacity.
            Ok(n) => unsafe { out.set_len(out.len() + n) },
            Err(_) if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {
            }
            Err(_) => return None,
        }
    }
    Some(out)
}

/// `len` bytes of `file` at `offset`, or `None` past its end or on an error.
#[cfg(not(unix))]
pub fn read_exact_at(file: &File, offset: u64, len: usize) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut out = Vec::with_capacity(len);
    file.take(len as u64).read_to_end(&mut out).ok()?;
    (out.len() == len).then_some(out)
}

/// A stream, read to its end into memory: at most `cap` bytes.
fn read_stream(file: File, cap: u64) -> Result<Source, StreamRead> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = file
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(StreamRead::Io)?;
    if read as u64 > cap {
        return Err(StreamRead::TooLong);
    }
    Ok(if bytes.is_empty() {
        Source::Empty
    } else {
        Source::Owned(bytes)
    })
}

/// How a file is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// Read-only: for scanning and for loads that copy every storage.
    ReadOnly,
    /// Private copy-on-write (MAP_PRIVATE): writes stay in this process.
    Private,
    /// Shared (MAP_SHARED): writes reach the file.
    Shared,
}

/// Bytes another owner keeps alive, and never changes, for as long as the value
/// holding them lives (a Python bytes object): read in place, never copied.
pub trait HeldBytes: Send + Sync {
    fn bytes(&self) -> &[u8];

    /// [`Source::read_file_at`] for bytes that lie in a file: `None` for others.
    fn read_file_at(&self, _offset: u64, _len: usize) -> Option<Vec<u8>> {
        None
    }

    /// [`Source::release_pages`] for bytes mapped from a file.
    fn release_pages(&self) {}
}

pub enum Source {
    /// A read-only map, and the file: an eager load reads storages with `pread`,
    /// so the file's pages never join the process's resident set.
    ReadOnly {
        map: Mmap,
        file: File,
    },
    /// A private or shared map, and the file it maps (none for anonymous memory).
    Writable {
        map: MmapMut,
        file: Option<File>,
    },
    Owned(Vec<u8>),
    Held(Box<dyn HeldBytes>),
    Empty,
}

impl Source {
    /// The bytes of the file at `path`: mapped when it is a regular file; read
    /// to its end (at most `max_stream_bytes`) when it is a pipe, a FIFO, a
    /// terminal or another stream (`/dev/stdin`, a process substitution).
    pub fn open(path: &Path, mode: MapMode, max_stream_bytes: u64) -> Result<Source, Error> {
        let describe = |what: &str, e: std::io::Error| {
            Error::io_at(path, format!("cannot {what} {}", path.display()), e)
        };
        let file = match mode {
            MapMode::Shared => OpenOptions::new().read(true).write(true).open(path),
            _ => File::open(path),
        }
        .map_err(|e| describe("open", e))?;
        let meta = file.metadata().map_err(|e| describe("stat", e))?;
        if meta.is_dir() {
            return Err(describe(
                "load",
                std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            ));
        }
        if !meta.is_file() {
            return read_stream(file, max_stream_bytes).map_err(|e| match e {
                StreamRead::Io(e) => describe("read", e),
                StreamRead::TooLong => Error::limit(
                    Limit::InflatedBytes,
                    max_stream_bytes,
                    Location::entry(&path.display().to_string()),
                ),
            });
        }
        if meta.len() == 0 {
            return Ok(Source::Empty);
        }
        // SAFETY: the mapping stays valid for as long as this value lives. Another
        // process truncating the file while it is mapped would fault on access (the
        // same hazard torch's mmap load has); we never write through a read-only or
        // private map to the file, and a shared map is only made when the caller
        // asked for writes to reach the file.
        let source = unsafe {
            match mode {
                MapMode::ReadOnly => Source::ReadOnly {
                    map: Mmap::map(&file).map_err(|e| describe("map", e))?,
                    file,
                },
                MapMode::Private => Source::Writable {
                    map: MmapOptions::new()
                        .map_copy(&file)
                        .map_err(|e| describe("map", e))?,
                    file: Some(file),
                },
                MapMode::Shared => {
                    let map = MmapMut::map_mut(&file).map_err(|e| describe("map", e))?;
                    Source::Writable {
                        map,
                        file: Some(file),
                    }
                }
            }
        };
        Ok(source)
    }

    /// A read-only map of a file someone else opened (a Python file object's
    /// descriptor, duplicated): a regular file, or an error naming what it is.
    pub fn open_file(file: File) -> Result<Source, Error> {
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot stat the file object's file".to_owned(), e))?;
        if !meta.is_file() {
            return Err(Error::io(
                "cannot map the file object's file".to_owned(),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        if meta.len() == 0 {
            return Ok(Source::Empty);
        }
        Source::map_file(file)
            .map_err(|e| Error::io("cannot map the file object's file".to_owned(), e))
    }

    /// A read-only map of an open regular file (not empty).
    pub fn map_file(file: File) -> std::io::Result<Source> {
        // SAFETY: as in `open`: the map lives as long as the value, and a truncation
        // by another process would fault on access, as any mmap load would.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Source::ReadOnly { map, file })
    }

    /// `len` bytes of fresh anonymous memory (zeroed by the kernel as it is touched).
    pub fn anonymous(len: usize) -> std::io::Result<Source> {
        Ok(Source::Writable {
            map: MmapMut::map_anon(len)?,
            file: None,
        })
    }

    pub fn from_vec(bytes: Vec<u8>) -> Source {
        Source::Owned(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::ReadOnly { map, .. } => map,
            Source::Writable { map, .. } => map,
            Source::Owned(v) => v,
            Source::Held(held) => held.bytes(),
            Source::Empty => &[],
        }
    }

    /// Whether tensors may be handed out as writable views of these bytes.
    pub fn is_writable(&self) -> bool {
        matches!(self, Source::Writable { .. })
    }

    /// Start of a writable mapping, for the buffer protocol in the bindings.
    pub fn writable_ptr(&mut self) -> Option<*mut u8> {
        match self {
            Source::Writable { map, .. } => Some(map.as_mut_ptr()),
            _ => None,
        }
    }

    /// Hint that the mapped range will be read soon, so the kernel reads ahead.
    pub fn will_need(&self, offset: usize, len: usize) {
        if let Source::ReadOnly { map, .. } = self {
            let _ = map.advise_range(memmap2::Advice::WillNeed, offset, len);
        }
    }

    /// Drop the pages of a read-only map from this process's resident set; they
    /// stay in the page cache and come back on the next access.
    pub fn release_pages(&self) {
        if let Source::Held(held) = self {
            held.release_pages();
        }
        if let Source::ReadOnly { map, .. } = self {
            // SAFETY: the map is read-only and never written, so discarding its
            // pages loses nothing: the next access faults the file's bytes back in.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// `len` bytes at `offset` read from the file, without touching the map (whose
    /// faults would bring whole page-cache folios into this process); `None` without
    /// a file, or past its end.
    pub fn read_file_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let file = match self {
            Source::Held(held) => return held.read_file_at(offset, len),
            Source::ReadOnly { file, .. }
            | Source::Writable {
                file: Some(file), ..
            } => file,
            _ => return None,
        };
        let end = offset.checked_add(len as u64)?;
        if end > self.bytes().len() as u64 {
            return None;
        }
        read_exact_at(file, offset, len)
    }

    /// Copy `dst.len()` bytes from `offset` into `dst`: from the file with `pread`
    /// when there is one (the kernel copies out of its page cache, and nothing is
    /// mapped into this process), else from the bytes in memory. `None` when the
    /// range lies outside the source.
    pub fn read_into(&self, offset: u64, dst: &mut [u8]) -> Option<std::io::Result<()>> {
        let end = offset.checked_add(dst.len() as u64)?;
        if end > self.bytes().len() as u64 {
            return None;
        }
        #[cfg(unix)]
        if let Source::ReadOnly { file, .. } = self {
            use std::os::unix::fs::FileExt;
            return Some(file.read_exact_at(dst, offset));
        }
        let start = usize::try_from(offset).ok()?;
        dst.copy_from_slice(self.bytes().get(start..start.checked_add(dst.len())?)?);
        Some(Ok(()))
    }
}

/// The source as a zip is read: `pread` copies where there is a file.
impl crate::archive::zip::FileBytes for Source {
    fn len(&self) -> usize {
        self.bytes().len()
    }

    fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        self.bytes().get(range)
    }

    fn whole(&self) -> Option<&[u8]> {
        Some(self.bytes())
    }

    fn copy_into(&self, offset: u64, dst: &mut [u8]) -> Option<std::io::Result<()>> {
        self.read_into(offset, dst)
    }
}
