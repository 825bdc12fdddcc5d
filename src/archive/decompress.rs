//! Every compression method a zip entry may use here (stored, DEFLATE, bzip2 and
//! LZMA, as TensorDict's `.tdz` archives are written), decoded straight into a
//! buffer of the size the caller expects. No decoder can write past that buffer,
//! and an entry that decodes to more or fewer bytes is an error: a bomb ends in a
//! clear refusal, never in memory exhaustion.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::archive::inflate::{check_ratio, inflate_exact};
use crate::archive::method::Method;
use crate::error::{Error, Location};
use crate::parallel::run_by_size;

/// General-purpose flag bit 1 of an LZMA entry: the stream ends with an end marker
/// (Python's zipfile and 7-Zip write one), so its excess can be detected.
pub const FLAG_LZMA_END_MARKER: u16 = 0x0002;

/// Whether [`decompress_exact`] can decode entries of this method.
pub fn is_supported(method: Method) -> bool {
    !matches!(method, Method::Other(_))
}

/// Checks that need only the sizes, before anything is allocated: the method is
/// known, and a DEFLATE entry does not claim more than DEFLATE can produce.
pub fn check_entry(
    method: Method,
    compressed: u64,
    expected: u64,
    entry: &str,
) -> Result<(), Error> {
    match method {
        Method::Stored if compressed != expected => Err(Error::archive(
            format!("a stored entry of {compressed} bytes cannot hold {expected} bytes"),
            Location::entry(entry),
        )),
        Method::Deflate => check_ratio(compressed, expected, entry),
        Method::Stored | Method::Bzip2 | Method::Lzma => Ok(()),
        Method::Other(_) => Err(unsupported(method, entry)),
    }
}

/// The refusal of a method nothing here decodes.
pub fn unsupported(method: Method, entry: &str) -> Error {
    Error::unsupported(method.to_string(), Location::entry(entry))
}

/// Decode `compressed` (the raw payload of a zip entry using `method`, with the
/// entry's general-purpose `flags`) into `out`, which must come out exactly full.
pub fn decompress_exact(
    method: Method,
    flags: u16,
    compressed: &[u8],
    out: &mut [u8],
    entry: &str,
) -> Result<(), Error> {
    check_entry(method, compressed.len() as u64, out.len() as u64, entry)?;
    match method {
        Method::Stored => {
            out.copy_from_slice(compressed);
            Ok(())
        }
        Method::Deflate => inflate_exact(compressed, out, entry),
        // Third-party decoders: a panic on crafted input becomes an error.
        Method::Bzip2 => guarded(entry, || bunzip_exact(compressed, out, entry)),
        Method::Lzma => guarded(entry, || {
            let marker = flags & FLAG_LZMA_END_MARKER != 0;
            unlzma_exact(compressed, marker, out, entry)
        }),
        Method::Other(_) => Err(unsupported(method, entry)),
    }
}

fn guarded(entry: &str, run: impl FnOnce() -> Result<(), Error>) -> Result<(), Error> {
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
        Err(Error::archive(
            "the decoder failed on a corrupt stream",
            Location::entry(entry),
        ))
    })
}

fn too_long(out: &[u8], entry: &str) -> Error {
    Error::archive(
        format!("decompresses to more than the {} bytes expected", out.len()),
        Location::entry(entry),
    )
}

fn too_short(produced: u64, out: &[u8], entry: &str) -> Error {
    Error::archive(
        format!(
            "decompresses to {produced} bytes, but {} are expected",
            out.len()
        ),
        Location::entry(entry),
    )
}

/// One bzip2 stream. Once `out` is full, a one-byte probe tells a stream that
/// ends there from one that would go on.
fn bunzip_exact(compressed: &[u8], out: &mut [u8], entry: &str) -> Result<(), Error> {
    let corrupt = |e: bzip2::Error| {
        Error::archive(
            format!("corrupt bzip2 stream ({e})"),
            Location::entry(entry),
        )
    };
    let mut decoder = bzip2::Decompress::new(false);
    let mut probe = [0u8; 1];
    loop {
        let (read, written) = (decoder.total_in(), decoder.total_out());
        let input = usize::try_from(read)
            .ok()
            .and_then(|r| compressed.get(r..))
            .unwrap_or_default();
        let at = usize::try_from(written).unwrap_or(usize::MAX);
        let full = at >= out.len();
        let dst = if full {
            probe.as_mut_slice()
        } else {
            out.get_mut(at..).unwrap_or_default()
        };
        let status = decoder.decompress(input, dst).map_err(corrupt)?;
        let produced = decoder.total_out().saturating_sub(written);
        if full && produced > 0 {
            return Err(too_long(out, entry));
        }
        if status == bzip2::Status::StreamEnd {
            break;
        }
        if produced == 0 && decoder.total_in() == read {
            return Err(if full {
                Error::archive("the bzip2 stream has no end marker", Location::entry(entry))
            } else {
                too_short(written, out, entry)
            });
        }
    }
    match decoder.total_out() {
        n if n == out.len() as u64 => Ok(()),
        n => Err(too_short(n, out, entry)),
    }
}

