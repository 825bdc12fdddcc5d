//! open → archive → VM → torch semantics → a validated [`Checkpoint`]: the value
//! tree, and every storage bound to the bytes that hold it. Nothing here touches
//! Python; the bindings turn a `Checkpoint` into objects. A tar is refused as
//! torch's weights-only load refuses it, and so is a legacy stream that is also
//! a tar: torch.load reads such a file as the tar.

use std::sync::Arc;

use crate::archive::inflate::check_ratio;
use crate::archive::method::Method;
use crate::archive::source::Source;
use crate::archive::tar::{self, Failure};
use crate::archive::zip;
use crate::error::{check_limit, Error, ErrorKind, Location, Refusal};
use crate::limits::{Limit, Limits};
use crate::pickle::machine::{self, StringEncoding};
use crate::torch::invariants::{self, StorageBytes};
use crate::torch::legacy;
use crate::torch::policy::{Stubs, UnknownGlobals, UserGlobals};
use crate::torch::records::{self, ByteOrder, Layout};
use crate::torch::{Refusals, TorchHooks};
use crate::torch::StorageKey;
use crate::torch::{IdFormat, Storages};
use crate::torch::{StorageDecl, StorageId};
use crate::torch::Arena;
use crate::value::NodeId;
use crate::value::{compact, keys};
use std::borrow::Cow;

/// torch's `LoadEndianness`: what to assume when a file has no `byteorder` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Endianness {
    /// No swapping at all.
    Native,
    #[default]
    Little,
    Big,
}

/// What may follow a checkpoint in the bytes that hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trailing {
    /// A file of its own: bytes after a legacy checkpoint's last storage are a
    /// second reading of the file (a polyglot), refused. (After a zip's end record
    /// they are tolerated, as every zip reader does.)
    #[default]
    Refused,
    /// A stream read on from its current position: the checkpoint ends where its
    /// own records say ([`Checkpoint::end`]), and what follows is the caller's,
    /// as `torch.load` leaves it on a file object.
    Left,
}

#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub limits: Limits,
    pub user_globals: UserGlobals,
    /// What a global outside the allowlist becomes: a refusal, or a stub.
    pub unknown_globals: UnknownGlobals,
    pub encoding: StringEncoding,
    pub endianness: Endianness,
    pub trailing: Trailing,
}

/// Where a storage's bytes live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageData {
    /// Uncompressed, at `offset` of the source.
    Stored { offset: u64 },
    /// DEFLATE-compressed, `compressed` bytes at `offset`.
    Deflated { offset: u64, compressed: u64 },
    /// A slice of another storage (legacy sub-storages).
    View { root: StorageId, offset: u64 },
}

impl StorageData {
    /// How the storage's bytes are read ([`zip::Payload`]); `None` for a view,
    /// which is read through its root.
    pub fn payload(&self, nbytes: u64) -> Option<zip::Payload> {
        let (offset, stored_size, method) = match *self {
            StorageData::Stored { offset } => (offset, nbytes, Method::Stored),
            StorageData::Deflated { offset, compressed } => (offset, compressed, Method::Deflate),
            StorageData::View { .. } => return None,
        };
        Some(zip::Payload { offset, stored_size, method, flags: 0 })
    }
}

#[derive(Debug, Clone)]
pub struct Storage {
    pub decl: StorageDecl,
    pub data: StorageData,
    /// When the payload's byte order differs from this machine's: the swap unit.
    pub swap: Option<u64>,
}

pub struct Checkpoint {
    pub source: Arc<Source>,
    pub arena: Arena,
    /// How many values refer to each node (`Arena::reference_counts`).
    pub references: Vec<u8>,
    pub root: NodeId,
    pub storages: Vec<Storage>,
    pub protocol: Option<u8>,
    /// The pickle's entry name, for error messages.
    pub pickle_entry: String,
    pub format: Format,
    /// Just past the checkpoint's last byte: a legacy stream's last storage, or a
    /// zip's end record and comment.
    pub end: u64,
    /// The globals that stand in as stubs (stub mode), by `Global::Stub` index.
    pub stubs: Stubs,
}

/// The container a checkpoint came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A zip archive, as `torch.save` writes since 1.6.
    Zip,
    /// The legacy stream of pickles (`_use_new_zipfile_serialization=False`).
    Legacy,
}

