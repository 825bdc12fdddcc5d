//! What is never allowed, and what is dangerous.
//!
//! The blocklist: modules and builtins that stay refused even when a user
//! allowlists them, since they reach the OS, the interpreter or another unpickler.
//!
//! The denylist: globals known to execute code, touch the file system or the
//! network, or unpickle nested data. A scan marks these as dangerous; every other
//! global outside the allowlist is reported as merely not allowlisted.

use std::fmt;

/// Modules that stay blocked whatever the user allowlists.
const BLOCKED_MODULES: &[&str] = &[
    "os",
    "sys",
    "posix",
    "nt",
    "subprocess",
    "importlib",
    "runpy",
    "pickle",
    "_pickle",
];

/// Names of `builtins` that stay blocked: they evaluate, import or open.
const BLOCKED_BUILTINS: &[&str] = &["eval", "exec", "compile", "__import__", "getattr", "open"];

/// The entry of the blocklist a global falls under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// The module (or a parent of it).
    Module(&'static str),
    /// `builtins.<name>`.
    Builtin(&'static str),
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocked::Module(m) => f.write_str(m),
            Blocked::Builtin(name) => write!(f, "builtins.{name}"),
        }
    }
}

/// Whether `module` is `parent` or one of its submodules.
fn in_module(module: &str, parent: &str) -> bool {
    module
        .strip_prefix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The blocklist entry `module.name` falls under, if any.
pub fn blocked(module: &str, name: &str) -> Option<Blocked> {
    if let Some(m) = BLOCKED_MODULES.iter().find(|m| in_module(module, m)) {
        return Some(Blocked::Module(m));
    }
    if module == "builtins" {
        return BLOCKED_BUILTINS
            .iter()
            .find(|b| **b == name)
            .map(|b| Blocked::Builtin(b));
    }
    None
}

/// Modules whose every member (and submodule) is dangerous.
const DANGEROUS_MODULES: &[&str] = &[
    "os",
    "posix",
    "nt",
    "sys",
    "subprocess",
    "_posixsubprocess",
    "importlib",
    "runpy",
    "pickle",
    "_pickle",
    "marshal",
    "shutil",
    "socket",
    "ssl",
    "http",
    "urllib",
    "requests",
    "httpx",
    "webbrowser",
    "pty",
    "code",
    "codeop",
    "ctypes",
    "cffi",
    "multiprocessing",
    "asyncio",
    "signal",
    "pydoc",
    "timeit",
    "trace",
    "pdb",
    "bdb",
    "types",
    "dill",
    "cloudpickle",
    "joblib",
    "ftplib",
    "smtplib",
    "telnetlib",
    "paramiko",
    "imp",
    "zipimport",
    "sqlite3",
    "platform",
    "tempfile",
    "glob",
    "pathlib",
    "linecache",
    "torch.hub",
    "torch.jit",
    "torch.package",
    "torch.utils.cpp_extension",
];

/// Individual dangerous names (`module.name`).
const DANGEROUS_NAMES: &[&str] = &[
    "builtins.eval",
    "builtins.exec",
    "builtins.compile",
    "builtins.__import__",
    "builtins.getattr",
    "builtins.setattr",
    "builtins.delattr",
    "builtins.open",
    "builtins.input",
    "builtins.breakpoint",
    "builtins.globals",
    "builtins.locals",
    "builtins.vars",
    "builtins.__build_class__",
    "builtins.exit",
    "builtins.quit",
    "io.open",
    "io.FileIO",
    "_io.open",
    "_io.FileIO",
    "operator.attrgetter",
    "operator.methodcaller",
    "functools.partial",
    "functools.reduce",
    "copyreg._reconstructor",
    "numpy.load",
    "numpy.lib.npyio.load",
    "torch.load",
    "torch.serialization.load",
    "torch.storage._load_from_bytes",
];

/// Is `module.name` dangerous? Blocked globals are, and so are names in `<...>`
/// (globals that cannot even be resolved).
pub fn is_dangerous(module: &str, name: &str) -> bool {
    if module.starts_with('<') || blocked(module, name).is_some() {
        return true;
    }
    DANGEROUS_MODULES.iter().any(|m| in_module(module, m))
        || DANGEROUS_NAMES
            .iter()
            .any(|full| full.strip_prefix(module).and_then(|r| r.strip_prefix('.')) == Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_execution_is_dangerous_and_data_types_are_not() {
        assert!(is_dangerous("os", "system"));
        assert!(is_dangerous("os.path", "join"));
        assert!(is_dangerous("builtins", "eval"));
        assert!(is_dangerous("subprocess", "Popen"));
        assert!(is_dangerous("torch.storage", "_load_from_bytes"));
        assert!(is_dangerous("<extension code 1>", ""));
        assert!(!is_dangerous("builtins", "print"));
        assert!(!is_dangerous("osx", "thing"));
        assert!(!is_dangerous("torch.nn.modules.linear", "Linear"));
        assert!(!is_dangerous("collections", "defaultdict"));
    }

    #[test]
    fn blocked_names_are_found_by_module_or_builtin() {
        assert_eq!(blocked("os.path", "join"), Some(Blocked::Module("os")));
        assert_eq!(blocked("osx", "thing"), None);
        assert_eq!(blocked("builtins", "eval"), Some(Blocked::Builtin("eval")));
        assert_eq!(blocked("builtins", "print"), None);
        assert_eq!(Blocked::Builtin("eval").to_string(), "builtins.eval");
    }
}
