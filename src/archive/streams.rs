//! Whole-file compression formats, decoded as the Python modules that open them
//! decode them (every member or stream, one after another), into at most `cap`
//! bytes: joblib, pandas and numpy read pickles through gzip, bz2, lzma and zlib,
//! so a scan must read through them too.

use std::io::{self, Read, Write};

use miniz_oxide::inflate::core::{decompress, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

/// A compression format a whole file may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    Bzip2,
    Xz,
    /// The `.lzma` format of LZMA Utils (`lzma.FORMAT_ALONE`).
    LzmaAlone,
    /// A zlib stream (joblib's and pandas' `compress="zlib"`).
    Zlib,
    Zstd,
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// It decodes to more than the cap.
    TooLarge(u64),
    Corrupt(String),
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::TooLarge(cap) => write!(f, "decompresses to more than {cap} bytes"),
            StreamError::Corrupt(why) => f.write_str(why),
        }
    }
}

const GZIP_MAGIC: &[u8] = b"\x1f\x8b";
const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";
const ZSTD_MAGIC: &[u8] = b"\x28\xb5\x2f\xfd";

impl Compression {
    /// The format `data` starts with, by its magic number (for zlib and LZMA-alone,
    /// whose headers have none, by a header that is valid).
    pub fn of(data: &[u8]) -> Option<Compression> {
        if data.starts_with(GZIP_MAGIC) && data.get(2) == Some(&8) {
            Some(Compression::Gzip)
        } else if data.starts_with(b"BZh") && data.get(3).is_some_and(|b| (b'1'..=b'9').contains(b))
        {
            Some(Compression::Bzip2)
        } else if data.starts_with(XZ_MAGIC) {
            Some(Compression::Xz)
        } else if data.starts_with(ZSTD_MAGIC) || is_zstd_skippable(data) {
            Some(Compression::Zstd)
        } else if is_zlib_header(data) {
            Some(Compression::Zlib)
        } else if is_lzma_alone_header(data) {
            Some(Compression::LzmaAlone)
        } else {
            None
        }
    }

    /// The format [`Compression::name`] names.
    pub fn named(name: &str) -> Option<Compression> {
        use Compression::*;
        [Gzip, Bzip2, Xz, LzmaAlone, Zlib, Zstd]
            .into_iter()
            .find(|c| c.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Xz => "xz",
            Compression::LzmaAlone => "lzma",
            Compression::Zlib => "zlib",
            Compression::Zstd => "zstd",
        }
    }

    /// Decode all of `data` into at most `cap` bytes.
    pub fn decode(self, data: &[u8], cap: u64) -> Result<Vec<u8>, StreamError> {
        let (out, end) = self.decode_prefix(data, cap);
        end.map(|()| out)
    }

    /// What decodes before the stream breaks, if it does, and why it broke: a
    /// streaming reader (tarfile, pandas' and joblib's file objects) has handed
    /// those bytes out by then, and a pickle among them has run.
    pub fn decode_prefix(self, data: &[u8], cap: u64) -> (Vec<u8>, Result<(), StreamError>) {
        let mut out = Capped::new(cap);
        let end = self.decode_into(data, &mut out);
        (out.into_inner(), end)
    }

    fn decode_into(self, data: &[u8], out: &mut Capped) -> Result<(), StreamError> {
        match self {
            Compression::Gzip => gunzip(data, out)?,
            Compression::Zlib => {
                let body = data.get(2..).unwrap_or_default();
                let used = inflate_into(body, out)?;
                // The Adler-32 trailer: zlib.decompress checks it, after the data
                // it returned to a stream reader; its absence is no hiding place.
                let rest = body.get(used..).unwrap_or_default();
                if rest.len() > 4 {
                    return Err(corrupt("bytes follow the zlib stream"));
                }
            }
            Compression::Bzip2 => {
                let mut decoder = bzip2::read::MultiBzDecoder::new(data);
                copy(&mut decoder, out)?;
            }
            Compression::Xz => {
                let mut input = data;
                // Python's lzma reads concatenated streams, padded with zeros.
                while !input.is_empty() {
                    let mut reader = io::BufReader::new(&mut input);
                    lzma_rs::xz_decompress(&mut reader, out).map_err(lzma_error)?;
                    let leftover = reader.buffer().len();
                    let consumed = data.len() - input.len() - leftover;
                    input = data.get(consumed..).unwrap_or_default();
                    let padding = input.iter().take_while(|b| **b == 0).count();
                    input = input.get(padding..).unwrap_or_default();
                    if !input.is_empty() && !input.starts_with(XZ_MAGIC) {
                        return Err(corrupt("bytes follow the xz stream"));
                    }
                }
            }
            Compression::LzmaAlone => {
                let mut reader = io::BufReader::new(data);
                let options = lzma_rs::decompress::Options {
                    memlimit: Some(usize::try_from(out.cap).unwrap_or(usize::MAX).max(1 << 12)),
                    ..Default::default()
                };
                lzma_rs::lzma_decompress_with_options(&mut reader, out, &options)
                    .map_err(lzma_error)?;
            }
            Compression::Zstd => unzstd_into(data, out)?,
        }
        Ok(())
    }
}

