//! The checks torch makes of a checkpoint's layout on every load: one root
//! folder holding `data.pkl`, `version`, `byteorder`, `data/<key>` and friends,
//! records looked up under the root ignoring ASCII case; names that lookup would
//! make ambiguous are refused.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::archive::zip::{Entry, Index};
use crate::error::{Error, Location};
use crate::limits::Limit;
use crate::torch::records::{
    check_method, folded, record_of, storage_record, BYTEORDER, CONSTANTS_PKL, DATA_VERSION,
    SERIALIZATION_ID, STORAGE_ALIGNMENT, STORAGE_FOLDER, VERSION,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    pub fn native() -> ByteOrder {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }
}

/// A torch zip checkpoint's records, located and checked.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: String,
    pub entries: Vec<Entry>,
    by_record: HashMap<String, usize>,
    /// `data/<n>` records by `n`: torch names storages by number, so finding one
    /// is an index instead of a hash of its name.
    numbered: Vec<Option<usize>>,
    pub version: u64,
    pub byteorder: Option<ByteOrder>,
    /// Every pickle in the archive (`data.pkl`, and TorchScript's `constants.pkl` etc.).
    pub pickles: Vec<usize>,
}

impl Layout {
    pub fn new(index: Index, data: &[u8]) -> Result<Layout, Error> {
        let first = index
            .entries
            .first()
            .ok_or_else(|| Error::archive("the archive has no entries", Location::default()))?;
        let first_name = std::str::from_utf8(&first.name).map_err(|_| {
            Error::archive("entry name is not UTF-8", Location::at(first.header_offset))
        })?;
        let root = match first_name.split_once('/') {
            Some((root, _)) => root.to_owned(),
            None => {
                return Err(Error::archive(
                    format!("file in archive is not in a subdirectory: {first_name}"),
                    Location::entry(first_name),
                ))
            }
        };
        let prefix = format!("{root}/");
        let mut by_record = HashMap::new();
        let mut numbered = vec![None; index.entries.len()];
        let mut pickles = Vec::new();
        for (i, entry) in index.entries.iter().enumerate() {
            let name = std::str::from_utf8(&entry.name).map_err(|_| {
                Error::archive("entry name is not UTF-8", Location::at(entry.header_offset))
            })?;
            let record = name.strip_prefix(&prefix).ok_or_else(|| {
                Error::archive(
                    format!("file in archive is not in a subdirectory {prefix}: {name}"),
                    Location::entry(name),
                )
            })?;
            // torch looks records up ignoring ASCII case, so records are keyed by
            // their folded names: `DATA.PKL` is the main pickle, and two names that
            // differ only in case, which would let the file choose which one a
            // reader sees, are refused.
            // Most records are storages named as torch names them: no folding.
            let (record, number) = match storage_number(record, index.entries.len()) {
                Some(n) => (Cow::Borrowed(record), Some(n)),
                None => {
                    let record = folded(record);
                    let number = storage_number(&record, index.entries.len());
                    (record, number)
                }
            };
            if record.ends_with(".pkl") {
                pickles.push(i);
            }
            let slot = number.and_then(|n| numbered.get_mut(n));
            let previous = match slot {
                Some(slot) => slot.replace(i),
                None => by_record.insert(record.into_owned(), i),
            };
            if let Some(previous) = previous.and_then(|p| index.entries.get(p)) {
                let why = if previous.name == entry.name {
                    "duplicate entry name"
                } else {
                    "two records whose names differ only in case"
                };
                return Err(Error::archive(why, Location::entry(name)));
            }
        }
        let mut layout = Layout {
            root,
            entries: index.entries,
            by_record,
            numbered,
            version: 0,
            byteorder: None,
            pickles,
        };
        let version_record = if layout.entry(DATA_VERSION).is_some() {
            DATA_VERSION
        } else {
            VERSION
        };
        let version_entry = layout.entry(version_record).ok_or_else(|| {
            Error::archive(
                "the archive has no 'version' record",
                Location::entry(&format!("{}/{VERSION}", layout.root)),
            )
        })?;
        layout.version = parse_version(
            &layout.small_record(version_entry, data)?,
            &layout.entry_name(version_entry),
        )?;
        if let Some(e) = layout.entry(BYTEORDER) {
            layout.byteorder = Some(match &*layout.small_record(e, data)? {
                b"little" => ByteOrder::Little,
                b"big" => ByteOrder::Big,
                other => {
                    return Err(Error::archive(
                        format!(
                            "Unknown endianness type: {}",
                            String::from_utf8_lossy(other)
                        ),
                        Location::entry(&layout.entry_name(e)),
                    ))
                }
            });
        }
        // torch parses the alignment with Python's int() on every load, and hands
        // the serialization id to Python as a str when the load ends: a record
        // either cannot read fails torch's load.
        if let Some(e) = layout.entry(STORAGE_ALIGNMENT) {
            let text = layout.small_record(e, data)?;
            if !is_python_int(&text) {
                return Err(Error::archive(
                    format!(
                        "the storage alignment {:?} is not an integer",
                        String::from_utf8_lossy(&text)
                    ),
                    Location::entry(&layout.entry_name(e)),
                ));
            }
        }
        if let Some(e) = layout.entry(SERIALIZATION_ID) {
            if std::str::from_utf8(&layout.small_record(e, data)?).is_err() {
                return Err(Error::archive(
                    "the serialization id is not UTF-8",
                    Location::entry(&layout.entry_name(e)),
                ));
            }
        }
        Ok(layout)
    }

