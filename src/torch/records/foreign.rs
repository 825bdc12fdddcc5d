//! The zips torch writes that are no checkpoint, each read by a reader of its
//! own ([`ArchiveKind`]): TorchScript, torch.export's `.pt2`, and those that hold
//! code their reader runs: `torch.package` archives (`PackageImporter` imports
//! the Python modules they carry, and their pickles name those modules'
//! classes), AOTInductor packages (compiled code) and mobile (lite interpreter)
//! bytecode (`_save_for_lite_interpreter`; torch's mobile loader runs it).
//! Recognised here, once: loads refuse the last three by name and scans never
//! call them clean.

use crate::error::{Error, Location};
use crate::torch::records::{
    is_storage_record, record_of, root_of, Layout, CODE_FOLDER, CONSTANTS_PKL, DATA_PKL,
    PT2_ARCHIVE_FORMAT,
};

/// The record a `torch.package` archive always has (beside `.data/version`).
pub const PACKAGE_EXTERN_MODULES: &str = ".data/extern_modules";
/// The mobile bytecode of a zip written for the lite interpreter.
pub const MOBILE_BYTECODE_PKL: &str = "bytecode.pkl";
/// The file identifier of the flatbuffer form (`_use_flatbuffer=True`), after
/// the root table's offset.
const FLATBUFFER_ID: &[u8] = b"PTMF";

pub const PACKAGE_REASON: &str =
    "a torch.package archive: torch.package.PackageImporter imports the \
     Python modules it carries to unpickle it, so it runs the archive's code";
pub const MOBILE_REASON: &str = "mobile (lite interpreter) bytecode: torch's mobile loader runs it";

/// Is `data` mobile bytecode in flatbuffer form: the root table's offset (inside
/// the file), then `PTMF`?
pub fn is_mobile_flatbuffer(data: &[u8]) -> bool {
    let (Some(offset), Some(id)) = (data.first_chunk::<4>(), data.get(4..8)) else {
        return false;
    };
    let offset = u32::from_le_bytes(*offset);
    id == FLATBUFFER_ID && offset >= 8 && (offset as u64) < data.len() as u64
}

/// A load's refusal of a flatbuffer of mobile bytecode.
pub fn refuse_flatbuffer(data: &[u8]) -> Result<(), Error> {
    if is_mobile_flatbuffer(data) {
        return Err(refusal(
            "mobile (lite interpreter) bytecode in flatbuffer form",
            "tensorplay scan reports it",
            Location::at(0),
        ));
    }
    Ok(())
}

/// A load's refusal of a zip that is a `torch.package` archive, an AOTInductor
/// package, or mobile bytecode with no full TorchScript archive beside it
/// ([`ArchiveKind::of`]). A lite-interpreter zip as torch writes it is also a
/// TorchScript archive (`data.pkl`, `constants.pkl`, `code/`), which
/// `torch.jit.load` reads: that part is read as TorchScript.
pub fn refuse_in_zip(layout: &Layout) -> Result<(), Error> {
    let at = |record: &str| Location::entry(&format!("{}/{record}", layout.root));
    let names = layout.entries.iter().map(|e| &e.name[..]);
    match ArchiveKind::of(names) {
        Some(ArchiveKind::TorchPackage) => Err(refusal(
            "a torch.package archive",
            READS_PICKLES,
            at(PACKAGE_EXTERN_MODULES),
        )),
        Some(ArchiveKind::AotInductor) => Err(refusal(AOTI_REASON, READS_PICKLES, at(AOTI_FOLDER))),
        Some(ArchiveKind::MobileBytecode) => Err(refusal(
            "mobile (lite interpreter) bytecode with no TorchScript archive beside it",
            READS_PICKLES,
            at(MOBILE_BYTECODE_PKL),
        )),
        _ => Ok(()),
    }
}

const READS_PICKLES: &str = "tensorplay scan reads every pickle in it";

fn refusal(what: &str, scan: &str, at: Location) -> Error {
    Error::unsupported(
        format!(
            "{what}: out of scope for weights-only loading, which never runs or imports code \
             from a file; {scan}"
        ),
        at,
    )
}

/// The folder of an AOTInductor package's compiled model, inside a `.pt2`.
pub const AOTI_FOLDER: &str = "data/aotinductor/";
/// Compiled code or its source, which only an AOTInductor package holds.
const AOTI_CODE_SUFFIXES: [&str; 6] = [".so", ".dll", ".dylib", ".cpp", ".wrapper", ".cubin"];
/// The program of the archives torch 2.6 and 2.7 wrote, at the zip's top level beside `version`.
pub const OLD_EXPORT_PROGRAM: &str = "serialized_exported_program.json";

