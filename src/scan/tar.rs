//! Tar archives in a scan, read as CPython's `tarfile` reads them
//! ([`crate::archive::tar`]), the reader torch's legacy loader tries first on
//! every file. Every member whose data tarfile hands out is scanned by content,
//! whatever its name or type: as `extractfile` reads it and, where that differs
//! (a sparse map, a negative size), as `extract` writes it. A link torch would
//! extract under a name it then opens is a dangerous finding. A member cut
//! short, or members tarfile stops reading with an exception, are problems.

use std::borrow::Cow;

use crate::archive::streams::{Compression, StreamError};
use crate::archive::tar::{self, Content, Failure, Member};
use crate::error::code;
use crate::scan::{nested, problem_kind, Finding, Scan, Work};

/// The members torch's legacy loader takes from a tar: `extract("storages")`
/// and `extract("tensors")` into a folder it then opens them from, and
/// `extractfile("pickle")`.
const TORCH_MEMBERS: [&[u8]; 3] = [b"storages", b"tensors", b"pickle"];

impl Scan<'_> {
    pub(super) fn tar(&mut self, data: &[u8], location: &str, depth: u32) {
        let archive = match tar::open(data, &self.options.limits) {
            Ok(archive) => archive,
            Err(failure) => return self.tar_failure(location, &failure, "opening it"),
        };
        for member in &archive.members {
            let here = nested(location, &member.display_name());
            if member.is_link() && TORCH_MEMBERS.contains(&member.name.as_slice()) {
                self.torch_link(member, &here);
            }
            if !member.has_data() {
                continue;
            }
            let room = self.budget.room(Work::Inflate);
            if !self.member_content(member.file_content(data, room), &here, depth) {
                return;
            }
            if member.extract_differs() {
                let room = self.budget.room(Work::Inflate);
                let extracted = format!("{here} (as extract writes it)");
                let content = member.extracted_content(data, room);
                if !self.member_content(content, &extracted, depth) {
                    return;
                }
            }
        }
        if let Some(failure) = &archive.failure {
            self.tar_failure(location, failure, "listing its members");
        }
    }

    /// Scan what a member hands out; `false` once the budget is spent.
    fn member_content(&mut self, content: Content<'_>, location: &str, depth: u32) -> bool {
        // A sparse member's holes are made, not read: they count as inflating.
        let work = match content.bytes {
            Cow::Borrowed(_) => Work::Read,
            Cow::Owned(_) => Work::Inflate,
        };
        if !self.charge(content.bytes.len() as u64, work, location) {
            return false;
        }
        self.bytes(&content.bytes, location, depth + 1, false);
        match content.failure {
            None => {}
            Some(Failure::Limit(why)) => self.stop_short(location, why),
            Some(failure) => self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                format!("tarfile cannot hand out the whole member: {failure}"),
            ),
        }
        true
    }

    fn tar_failure(&mut self, location: &str, failure: &Failure, doing: &str) {
        match failure {
            Failure::Limit(why) => self.stop_short(location, format!("tar archive: {why}")),
            failure => self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                format!("tar archive: {failure} {doing}"),
            ),
        }
    }

    /// A link named as a member torch extracts: `extract` makes the link, and
    /// torch unpickles whatever host file it points to (or the member it names).
    /// Reported as a global without a name, and dangerous.
    fn torch_link(&mut self, member: &Member, location: &str) {
        let kind = if member.kind == b'2' {
            "symbolic link"
        } else {
            "hard link"
        };
        let name = format!(
            "<tar {kind} {} -> {}, which torch.load extracts and unpickles>",
            member.display_name(),
            String::from_utf8_lossy(&member.linkname)
        );
        self.report.add(Finding {
            module_len: name.len(),
            name,
            dangerous: true,
            location: location.to_owned(),
            offset: 0,
            wrappers: Vec::new(),
        });
    }

    /// A tar that is also another format gets that reading too: a legacy torch
    /// file (tensorplay.load's reading of it, while torch.load reads the tar:
    /// a disagreement even when the tar holds nothing unsafe), and the formats
    /// that hold files of their own, kept only where they find something (a
    /// tar's first member name may look like their magic). A pickle from byte
    /// 0 is the leading pickle's reading.
    pub(super) fn beside_tar(
        &mut self,
        data: &[u8],
        location: &str,
        depth: u32,
        top: bool,
        tar_found: bool,
    ) {
        use crate::scan::Kind;
        match Kind::beside_tar(data) {
            Kind::TorchLegacy => {
                self.legacy(data, location, depth, top);
                if !tar_found {
                    self.problem(
                        location,
                        problem_kind::PARSER_DISAGREEMENT,
                        "a legacy torch file that is also a tar archive: torch.load reads the tar \
                         (and unpickles its storages member), tensorplay.load the legacy stream",
                    );
                }
            }
            Kind::SevenZip => self.unless_nothing_found(|scan| {
                scan.wrapped("7z", |scan| scan.sevenzip(data, location, depth));
            }),
            // LZMA-alone's header is no evidence (most tar headers pass for one)
            // and garbage decodes without an error; the others check their data.
            Kind::Compressed(c) if c != Compression::LzmaAlone => {
                let room = self.budget.room(Work::Inflate);
                match c.decode(data, room) {
                    Ok(inner) => self.unless_nothing_found(|scan| {
                        scan.decompressed(c, &inner, location, depth);
                    }),
                    Err(StreamError::TooLarge(_)) => {
                        self.charge(room.saturating_add(1), Work::Inflate, location);
                    }
                    // No such stream: its magic was the tar's first bytes.
                    Err(_) => {}
                }
            }
            _ => {}
        }
    }
}
