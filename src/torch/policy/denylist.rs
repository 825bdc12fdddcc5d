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

/// A family of dangerous globals: what they do, where the family is documented,
/// and the modules (every member and submodule) and single names it covers.
pub struct Family {
    pub name: &'static str,
    pub why: &'static str,
    /// Scanners and advisories that list the family: picklescan's
    /// `_unsafe_globals` (PS), modelscan's `unsafe_globals` (MS), fickling's
    /// `UNSAFE_IMPORTS` and ML analyses (FK), GitHub advisories (GHSA), or
    /// CPython's or torch's own code (source).
    pub sources: &'static str,
    pub modules: &'static [&'static str],
    pub names: &'static [&'static str],
}

/// Every dangerous global, by family. A global outside the allowlist and in none
/// of these is reported as merely not allowlisted.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "builtins",
        why: "evaluate or compile code, import, reach any attribute, open files, start a debugger",
        sources: "PS, MS, FK",
        modules: &[],
        names: &[
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
            "builtins.help",
            "builtins.memoryview",
        ],
    },
    Family {
        name: "process",
        why: "run commands or start processes",
        sources: "PS, MS, FK",
        modules: &[
            "os",
            "posix",
            "nt",
            "subprocess",
            "_posixsubprocess",
            "pty",
            "commands",
            "multiprocessing",
            "_multiprocessing",
            "_winapi",
            "platform",
            "popen2",
        ],
        names: &[],
    },
    Family {
        name: "hidden shell-outs",
        why: "standard-library helpers that run a command underneath",
        sources: "PS (GHSA-g38g-8gr9-h9xp), FK",
        modules: &["_osx_support", "_aix_support", "_pyrepl"],
        names: &[
            "uuid._get_command_stdout",
            "imaplib.IMAP4_stream",
            "pydoc.pipepager",
            "pydoc.tempfilepager",
        ],
    },
    Family {
        name: "asyncio",
        why: "subprocesses and network connections",
        sources: "PS (GHSA-q77w-mwjj-7mqx, GHSA-f7qq-56ww-84cr), MS, FK",
        modules: &["asyncio", "_asyncio"],
        names: &[],
    },
    Family {
        name: "foreign functions",
        why: "call native code and write raw memory",
        sources: "PS (GHSA-4675-36f9-wf6r), FK",
        modules: &["ctypes", "_ctypes", "cffi", "_cffi_backend"],
        names: &["numpy.ctypeslib.load_library"],
    },
    Family {
        name: "code objects",
        why: "build functions from bytecode or unmarshal it",
        sources: "PS (GHSA-9m3x-qqw2-h32h), FK",
        modules: &["types", "marshal", "dill", "cloudpickle", "joblib"],
        names: &[],
    },
    Family {
        name: "interpreters",
        why: "run source strings: REPLs, profilers, debuggers, test runners",
        sources: "PS (GHSA-5qwp, x696, 6vqj, cj3c, 9w88, 49gj, 7wx9, fqq6 and others), MS, FK",
        modules: &[
            "code",
            "codeop",
            "runpy",
            "cProfile",
            "profile",
            "_lsprof",
            "timeit",
            "trace",
            "pdb",
            "bdb",
            "doctest",
            "idlelib",
            "lib2to3",
            "unittest",
            "test.support",
            "test.libregrtest",
            "tkinter",
            "turtle",
            "turtledemo",
        ],
        names: &[],
    },
    Family {
        name: "subinterpreters",
        why: "run source strings in another interpreter",
        sources: "FK (GHSA-6ggj-6f2q-f7mx)",
        modules: &[
            "_xxsubinterpreters",
            "_interpreters",
            "_xxinterpchannels",
            "concurrent.interpreters",
        ],
        names: &[],
    },
    Family {
        name: "imports",
        why: "import or resolve any name, so every other rule could be bypassed",
        sources: "PS (GHSA-vvpj-8cmc-gx39, GHSA-84r2-jw7c-4r5q), MS, FK",
        modules: &[
            "importlib",
            "_imp",
            "imp",
            "_frozen_importlib",
            "_frozen_importlib_external",
            "zipimport",
            "pkgutil",
            "pydoc",
            "site",
            "sys",
            "sysconfig",
        ],
        names: &[],
    },
    Family {
        name: "call gadgets",
        why: "turn data into a call or an attribute lookup on anything",
        sources: "PS (GHSA-955r-x9j8-7rhh, GHSA-46h3-79wf-xr6c), MS, FK",
        modules: &["inspect", "gc"],
        names: &[
            "operator.attrgetter",
            "operator.methodcaller",
            "operator.itemgetter",
            "_operator.attrgetter",
            "_operator.methodcaller",
            "_operator.itemgetter",
            "functools.partial",
            "functools.reduce",
            "_functools.partial",
            "_functools.reduce",
            "copyreg._reconstructor",
            "copyreg.__newobj__",
            "copyreg.__newobj_ex__",
        ],
    },
    Family {
        name: "packaging",
        why: "install packages, run commands, write files",
        sources: "PS (CVE-2025-1716, GHSA-xp4f-hrf8-rxw7, GHSA-m273-6v24-x4m4), FK",
        modules: &[
            "pip",
            "ensurepip",
            "venv",
            "setuptools",
            "distutils",
            "numpy.distutils",
        ],
        names: &[],
    },
    Family {
        name: "numpy",
        why: "unpickle nested data, evaluate strings, load native libraries, read, write or map files",
        sources: "PS (GHSA-r8g5-cgf2-4m4m), FK",
        modules: &["numpy.f2py", "numpy.testing"],
        names: &[
            "numpy.load",
            "numpy.lib.npyio.load",
            "numpy.lib._npyio_impl.load",
            "numpy.lib.format.read_array",
            "numpy.lib.format.read_array_header_1_0",
            "numpy.lib.format.open_memmap",
            "numpy.save",
            "numpy.savez",
            "numpy.savez_compressed",
            "numpy.savetxt",
            "numpy.loadtxt",
            "numpy.genfromtxt",
            "numpy.fromfile",
            "numpy.fromregex",
            "numpy.memmap",
            "numpy.ndarray.tofile",
            "numpy.ndarray.dump",
            "numpy.core.memmap",
            "numpy._core.memmap",
        ],
    },
    Family {
        name: "torch unpickling",
        why: "unpickle attacker bytes with weights_only=False",
        sources: "PS (GHSA-h3qp-7fh3-f8h4, GHSA-vv6j-3g6g-2pvj), FK",
        modules: &[
            "torch.utils._config_module",
            "torch.utils.data.datapipes.utils.decoder",
            "torch.utils.data.datapipes.datapipe",
        ],
        names: &[
            "torch.load",
            "torch.serialization.load",
            "torch.serialization._load",
            "torch.serialization._legacy_load",
            "torch.storage._load_from_bytes",
            "torch.multiprocessing.reductions.rebuild_storage_filename",
        ],
    },
    Family {
        name: "torch code",
        why: "execute, compile or shell out from torch's own helpers",
        sources: "PS (GHSA-4r9r, 86cj, f4x7, f745, jhph, vr7h, 4whj), FK; pytorch/pytorch#194694",
        modules: &[
            "torch.hub",
            "torch.jit",
            "torch.package",
            "torch._dynamo",
            "torch._inductor",
            "torch.compiler",
            "torch.utils.cpp_extension",
            "torch.utils.collect_env",
            "torch.utils.bottleneck",
            "torch.fx.experimental.symbolic_shapes",
            "torch._C._jit_tree_views",
            "torch.distributed.rpc",
        ],
        names: &[
            "torch.fx.graph_module._exec_with_source",
            "torch.fx.graph_module._forward_from_src",
            "torch.fx.graph_module._method_from_src",
            "torch.fx.graph_module.reduce_graph_module",
            "torch.fx.graph_module.reduce_package_graph_module",
            "torch.fx.graph_module.reduce_deploy_graph_module",
            "torch.compile",
            "torch._ops.ops",
        ],
    },
    Family {
        name: "files",
        why: "read, write or delete files",
        sources: "PS (GHSA-9726-w42j-3qjr), FK",
        modules: &[
            "shutil",
            "tempfile",
            "filecmp",
            "fileinput",
            "glob",
            "linecache",
            "pathlib",
            "mmap",
            "tarfile",
            "zipfile",
            "shelve",
            "dbm",
            "dumbdbm",
            "anydbm",
            "sqlite3",
            "_sqlite3",
            "compileall",
            "py_compile",
        ],
        names: &[
            "io.open",
            "io.open_code",
            "io.FileIO",
            "_io.open",
            "_io.open_code",
            "_io.FileIO",
            "codecs.open",
            "gzip.open",
            "gzip.GzipFile",
            "bz2.open",
            "bz2.BZ2File",
            "lzma.open",
            "lzma.LZMAFile",
        ],
    },
    Family {
        name: "logging",
        why: "create files, open sockets, evaluate configuration",
        sources: "PS (GHSA-m7j5-r2p5-c39r), FK",
        modules: &["logging", "syslog"],
        names: &[],
    },
    Family {
        name: "network",
        why: "exfiltrate data, make requests, listen on ports",
        sources: "PS, MS, FK",
        modules: &[
            "socket",
            "_socket",
            "ssl",
            "_ssl",
            "select",
            "selectors",
            "http",
            "httplib",
            "urllib",
            "urllib2",
            "urllib3",
            "requests",
            "httpx",
            "aiohttp",
            "ftplib",
            "smtplib",
            "imaplib",
            "poplib",
            "telnetlib",
            "nntplib",
            "socketserver",
            "SocketServer",
            "xmlrpc",
            "xmlrpclib",
            "webbrowser",
            "paramiko",
            "SimpleHTTPServer",
            "BaseHTTPServer",
            "CGIHTTPServer",
        ],
        names: &[],
    },
    Family {
        name: "nested pickles",
        why: "a second unpickling a scanner never sees",
        sources: "PS, MS, FK",
        modules: &["pickle", "_pickle", "cPickle", "pickletools", "copy_reg"],
        names: &["pandas.read_pickle", "pandas.io.pickle.read_pickle"],
    },
    Family {
        name: "deferred calls",
        why: "run any callable later or in the background",
        sources: "FK",
        modules: &[
            "threading",
            "_thread",
            "thread",
            "signal",
            "_signal",
            "atexit",
            "sched",
        ],
        names: &[],
    },
    Family {
        name: "import side effects",
        why: "importing the module acts (find_class imports before it looks the name up)",
        sources: "source (CPython 3.13: antigravity, the __main__ modules)",
        modules: &["antigravity", "this"],
        names: &[],
    },
];

