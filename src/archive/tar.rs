//! Recognising a POSIX tar archive.

/// A POSIX tar archive has `ustar` at offset 257.
pub fn is_tar(data: &[u8]) -> bool {
    data.get(257..262) == Some(b"ustar")
}
