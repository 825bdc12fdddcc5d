//! Zip archives in a scan: torch checkpoints (judged by a load's dry run and by
//! their pickles), npz files, and zips of anything, read the strict way and, where
//! that fails, the ways other readers would still read them.

use crate::archive::inflate::{inflate_prefix, inflated_len};
use crate::archive::method::Method;
use crate::archive::zip::{self, Entry, FileBytes};
use crate::error::code;
use crate::limits::{Limit, Limits};
use crate::pickle::opcodes;
use crate::scan::kind::{is_tensordict_leaf, named_like_a_model, Kind};
use crate::scan::{entry_data, nested, problem_kind, Format, Scan, Work};
use crate::torch::policy;
use crate::torch::records;
use crate::torch::export_program;
use crate::torch::records::{ArchiveKind, Names, NamesReading};

/// How a zip's index was read, and where the zip is.
pub struct ZipReading<'l> {
    /// As a load reads it, not by the fallbacks of other readers.
    pub strict: bool,
    pub location: &'l str,
    pub depth: u32,
    /// The zip is the file itself.
    pub top: bool,
}

impl ZipReading<'_> {
    /// The scanned file, a zip whose index was read as a load reads it.
    pub fn whole_file() -> ZipReading<'static> {
        ZipReading {
            strict: true,
            location: "",
            depth: 0,
            top: true,
        }
    }
}