/// The family `module.name` belongs to, if any. A dotted name (protocol 4
/// reaches attributes of attributes) is judged at every split, so
/// `tempfile` + `_os.system` is `os.system`, `torch._utils` + `torch.load`
/// is `torch.load` and `torch` + `os.system` is `os.system`; and a walk that
/// starts at a family's object (`builtins.getattr.__self__`) is that family's.
///
/// Linear in the name's length: a hostile name is millions of dots long, so no
/// split is tried one by one. Membership is prefix-closed (a prefix of the path
/// inside a family's module puts the whole path inside it), so each family
/// entry is tried once against the two paths a split can make: the module's
/// (`module.name`) and the attribute's (the name, less the leading underscores
/// of how one module names another: `_os` is os).
pub fn family(module: &str, name: &str) -> Option<&'static Family> {
    let through_module = format!("{module}.{name}");
    let attribute = name.trim_start_matches('_');
    // A package's __main__ runs the package (venv, idlelib, unittest...); a
    // script's own __main__ classes are ordinary, if not allowlisted.
    let runs_a_package = module.ends_with(".__main__") || module.contains(".__main__.");
    FAMILIES.iter().find(|f| {
        let covers = |path: &str| {
            f.modules.iter().any(|m| in_module(path, m)) || f.names.iter().any(|full| in_module(path, full))
        };
        covers(&through_module)
            || (!attribute.is_empty() && covers(attribute))
            || (runs_a_package && f.name == "import side effects")
    })
}

