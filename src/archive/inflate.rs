//! DEFLATE entries, inflated straight into a buffer of their declared size. The
//! decoder can never write past that buffer, so a zip bomb ends in a clear error
//! rather than in memory exhaustion.

use miniz_oxide::inflate::{decompress_slice_iter_to_slice, TINFLStatus};

use crate::error::{Error, Location};

/// DEFLATE cannot expand data more than 1032-fold (a 258-byte match costs at least
/// two bits); a larger declared size is a lie, refused before anything is allocated.
pub fn check_ratio(compressed: u64, declared: u64, entry: &str) -> Result<(), Error> {
    const MAX_RATIO: u64 = 1032;
    if declared > compressed.saturating_mul(MAX_RATIO).saturating_add(1024) {
        return Err(Error::archive(
            format!("declares {declared} bytes from {compressed} deflated bytes, more than DEFLATE can produce"),
            Location::entry(entry),
        ));
    }
    Ok(())
}

/// Inflate `compressed` into `out`, which must come out exactly full.
pub fn inflate_exact(compressed: &[u8], out: &mut [u8], entry: &str) -> Result<(), Error> {
    let fail = |reason: String| Error::archive(reason, Location::entry(entry));
    match decompress_slice_iter_to_slice(out, std::iter::once(compressed), false, true) {
        Ok(n) if n == out.len() => Ok(()),
        Ok(n) => Err(fail(format!(
            "inflated to {n} bytes, but the entry declares {}",
            out.len()
        ))),
        Err(TINFLStatus::HasMoreOutput) => Err(fail(format!(
            "inflates to more than the {} bytes the entry declares",
            out.len()
        ))),
        Err(status) => Err(fail(format!("corrupt deflate stream ({status:?})"))),
    }
}

/// Inflate the first `out.len()` bytes of `compressed`: what a check that needs
/// only the start of an entry reads (the rest is never produced).
pub fn inflate_prefix(compressed: &[u8], out: &mut [u8], entry: &str) -> Result<(), Error> {
    let fail = |reason: String| Error::archive(reason, Location::entry(entry));
    match decompress_slice_iter_to_slice(out, std::iter::once(compressed), false, true) {
        Ok(n) if n == out.len() => Ok(()),
        Err(TINFLStatus::HasMoreOutput) => Ok(()),
        Ok(n) => Err(fail(format!(
            "inflated to {n} bytes, fewer than the {} needed",
            out.len()
        ))),
        Err(status) => Err(fail(format!("corrupt deflate stream ({status:?})"))),
    }
}

/// How many bytes `compressed` inflates to, counted through a small window so
/// nothing the size of the output is allocated; stops past `limit`.
pub fn inflated_len(compressed: &[u8], limit: u64) -> Result<u64, String> {
    use miniz_oxide::inflate::core::{decompress, DecompressorOxide};
    const WINDOW: usize = 1 << 15;
    let mut state = Box::<DecompressorOxide>::default();
    let mut window = vec![0u8; WINDOW];
    let (mut consumed, mut at, mut total) = (0usize, 0usize, 0u64);
    loop {
        let input = compressed.get(consumed..).unwrap_or_default();
        let (status, read, written) = decompress(&mut state, input, &mut window, at, 0);
        consumed += read;
        at = (at + written) % WINDOW;
        total = total.saturating_add(written as u64);
        if total > limit {
            return Err(format!("inflates to more than {limit} bytes"));
        }
        match status {
            TINFLStatus::Done => return Ok(total),
            TINFLStatus::HasMoreOutput => continue,
            other => return Err(format!("corrupt deflate stream ({other:?})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "hello hello hello" deflated by zlib (raw, no header).
    const HELLO: &[u8] = &[203, 72, 205, 201, 201, 87, 200, 64, 144, 0];

    #[test]
    fn inflates_exactly_the_declared_size() {
        let mut out = vec![0u8; 17];
        inflate_exact(HELLO, &mut out, "e").unwrap();
        assert_eq!(&out, b"hello hello hello");
        assert!(inflate_exact(HELLO, &mut [0u8; 5], "e").is_err());
        assert!(inflate_exact(HELLO, &mut [0u8; 40], "e").is_err());
        assert!(inflate_exact(b"\xff\xff\xff", &mut [0u8; 4], "e").is_err());
        assert_eq!(inflated_len(HELLO, 100), Ok(17));
        let mut prefix = vec![0u8; 8];
        inflate_prefix(HELLO, &mut prefix, "e").unwrap();
        assert_eq!(&prefix, b"hello he");
        inflate_prefix(HELLO, &mut [0u8; 17], "e").unwrap();
        assert!(inflate_prefix(HELLO, &mut [0u8; 18], "e").is_err());
        assert!(inflated_len(HELLO, 10).is_err());
    }
}