impl Scan<'_> {
    pub(super) fn zip(&mut self, data: &[u8], location: &str, depth: u32, top: bool) {
        let max = self.options.limits.max_zip_entries;
        let mut strict = true;
        let read = if self.options.pickles_only {
            zip::read_directory_only
        } else {
            zip::read_entries
        };
        let index = read(data, max);
        if !index.as_ref().is_ok_and(|i| i.archive_end.is_some()) {
            if let Some(parts) = zip::archive_sequence(data, max) {
                for part in parts {
                    let here = nested(location, &format!("archive at byte {}", part.start));
                    if let Some(archive) = data.get(part) {
                        self.zip(archive, &here, depth, top);
                    }
                }
                return;
            }
        }
        let index = match index {
            Ok(index) => index,
            // Other readers still extract something: a zip after a prefix (Python's
            // zipfile shifts the offsets), or, with no directory, the local headers.
            Err(e) => match zip::read_entries_after_prefix(data, max) {
                Ok(index) => {
                    strict = false;
                    self.problem(
                        location,
                        problem_kind::PARSER_DISAGREEMENT,
                        "the archive follows other bytes; offsets are shifted by them",
                    );
                    index
                }
                Err(_) => {
                    strict = false;
                    self.problem(
                        location,
                        e.kind().code(),
                        format!("{e}; reading the local headers one by one instead"),
                    );
                    let entries = zip::walk_local_headers(data, max);
                    zip::Index {
                        entries,
                        directory_offset: data.len() as u64,
                        disagreements: Vec::new(),
                        archive_end: None,
                    }
                }
            },
        };
        let mut index = index;
        let located = !(strict && self.options.pickles_only);
        let layout = ZipLayout::of_file(&index, data, located, &self.options.limits);
        if strict && self.options.pickles_only {
            // Entries only a streaming reader finds, near those a pickles-only
            // scan reads (the full scan located every entry and looked between all).
            let mut listed: Vec<(u64, u64)> = (index.entries.iter())
                .map(|e| (e.header_offset, e.compressed_size))
                .collect();
            listed.sort_unstable();
            let read = layout.pickles(&index).map(|e| e.header_offset);
            let near =
                zip::unlisted_local_headers_near(data, &listed, read, index.directory_offset, max);
            index.disagreements.extend(near.unwrap_or_default());
        }
        if strict {
            let more = zip::other_end_records(data, &index.entries, max);
            index.disagreements.extend(more);
        }
        let reading = ZipReading {
            strict,
            location,
            depth,
            top,
        };
        self.zip_entries(data, index, &layout, &reading);
    }

    /// Scan the entries of a zip. With `pickles_only`, a strict index may leave
    /// payloads unlocated: an entry is located when it is read.
    pub(super) fn zip_entries<D: FileBytes + ?Sized>(
        &mut self,
        data: &D,
        index: zip::Index,
        layout: &ZipLayout,
        reading: &ZipReading,
    ) {
        let ZipReading {
            strict,
            location,
            depth,
            top,
        } = *reading;
        let pickles_only = self.options.pickles_only;
        let unlocated = strict && pickles_only;
        for d in &index.disagreements {
            self.problem(location, problem_kind::PARSER_DISAGREEMENT, d.error());
        }
        // Located entries: a pickles-only scan reports these as it locates each.
        for e in &index.entries {
            if let Some(what) = e.disagreement {
                let reason = zip::disagreement_error(e, what);
                self.problem(location, problem_kind::PARSER_DISAGREEMENT, reason);
            }
        }
        let valid = if unlocated {
            // A repeated name leaves readers to pick one of its entries: only the
            // pickles' choice matters to a gate that reads no tensor.
            zip::validate_directory(&index, layout.pickles(&index))
        } else {
            zip::validate_entries(&index)
        };
        if let Err(e) = valid {
            self.report.error(location, &e);
        }
        if top {
            self.report.format = layout.format(&index);
        }
        // A checkpoint a load accepts has only allowlisted globals in its data.pkl,
        // and the compressed payloads the load reads are what it inflates: those
        // of the storages its pickle names, and the metadata records it checked.
        let inflated_by_load = if top && !pickles_only && layout.root.is_some() {
            data.whole().and_then(|whole| {
                self.validated_load(whole, strict.then(|| index.clone()), location)
            })
        } else {
            None
        };
        let loadable = inflated_by_load.is_some();
        let torchscript = layout.format(&index) == Format::TorchScriptZip;
        if torchscript {
            self.problem(
                location,
                problem_kind::TORCHSCRIPT,
                "a TorchScript archive: torch.jit.load runs the code under code/",
            );
        }
        if layout.names.package {
            self.problem(
                location,
                problem_kind::TORCH_PACKAGE,
                records::PACKAGE_REASON,
            );
        }
        if layout.names.mobile {
            self.problem(
                location,
                problem_kind::MOBILE_BYTECODE,
                records::MOBILE_REASON,
            );
        }
        if layout.kind == Some(ArchiveKind::AotInductor) {
            self.problem(location, problem_kind::AOTI_PACKAGE, records::AOTI_REASON);
        }
        debug_assert_eq!(layout.unpickled.len(), index.entries.len());
        for (entry, &unpickled) in index.entries.iter().zip(&layout.unpickled) {
            if loadable && layout.is_main_pickle(&entry.name) && !self.options.list_allowlisted {
                self.report.pickles += 1;
                continue;
            }
            if !unpickled {
                let unread = inflated_by_load
                    .as_ref()
                    .is_some_and(|read| read.binary_search(&entry.data_offset).is_err());
                if entry.method != Method::Stored && !pickles_only && !unread {
                    let here = nested(location, &entry.name_lossy());
                    if !self.charge(entry.uncompressed_size, Work::Inflate, &here) {
                        return;
                    }
                    self.compressed_payload(data, entry, &here);
                }
                // A pickles-only scan reads the directory and the pickles, never
                // a payload's bytes (not even its local header).
                if !unlocated && !self.byte_zero(data, entry, location) {
                    return;
                }
                continue;
            }
            let here = nested(location, &entry.name_lossy());
            if !self.charge_entry(entry, &here) {
                return;
            }
            let located;
            let entry = if unlocated {
                located = match zip::locate_entry(data, entry) {
                    Ok(e) => e,
                    Err(e) => {
                        self.report.error(&here, &e);
                        continue;
                    }
                };
                if let Some(what) = located.disagreement {
                    let reason = zip::disagreement_error(&located, what);
                    self.problem(location, problem_kind::PARSER_DISAGREEMENT, reason);
                }
                &located
            } else {
                entry
            };
            let found_before = self.report.findings.len();
            let tensor_record = layout
                .is_pt2_tensor_record(&entry.name)
                .then(|| here.clone());
            let outer = std::mem::replace(&mut self.tensor_record, tensor_record);
            self.member(data, entry, &here, depth);
            self.tensor_record = outer;
            if layout.is_export_program(&entry.name) {
                self.export_program(data, entry, &here);
            }
            if torchscript && layout.is_torchscript_pickle(&entry.name) {
                self.drop_torchscript_builders(found_before, &here);
            }
        }
        // What other readers of the archive find that its directory does not list.
        for d in &index.disagreements {
            for entry in &d.entries {
                let name = format!("{} [{}]", entry.name_lossy(), d.reading);
                let here = nested(location, &name);
                let entry = match zip::locate_entry(data, entry) {
                    Ok(located) => located,
                    Err(e) => {
                        self.report.error(&here, &e);
                        continue;
                    }
                };
                if !self.charge_entry(&entry, &here) {
                    return;
                }
                self.member(data, &entry, &here, depth);
            }
        }
    }

    /// What in a torch.export program's JSON `torch.export.load` runs as Python.
    fn export_program<D: FileBytes + ?Sized>(&mut self, data: &D, entry: &Entry, here: &str) {
        let bytes = match entry_data(entry, data, &self.options.limits) {
            Ok(b) => b,
            Err(e) => return self.report.error(here, &e),
        };
        match export_program::hazards(&bytes) {
            Ok(hazards) => {
                for h in hazards {
                    self.problem(here, problem_kind::EXPORT_PROGRAM_CODE, format!("{}: {}", h.at, h.why));
                }
            }
            Err(why) => self.problem(
                here,
                problem_kind::UNKNOWN_FORMAT,
                format!("a torch.export program this scanner cannot read to its end ({why})"),
            ),
        }
    }

    /// In a TorchScript archive's own pickle, `torch.jit._pickle`'s builders are
    /// data (as its unpickler, and a load, treat them): the findings the pickle at
    /// `here` added since `from` lose them. Those of bytes nested in it keep them.
    fn drop_torchscript_builders(&mut self, from: usize, here: &str) {
        let findings = &mut self.report.findings;
        let mut added = findings.split_off(from.min(findings.len()));
        added.retain(|f| {
            let (module, name) = f.name.split_at(f.module_len.min(f.name.len()));
            let name = name.strip_prefix('.').unwrap_or_default();
            f.location != here || policy::torchscript_builder(module, name).is_none()
        });
        findings.append(&mut added);
    }

    /// Account for reading `entry`'s bytes: stored ones are read, others inflated.
    fn charge_entry(&mut self, entry: &Entry, here: &str) -> bool {
        match entry.method {
            Method::Stored => self.charge(entry.compressed_size, Work::Read, here),
            _ => self.charge(entry.uncompressed_size, Work::Inflate, here),
        }
    }

    /// One located entry, charged for, read by content whatever its name (pandas
    /// unpickles a zip's single member whatever it is called). One named like a
    /// model or pickle, one of a kind the scanner knows other than a bare pickle
    /// (an archive, a compressed file...) or one that opens with PROTO must read
    /// to its end; any other (text, bytes of no known format) counts only when
    /// reading it names a global or stops at a limit.
    fn member<D: FileBytes + ?Sized>(&mut self, data: &D, entry: &Entry, here: &str, depth: u32) {
        let bytes = match entry_data(entry, data, &self.options.limits) {
            Ok(b) => b,
            Err(e) => return self.report.error(here, &e),
        };
        let must_read = named_like_a_model(&entry.name)
            || !matches!(Kind::of(&bytes), Kind::Pickle | Kind::Empty)
            || bytes.first() == Some(&0x80);
        if must_read {
            self.bytes(&bytes, here, depth + 1, false);
        } else {
            self.unless_nothing_found(|scan| scan.bytes(&bytes, here, depth + 1, false));
        }
    }

    /// An entry no loader is expected to unpickle (a tensor's bytes, a folder, a
    /// TensorDict leaf) is still what an unpickler handed it reads from byte 0:
    /// that reading counts when it names a global or stops at a limit. Most
    /// such entries start with no opcode, and are done with after one byte (one
    /// inflated byte, when compressed). `false` once the budget is spent.
    fn byte_zero<D: FileBytes + ?Sized>(
        &mut self,
        data: &D,
        entry: &Entry,
        location: &str,
    ) -> bool {
        let Ok(raw) = entry.raw(data) else {
            // Where the entry lies was checked and reported with the others.
            return true;
        };
        let first = match entry.method {
            Method::Stored => raw.first().copied(),
            Method::Deflate => {
                let mut first = [0u8; 1];
                inflate_prefix(raw, &mut first, "").ok().map(|()| first[0])
            }
            // Other methods are rare for payloads: read them whole below.
            _ => Some(opcodes::PROTO),
        };
        // Named only past this point: a name per entry was a tenth of a scan.
        if !first.is_some_and(opcodes::is_opcode) {
            return true;
        }
        let here = nested(location, &entry.name_lossy());
        if entry.method != Method::Stored && !self.charge_entry(entry, &here) {
            return false;
        }
        match entry_data(entry, data, &self.options.limits) {
            Ok(bytes) => self.leading_pickle(&bytes, &here),
            Err(e) => self.report.error(&here, &e),
        }
        true
    }

    /// A compressed storage record must inflate to exactly what it declares (a load
    /// would find out only when copying it); counted without keeping the output.
    fn compressed_payload<D: FileBytes + ?Sized>(
        &mut self,
        data: &D,
        entry: &Entry,
        location: &str,
    ) {
        if entry.method != Method::Deflate {
            return;
        }
        let raw = entry.raw(data).ok();
        match raw.map(|raw| inflated_len(raw, entry.uncompressed_size)) {
            Some(Ok(n)) if n == entry.uncompressed_size => {}
            Some(Ok(n)) => self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                format!(
                    "inflates to {n} bytes, declares {}",
                    entry.uncompressed_size
                ),
            ),
            Some(Err(e)) => self.problem(location, code::MALFORMED_ARCHIVE, e),
            None => self.problem(
                location,
                code::MALFORMED_ARCHIVE,
                "entry data lies outside the file",
            ),
        }
    }

    /// A zip glued after another file (a pickle, an .npy): Python's zipfile opens it.
    pub(super) fn trailing_zip(&mut self, data: &[u8], location: &str, depth: u32) {
        let tail_start = data.len().saturating_sub(22 + 0xffff + 64);
        if !data
            .get(tail_start..)
            .is_some_and(zip::holds_end_record_signature)
        {
            return;
        }
        let max = self.options.limits.max_zip_entries;
        if let Ok(index) = zip::read_entries_after_prefix(data, max) {
            if !index.entries.is_empty() {
                self.problem(
                    location,
                    problem_kind::PARSER_DISAGREEMENT,
                    "a zip archive is appended to the file",
                );
                self.zip(data, location, depth + 1, false);
            }
        }
    }
}

