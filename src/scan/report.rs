//! What a scan found: plain data, for the CLI, JSON and Python to present.

use crate::archive::streams::Compression;

/// A global a pickle names, where it was found: in a report's findings, one
/// outside the allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `module.name`, or a `<...>` description of a global without a name.
    pub name: String,
    /// Where the module ends in `name` (all of it for a described global).
    pub module_len: usize,
    pub dangerous: bool,
    /// The file, archive entry or pickle it was found in.
    pub location: String,
    /// Byte offset inside that location.
    pub offset: u64,
    /// The compressions and archives the pickle was found in, outermost first
    /// (`gzip`, `tar`, `zip`...).
    pub wrappers: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Clean,
    Unsafe,
    Unreadable,
    /// Not a model and no pickle: text, an image... listed, and no failure.
    Skipped,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Unsafe => "unsafe",
            Verdict::Unreadable => "unreadable",
            Verdict::Skipped => "skipped",
        }
    }
}

/// What a file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Empty,
    TorchZip,
    TorchScriptZip,
    Npz,
    Zip,
    Npy,
    Tar,
    TorchLegacy,
    Safetensors,
    Pickle,
    /// A compressed file: what it holds is scanned too.
    Compressed(Compression),
    SevenZip,
    /// Bytes that no reader could unpickle from their first opcode on.
    NotAPickle,
    /// Spans of a file that another file points a loader at, each read as a
    /// file of its own (a distributed checkpoint's items).
    Items,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Empty => "empty",
            Format::TorchZip => "torch-zip",
            Format::TorchScriptZip => "torchscript-zip",
            Format::Npz => "npz",
            Format::Zip => "zip",
            Format::Npy => "npy",
            Format::Tar => "tar",
            Format::TorchLegacy => "torch-legacy",
            Format::Safetensors => "safetensors",
            Format::Pickle => "pickle",
            Format::Compressed(c) => c.name(),
            Format::SevenZip => "7z",
            Format::NotAPickle => "not-a-pickle",
            Format::Items => "items",
        }
    }
}

/// The kinds of problem only a scan meets, beside the error kinds of `error::code`.
pub mod problem_kind {
    /// Two readers of the same bytes would read different things (two end
    /// records, a prefix or an appended archive, pickle readers that part ways).
    pub const PARSER_DISAGREEMENT: &str = "parser_disagreement";
    /// Bytes of no format the scanner knows, where a model or pickle was expected.
    pub const UNKNOWN_FORMAT: &str = "unknown_format";
    /// A pointer one file gives a loader (a DCP item's offset and length) that
    /// reaches past the end of the file it names.
    pub const POINTER_OUT_OF_RANGE: &str = "pointer_out_of_range";
    /// A TorchScript archive: `torch.jit.load` compiles and runs the code under
    /// `code/`, whatever its pickles name (and `torch.load(weights_only=False)`
    /// hands the archive to it).
    pub const TORCHSCRIPT: &str = "torchscript";
    /// A `torch.package` archive: `torch.package.PackageImporter` imports the
    /// Python modules it carries to unpickle it. Never clean.
    pub const TORCH_PACKAGE: &str = "torch_package";
    /// Mobile (lite interpreter) bytecode, in a zip's `bytecode.pkl` or as a
    /// flatbuffer: torch's mobile loader runs it. Never clean.
    pub const MOBILE_BYTECODE: &str = "mobile_bytecode";
    /// An AOTInductor package (a `.pt2` holding compiled code):
    /// `aoti_load_package` loads that code and runs it.
    pub const AOTI_PACKAGE: &str = "aoti_package";
    /// A torch.export program (`.pt2`) whose JSON gives `torch.export.load`
    /// Python to run: an expression `sympy.sympify` evaluates, an input name
    /// written into generated code, a module a pytree context imports, a guard
    /// `ExportedProgram.module()` executes ([`crate::torch::export_program`]).
    pub const EXPORT_PROGRAM_CODE: &str = "export_program_code";

    /// The kinds of a file whose reader runs code the file carries: unsafe, as a
    /// dangerous global is, under every policy.
    pub const RUNS_CODE: [&str; 5] = [
        TORCHSCRIPT,
        TORCH_PACKAGE,
        MOBILE_BYTECODE,
        AOTI_PACKAGE,
        EXPORT_PROGRAM_CODE,
    ];

    pub fn runs_code(kind: &str) -> bool {
        RUNS_CODE.contains(&kind)
    }
}

/// Why (part of) a file could not be read: a stable `kind` for programs, where,
/// and why in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: &'static str,
    pub location: String,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.location.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.location, self.reason)
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub format: Format,
    pub findings: Vec<Finding>,
    /// Why (part of) the file could not be read.
    pub problems: Vec<Problem>,
    /// How many pickles were read.
    pub pickles: u32,
    /// The globals inside the allowlist, when the scan lists them
    /// ([`super::ScanOptions::list_allowlisted`]): with the findings, every
    /// global the pickles import.
    pub allowlisted: Option<Vec<Finding>>,
    /// What a file that holds no pickle and is no model format is (text, a
    /// PNG image...): why it is skipped.
    pub skipped_because: Option<&'static str>,
}

impl Report {
    pub fn add(&mut self, finding: Finding) {
        self.findings.push(finding);
    }

    /// Record why something at `location` could not be read; `kind` is one of
    /// `error::code` or [`problem_kind`].
    pub fn problem(&mut self, location: &str, kind: &'static str, reason: impl std::fmt::Display) {
        self.problems.push(Problem {
            kind,
            location: location.to_owned(),
            reason: reason.to_string(),
        });
    }

    /// Record an error of the core met at `location`, of its kind.
    pub fn error(&mut self, location: &str, error: &crate::error::Error) {
        self.problem(location, error.kind().code(), error);
    }

    /// Unsafe outranks unreadable: a malformed file with a dangerous global before
    /// the break is unsafe, and so is one whose reader runs its code. A file that
    /// holds no pickle and is no model format (text, an image, nothing at all) is
    /// skipped.
    pub fn verdict(&self) -> Verdict {
        if !self.findings.is_empty()
            || (self.problems.iter()).any(|p| problem_kind::runs_code(p.kind))
        {
            Verdict::Unsafe
        } else if !self.problems.is_empty() {
            Verdict::Unreadable
        } else if matches!(self.format, Format::NotAPickle | Format::Empty) {
            Verdict::Skipped
        } else {
            Verdict::Clean
        }
    }

    /// The distinct global names, in order of first appearance.
    pub fn names(&self) -> Vec<String> {
        first_appearances(self.findings.iter().map(|f| f.name.clone()))
    }
}

/// Each name once, in order of first appearance. A B-tree set, not a hash set:
/// see `UserGlobals` for the cost a `RandomState` adds to a one-file scan.
fn first_appearances(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    names.filter(|n| seen.insert(n.clone())).collect()
}