/// Open a checkpoint held in `source` and validate it completely.
pub fn open(source: Arc<Source>, options: &LoadOptions) -> Result<Checkpoint, Error> {
    // Local headers read from the file, not through the map: each fault on the map
    // would keep the page-cache folio holding a header (up to 2 MiB of payload) in
    // this process. Files with many small records, and anything irregular, are
    // read through the map, which gives the same index or the precise error.
    let index = zip::read_entries_by_reading(
        source.bytes().len() as u64,
        &|offset, len| source.read_file_at(offset, len),
        options.limits.max_zip_entries,
    );
    let c = read(source.bytes(), options, Some(&source), index)?;
    // The pickle's pages too: storages are read from the file, not the map.
    source.release_pages();
    let (mut arena, root) = compact::compact(&c.arena, c.root);
    drop(c.arena);
    Ok(Checkpoint {
        source,
        references: arena.reference_counts(),
        arena,
        root,
        storages: c.storages,
        protocol: c.protocol,
        pickle_entry: c.pickle_entry,
        format: c.format,
        end: c.end,
        stubs: c.stubs,
    })
}

/// Everything a load checks before it copies a byte, on borrowed bytes: what a
/// scanner runs to tell a loadable file from one a load would refuse. Whether
/// each compressed storage inflates to its size is left to the caller, which
/// gets where their payloads start.
pub fn validate(data: &[u8], options: &LoadOptions) -> Result<Vec<u64>, Error> {
    read(data, options, None, None).map(|c| deflated_offsets(&c.storages))
}

/// [`validate`] for a zip checkpoint whose entries were already read, by
/// [`zip::read_entries`] or [`zip::read_entries_by_reading`]: the local headers
/// are not read again.
pub fn validate_zip(
    data: &[u8],
    index: zip::Index,
    options: &LoadOptions,
) -> Result<Vec<u64>, Error> {
    read(data, options, None, Some(index)).map(|c| deflated_offsets(&c.storages))
}

/// Where the payloads of the compressed storages a load would inflate start, in
/// order: an empty storage has nothing to inflate.
fn deflated_offsets(storages: &[Storage]) -> Vec<u64> {
    let mut offsets: Vec<u64> = (storages.iter())
        .filter_map(|s| match s.data {
            StorageData::Deflated { offset, .. } if s.decl.nbytes > 0 => Some(offset),
            _ => None,
        })
        .collect();
    offsets.sort_unstable();
    offsets
}

/// A checkpoint's values and storages, before they are tied to their source.
struct Contents {
    arena: Arena,
    root: NodeId,
    storages: Vec<Storage>,
    protocol: Option<u8>,
    pickle_entry: String,
    format: Format,
    end: u64,
    stubs: Stubs,
}

/// `source`, when given, holds `data` and may let go of the pages already read;
/// `index`, when given, is the zip's entries, already read.
fn read(
    data: &[u8],
    options: &LoadOptions,
    source: Option<&Source>,
    index: Option<zip::Index>,
) -> Result<Contents, Error> {
    let contents = read_format(data, options, source, index)?;
    keys::check_keys(&contents.arena, options.limits.max_key_values)
        .map_err(|e| e.in_entry(&contents.pickle_entry))?;
    // What torch checks when it builds sparse, nested and per-channel quantized
    // tensors, from the index values in their storages: a load and a scan refuse
    // such a file here, before anything is built. (Dense tensors never get here.)
    if contents.arena.tensors_to_check().next().is_some() {
        check_invariants(data, &contents, options)?;
    }
    Ok(contents)
}

fn check_invariants(data: &[u8], contents: &Contents, options: &LoadOptions) -> Result<(), Error> {
    let inflated = (contents.storages.iter())
        .filter(|s| matches!(s.data, StorageData::Deflated { .. }))
        .fold(0u64, |acc, s| acc.saturating_add(s.decl.nbytes));
    let budget = invariants::Budget {
        max_read: options.limits.max_inflated_bytes,
        data_bytes: (data.len() as u64).saturating_add(inflated),
    };
    invariants::check(
        &contents.arena,
        &mut BoundBytes {
            data,
            storages: &contents.storages,
            entry: &contents.pickle_entry,
        },
        budget,
        &contents.pickle_entry,
    )
}

