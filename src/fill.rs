//! Copying storages out of the file into memory the caller owns, on several
//! threads: page faults on fresh memory dominate an eager load, and they
//! parallelise. Big stored storages are split into chunks so one huge tensor
//! still uses every thread. A [`FreshPages`] hook sees each chunk just before
//! its first write and after it: where the bindings ask for huge pages.

use std::time::{Duration, Instant};

use crate::checkpoint::{Checkpoint, StorageData};
use crate::error::Error;
use crate::parallel::run_by_size;
use crate::torch::StorageId;

/// Chunk size for splitting stored storages; a multiple of every swap unit.
const CHUNK: usize = 8 << 20;

/// One storage and the memory it is copied into (exactly its size).
pub struct FillJob<'a> {
    pub storage: StorageId,
    pub dst: &'a mut [u8],
}

/// Where a chunk of fresh memory lies: `len` bytes at `offset` into a
/// destination of `total` bytes that starts at address `base`.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub base: usize,
    pub total: usize,
    pub offset: usize,
    pub len: usize,
}

/// Told about each chunk of fresh memory just before the first write to it,
/// and, when it prepared the chunk, how long the write took.
pub trait FreshPages: Sync {
    /// Whether it did anything to the chunk, and wants to hear how the write went.
    fn before_first_write(&self, region: Region) -> bool;
    fn written(&self, region: Region, took: Duration);
}

struct Piece<'a> {
    storage: StorageId,
    start: usize,
    dst: &'a mut [u8],
    whole: bool,
    base: usize,
    total: usize,
}

/// Fill every job's destination, using up to `threads` threads.
pub fn fill(
    checkpoint: &Checkpoint,
    jobs: Vec<FillJob<'_>>,
    threads: usize,
    pages: &dyn FreshPages,
) -> Result<(), Error> {
    let mut pieces = Vec::new();
    for job in jobs {
        let (base, total) = (job.dst.as_ptr() as usize, job.dst.len());
        let stored = matches!(
            checkpoint.storage(job.storage).map(|s| &s.data),
            Some(StorageData::Stored { .. })
        );
        if !stored || job.dst.len() <= CHUNK {
            pieces.push(Piece {
                storage: job.storage,
                start: 0,
                whole: true,
                dst: job.dst,
                base,
                total,
            });
            continue;
        }
        let mut start = 0;
        for dst in job.dst.chunks_mut(CHUNK) {
            let len = dst.len();
            pieces.push(Piece {
                storage: job.storage,
                start,
                whole: false,
                dst,
                base,
                total,
            });
            start += len;
        }
    }
    run_by_size(
        pieces,
        threads,
        |piece| piece.dst.len(),
        |piece| copy_piece(checkpoint, piece, pages),
    )
}

fn copy_piece(
    checkpoint: &Checkpoint,
    piece: Piece<'_>,
    pages: &dyn FreshPages,
) -> Result<(), Error> {
    let region = Region {
        base: piece.base,
        total: piece.total,
        offset: piece.start,
        len: piece.dst.len(),
    };
    // Timed only when prepared: 50,000 tiny storages would read the clock 100,000 times.
    let started = pages.before_first_write(region).then(Instant::now);
    let copied = if piece.whole {
        checkpoint.read_storage(piece.storage, piece.dst)
    } else {
        checkpoint.read_stored_chunk(piece.storage, piece.start, piece.dst)
    };
    if let Some(started) = started {
        pages.written(region, started.elapsed());
    }
    copied
}