fn corrupt(why: &str) -> StreamError {
    StreamError::Corrupt(why.to_owned())
}

fn lzma_error(e: lzma_rs::error::Error) -> StreamError {
    match e {
        lzma_rs::error::Error::IoError(io) if io.kind() == io::ErrorKind::WriteZero => {
            StreamError::TooLarge(0)
        }
        other => StreamError::Corrupt(format!("corrupt LZMA stream ({other})")),
    }
}

/// zlib's two header bytes: DEFLATE with a window of at most 32 KiB, no preset
/// dictionary, and the check bits right.
fn is_zlib_header(data: &[u8]) -> bool {
    match data {
        [cmf, flg, ..] => {
            cmf & 0x0f == 8
                && cmf >> 4 <= 7
                && flg & 0x20 == 0
                && (u16::from(*cmf) * 256 + u16::from(*flg)) % 31 == 0
        }
        _ => false,
    }
}

/// The 13-byte header of LZMA-alone: lc/lp/pb in range, a dictionary of at least
/// 4 KiB, and an uncompressed size that is -1 (unknown) or plausible. A pickle
/// may start the same way (`]` is a valid properties byte): a caller that fails
/// to decode it reads it as a pickle instead.
fn is_lzma_alone_header(data: &[u8]) -> bool {
    let (Some(&props), Some(dict), Some(size)) = (data.first(), data.get(1..5), data.get(5..13))
    else {
        return false;
    };
    let dict = dict.try_into().map_or(0, u32::from_le_bytes);
    let size = size.try_into().map_or(0, u64::from_le_bytes);
    props < 225 && dict >= 1 << 12 && (size == u64::MAX || size < 1 << 48)
}

fn is_zstd_skippable(data: &[u8]) -> bool {
    data.get(..4).is_some_and(|m| {
        m.get(1..4) == Some(b"\x2a\x4d\x18") && m.first().is_some_and(|b| b & 0xf0 == 0x50)
    })
}

/// The rest of the data after a zstd skippable frame.
fn skip_zstd_frame(data: &[u8]) -> Result<&[u8], StreamError> {
    let len = data
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .map(|b| u32::from_le_bytes(b) as usize)
        .ok_or_else(|| corrupt("truncated zstd skippable frame"))?;
    data.get(8usize.saturating_add(len)..)
        .ok_or_else(|| corrupt("truncated zstd skippable frame"))
}

/// gzip's members, one after another, as Python's gzip module reads them; zeros
/// may pad the end.
fn gunzip(data: &[u8], out: &mut Capped) -> Result<(), StreamError> {
    let mut rest = data;
    loop {
        let body = gzip_header(rest)?;
        let used = inflate_into(body, out)?;
        // CRC-32 and size follow; Python checks them only after it has handed
        // the data out, so a wrong one hides nothing.
        rest = body.get(used.saturating_add(8)..).unwrap_or_default();
        let padding = rest.iter().take_while(|b| **b == 0).count();
        if padding == rest.len() {
            return Ok(());
        }
        if !rest.starts_with(GZIP_MAGIC) {
            return Err(corrupt("bytes follow the gzip member"));
        }
    }
}