/// The bytes of bound storages, for [`invariants::check`]: stored ones borrowed
/// from `data`, compressed ones inflated up to the bytes asked for.
struct BoundBytes<'d, 's> {
    data: &'d [u8],
    storages: &'s [Storage],
    /// The pickle's entry, for messages.
    entry: &'s str,
}

impl<'d> StorageBytes<'d> for BoundBytes<'d, '_> {
    fn read(&mut self, id: StorageId, start: u64, len: u64) -> Result<Cow<'d, [u8]>, Error> {
        let fail = |reason: &str| Error::tensor(reason.to_owned(), Location::entry(self.entry));
        let storage =
            |id: StorageId| (self.storages.get(id.index())).ok_or_else(|| fail("unknown storage"));
        let mut s = storage(id)?;
        let mut start = start;
        if let StorageData::View { root, offset } = s.data {
            s = storage(root)?;
            start = start
                .checked_add(offset)
                .ok_or_else(|| fail("storage view offset overflows"))?;
        }
        let end = (start.checked_add(len))
            .filter(|end| *end <= s.decl.nbytes)
            .ok_or_else(|| fail("index tensor reaches outside its storage"))?;
        let to_usize = |v: u64| usize::try_from(v).map_err(|_| fail("storage too large"));
        let payload = (s.data.payload(s.decl.nbytes)).ok_or_else(|| fail("a view of a view storage"))?;
        let bytes = payload.range(self.data, to_usize(start)?, to_usize(end)?, || {
            self.entry.to_owned()
        })?;
        Ok(match s.swap {
            Some(unit) => {
                let mut owned = bytes.into_owned();
                byteswap(&mut owned, unit as usize);
                Cow::Owned(owned)
            }
            None => bytes,
        })
    }
}

fn read_format(
    data: &[u8],
    options: &LoadOptions,
    source: Option<&Source>,
    index: Option<zip::Index>,
) -> Result<Contents, Error> {
    if data.is_empty() {
        return Err(Error::archive("the file is empty", Location::default()));
    }
    if data.starts_with(b"PK\x03\x04") {
        if options.trailing == Trailing::Left {
            return open_zip_in_stream(data, options, source, index);
        }
        return open_zip(data, options, source, index);
    }
    if legacy::is_legacy(data) {
        refuse_legacy_tar(data)?;
        return open_legacy(data, options);
    }
    records::refuse_flatbuffer(data)?;
    if tar::may_be_tar(data) {
        return Err(Error::unsupported(
            "a legacy .tar checkpoint: weights-only loading refuses this format (CVE-2025-32434); \
             load it with torch.load(weights_only=False) only if you trust it",
            Location::at(0),
        ));
    }
    // torch's legacy path unpickles the first pickle before it checks the magic
    // number, so a raw pickle that names a global outside the allowlist is
    // refused for that global, as torch refuses it, not as a corrupt file.
    let first_pickle = legacy::parse(
        data,
        &options.user_globals,
        UnknownGlobals::Refuse,
        &options.limits,
        options.encoding,
    );
    match first_pickle {
        Err(e) if matches!(e.kind(), ErrorKind::Unsafe(_)) => Err(e),
        _ => Err(Error::archive(
            "Invalid magic number; corrupt file? (neither a zip checkpoint nor torch's legacy format)",
            Location::at(0),
        )),
    }
}

/// torch.load tries every file as a tar before its legacy stream, and reads
/// the stream only when `tarfile.open` raises a `TarError`: a legacy file tarfile
/// opens is a polyglot whose tar torch unpickles (whatever the source a load
/// is given: the same bytes in a file are read as the tar).
fn refuse_legacy_tar(data: &[u8]) -> Result<(), Error> {
    match tar::tarfile_open(data) {
        Err(Failure::ReadError(_)) => Ok(()),
        Ok(()) | Err(Failure::Limit(_)) => Err(Error::refused(
            Refusal::UnsafeFile(
                "a legacy checkpoint that is also a tar archive: torch.load reads it first as a \
                 tar (tarfile opens it) and would unpickle its storages member, not the legacy \
                 stream tensorplay reads; such a polyglot is refused"
                    .into(),
            ),
            Location::at(0),
        )),
        Err(Failure::Raises(e)) => Err(Error::archive(
            format!(
                "torch.load cannot read this legacy checkpoint: tarfile.open, which it tries \
                 first, raises {} on it",
                e.name()
            ),
            Location::at(0),
        )),
    }
}