/// A torch.export program that `torch.export.load` deserializes, in a zip whose
/// torch.export root is `pt2_root`: every member under `<root>/models/` (it
/// reads them all, naming each model by its member's name less five
/// characters, whatever they are), and a top-level `serialized_exported_program.json`
/// (torch 2.6 and 2.7's layout, which it also falls back to when a root folder
/// sits beside a top-level member) in any zip.
pub fn is_export_program(pt2_root: Option<&[u8]>, name: &[u8]) -> bool {
    let in_models = pt2_root
        .and_then(|r| record_of(r, name))
        .and_then(|record| record.strip_prefix(super::PT2_MODELS_FOLDER.as_bytes()))
        .is_some_and(|rest| !rest.is_empty() && !rest.ends_with(b"/"));
    in_models || name == OLD_EXPORT_PROGRAM.as_bytes()
}

pub const AOTI_REASON: &str =
    "an AOTInductor package: torch._inductor.aoti_load_package loads the \
     compiled code it carries and runs it to read its weights";

/// What a zip torch wrote is for, by its entries' names, as each reader decides
/// (the root is the first entry's folder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveKind {
    /// `torch.package` (`PackageImporter` imports its modules).
    TorchPackage,
    /// A `.pt2` holding compiled code (`aoti_load_package` runs it).
    AotInductor,
    /// A torch.export `.pt2` (torch 2.8 on: an `archive_format` record under the root).
    Export,
    /// A torch.export archive of torch 2.6 and 2.7 (its program at the top level).
    OldExport,
    /// TorchScript as `torch.load` hands it to `torch.jit.load` (`constants.pkl`, exactly).
    TorchScript,
    /// Lite interpreter bytecode with no full TorchScript archive beside it.
    MobileBytecode,
}

impl ArchiveKind {
    pub fn name(self) -> &'static str {
        match self {
            ArchiveKind::TorchPackage => "torch_package",
            ArchiveKind::AotInductor => "aoti",
            ArchiveKind::Export => "pt2",
            ArchiveKind::OldExport => "pt2_zip",
            ArchiveKind::TorchScript => "torchscript",
            ArchiveKind::MobileBytecode => "mobile_bytecode",
        }
    }

    /// What `names` are the entries of; `None` for a checkpoint or any other zip.
    pub fn of<'n>(names: impl Iterator<Item = &'n [u8]> + Clone) -> Option<ArchiveKind> {
        Names::of(names).kind()
    }
}

/// What the names of a zip's entries say, read in one pass (the root is the
/// first entry's folder): enough for [`ArchiveKind`] and the scan's problems.
#[derive(Clone, Copy, Debug, Default)]
pub struct Names {
    /// `.data/extern_modules`: a `torch.package` archive.
    pub package: bool,
    /// `bytecode.pkl`: mobile bytecode.
    pub mobile: bool,
    aoti_folder: bool,
    archive_format: bool,
    compiled_code: bool,
    old_program: bool,
    top_version: bool,
    /// A record named exactly `constants.pkl`, as `torch.load` asks.
    constants_exact: bool,
    /// `constants.pkl` and `code/` in any case, as `torch.jit.load` finds them.
    constants_any: bool,
    code: bool,
    /// `data.pkl` under the root, in any case: the pickle `torch.load` runs.
    pub data_pkl: bool,
}

impl Names {
    pub fn of<'n>(names: impl Iterator<Item = &'n [u8]> + Clone) -> Names {
        let mut reading = NamesReading::default();
        for name in names.clone() {
            reading.add(name);
        }
        reading.finish(names)
    }

    pub fn kind(&self) -> Option<ArchiveKind> {
        if self.package {
            Some(ArchiveKind::TorchPackage)
        } else if self.aoti_folder || (self.archive_format && self.compiled_code) {
            Some(ArchiveKind::AotInductor)
        } else if self.archive_format {
            Some(ArchiveKind::Export)
        } else if self.old_program && self.top_version {
            Some(ArchiveKind::OldExport)
        } else if self.constants_exact && self.data_pkl {
            Some(ArchiveKind::TorchScript)
        } else {
            self.mobile.then_some(ArchiveKind::MobileBytecode)
        }
    }

    /// Whether `torch.jit.load` reads the archive as TorchScript: a
    /// `constants.pkl` and code, in any case (without code it has nothing to run).
    pub fn is_jit_archive(&self) -> bool {
        self.constants_any && self.code
    }
}

/// [`Names`] read one name at a time, in the archive's order, for a caller that
/// makes its own pass over the names (the scan's, which also sorts out the
/// entries never unpickled): one pass, where two cost a tenth of a pickles-only scan.
#[derive(Default)]
pub struct NamesReading<'n> {
    /// The first entry's folder, once the first name is in.
    root: Option<Option<&'n [u8]>>,
    seen: Names,
}

