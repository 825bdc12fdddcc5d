//! The denylist: globals known to execute code, touch the file system or the
//! network, or unpickle nested data. The scanner marks these as dangerous; every
//! other global outside the allowlist is reported as merely not allowlisted.

/// Modules whose every member (and submodule) is dangerous.
pub const DANGEROUS_MODULES: &[&str] = &[
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
pub const DANGEROUS_NAMES: &[&str] = &[
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

/// Is `module.name` dangerous? Names in `<...>` (globals that cannot even be
/// resolved) always are.
pub fn is_dangerous(module: &str, name: &str) -> bool {
    if module.starts_with('<') {
        return true;
    }
    let in_module = DANGEROUS_MODULES.iter().any(|m| {
        module
            .strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    });
    in_module
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
}