/// What a zip's names say about which of its entries are never unpickled.
pub struct ZipLayout {
    /// The root folder of a torch checkpoint: every entry under it, with a data.pkl.
    root: Option<Vec<u8>>,
    /// Per entry of the index, in order: whether a reader may unpickle it.
    unpickled: Vec<bool>,
    /// The root folder of a torch.export archive: one with an `archive_format` record.
    pt2_root: Option<Vec<u8>>,
    /// What the zip is for, when it is no checkpoint ([`ArchiveKind::of`]).
    kind: Option<ArchiveKind>,
    /// What its entries' names say.
    names: Names,
}

impl ZipLayout {
    pub fn of(index: &zip::Index) -> ZipLayout {
        let first_root = (index.entries.first()).and_then(|e| records::root_of(&e.name));
        // One pass over the names (tens of thousands in a big checkpoint): what
        // they say the archive is, and which entries are payloads under the root.
        let mut reading = NamesReading::default();
        let mut any_memmap = false;
        let mut unpickled: Vec<bool> = (index.entries.iter())
            .map(|e| {
                let storage = reading.add(&e.name);
                any_memmap |= e.name.ends_with(b".memmap");
                !(storage || e.name.ends_with(b"/") || records::is_payload(first_root, &e.name))
            })
            .collect();
        let names = reading.finish(index.entries.iter().map(|e| &e.name[..]));
        // Without a data.pkl the first entry's folder is no checkpoint's root, and
        // nothing under it is a payload.
        let root = first_root.filter(|_| names.data_pkl);
        if root.is_none() {
            for (unpickled, e) in unpickled.iter_mut().zip(&index.entries) {
                *unpickled = !e.name.ends_with(b"/");
            }
        }
        // Only TensorDict leaves need to know their neighbours.
        if any_memmap {
            let names: std::collections::HashSet<String> =
                index.entries.iter().map(Entry::name_lossy).collect();
            for (unpickled, e) in unpickled.iter_mut().zip(&index.entries) {
                *unpickled &=
                    !is_tensordict_leaf(&String::from_utf8_lossy(&e.name), |n| names.contains(n));
            }
        }
        let kind = names.kind();
        let pt2_root = first_root
            .filter(|_| matches!(kind, Some(ArchiveKind::Export | ArchiveKind::AotInductor)));
        ZipLayout {
            unpickled,
            root: root.map(<[u8]>::to_vec),
            pt2_root: pt2_root.map(<[u8]>::to_vec),
            kind,
            names,
        }
    }

