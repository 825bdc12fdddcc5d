//! The compression method of a zip entry.

use std::fmt;

/// How an entry's payload is compressed, as its headers' method field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Stored,
    Deflate,
    Bzip2,
    Lzma,
    /// Any other method (deflate64, zstd, xz...), kept by its code.
    Other(u16),
}

impl Method {
    pub fn from_code(code: u16) -> Method {
        match code {
            0 => Method::Stored,
            8 => Method::Deflate,
            12 => Method::Bzip2,
            14 => Method::Lzma,
            other => Method::Other(other),
        }
    }

    pub fn code(self) -> u16 {
        match self {
            Method::Stored => 0,
            Method::Deflate => 8,
            Method::Bzip2 => 12,
            Method::Lzma => 14,
            Method::Other(code) => code,
        }
    }

    /// The method's name, `unknown` for a code no zip tool we know of writes.
    pub fn name(self) -> &'static str {
        match self.code() {
            0 => "stored",
            8 => "deflate",
            9 => "deflate64",
            12 => "bzip2",
            14 => "lzma",
            93 => "zstd",
            95 => "xz",
            _ => "unknown",
        }
    }
}

impl fmt::Display for Method {
    /// `compression method 12 (bzip2)`, as refusals name it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "compression method {} ({})", self.code(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_ones_keep_their_number() {
        for code in [0, 8, 9, 12, 14, 93, 95, 99] {
            assert_eq!(Method::from_code(code).code(), code);
        }
        assert_eq!(
            Method::from_code(93).to_string(),
            "compression method 93 (zstd)"
        );
        assert_eq!(Method::from_code(77).name(), "unknown");
    }
}
