//! `.npy` files in a scan: only object arrays hold a pickle, after the header.

use crate::error::code;
use crate::scan::Scan;
use crate::torch::storages::IdFormat;

impl Scan<'_> {
    pub(super) fn npy(&mut self, data: &[u8], location: &str, depth: u32) {
        let Some(&major) = data.get(6) else {
            return self.problem(location, code::MALFORMED_ARCHIVE, "truncated .npy header");
        };
        let (len, start) = match major {
            1 => (
                data.get(8..10)
                    .and_then(|b| <[u8; 2]>::try_from(b).ok())
                    .map(|b| u64::from(u16::from_le_bytes(b))),
                10usize,
            ),
            2 | 3 => (
                data.get(8..12)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(|b| u64::from(u32::from_le_bytes(b))),
                12,
            ),
            _ => (None, 0),
        };
        let header =
            len.and_then(|l| data.get(start..start.checked_add(usize::try_from(l).ok()?)?));
        let Some(header) = header else {
            return self.problem(location, code::MALFORMED_ARCHIVE, "malformed .npy header");
        };
        let text = String::from_utf8_lossy(header);
        let object = text.contains("'|O'")
            || text.contains("'O'")
            || text.contains("\"|O\"")
            || text.contains("'O',")
            || text.contains("'|O',");
        if object {
            let body = data.get(start + header.len()..).unwrap_or_default();
            self.stream(body, location, depth, IdFormat::Zip, None);
        }
    }
}