    /// [`ZipLayout::of`], with what a torch.export archive's configs say of its
    /// records, read from the file (`located`: the index has each entry's data
    /// offset, else its local header is read).
    pub fn of_file<D: FileBytes + ?Sized>(
        index: &zip::Index,
        data: &D,
        located: bool,
        limits: &Limits,
    ) -> ZipLayout {
        let mut layout = ZipLayout::of(index);
        layout.mark_raw_pt2_records(data, index, located, limits);
        layout
    }

    /// A torch.export archive's weight and constant records its configs list as
    /// raw tensor bytes ([`records::pt2_config_records`]): payloads, read as a
    /// checkpoint's storages are, since `torch.export.load` never unpickles them.
    /// A config that cannot be read leaves every record to be read by content.
    pub(super) fn mark_raw_pt2_records<D: FileBytes + ?Sized>(
        &mut self,
        data: &D,
        index: &zip::Index,
        located: bool,
        limits: &Limits,
    ) {
        let Some(root) = self.pt2_root.clone() else {
            return;
        };
        let mut raw: std::collections::HashMap<Vec<u8>, bool> = std::collections::HashMap::new();
        for (entry, folder) in self.pt2_configs(index) {
            let entry = if located {
                std::borrow::Cow::Borrowed(entry)
            } else {
                match zip::locate_entry(data, entry) {
                    Ok(entry) => std::borrow::Cow::Owned(entry),
                    Err(_) => continue,
                }
            };
            let Ok(json) = entry.read(data, Limit::PickleBytes, limits.max_pickle_bytes) else {
                continue;
            };
            for (name, is_raw) in records::pt2_config_records(folder, &json).into_iter().flatten() {
                // Listed twice, once as a pickle: it is read as one.
                *raw.entry([&root[..], b"/", name.as_bytes()].concat()).or_insert(true) &= is_raw;
            }
        }
        for (unpickled, e) in self.unpickled.iter_mut().zip(&index.entries) {
            if raw.get(&e.name[..]) == Some(&true) {
                *unpickled = false;
            }
        }
    }