/// A zip at the start of a stream that may go on after it. Read from its end, a
/// stream of several archives gives the last one's end records, whose directory
/// then lies far before them: the archive is read up to the first end record
/// instead. (Searched for first, that end would cost a walk through every entry
/// of the usual stream, a file of its own.)
fn open_zip_in_stream(
    data: &[u8],
    options: &LoadOptions,
    source: Option<&Source>,
    index: Option<zip::Index>,
) -> Result<Contents, Error> {
    let index = index.map_or_else(|| zip::read_index(data, options.limits.max_zip_entries), Ok);
    if !index.as_ref().is_ok_and(|i| i.archive_end.is_some()) {
        let first_end = zip::first_archive_end(data, options.limits.max_zip_entries);
        if let Some(end) = first_end.filter(|end| *end < data.len()) {
            return open_zip(data.get(..end).unwrap_or(data), options, source, None);
        }
    }
    open_zip(data, options, source, Some(index?))
}

fn open_zip(
    data: &[u8],
    options: &LoadOptions,
    source: Option<&Source>,
    index: Option<zip::Index>,
) -> Result<Contents, Error> {
    let index = match index {
        Some(index) => {
            zip::validate(&index)?;
            index
        }
        None => zip::read_index(data, options.limits.max_zip_entries)?,
    };
    let archive_end = index.archive_end.unwrap_or(data.len() as u64);
    let layout = Layout::new(index, data)?;
    // Checking the local headers touched a page of the map for each record. The
    // storages are copied with reads of the file, not through the map, so those
    // pages need not stay in this process while the pickle runs.
    if let Some(source) = source {
        source.release_pages();
    }
    records::refuse_in_zip(&layout)?;
    // A TorchScript archive's data.pkl is made of `__torch__` classes, defined
    // only by the archive's code: stubs stand in for them, so only stub mode
    // reads one (torch.load refuses one too, unless it may run it).
    let torchscript = layout.is_torchscript();
    if torchscript && options.unknown_globals != UnknownGlobals::Stub {
        return Err(Error::unsupported(
            "a TorchScript archive: Cannot use ``weights_only=True`` with TorchScript archives \
             passed to ``torch.load`` (weights-only loading cannot run TorchScript); its tensors load \
             with unknown_globals=\"stub\" (its modules become stubs) or tensorplay.jit_state_dict; \
             use torch.jit.load on trusted files",
            Location::entry(&format!("{}/{}", layout.root, records::CONSTANTS_PKL)),
        ));
    }
    let pkl_entry = layout.entry(records::DATA_PKL).ok_or_else(|| {
        Error::archive(
            format!("the archive has no {} record", records::DATA_PKL),
            Location::entry(&format!("{}/{}", layout.root, records::DATA_PKL)),
        )
    })?;
    let pickle_entry = pkl_entry.name_lossy();
    let mut arena = Arena::new(&options.limits);
    let (parsed, storages) = {
        records::check_method(pkl_entry)?;
        let pkl = pkl_entry.read(data, Limit::PickleBytes, options.limits.max_pickle_bytes)?;
        let mut hooks = TorchHooks::new(
            Refusals::Raise,
            &options.user_globals,
            options.limits,
            IdFormat::Zip,
        )
        .stubbing(options.unknown_globals);
        if torchscript {
            hooks = hooks.in_torchscript();
        }
        let parsed = machine::run(
            &pkl,
            &mut hooks,
            &mut arena,
            &options.limits,
            options.encoding,
        )
        .map_err(|e| e.in_entry(&pickle_entry))?;
        // torch ignores what follows STOP; a second pickle hidden there is how
        // polyglot files fool scanners, and no writer puts anything there.
        if parsed.end < pkl.len() {
            return Err(Error::pickle(
                format!("{} bytes follow the pickle's STOP", pkl.len() - parsed.end),
                Location {
                    entry: Some(pickle_entry),
                    offset: Some(parsed.end as u64),
                    opcode: None,
                },
            ));
        }
        // A TorchScript archive's constants.pkl is read as data.pkl is, with the
        // same policy: its globals are refused as theirs are, and its storages,
        // in constants/, are checked against their records. Its values are not
        // returned (they belong to the archive's code), only checked.
        let data_storages = hooks.storages.decls().len();
        if let Some(entry) = layout.entry(records::CONSTANTS_PKL).filter(|_| torchscript) {
            let name = entry.name_lossy();
            records::check_method(entry)?;
            let pkl = entry.read(data, Limit::PickleBytes, options.limits.max_pickle_bytes)?;
            hooks.storages.forget_keys();
            let constants = machine::run(
                &pkl,
                &mut hooks,
                &mut arena,
                &options.limits,
                options.encoding,
            )
            .map_err(|e| e.in_entry(&name))?;
            if constants.end < pkl.len() {
                return Err(Error::pickle(
                    format!(
                        "{} bytes follow the pickle's STOP",
                        pkl.len() - constants.end
                    ),
                    Location {
                        entry: Some(name),
                        offset: Some(constants.end as u64),
                        opcode: None,
                    },
                ));
            }
        }
        (
            parsed,
            (
                hooks.storages,
                hooks.stubs.unwrap_or_default(),
                data_storages,
            ),
        )
    };
    let (storages, stubs, data_storages) = storages;
    let file_order = layout.byteorder.unwrap_or(match options.endianness {
        Endianness::Little => ByteOrder::Little,
        Endianness::Big => ByteOrder::Big,
        Endianness::Native => ByteOrder::native(),
    });
    let mut inflated = 0u64;
    let storages = bind_storages(storages, file_order, |id, decl| {
        let constant = id.index() >= data_storages;
        let entry = match &decl.key {
            _ if constant => layout.entry(&format!("{}{}", records::CONSTANTS_FOLDER, decl.key)),
            StorageKey::Number(n) => layout.storage_entry(*n),
            StorageKey::Text(key) => layout.entry(&records::storage_record(key)),
        };
        let entry = entry.ok_or_else(|| {
            let record = if constant {
                format!("{}{}", records::CONSTANTS_FOLDER, decl.key)
            } else {
                records::storage_record(&decl.key)
            };
            Error::archive(
                format!("storage '{}' has no record {record}", decl.key),
                Location::entry(&format!("{}/{record}", layout.root)),
            )
        })?;
        let entry_name = || entry.name_lossy();
        if entry.uncompressed_size != decl.nbytes {
            return Err(Error::tensor(
                format!(
                    "record size ({} bytes) does not match the {} bytes the pickle declares ({} x {})",
                    entry.uncompressed_size,
                    decl.nbytes,
                    decl.nbytes / decl.dtype.itemsize().max(1),
                    decl.dtype.name(),
                ),
                Location::entry(&entry_name()),
            ));
        }
        records::check_method(entry)?;
        let data = match entry.method {
            Method::Stored if entry.compressed_size == entry.uncompressed_size => {
                StorageData::Stored {
                    offset: entry.data_offset,
                }
            }
            Method::Stored => {
                return Err(Error::archive(
                    "stored entry with differing sizes",
                    Location::entry(&entry_name()),
                ))
            }
            // DEFLATE: `check_method` lets nothing else through.
            _ => {
                check_ratio(entry.compressed_size, decl.nbytes, &entry_name())?;
                inflated = inflated.saturating_add(decl.nbytes);
                check_limit(
                    Limit::InflatedBytes,
                    inflated,
                    options.limits.max_inflated_bytes,
                    || Location::entry(&entry_name()),
                )?;
                StorageData::Deflated {
                    offset: entry.data_offset,
                    compressed: entry.compressed_size,
                }
            }
        };
        Ok((data, entry_name))
    })?;
    Ok(Contents {
        arena,
        root: parsed.root,
        storages,
        protocol: parsed.protocol,
        pickle_entry,
        format: Format::Zip,
        end: archive_end,
        stubs,
    })
}

