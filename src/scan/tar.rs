//! POSIX tar archives in a scan: every regular member is scanned by content.

use crate::error::code;
use crate::scan::{nested, Scan, Work};

impl Scan<'_> {
    pub(super) fn tar(&mut self, data: &[u8], location: &str, depth: u32) {
        let mut pos = 0usize;
        let mut members = 0u64;
        while let Some(header) = data.get(pos..pos + 512) {
            if header.iter().all(|b| *b == 0) {
                return;
            }
            members += 1;
            if members > self.options.limits.max_zip_entries {
                return self.problem(location, code::LIMIT, "too many tar members");
            }
            let name = String::from_utf8_lossy(header.get(..100).unwrap_or_default())
                .trim_end_matches('\0')
                .to_owned();
            let size_text = String::from_utf8_lossy(header.get(124..136).unwrap_or_default())
                .trim_matches(|c: char| c == '\0' || c == ' ')
                .to_owned();
            let Ok(size) = u64::from_str_radix(&size_text, 8) else {
                return self.problem(location, code::MALFORMED_ARCHIVE, "malformed tar header");
            };
            let kind = header.get(156).copied().unwrap_or(0);
            let body_start = pos + 512;
            let Some(body) = usize::try_from(size)
                .ok()
                .and_then(|s| data.get(body_start..body_start.checked_add(s)?))
            else {
                return self.problem(
                    location,
                    code::MALFORMED_ARCHIVE,
                    format!("tar member {name} runs past the end"),
                );
            };
            if matches!(kind, b'0' | 0) {
                let here = nested(location, &name);
                if !self.charge(body.len() as u64, Work::Read, &here) {
                    return;
                }
                self.bytes(body, &here, depth + 1, false);
            }
            pos = body_start + body.len().div_ceil(512) * 512;
        }
        self.problem(location, code::MALFORMED_ARCHIVE, "truncated tar archive");
    }
}