    /// A torch.export archive's weights and constants configs, each with its folder.
    pub(super) fn pt2_configs<'i>(
        &self,
        index: &'i zip::Index,
    ) -> Vec<(&'i Entry, &'static str)> {
        let Some(root) = self.pt2_root.as_deref() else {
            return Vec::new();
        };
        (index.entries.iter()).filter_map(|entry| {
            let folder = records::record_of(root, &entry.name).and_then(records::pt2_config_folder)?;
            Some((entry, folder))
        })
        .collect()
    }

    /// A torch.export archive's weight or constant record: tensor bytes unless
    /// they are a pickle (which the scan reads as any other).
    fn is_pt2_tensor_record(&self, name: &[u8]) -> bool {
        (self.pt2_root.as_deref())
            .and_then(|r| records::record_of(r, name))
            .is_some_and(|record| {
                (records::PT2_TENSOR_FOLDERS.iter()).any(|f| {
                    record
                        .strip_prefix(f.as_bytes())
                        .is_some_and(|rest| !rest.is_empty() && !rest.contains(&b'/'))
                })
            })
    }

    /// What the zip is: a torch checkpoint (TorchScript's when `torch.jit.load`
    /// reads it as such, or `torch.load` hands it to `torch.jit.load`), an npz,
    /// or any zip.
    fn format(&self, index: &zip::Index) -> Format {
        let torchscript =
            self.names.is_jit_archive() || self.kind == Some(ArchiveKind::TorchScript);
        match &self.root {
            Some(_) if torchscript => Format::TorchScriptZip,
            Some(_) => Format::TorchZip,
            None if (index.entries.iter()).all(|e| e.name.ends_with(b".npy")) => Format::Npz,
            None => Format::Zip,
        }
    }

    /// A torch.export program ([`records::is_export_program`]).
    fn is_export_program(&self, name: &[u8]) -> bool {
        records::is_export_program(self.pt2_root.as_deref(), name)
    }

    /// One of a TorchScript archive's own pickles ([`records::is_torchscript_pickle`]).
    fn is_torchscript_pickle(&self, name: &[u8]) -> bool {
        (self.root.as_deref())
            .and_then(|r| records::record_of(r, name))
            .is_some_and(records::is_torchscript_pickle)
    }

    /// The checkpoint's main pickle, `<root>/data.pkl`.
    fn is_main_pickle(&self, name: &[u8]) -> bool {
        (self.root.as_deref()).is_some_and(|r| records::is_record(r, name, records::DATA_PKL))
    }

    /// The entries of `index` (the one this layout is of) that a reader may unpickle.
    pub fn pickles<'i>(&'i self, index: &'i zip::Index) -> impl Iterator<Item = &'i Entry> {
        (index.entries.iter().zip(&self.unpickled)).filter_map(|(e, &u)| u.then_some(e))
    }
}

