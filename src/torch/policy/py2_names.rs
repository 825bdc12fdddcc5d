//! Python 2 names of globals, mapped as Python's `fix_imports` maps them, so the
//! same object has one name whatever protocol wrote it.

use std::borrow::Cow;

/// `module.name` as Python 3 names it.
pub fn map_py2<'a>(module: &'a str, name: &'a str) -> (Cow<'a, str>, Cow<'a, str>) {
    type Name = (&'static str, &'static str);
    const NAMES: &[(Name, Name)] = &[
        (("__builtin__", "xrange"), ("builtins", "range")),
        (("__builtin__", "reduce"), ("functools", "reduce")),
        (("__builtin__", "intern"), ("sys", "intern")),
        (("__builtin__", "unichr"), ("builtins", "chr")),
        (("__builtin__", "unicode"), ("builtins", "str")),
        (("__builtin__", "long"), ("builtins", "int")),
        (("__builtin__", "basestring"), ("builtins", "str")),
        (("itertools", "izip"), ("builtins", "zip")),
        (("itertools", "imap"), ("builtins", "map")),
        (("itertools", "ifilter"), ("builtins", "filter")),
        (("itertools", "ifilterfalse"), ("itertools", "filterfalse")),
        (("itertools", "izip_longest"), ("itertools", "zip_longest")),
        (
            ("UserDict", "IterableUserDict"),
            ("collections", "UserDict"),
        ),
        (("UserDict", "UserDict"), ("collections", "UserDict")),
        (("UserList", "UserList"), ("collections", "UserList")),
        (("UserString", "UserString"), ("collections", "UserString")),
        (("whichdb", "whichdb"), ("dbm", "whichdb")),
        (("_socket", "fromfd"), ("socket", "fromfd")),
        (("socket", "_socketobject"), ("socket", "SocketType")),
        (
            ("_multiprocessing", "Connection"),
            ("multiprocessing.connection", "Connection"),
        ),
        (
            ("multiprocessing.process", "Process"),
            ("multiprocessing.context", "Process"),
        ),
        (
            ("multiprocessing.forking", "Popen"),
            ("multiprocessing.popen_fork", "Popen"),
        ),
        (("exceptions", "StandardError"), ("builtins", "Exception")),
        (("urllib", "urlopen"), ("urllib.request", "urlopen")),
        (("urllib", "urlretrieve"), ("urllib.request", "urlretrieve")),
        (("urllib2", "HTTPError"), ("urllib.error", "HTTPError")),
        (("urllib2", "URLError"), ("urllib.error", "URLError")),
    ];
    const MODULES: &[(&str, &str)] = &[
        ("__builtin__", "builtins"),
        ("copy_reg", "copyreg"),
        ("Queue", "queue"),
        ("SocketServer", "socketserver"),
        ("ConfigParser", "configparser"),
        ("repr", "reprlib"),
        ("_winreg", "winreg"),
        ("thread", "_thread"),
        ("dummy_thread", "_dummy_thread"),
        ("xmlrpclib", "xmlrpc.client"),
        ("httplib", "http.client"),
        ("commands", "subprocess"),
        ("urlparse", "urllib.parse"),
        ("urllib2", "urllib.request"),
        ("anydbm", "dbm"),
        ("_abcoll", "collections.abc"),
        ("cPickle", "pickle"),
        ("UserDict", "collections"),
        ("UserList", "collections"),
        ("UserString", "collections"),
        ("whichdb", "dbm"),
        ("StringIO", "io"),
        ("cStringIO", "io"),
        ("exceptions", "builtins"),
    ];
    if let Some((_, (m, n))) = NAMES.iter().find(|((m, n), _)| *m == module && *n == name) {
        return (Cow::Borrowed(m), Cow::Borrowed(n));
    }
    if let Some((_, m)) = MODULES.iter().find(|(m, _)| *m == module) {
        return (Cow::Borrowed(m), Cow::Borrowed(name));
    }
    (Cow::Borrowed(module), Cow::Borrowed(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python2_names_map_like_fix_imports() {
        assert_eq!(
            map_py2("__builtin__", "set"),
            ("builtins".into(), "set".into())
        );
        assert_eq!(
            map_py2("__builtin__", "intern"),
            ("sys".into(), "intern".into())
        );
        assert_eq!(
            map_py2("commands", "getoutput"),
            ("subprocess".into(), "getoutput".into())
        );
        assert_eq!(
            map_py2("exceptions", "ValueError"),
            ("builtins".into(), "ValueError".into())
        );
    }
}