fn open_legacy(data: &[u8], options: &LoadOptions) -> Result<Contents, Error> {
    let parsed = legacy::parse(
        data,
        &options.user_globals,
        options.unknown_globals,
        &options.limits,
        options.encoding,
    )?;
    if options.trailing == Trailing::Refused && parsed.end < data.len() as u64 {
        return Err(Error::archive(
            format!(
                "the file goes on for {} bytes after the last storage",
                data.len() as u64 - parsed.end
            ),
            Location::at(parsed.end),
        ));
    }
    let offsets = parsed.offsets;
    // Legacy payloads are always little-endian, whatever machine wrote them.
    let storages = bind_storages(parsed.storages, ByteOrder::Little, |id, decl| {
        let offset = offsets.get(&id).copied().ok_or_else(|| {
            Error::archive(
                format!("storage '{}' has no data", decl.key),
                Location::default(),
            )
        })?;
        let key = decl.key.clone();
        Ok((StorageData::Stored { offset }, move || {
            format!("legacy storage '{key}'")
        }))
    })?;
    Ok(Contents {
        arena: parsed.arena,
        root: parsed.root,
        storages,
        protocol: parsed.protocol,
        pickle_entry: "legacy main pickle".into(),
        format: Format::Legacy,
        end: parsed.end,
        stubs: parsed.stubs,
    })
}

