//! The numpy values a checkpoint holds, as the torch domain keeps them: a plain
//! dtype, and an array's state (shape, dtype, order, raw bytes). Apart from the
//! rules that build them (`numpy.rs`), so values can hold them without those rules.

use crate::torch::tensor::Dims;
use crate::value::NodeId;

/// A plain numpy dtype: kind (`b`, `i`, `u`, `f`, `c`), size in bytes, byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpDtype {
    pub kind: u8,
    pub size: u8,
    pub order: u8,
}

impl NpDtype {
    /// Parse numpy's type code (`f4`, `i8`, `b1`, `c16`...); `None` for anything else.
    pub fn parse(code: &str) -> Option<NpDtype> {
        let (kind, size) = code.split_at_checked(1)?;
        let kind = *kind.as_bytes().first()?;
        let size: u8 = size.parse().ok()?;
        let ok = match kind {
            b'b' => size == 1,
            b'i' | b'u' => matches!(size, 1 | 2 | 4 | 8),
            b'f' => matches!(size, 2 | 4 | 8),
            b'c' => matches!(size, 8 | 16),
            _ => false,
        };
        ok.then_some(NpDtype {
            kind,
            size,
            order: if size == 1 { b'|' } else { b'=' },
        })
    }

    /// The numpy dtype string, e.g. `<f4`.
    pub fn descr(&self) -> String {
        format!(
            "{}{}{}",
            char::from(self.order),
            char::from(self.kind),
            self.size
        )
    }
}

/// An array under reconstruction; `state` is set by its BUILD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdArrayNode {
    pub state: Option<NdArrayState>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NdArrayState {
    pub shape: Dims,
    pub dtype: NpDtype,
    pub fortran: bool,
    /// A bytes node holding exactly the array's data.
    pub data: NodeId,
}
