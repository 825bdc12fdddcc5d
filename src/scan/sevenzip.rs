//! 7z archives in a scan: every file is scanned by content, within the inflate
//! budget. A folder coded in a way the reader refuses (encryption, PPMd, BCJ2, a
//! chain laid out otherwise than py7zr writes it) makes the archive unreadable,
//! never clean.

use crate::archive::sevenzip;
use crate::scan::{nested, Scan, Work};

impl Scan<'_> {
    pub(super) fn sevenzip(&mut self, data: &[u8], location: &str, depth: u32) {
        let room = self.budget.room(Work::Inflate);
        let mut spent = false;
        let read = sevenzip::for_each_member(data, room, |name, bytes| {
            let here = nested(location, name);
            if !self.charge(bytes.len() as u64, Work::Inflate, &here) {
                spent = true;
                return Ok(());
            }
            self.bytes(bytes, &here, depth + 1, false);
            Ok(())
        });
        match read {
            Ok(()) => {}
            Err(e) if e.is_limit() && !spent => {
                self.charge(room.saturating_add(1), Work::Inflate, location);
            }
            Err(e) => self.problem(location, e.kind().code(), format!("7z archive: {e}")),
        }
    }
}