impl<'n> NamesReading<'n> {
    /// Takes in the next name; whether it is a storage record (`data/<key>`
    /// under the first entry's folder, [`is_storage_record`]).
    pub fn add(&mut self, name: &'n [u8]) -> bool {
        let root = *self.root.get_or_insert_with(|| root_of(name));
        let seen = &mut self.seen;
        let Some(record) = root.and_then(|r| record_of(r, name)) else {
            seen.old_program |= name == OLD_EXPORT_PROGRAM.as_bytes();
            seen.top_version |= name == b"version";
            return false;
        };
        // Most names of a big archive are storages, which say nothing more.
        if is_storage_record(record) {
            return true;
        }
        let is = |wanted: &str| record.eq_ignore_ascii_case(wanted.as_bytes());
        seen.package |= is(PACKAGE_EXTERN_MODULES);
        seen.mobile |= is(MOBILE_BYTECODE_PKL);
        seen.aoti_folder |= record.starts_with(AOTI_FOLDER.as_bytes());
        seen.archive_format |= record == PT2_ARCHIVE_FORMAT.as_bytes();
        seen.constants_exact |= record == CONSTANTS_PKL.as_bytes();
        seen.constants_any |= is(CONSTANTS_PKL);
        seen.code |= (record.get(..CODE_FOLDER.len()))
            .is_some_and(|p| p.eq_ignore_ascii_case(CODE_FOLDER.as_bytes()));
        seen.data_pkl |= is(DATA_PKL);
        false
    }

    /// What the names said. `names` are all of them again: compiled code is
    /// looked for in a torch.export archive only (rare: a second pass).
    pub fn finish(self, names: impl Iterator<Item = &'n [u8]>) -> Names {
        let mut seen = self.seen;
        let root = self.root.flatten();
        if seen.archive_format {
            seen.compiled_code = names
                .filter_map(|n| root.and_then(|r| record_of(r, n)))
                .any(|r| {
                    AOTI_CODE_SUFFIXES.iter().any(|s| {
                        (r.len().checked_sub(s.len()))
                            .and_then(|at| r.get(at..))
                            .is_some_and(|end| end.eq_ignore_ascii_case(s.as_bytes()))
                    })
                });
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(names: &[&str]) -> Option<ArchiveKind> {
        ArchiveKind::of(names.iter().map(|n| n.as_bytes()))
    }

    #[test]
    fn each_kind_is_known_by_its_records() {
        use ArchiveKind::*;
        assert_eq!(kind(&["a/data.pkl", "a/version", "a/data/0"]), None);
        assert_eq!(
            kind(&["a/data.pkl", "a/constants.pkl", "a/code/x.py"]),
            Some(TorchScript)
        );
        // torch.load hands over only the exact name; the scanner asks more (is_jit_archive).
        assert_eq!(kind(&["a/data.pkl", "a/CONSTANTS.pkl"]), None);
        assert_eq!(
            kind(&["a/data.pkl", "a/constants.pkl", "a/bytecode.pkl"]),
            Some(TorchScript)
        );
        assert_eq!(
            kind(&["a/data.pkl", "a/bytecode.pkl"]),
            Some(MobileBytecode)
        );
        assert_eq!(
            kind(&["p/.data/extern_modules", "p/.data/version", "p/m/x.pkl"]),
            Some(TorchPackage)
        );
        assert_eq!(
            kind(&["m/archive_format", "m/models/model.json"]),
            Some(Export)
        );
        assert_eq!(
            kind(&["m/archive_format", "m/data/aotinductor/model/x.SO"]),
            Some(AotInductor)
        );
        assert_eq!(
            kind(&["m/archive_format", "m/data/x.cpp"]),
            Some(AotInductor)
        );
        assert_eq!(
            kind(&["serialized_exported_program.json", "version"]),
            Some(OldExport)
        );
        assert_eq!(kind(&[]), None);
    }

    #[test]
    fn a_flatbuffer_is_known_by_its_identifier_and_a_root_inside_it() {
        let mut fb = vec![16, 0, 0, 0];
        fb.extend_from_slice(b"PTMF");
        fb.resize(32, 0);
        assert!(is_mobile_flatbuffer(&fb));
        assert!(!is_mobile_flatbuffer(&fb[..12]));
        assert!(!is_mobile_flatbuffer(b"abc PTMF is text"));
    }

    fn names(names: &[&str]) -> Names {
        Names::of(names.iter().map(|n| n.as_bytes()))
    }

    #[test]
    fn package_and_mobile_records_are_found_under_the_root() {
        let found = names(&["pkg/.data/version", "pkg/.data/extern_modules", "pkg/x.py"]);
        assert!(found.package && !found.mobile);
        let found = names(&["lite/data.pkl", "lite/BYTECODE.pkl"]);
        assert!(!found.package && found.mobile);
        let found = names(&["a/data.pkl", "b/bytecode.pkl"]);
        assert!(!found.package && !found.mobile);
    }

    #[test]
    fn torch_jit_load_needs_constants_and_code_in_any_case() {
        assert!(names(&["a/data.pkl", "a/CONSTANTS.pkl", "a/Code/__torch__.py"]).is_jit_archive());
        // No code: nothing for torch.jit.load to run.
        assert!(!names(&["a/data.pkl", "a/CONSTANTS.pkl"]).is_jit_archive());
        assert!(!names(&["a/data.pkl", "a/code/constants.pkl"]).is_jit_archive());
    }
}