/// Is `module.name` dangerous? Blocked globals are, and so are names in `<...>`
/// (globals that cannot even be resolved), every family's, and every attribute
/// walk that starts at one of them.
pub fn is_dangerous(module: &str, name: &str) -> bool {
    module.starts_with('<')
        || blocked(module, name).is_some()
        || (module == "builtins" && BLOCKED_BUILTINS.iter().any(|b| in_module(name, b)))
        || family(module, name).is_some()
        // An attribute walk through a dunder (`getattr.__self__.exec` is
        // builtins.exec) reaches what the name does not say.
        || name
            .split('.')
            .any(|part| part.len() > 4 && part.starts_with("__") && part.ends_with("__"))
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
        // Found by the oracle: torch.export.load ran it from a .pt2's example inputs.
        assert!(is_dangerous("builtins", "getattr.__self__.exec"));
        assert!(is_dangerous("builtins", "print.__self__.exec"));
        assert!(!is_dangerous("torch.nn", "Module.Inner"));
        assert!(is_dangerous("builtins", "eval.x.y"));
        assert!(is_dangerous("builtins", "getattr.x"));
    }

    #[test]
    fn a_name_of_a_million_dots_is_judged_in_linear_time() {
        // Found by the fuzz corpus: judging every split of every prefix took
        // time exponential in the number of dots.
        let name = "a.".repeat(1_000_000) + "b";
        let started = std::time::Instant::now();
        assert!(!is_dangerous("torch", &name));
        assert!(is_dangerous("torch", &format!("hub.{name}")));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn every_family_of_gadgets_is_dangerous() {
        for (module, name) in [
            ("_ctypes", "dlopen"),
            ("ctypes", "CDLL"),
            ("torch.fx.graph_module", "_exec_with_source"),
            ("_xxsubinterpreters", "run_string"),
            ("_interpreters", "exec"),
            ("distutils.spawn", "spawn"),
            ("logging.handlers", "SocketHandler"),
            ("zipfile", "ZipFile"),
            ("io", "open"),
            ("_io", "FileIO"),
            ("sqlite3", "connect"),
            ("marshal", "loads"),
            ("types", "FunctionType"),
            ("types", "CodeType"),
            ("numpy", "load"),
            ("torch.storage", "_load_from_bytes"),
            ("_posixsubprocess", "fork_exec"),
            ("multiprocessing.util", "spawnv_passfds"),
            ("asyncio.subprocess", "create_subprocess_shell"),
            ("pdb", "run"),
            ("code", "InteractiveInterpreter"),
            ("idlelib.pyshell", "ModifiedInterpreter"),
            ("webbrowser", "open"),
            ("shutil", "rmtree"),
            ("_operator", "attrgetter"),
            ("pkgutil", "resolve_name"),
            ("antigravity", "x"),
            ("venv.__main__", "main"),
            ("tempfile", "_os.system"),
            ("torch._utils", "torch.load"),
            ("collections", "_sys.modules"),
            ("torch", "hub.load"),
            ("torch", "serialization.load"),
            ("torch.serialization", "pickle"),
            ("torch", "os.system"),
            ("numpy", "savetxt"),
            ("numpy", "memmap"),
            ("numpy", "ndarray.tofile"),
            ("codecs", "open"),
            ("gzip", "open"),
            ("lzma", "LZMAFile"),
        ] {
            assert!(is_dangerous(module, name), "{module}.{name}");
            assert!(family(module, name).is_some() || blocked(module, name).is_some());
        }
        for (module, name) in [
            ("torch._utils", "_rebuild_tensor_v2"),
            ("collections", "OrderedDict"),
            ("mymodel", "Outer.Inner"),
            ("torch.fx.graph_module", "GraphModule"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("__main__", "MyModel"),
            ("io", "BytesIO"),
        ] {
            assert!(!is_dangerous(module, name), "{module}.{name}");
        }
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
