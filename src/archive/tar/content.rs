//! The bytes a member hands out, both ways tarfile hands them out:
//! `extractfile(m).read()` (`_FileInFile`, which replays a sparse map by
//! looking up each position) and `extract(m)` (`makefile`, which copies the
//! data blocks in order to each sparse offset of the file it writes).

use std::borrow::Cow;

use super::number::clamp;
use super::{Failure, Member, PyException};

/// `copyfileobj`'s default buffer: a negative count copies its remainder.
const COPY_BUFFER: i128 = 16 * 1024;

/// Map lookups one sparse read may make: a map whose pieces are in order
/// needs one or two per piece; only a map tangled on purpose needs more.
const MAX_SPARSE_LOOKUPS: u64 = 1 << 24;

const SSIZE_MAX: i128 = i64::MAX as i128;

/// What a member hands out: its bytes, or those read before `failure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content<'d> {
    pub bytes: Cow<'d, [u8]>,
    pub failure: Option<Failure>,
}

impl<'d> Content<'d> {
    fn whole(bytes: impl Into<Cow<'d, [u8]>>) -> Self {
        Content {
            bytes: bytes.into(),
            failure: None,
        }
    }

    fn failed(bytes: impl Into<Cow<'d, [u8]>>, failure: Failure) -> Self {
        Content {
            bytes: bytes.into(),
            failure: Some(failure),
        }
    }
}

const SHORT: Failure = Failure::ReadError("unexpected end of data");

fn too_large() -> Failure {
    Failure::Limit("a sparse member larger than the bytes the reading may make")
}

/// `data[at..at + len]`, as much of it as there is.
fn slice(data: &[u8], at: i128, len: i128) -> &[u8] {
    let Ok(start) = usize::try_from(at) else {
        return &[];
    };
    let end = usize::try_from(clamp(at + len)).unwrap_or(usize::MAX);
    data.get(start.min(data.len())..end.min(data.len()))
        .unwrap_or_default()
}

pub fn file_content<'d>(member: &Member, data: &'d [u8], max_len: u64) -> Content<'d> {
    let size = member.size;
    let start = i128::from(member.offset_data);
    if size <= 0 {
        return Content::whole(&[][..]);
    }
    let Some(map) = &member.sparse else {
        if size > SSIZE_MAX {
            return Content::failed(&[][..], Failure::Raises(PyException::OverflowError));
        }
        let bytes = slice(data, start, size);
        return if (bytes.len() as i128) < size {
            Content::failed(bytes, SHORT)
        } else {
            Content::whole(bytes)
        };
    };
    if size > i128::from(max_len) {
        return Content::failed(Vec::new(), too_large());
    }
    replay_lookups(&FileMap::new(map, start, size), data, size)
}

/// One piece of `_FileInFile.map`: a stretch of the file, from the archive at
/// `real` or a hole of zeros.
struct Piece {
    start: i128,
    stop: i128,
    real: Option<i128>,
}

struct FileMap {
    pieces: Vec<Piece>,
}

impl FileMap {
    fn new(sparse: &[(i128, i128)], offset_data: i128, size: i128) -> FileMap {
        let mut pieces = Vec::with_capacity(sparse.len() * 2 + 1);
        let (mut last, mut real) = (0i128, offset_data);
        for &(offset, numbytes) in sparse {
            if offset > last {
                pieces.push(Piece {
                    start: last,
                    stop: offset,
                    real: None,
                });
            }
            let stop = clamp(offset + numbytes);
            pieces.push(Piece {
                start: offset,
                stop,
                real: Some(real),
            });
            real = clamp(real + numbytes);
            last = stop;
        }
        if last < size {
            pieces.push(Piece {
                start: last,
                stop: size,
                real: None,
            });
        }
        FileMap { pieces }
    }
}

/// `_FileInFile.read()`: for each position, the first piece holding it from
/// the last one used on, wrapping around. Every position below the size is in
/// some piece, so the lookup ends.
fn replay_lookups<'d>(map: &FileMap, data: &'d [u8], size: i128) -> Content<'d> {
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let (mut position, mut index, mut lookups) = (0i128, 0usize, 0u64);
    while position < size {
        let piece = loop {
            lookups += 1;
            if lookups > MAX_SPARSE_LOOKUPS {
                return Content::failed(out, Failure::Limit("a sparse map too tangled to replay"));
            }
            match map.pieces.get(index) {
                Some(p) if p.start <= position && position < p.stop => break p,
                Some(_) => index = (index + 1) % map.pieces.len(),
                None => return Content::failed(out, Failure::Limit("an empty sparse map")),
            }
        };
        let length = (size - position).min(piece.stop - position);
        match piece.real {
            Some(real) => {
                let at = real + (position - piece.start);
                if let Some(failure) = seek_failure(at) {
                    return Content::failed(out, failure);
                }
                let bytes = slice(data, at, length);
                out.extend_from_slice(bytes);
                if (bytes.len() as i128) < length {
                    return Content::failed(out, SHORT);
                }
            }
            None => out.resize(out.len() + usize::try_from(length).unwrap_or(0), 0),
        }
        position += length;
    }
    Content::whole(out)
}

/// What `BytesIO.seek(at)` raises.
fn seek_failure(at: i128) -> Option<Failure> {
    if at > SSIZE_MAX || at < i128::from(i64::MIN) {
        Some(Failure::Raises(PyException::OverflowError))
    } else if at < 0 {
        Some(Failure::Raises(PyException::ValueError))
    } else {
        None
    }
}

/// How many bytes `copyfileobj(src, dst, count)` copies: a negative count's
/// whole buffers are none, but its remainder (Python's modulo) is copied.
fn copied(count: i128) -> i128 {
    if count >= 0 {
        count
    } else {
        count.rem_euclid(COPY_BUFFER)
    }
}

pub fn extracted_content<'d>(member: &Member, data: &'d [u8], max_len: u64) -> Content<'d> {
    let start = i128::from(member.offset_data);
    let Some(map) = &member.sparse else {
        let count = copied(member.size);
        let bytes = slice(data, start, count);
        return if (bytes.len() as i128) < count {
            Content::failed(bytes, SHORT)
        } else {
            Content::whole(bytes)
        };
    };
    let max_len = i128::from(max_len);
    let mut file: Vec<u8> = Vec::new();
    let mut source = start;
    for &(offset, numbytes) in map {
        // The file written is a real file: a seek before its start is an OSError.
        if offset < 0 {
            return Content::failed(file, Failure::Raises(PyException::OsError));
        }
        let count = copied(numbytes);
        if offset + count > max_len {
            return Content::failed(file, too_large());
        }
        let bytes = slice(data, source, count);
        // Whole buffers are written before a short one raises.
        let written = if (bytes.len() as i128) < count {
            bytes.len() - bytes.len() % COPY_BUFFER as usize
        } else {
            bytes.len()
        };
        let at = usize::try_from(offset).unwrap_or(0);
        if file.len() < at + written {
            file.resize(at + written, 0);
        }
        if let (Some(target), Some(bytes)) = (file.get_mut(at..at + written), bytes.get(..written))
        {
            target.copy_from_slice(bytes);
        }
        if (bytes.len() as i128) < count {
            return Content::failed(file, SHORT);
        }
        source += count;
    }
    let size = member.size;
    if size < 0 {
        return Content::failed(file, Failure::Raises(PyException::OsError));
    }
    if size > max_len {
        return Content::failed(file, too_large());
    }
    file.resize(usize::try_from(size).unwrap_or(0), 0);
    Content::whole(file)
}
