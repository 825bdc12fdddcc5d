//! torch's records inside a checkpoint zip: their names, how torch finds them
//! (in the first entry's folder, ignoring ASCII case), which compression it reads,
//! and the checks it makes of the layout on every load ([`Layout`]). Loads, scans
//! and saves all take these from here.

mod foreign;
mod layout;
mod pt2;
mod torchscript;

use std::borrow::Cow;

use crate::archive::method::Method;
use crate::archive::zip::{Entry, Wanted};
use crate::error::{Error, Location};

pub use foreign::{
    is_export_program, is_mobile_flatbuffer, refuse_flatbuffer, refuse_in_zip, ArchiveKind, Names,
    NamesReading, AOTI_REASON, MOBILE_REASON, PACKAGE_REASON,
};
pub use layout::{ByteOrder, Layout};
pub use pt2::{pt2_config_folder, pt2_config_records, Pt2Record};
pub use torchscript::{code_module, module_lists, ModuleLists};

pub const DATA_PKL: &str = "data.pkl";
pub const VERSION: &str = "version";
/// Where torch 2.x may keep the version instead (`.data/version`).
pub const DATA_VERSION: &str = ".data/version";
pub const BYTEORDER: &str = "byteorder";
pub const FORMAT_VERSION: &str = ".format_version";
pub const STORAGE_ALIGNMENT: &str = ".storage_alignment";
pub const SERIALIZATION_ID: &str = ".data/serialization_id";
/// TorchScript's constants: their presence makes an archive TorchScript.
pub const CONSTANTS_PKL: &str = "constants.pkl";
/// The folder of the storage records, `data/<key>`.
pub const STORAGE_FOLDER: &str = "data/";
/// The folder of the storages of a TorchScript archive's `constants.pkl`.
pub const CONSTANTS_FOLDER: &str = "constants/";

/// torch.export's archives (`.pt2`) say what they are in this record, beside no data.pkl.
pub const PT2_ARCHIVE_FORMAT: &str = "archive_format";
/// The folders of a `.pt2`'s weights and constants: raw tensor bytes, or a
/// `torch.save` archive where the archive's JSON config says `use_pickle`.
pub const PT2_TENSOR_FOLDERS: [&str; 2] = ["data/weights/", "data/constants/"];
/// The folder of a torch.export archive's programs: `models/<name>.json` each.
pub const PT2_MODELS_FOLDER: &str = "models/";

/// The small records torch writes beside data.pkl and the storages.
const METADATA: [&str; 6] = [
    VERSION,
    DATA_VERSION,
    BYTEORDER,
    FORMAT_VERSION,
    STORAGE_ALIGNMENT,
    SERIALIZATION_ID,
];

/// The record of storage `key`.
pub fn storage_record(key: impl std::fmt::Display) -> String {
    format!("{STORAGE_FOLDER}{key}")
}

/// `record` in ASCII lower case, as torch's record lookup compares names.
pub fn folded(record: &str) -> Cow<'_, str> {
    if record.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(record.to_ascii_lowercase())
    } else {
        Cow::Borrowed(record)
    }
}

/// The top folder of an entry name, if it lies in one: a checkpoint's root is
/// its first entry's.
pub fn root_of(name: &[u8]) -> Option<&[u8]> {
    name.get(..name.iter().position(|&b| b == b'/')?)
}

/// `name` less its `<root>/`, when it lies under the root folder.
pub fn record_of<'n>(root: &[u8], name: &'n [u8]) -> Option<&'n [u8]> {
    name.strip_prefix(root)?.strip_prefix(b"/")
}

/// Whether `name` is `<root>/<record>`, in any case: torch's lookup ignores ASCII
/// case, so `archive/DATA.PKL` is the pickle it runs.
pub fn is_record(root: &[u8], name: &[u8], record: &str) -> bool {
    record_of(root, name).is_some_and(|r| r.eq_ignore_ascii_case(record.as_bytes()))
}

/// The folder of a TorchScript archive's code, which `torch.jit.load` compiles.
pub const CODE_FOLDER: &str = "code/";

/// Whether `record` (a name under the root) is one of the pickles a TorchScript
/// archive's own unpickler reads: `data.pkl`, `constants.pkl`, others of its
/// `*.pkl` (`traced_inputs.pkl`) and the `code/` folder's `*.debug_pkl`. In
/// those, `torch.jit._pickle`'s builders are data. Case counts: a mis-cased
/// name keeps them flagged, the safe side.
pub fn is_torchscript_pickle(record: &[u8]) -> bool {
    record.ends_with(b".pkl") || record.ends_with(b".debug_pkl")
}

/// Storage records and small metadata of a checkpoint: never unpickled.
/// Inlined: it is asked once per entry, for tens of thousands of entries.
#[inline(always)]
pub fn is_payload(root: Option<&[u8]>, name: &[u8]) -> bool {
    let Some(record) = root.and_then(|r| record_of(r, name)) else {
        return false;
    };
    is_storage_record(record)
        || METADATA
            .iter()
            .any(|m| m.as_bytes().eq_ignore_ascii_case(record))
}

/// Whether `record` (a name under the root) is a storage's, `data/<key>` in any
/// case, as `torch.save` names them: a key of one name, no folder. Other readers
/// keep pickles in deeper folders of `data/` (torch.export's `data/weights/`,
/// `data/constants/`, `data/sample_inputs/`), which are read as any member is.
#[inline(always)]
pub fn is_storage_record(record: &[u8]) -> bool {
    let folder = STORAGE_FOLDER.as_bytes();
    // The exact prefix first: most records are storages, named as torch names them.
    let in_folder = record.starts_with(folder)
        || record
            .get(..folder.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(folder));
    in_folder && (record.get(folder.len()..)).is_some_and(|key| !key.contains(&b'/'))
}

/// A record of the checkpoint, as [`crate::archive::zip::find_record`] looks for it.
pub struct Record(pub &'static str);

impl Wanted for Record {
    fn name_in(&self, first: &[u8]) -> String {
        let root = root_of(first).unwrap_or(first);
        format!("{}/{}", String::from_utf8_lossy(root), self.0)
    }

    /// torch's lookup ignores ASCII case: any spelling is the record.
    fn is(&self, wanted: &[u8], name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(wanted)
    }

    fn what(&self) -> &str {
        self.0
    }
}

/// torch reads records through miniz, which knows stored and DEFLATE entries only.
pub fn check_method(entry: &Entry) -> Result<(), Error> {
    match entry.method {
        Method::Stored | Method::Deflate => Ok(()),
        other => Err(Error::unsupported(
            other.to_string(),
            Location::entry(&entry.name_lossy()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_found_in_any_case_under_the_root() {
        assert!(is_record(b"archive", b"archive/DATA.pkl", DATA_PKL));
        assert!(!is_record(b"archive", b"other/data.pkl", DATA_PKL));
        assert!(!is_record(b"archive", b"archive/data.pkl2", DATA_PKL));
        assert!(is_payload(Some(b"a"), b"a/Data/0"));
        assert!(!is_payload(Some(b"a"), b"a/data/weights/weight_0"));
        assert!(!is_payload(Some(b"a"), b"a/data/aotinductor/model/x.so"));
        assert!(is_payload(Some(b"a"), b"a/.DATA/VERSION"));
        assert!(!is_payload(Some(b"a"), b"a/data.pkl"));
        assert_eq!(
            Record(DATA_PKL).name_in(b"archive/version"),
            "archive/data.pkl"
        );
        assert_eq!(storage_record(7), "data/7");
    }
}