/// ZIP's LZMA framing: a 2-byte encoder version, a 2-byte properties length (5),
/// the properties (lc/lp/pb and the dictionary size), then the raw stream. A
/// stream with an end marker is decoded to its marker, and must produce exactly
/// `out`; one without is decoded to exactly `out.len()` bytes. Output never goes
/// past `out`, and the dictionary buffer may not grow past its size, so a bomb
/// cannot make anything large.
fn unlzma_exact(compressed: &[u8], marker: bool, out: &mut [u8], entry: &str) -> Result<(), Error> {
    let fail = |reason: String| Error::archive(reason, Location::entry(entry));
    let props_len = compressed
        .get(2..4)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_le_bytes);
    if props_len != Some(5) {
        return Err(fail("bad LZMA header: properties must be 5 bytes".into()));
    }
    let (props, stream) = match (compressed.get(4..9), compressed.get(9..)) {
        (Some(p), Some(s)) => (p, s),
        _ => return Err(fail("truncated LZMA header".into())),
    };
    let expected = out.len() as u64;
    let options = lzma_rs::decompress::Options {
        unpacked_size: lzma_rs::decompress::UnpackedSize::UseProvided(if marker {
            None
        } else {
            Some(expected)
        }),
        memlimit: Some(out.len().max(1 << 12)),
        allow_incomplete: false,
    };
    let mut input = std::io::Read::chain(props, stream);
    let mut sink: &mut [u8] = out;
    lzma_rs::lzma_decompress_with_options(&mut input, &mut sink, &options).map_err(
        |e| match e {
            lzma_rs::error::Error::IoError(io) if io.kind() == std::io::ErrorKind::WriteZero => {
                fail(format!(
                    "decompresses to more than the {expected} bytes expected"
                ))
            }
            lzma_rs::error::Error::LzmaError(text) if text.contains("memory limit") => fail(
                format!("decompresses to more than the {expected} bytes expected"),
            ),
            other => fail(format!("corrupt LZMA stream ({other})")),
        },
    )?;
    if !sink.is_empty() {
        return Err(fail(format!(
            "decompresses to {} bytes, but {expected} are expected",
            expected.saturating_sub(sink.len() as u64)
        )));
    }
    Ok(())
}

/// One entry to decode: its method and flags, raw payload and the buffer it must fill.
pub struct Job<'a> {
    pub method: Method,
    pub flags: u16,
    pub compressed: &'a [u8],
    pub out: &'a mut [u8],
    pub entry: String,
}

impl Job<'_> {
    fn run(self) -> Result<(), Error> {
        decompress_exact(
            self.method,
            self.flags,
            self.compressed,
            self.out,
            &self.entry,
        )
    }
}

/// Decode every job on up to `threads` threads (one after the other for 0 or 1).
/// The first failing job, in the order given, is the error reported.
pub fn decompress_all(jobs: Vec<Job<'_>>, threads: usize) -> Result<(), Error> {
    run_by_size(jobs, threads, |job| job.out.len(), Job::run)
}

#[cfg(test)]
mod tests {
    use super::*;

    // "hello hello hello" deflated by zlib (raw, no header).
    const HELLO_DEFLATE: &[u8] = &[203, 72, 205, 201, 201, 87, 200, 64, 144, 0];

    fn bzip2_of(data: &[u8]) -> Vec<u8> {
        let mut c = bzip2::Compress::new(bzip2::Compression::best(), 0);
        let mut out = Vec::with_capacity(data.len() + 1024);
        c.compress_vec(data, &mut out, bzip2::Action::Finish)
            .unwrap();
        out
    }

    fn lzma_zip_of(data: &[u8]) -> Vec<u8> {
        let mut raw = Vec::new();
        let options = lzma_rs::compress::Options {
            unpacked_size: lzma_rs::compress::UnpackedSize::SkipWritingToHeader,
        };
        lzma_rs::lzma_compress_with_options(&mut &data[..], &mut raw, &options).unwrap();
        // raw = 5 property bytes + stream (with an end marker)
        let mut framed = vec![9, 4, 5, 0];
        framed.extend_from_slice(&raw);
        framed
    }