/// Bind every declared storage to where its bytes are; legacy sub-storages become
/// views of their roots. `locate` gives the bytes and, for messages, a maker of
/// the entry's name: naming every storage up front cost an allocation each.
fn bind_storages<Name: FnOnce() -> String>(
    storages: Storages,
    file_order: ByteOrder,
    mut locate: impl FnMut(StorageId, &StorageDecl) -> Result<(StorageData, Name), Error>,
) -> Result<Vec<Storage>, Error> {
    let (mut decls, views) = storages.into_parts();
    align_roots_for_views(&mut decls, &views)?;
    let mut view_of = vec![None; decls.len()];
    for (view, root, offset) in views {
        if let Some(slot @ None) = view_of.get_mut(view.index()) {
            *slot = Some((root, offset));
        }
    }
    let mut out = Vec::with_capacity(decls.len());
    for (i, (decl, view)) in decls.into_iter().zip(view_of).enumerate() {
        if let Some((root, offset)) = view {
            out.push(Storage {
                decl,
                data: StorageData::View { root, offset },
                swap: None,
            });
            continue;
        }
        let (data, entry_name) = locate(StorageId(i as u32), &decl)?;
        let swap = match decl.view_itemsize {
            _ if file_order == ByteOrder::native() => None,
            Some(0) => {
                return Err(Error::tensor(
                    "tensors of different element sizes view one big-endian storage; it cannot be byte-swapped",
                    Location::entry(&entry_name()),
                ))
            }
            Some(unit) => Some(unit),
            None => Some(decl.dtype.swap_unit()),
        }
        .filter(|unit| *unit > 1);
        out.push(Storage { decl, data, swap });
    }
    Ok(out)
}

/// A legacy view's tensors live in its root's memory: the root is used in place
/// only when aligned for them too, and the view must start aligned within it
/// (no placement of the root can fix a view that does not).
fn align_roots_for_views(
    decls: &mut [StorageDecl],
    views: &[(StorageId, StorageId, u64)],
) -> Result<(), Error> {
    for &(view, root, offset) in views {
        let Some(view) = decls.get(view.index()) else {
            continue;
        };
        let needs = view.alignment();
        if offset % needs != 0 {
            let root_key = decls
                .get(root.index())
                .map_or("?".into(), |d| d.key.to_string());
            return Err(Error::tensor(
                format!(
                    "legacy view '{}' starts {offset} bytes into its storage, not a multiple of its element alignment {needs}",
                    view.key
                ),
                Location::entry(&format!("legacy storage '{root_key}'")),
            ));
        }
        if let Some(root) = decls.get_mut(root.index()) {
            root.view_alignment = root.view_alignment.max(needs);
        }
    }
    Ok(())
}

impl Checkpoint {
    /// Where a storage's bytes are, for error messages.
    pub fn entry_of(&self, s: &Storage) -> String {
        match (&s.data, self.format) {
            (StorageData::View { root, .. }, _) => format!("view of storage #{}", root.index()),
            (_, Format::Zip) => {
                let root = (self.pickle_entry.rsplit_once('/'))
                    .map_or(&*self.pickle_entry, |(root, _)| root);
                format!("{root}/data/{}", s.decl.key)
            }
            (_, Format::Legacy) => format!("legacy storage '{}'", s.decl.key),
        }
    }

    pub fn storage(&self, id: StorageId) -> Option<&Storage> {
        self.storages.get(id.index())
    }

    /// The byte range of a storage that can be used in place: stored, in native byte
    /// order, and aligned for its element type and every tensor viewing it.
    pub fn mapped_range(&self, id: StorageId) -> Option<(usize, usize)> {
        let s = self.storage(id)?;
        match s.data {
            StorageData::Stored { offset } if s.swap.is_none() => {
                if offset % s.decl.alignment() != 0 {
                    return None;
                }
                let start = usize::try_from(offset).ok()?;
                Some((start, usize::try_from(s.decl.nbytes).ok()?))
            }
            _ => None,
        }
    }