/// The DEFLATE body of a gzip member, after its header.
fn gzip_header(member: &[u8]) -> Result<&[u8], StreamError> {
    const FHCRC: u8 = 0x02;
    const FEXTRA: u8 = 0x04;
    const FNAME: u8 = 0x08;
    const FCOMMENT: u8 = 0x10;
    let truncated = || corrupt("truncated gzip header");
    if !member.starts_with(GZIP_MAGIC) || member.get(2) != Some(&8) {
        return Err(corrupt("not a gzip member"));
    }
    let flags = *member.get(3).ok_or_else(truncated)?;
    let mut at = 10usize;
    if flags & FEXTRA != 0 {
        let len = member.get(at..at + 2).and_then(|b| b.try_into().ok());
        at += 2 + usize::from(u16::from_le_bytes(len.ok_or_else(truncated)?));
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let text = member.get(at..).ok_or_else(truncated)?;
            at += text.iter().position(|b| *b == 0).ok_or_else(truncated)? + 1;
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    member.get(at..).ok_or_else(truncated)
}

/// Inflate one raw DEFLATE stream from the start of `data` into `out`; how many
/// bytes of `data` it took.
pub(crate) fn inflate_into(data: &[u8], out: &mut Capped) -> Result<usize, StreamError> {
    const WINDOW: usize = 1 << 15;
    let mut state = Box::<DecompressorOxide>::default();
    let mut window = vec![0u8; WINDOW];
    let (mut consumed, mut at) = (0usize, 0usize);
    loop {
        let input = data.get(consumed..).unwrap_or_default();
        let (status, read, written) = decompress(&mut state, input, &mut window, at, 0);
        consumed += read;
        let produced = window.get(at..at + written).unwrap_or_default();
        out.write_all(produced)
            .map_err(|_| StreamError::TooLarge(out.cap))?;
        at = (at + written) % WINDOW;
        match status {
            TINFLStatus::Done => return Ok(consumed),
            TINFLStatus::HasMoreOutput => continue,
            other => {
                return Err(StreamError::Corrupt(format!(
                    "corrupt deflate stream ({other:?})"
                )))
            }
        }
    }
}

/// zstd frames one after another, skippable frames passed over, from all of
/// `data` into `out`: a `.zst` file as zstandard reads it, and the Zstandard
/// stream of a 7z folder.
pub(crate) fn unzstd_into(data: &[u8], out: &mut Capped) -> Result<(), StreamError> {
    let mut input = data;
    while !input.is_empty() {
        if is_zstd_skippable(input) {
            input = skip_zstd_frame(input)?;
            continue;
        }
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(&mut input)
            .map_err(|e| corrupt(&format!("corrupt zstd frame ({e})")))?;
        copy(&mut decoder, out)?;
    }
    Ok(())
}

fn copy(reader: &mut dyn Read, out: &mut Capped) -> Result<(), StreamError> {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StreamError::Corrupt(format!("corrupt stream ({e})"))),
        };
        out.write_all(buf.get(..n).unwrap_or_default())
            .map_err(|_| StreamError::TooLarge(out.cap))?;
    }
}

/// A buffer that refuses to grow past `cap` bytes.
pub struct Capped {
    out: Vec<u8>,
    cap: u64,
}

impl Capped {
    pub fn new(cap: u64) -> Capped {
        Capped {
            out: Vec::new(),
            cap,
        }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.out
    }
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.out.len() as u64);
        if buf.len() as u64 > room {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "over the cap"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_known_by_their_headers() {
        assert_eq!(
            Compression::of(b"\x1f\x8b\x08\x00"),
            Some(Compression::Gzip)
        );
        assert_eq!(Compression::of(b"BZh91AY"), Some(Compression::Bzip2));
        assert_eq!(Compression::of(b"\xfd7zXZ\x00\x00"), Some(Compression::Xz));
        assert_eq!(Compression::of(b"\x78\x9c\x03"), Some(Compression::Zlib));
        assert_eq!(
            Compression::of(b"\x28\xb5\x2f\xfd"),
            Some(Compression::Zstd)
        );
        let mut alone = vec![0x5d, 0, 0, 0x10, 0];
        alone.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Compression::of(&alone), Some(Compression::LzmaAlone));
        for pickle in [&b"\x80\x02}q\x00."[..], b"]q\x00.", b"(lp0\n.", b"N."] {
            assert_eq!(Compression::of(pickle), None, "{pickle:?}");
        }
    }

    #[test]
    fn deflate_streams_decode_within_the_cap() {
        // "hello hello hello" as a zlib stream.
        let zlib = b"\x78\x9c\xcbH\xcd\xc9\xc9W\xc8@\x90\x00\x9d\x9b\x06C";
        assert_eq!(
            Compression::Zlib.decode(zlib, 100).unwrap(),
            b"hello hello hello"
        );
        assert!(matches!(
            Compression::Zlib.decode(zlib, 5),
            Err(StreamError::TooLarge(_))
        ));
    }
}