    /// The entry of `record` (a name relative to the root folder), in any case.
    pub fn entry(&self, record: &str) -> Option<&Entry> {
        let record = folded(record);
        let index = match storage_number(&record, self.numbered.len()) {
            Some(n) => self.numbered.get(n).copied().flatten(),
            None => self.by_record.get(&*record).copied(),
        };
        index.and_then(|i| self.entries.get(i))
    }

    /// The entry of record `data/<n>`: [`Layout::entry`] without writing the
    /// name and reading the number back, for the storages torch numbers.
    pub fn storage_entry(&self, n: u32) -> Option<&Entry> {
        let n = n as usize;
        let index = if n < self.numbered.len() {
            self.numbered.get(n).copied().flatten()
        } else {
            self.by_record.get(&storage_record(n)).copied()
        };
        index.and_then(|i| self.entries.get(i))
    }

    pub fn entry_name(&self, entry: &Entry) -> String {
        entry.name_lossy()
    }

    /// torch asks this of its list of record names, where case counts.
    pub fn is_torchscript(&self) -> bool {
        self.entry(CONSTANTS_PKL).is_some_and(|e| {
            record_of(self.root.as_bytes(), &e.name) == Some(CONSTANTS_PKL.as_bytes())
        })
    }

    /// The bytes of a small metadata record (`version`, `byteorder`), inflated if needed.
    fn small_record<'d>(&self, entry: &Entry, data: &'d [u8]) -> Result<Cow<'d, [u8]>, Error> {
        const MAX: u64 = 4096;
        if entry.uncompressed_size > MAX || entry.compressed_size > MAX {
            return Err(Error::archive(
                "metadata record is too large",
                Location::entry(&entry.name_lossy()),
            ));
        }
        check_method(entry)?;
        entry.read(data, Limit::InflatedBytes, MAX)
    }
}

/// `n` of a `data/<n>` record written as torch writes numbers (no sign, no
/// leading zero), when `n < bound`.
fn storage_number(record: &str, bound: usize) -> Option<usize> {
    let digits = record.strip_prefix(STORAGE_FOLDER)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical || digits.len() > 19 {
        return None;
    }
    digits.parse::<usize>().ok().filter(|n| *n < bound)
}

/// What Python's `int(bytes)` accepts in base 10: blanks, a sign, then digits
/// with single underscores between them, then blanks.
fn is_python_int(bytes: &[u8]) -> bool {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !blank(b))
        .map_or(start, |i| i + 1);
    let text = bytes.get(start..end).unwrap_or_default();
    let digits = text
        .strip_prefix(b"+")
        .or_else(|| text.strip_prefix(b"-"))
        .unwrap_or(text);
    digits
        .split(|&b| b == b'_')
        .all(|run| !run.is_empty() && run.iter().all(u8::is_ascii_digit))
}

/// torch parses `version` with C++'s `stoull`: leading blanks, digits, anything after.
fn parse_version(bytes: &[u8], entry: &str) -> Result<u64, Error> {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim_start();
    let digits: String = trimmed.chars().take_while(|c| c.is_ascii_digit()).collect();
    let version = digits.parse::<u64>().map_err(|_| {
        Error::archive(
            format!("Couldn't parse the version {text:?} as an integer"),
            Location::entry(entry),
        )
    })?;
    if !(1..=10).contains(&version) {
        return Err(Error::unsupported(
            format!("checkpoint version {version}: versions 1 to 10 are supported"),
            Location::entry(entry),
        ));
    }
    Ok(version)
}