    /// Where a storage's record data starts in the file (torch's `_checkpoint_offset`).
    pub fn data_offset(&self, id: StorageId) -> Option<u64> {
        match self.storage(id)?.data {
            StorageData::Stored { offset } | StorageData::Deflated { offset, .. } => Some(offset),
            StorageData::View { root, offset } => self.data_offset(root)?.checked_add(offset),
        }
    }

    /// Copy (inflating and byte-swapping as needed) a whole storage into `dst`.
    pub fn read_storage(&self, id: StorageId, dst: &mut [u8]) -> Result<(), Error> {
        let s = self
            .storage(id)
            .ok_or_else(|| Error::tensor("unknown storage", Location::default()))?;
        if dst.len() as u64 != s.decl.nbytes {
            return Err(Error::tensor(
                "destination size differs from the storage size",
                Location::entry(&self.entry_of(s)),
            ));
        }
        let payload = s.data.payload(s.decl.nbytes).ok_or_else(|| {
            Error::tensor(
                "a view storage is read through its root",
                Location::entry(&self.entry_of(s)),
            )
        })?;
        payload.read_into(&*self.source, dst, || self.entry_of(s))?;
        if let Some(unit) = s.swap {
            byteswap(dst, unit as usize);
        }
        Ok(())
    }

    /// Read a chunk `[start, start+dst.len())` of a stored storage: lets big storages
    /// be copied by several threads.
    pub fn read_stored_chunk(
        &self,
        id: StorageId,
        start: usize,
        dst: &mut [u8],
    ) -> Result<(), Error> {
        let s = self
            .storage(id)
            .ok_or_else(|| Error::tensor("unknown storage", Location::default()))?;
        let Some(payload) = (s.data.payload(s.decl.nbytes)).filter(|p| p.method == Method::Stored)
        else {
            return Err(Error::tensor(
                "only stored storages can be read in chunks",
                Location::entry(&self.entry_of(s)),
            ));
        };
        payload.read_range_into(&*self.source, start as u64, dst, || self.entry_of(s))?;
        if let Some(unit) = s.swap {
            byteswap(dst, unit as usize);
        }
        Ok(())
    }
}

/// The parameter and buffer lists of every module class of the TorchScript
/// archive `data`, read from its `code/` records by
/// [`records::module_lists`] (nothing else there is read). The code
/// read is charged to `max_pickle_bytes`, as the archive's pickles are.
pub fn torchscript_module_lists(
    data: &[u8],
    limits: &Limits,
) -> Result<Vec<records::ModuleLists>, Error> {
    records::refuse_flatbuffer(data)?;
    let index = zip::read_index(data, limits.max_zip_entries)?;
    zip::validate(&index)?;
    let layout = Layout::new(index, data)?;
    records::refuse_in_zip(&layout)?;
    if !layout.is_torchscript() {
        return Err(Error::unsupported(
            format!(
                "not a TorchScript archive: it has no {} record",
                records::CONSTANTS_PKL
            ),
            Location::entry(&format!("{}/{}", layout.root, records::CONSTANTS_PKL)),
        ));
    }
    let root = layout.root.as_bytes();
    let mut out = Vec::new();
    let mut read = 0u64;
    for entry in &layout.entries {
        let module = (records::record_of(root, &entry.name))
            .and_then(|r| std::str::from_utf8(r).ok())
            .and_then(records::code_module);
        let Some(module) = module else { continue };
        let name = entry.name_lossy();
        records::check_method(entry)?;
        read = read.saturating_add(entry.uncompressed_size);
        check_limit(Limit::PickleBytes, read, limits.max_pickle_bytes, || {
            Location::entry(&name)
        })?;
        let code = entry.read(data, Limit::PickleBytes, limits.max_pickle_bytes)?;
        out.extend(records::module_lists(&code, &module, &name)?);
    }
    Ok(out)
}

/// Reverse the bytes of every `unit`-sized element.
pub fn byteswap(bytes: &mut [u8], unit: usize) {
    if unit > 1 {
        for chunk in bytes.chunks_exact_mut(unit) {
            chunk.reverse();
        }
    }
}
