//! The bytes of a checkpoint: a memory map of the file, or a buffer read from a
//! file object. Mapping is the one place the core needs `unsafe`.

#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::Path;

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::Error;

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

pub enum Source {
    ReadOnly(Mmap),
    Writable(MmapMut),
    Owned(Vec<u8>),
    Empty,
}

impl Source {
    pub fn open(path: &Path, mode: MapMode) -> Result<Source, Error> {
        let describe = |what: &str, e: std::io::Error| {
            Error::io(format!("cannot {what} {}", path.display()), e)
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
                MapMode::ReadOnly => {
                    Source::ReadOnly(Mmap::map(&file).map_err(|e| describe("map", e))?)
                }
                MapMode::Private => Source::Writable(
                    MmapOptions::new()
                        .map_copy(&file)
                        .map_err(|e| describe("map", e))?,
                ),
                MapMode::Shared => {
                    Source::Writable(MmapMut::map_mut(&file).map_err(|e| describe("map", e))?)
                }
            }
        };
        Ok(source)
    }

    pub fn from_vec(bytes: Vec<u8>) -> Source {
        Source::Owned(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::ReadOnly(m) => m,
            Source::Writable(m) => m,
            Source::Owned(v) => v,
            Source::Empty => &[],
        }
    }

    /// Whether tensors may be handed out as writable views of these bytes.
    pub fn is_writable(&self) -> bool {
        matches!(self, Source::Writable(_))
    }

    /// Start of a writable mapping, for the buffer protocol in the bindings.
    pub fn writable_ptr(&mut self) -> Option<*mut u8> {
        match self {
            Source::Writable(m) => Some(m.as_mut_ptr()),
            _ => None,
        }
    }

    /// Hint that the mapped range will be read soon, so the kernel reads ahead.
    pub fn will_need(&self, offset: usize, len: usize) {
        if let Source::ReadOnly(m) = self {
            let _ = m.advise_range(memmap2::Advice::WillNeed, offset, len);
        }
    }
}