/// The directory records a pickles-only scan of a torch checkpoint need not
/// build: those [`ZipLayout`] sets aside as torch payload (most of a checkpoint's
/// entries), from the record after `<root>/data.pkl` on. torch writes data.pkl
/// first; any payload before it is built and set aside by the layout as usual,
/// so the layout of the entries kept is the layout of them all.
#[derive(Default)]
pub struct TorchPayloads {
    /// The first record's folder, once a record has been seen.
    root: Option<Option<Vec<u8>>>,
    holds_main_pickle: bool,
}

impl TorchPayloads {
    pub fn skip(&mut self, name: &[u8]) -> bool {
        let root = (self.root).get_or_insert_with(|| records::root_of(name).map(<[u8]>::to_vec));
        let Some(root) = root.as_deref() else {
            return false;
        };
        if !self.holds_main_pickle {
            self.holds_main_pickle = records::is_record(root, name, records::DATA_PKL);
            return false;
        }
        records::is_payload(Some(root), name)
    }
}

#[cfg(test)]
mod tests {
    use crate::archive::zip::holds_end_record_signature as has_end_record_signature;

    #[test]
    fn the_end_record_search_finds_what_a_window_search_finds() {
        let signature = b"PK\x05\x06";
        for len in 0..100 {
            for at in 0..len {
                // `P`s and partial signatures everywhere, the whole one at `at` or nowhere.
                let mut data: Vec<u8> = (0..len).map(|i| b"PPK\x05x"[i % 5]).collect();
                assert!(!has_end_record_signature(&data), "{data:?}");
                if at + 4 <= len {
                    data[at..at + 4].copy_from_slice(signature);
                }
                let expected = data.windows(4).any(|w| w == signature);
                assert_eq!(has_end_record_signature(&data), expected, "{data:?}");
            }
        }
    }
}