    #[test]
    fn every_method_decodes_exactly() {
        let text = b"hello hello hello";
        for (method, payload) in [
            (Method::Stored, text.to_vec()),
            (Method::Deflate, HELLO_DEFLATE.to_vec()),
            (Method::Bzip2, bzip2_of(text)),
            (Method::Lzma, lzma_zip_of(text)),
        ] {
            let mut out = vec![0u8; text.len()];
            decompress_exact(method, FLAG_LZMA_END_MARKER, &payload, &mut out, "e").unwrap();
            assert_eq!(&out, text, "method {method}");
            if method != Method::Stored {
                let mut short = vec![0u8; 5];
                assert!(
                    decompress_exact(method, FLAG_LZMA_END_MARKER, &payload, &mut short, "e")
                        .is_err()
                );
                let mut long = vec![0u8; 40];
                assert!(
                    decompress_exact(method, FLAG_LZMA_END_MARKER, &payload, &mut long, "e")
                        .is_err()
                );
            }
            assert!(decompress_exact(
                method,
                FLAG_LZMA_END_MARKER,
                &payload[..payload.len() / 2],
                &mut out,
                "e"
            )
            .is_err());
        }
    }

    #[test]
    fn bombs_stop_at_the_expected_size() {
        let zeros = vec![0u8; 1 << 22];
        let bomb = bzip2_of(&zeros);
        assert!(bomb.len() < 1024);
        let mut out = vec![0u8; 64];
        let err = decompress_exact(Method::Bzip2, 0, &bomb, &mut out, "bomb").unwrap_err();
        assert!(err.to_string().contains("more than the 64 bytes"), "{err}");
        // LZMA, with and without an end marker: never more than `out` is written.
        let lzma = lzma_zip_of(&zeros);
        for flags in [0, FLAG_LZMA_END_MARKER] {
            let mut out = vec![1u8; 64];
            let result = decompress_exact(Method::Lzma, flags, &lzma, &mut out, "bomb");
            if flags == 0 {
                // No end marker: the size is the archive's word, and is exact.
                result.unwrap();
                assert!(out.iter().all(|b| *b == 0));
            } else {
                let err = result.unwrap_err();
                assert!(err.to_string().contains("more than the 64 bytes"), "{err}");
            }
        }
    }

    #[test]
    fn jobs_run_in_parallel_and_report_the_first_failure() {
        let text = b"hello hello hello";
        let payloads: Vec<Vec<u8>> = (0..6)
            .map(|i| match i % 3 {
                0 => HELLO_DEFLATE.to_vec(),
                1 => bzip2_of(text),
                _ => lzma_zip_of(text),
            })
            .collect();
        for threads in [0, 1, 4] {
            let mut outs = vec![vec![0u8; text.len()]; payloads.len()];
            let jobs = payloads
                .iter()
                .zip(outs.iter_mut())
                .enumerate()
                .map(|(i, (p, out))| Job {
                    method: [Method::Deflate, Method::Bzip2, Method::Lzma][i % 3],
                    flags: FLAG_LZMA_END_MARKER,
                    compressed: p,
                    out,
                    entry: format!("e{i}"),
                })
                .collect();
            decompress_all(jobs, threads).unwrap();
            assert!(outs.iter().all(|o| o == text));
            let (mut a, mut b, mut c) = ([0u8; 17], [0u8; 17], [0u8; 17]);
            let jobs = vec![
                Job {
                    method: Method::Deflate,
                    flags: 0,
                    compressed: HELLO_DEFLATE,
                    out: &mut a,
                    entry: "ok".into(),
                },
                Job {
                    method: Method::Deflate,
                    flags: 0,
                    compressed: b"xx",
                    out: &mut b,
                    entry: "first".into(),
                },
                Job {
                    method: Method::Bzip2,
                    flags: 0,
                    compressed: b"yy",
                    out: &mut c,
                    entry: "second".into(),
                },
            ];
            let err = decompress_all(jobs, threads).unwrap_err();
            assert!(err.to_string().contains("first"), "{err}");
        }
    }

    #[test]
    fn garbage_and_unknown_methods_are_errors() {
        let mut out = vec![0u8; 16];
        for method in [Method::Deflate, Method::Bzip2, Method::Lzma] {
            for flags in [0, FLAG_LZMA_END_MARKER] {
                let garbage = b"\xff\x00\x05\x00garbage garbage";
                assert!(decompress_exact(method, flags, garbage, &mut out, "e").is_err());
                assert!(decompress_exact(method, flags, b"", &mut out, "e").is_err());
            }
        }
        let err = decompress_exact(Method::from_code(93), 0, b"x", &mut out, "e").unwrap_err();
        assert!(matches!(
            err.kind(),
            crate::error::ErrorKind::Unsupported { .. }
        ));
        assert!(err.to_string().contains("zstd"));
        assert!(check_entry(Method::Stored, 3, 4, "e").is_err());
        assert!(check_entry(Method::Deflate, 1, 1 << 20, "e").is_err());
    }
}
