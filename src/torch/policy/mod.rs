//! Which globals a checkpoint may name: the built-in allowlist, the user's
//! entries, the blocklist no entry can lift, and the denylist of dangerous names
//! a scan marks. Loads and scans ask the same questions here, so they cannot
//! disagree about a name.

mod allowlist;
mod by_file;
mod denylist;
mod py2_names;

use std::collections::BTreeMap;

pub use allowlist::{builtin, Builtin, JitBuilder, QScheme, RebuildFn};
pub use by_file::{allowed_in_file, is_dcp_metadata, torchscript_builder, DCP_METADATA_GLOBALS};
pub use denylist::{blocked, family, is_dangerous, Blocked, Family, FAMILIES};
pub use py2_names::map_py2;

/// A resolved global: a built-in, the index of a user entry, or (in stub mode)
/// the index of a name outside the allowlist in the load's [`Stubs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Global {
    Builtin(Builtin),
    User(u32),
    Stub(u32),
}

/// What a load does with a global outside the allowlist (never one the
/// blocklist names: that is always refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownGlobals {
    #[default]
    Refuse,
    /// Build an inert stand-in that records how the file used it; nothing is
    /// imported or called.
    Stub,
}

/// The globals a stub-mode load stood in for, as `(module, name)`, each once.
#[derive(Debug, Default, Clone)]
pub struct Stubs {
    names: Vec<(String, String)>,
    by_name: BTreeMap<(String, String), u32>,
    /// The class source a legacy whole-module file recorded for a stub, by index
    /// (`None`: the file recorded none). Text, never compiled.
    sources: BTreeMap<u32, Option<String>>,
}

impl Stubs {
    /// The index of `module.name`, added on first use. Each name costs the
    /// pickle its bytes, so the pickle's size limit bounds the table.
    pub fn index(&mut self, module: &str, name: &str) -> Option<u32> {
        let key = (module.to_owned(), name.to_owned());
        if let Some(&i) = self.by_name.get(&key) {
            return Some(i);
        }
        let i = u32::try_from(self.names.len()).ok()?;
        self.names.push(key.clone());
        self.by_name.insert(key, i);
        Some(i)
    }

    pub fn names(&self) -> &[(String, String)] {
        &self.names
    }

    /// Record the source a module persistent id gave stub `index`; false when
    /// one was recorded for it before.
    pub fn set_source(&mut self, index: u32, source: Option<String>) -> bool {
        match self.sources.entry(index) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(source);
                true
            }
        }
    }

    /// The classes a module persistent id named, in the order the file first named them.
    pub fn module_classes(&self) -> impl Iterator<Item = &(String, String)> {
        (self.sources.keys()).filter_map(|i| self.names.get(*i as usize))
    }

    /// The class source recorded for stub `index`, if any.
    pub fn source(&self, index: u32) -> Option<&str> {
        self.sources.get(&index).and_then(|s| s.as_deref())
    }
}

/// The user's allowlist entries, by `module.qualname`; the bindings keep the objects.
/// A B-tree rather than a hash map: building a `RandomState` seeds it from the OS
/// on first use, which a one-file scan would pay for a usually empty list.
#[derive(Debug, Default, Clone)]
pub struct UserGlobals {
    by_name: BTreeMap<String, u32>,
}

impl UserGlobals {
    pub fn new<I: IntoIterator<Item = String>>(names: I) -> Self {
        let mut by_name = BTreeMap::new();
        for (i, name) in names.into_iter().enumerate() {
            by_name.entry(name).or_insert(i as u32);
        }
        UserGlobals { by_name }
    }

    pub fn lookup(&self, full_name: &str) -> Option<u32> {
        self.by_name.get(full_name).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// What a GLOBAL resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Allowed(Global),
    Blocked(Blocked),
    NotAllowed,
}

/// Resolve a mapped `module.name`: the blocklist first, then the built-ins (which win
/// over user entries on a clash, as in torch), then the user's entries.
pub fn resolve(module: &str, name: &str, user: &UserGlobals) -> Resolution {
    if let Some(b) = blocked(module, name) {
        return Resolution::Blocked(b);
    }
    if let Some(b) = builtin(module, name) {
        return Resolution::Allowed(Global::Builtin(b));
    }
    if !user.is_empty() {
        if let Some(i) = user.lookup(&format!("{module}.{name}")) {
            return Resolution::Allowed(Global::User(i));
        }
    }
    Resolution::NotAllowed
}

/// [`resolve`] for a load, whose builder checks each call of an allowlisted
/// `builtins.getattr` (see [`getattr_lifted`]). A scan runs no call, so it
/// keeps `getattr` blocked whatever the allowlist: `getattr(os, "system")`
/// runs under plain pickle.
pub fn resolve_for_load(module: &str, name: &str, user: &UserGlobals) -> Resolution {
    if getattr_lifted(module, name, user) {
        if let Some(i) = user.lookup("builtins.getattr") {
            return Resolution::Allowed(Global::User(i));
        }
    }
    resolve(module, name, user)
}

/// `builtins.getattr` is the one blocked name a user entry lifts, as torch lets
/// it be allowlisted: the builder then checks every call, which must be
/// `getattr(C, name)` with `C` and `C.name` both allowlisted (never a module,
/// a dunder, or a name on the denylist).
pub fn getattr_lifted(module: &str, name: &str, user: &UserGlobals) -> bool {
    module == "builtins" && name == "getattr" && user.lookup("builtins.getattr").is_some()
}

/// How a STACK_GLOBAL whose name was computed at run time is named.
pub const COMPUTED_GLOBAL: &str = "<STACK_GLOBAL of a computed name>";

/// A global outside the allowlist, where it was met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundGlobal {
    /// `module.name` after Python 2 name mapping, or a `<...>` description of a global
    /// that has no name (an extension code, a computed STACK_GLOBAL).
    pub name: String,
    /// Where the module ends in `name` (all of it for a described global).
    pub module_len: usize,
    pub offset: u64,
    /// Blocked, or on the denylist (code execution, files, network, nested pickles).
    pub dangerous: bool,
}

impl FoundGlobal {
    /// `module.name` met at `offset`; `name` is empty for a global described by
    /// `module` alone (an extension code, a computed name).
    pub fn new(module: &str, name: &str, offset: u64) -> FoundGlobal {
        let full = if name.is_empty() {
            module.to_owned()
        } else {
            format!("{module}.{name}")
        };
        FoundGlobal {
            name: full,
            module_len: module.len(),
            offset,
            dangerous: is_dangerous(module, name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_modules_win_over_user_entries() {
        let user = UserGlobals::new(["os.system".to_owned(), "mymod.Thing".to_owned()]);
        assert!(matches!(
            resolve("os", "system", &user),
            Resolution::Blocked(_)
        ));
        assert!(matches!(
            resolve("os.path", "join", &user),
            Resolution::Blocked(_)
        ));
        assert_eq!(resolve("osx", "thing", &user), Resolution::NotAllowed);
        assert!(matches!(
            resolve("builtins", "eval", &user),
            Resolution::Blocked(_)
        ));
        assert_eq!(resolve("builtins", "print", &user), Resolution::NotAllowed);
        assert!(matches!(
            resolve("builtins", "getattr", &user),
            Resolution::Blocked(_)
        ));
        assert_eq!(
            resolve("mymod", "Thing", &user),
            Resolution::Allowed(Global::User(1))
        );
    }

    #[test]
    fn getattr_alone_is_lifted_by_a_user_entry() {
        let user = UserGlobals::new(["builtins.getattr".to_owned(), "builtins.eval".to_owned()]);
        assert_eq!(
            resolve_for_load("builtins", "getattr", &user),
            Resolution::Allowed(Global::User(0))
        );
        assert!(matches!(
            resolve_for_load("builtins", "eval", &user),
            Resolution::Blocked(_)
        ));
        // A scan runs no call: getattr stays blocked whatever the allowlist.
        assert!(matches!(
            resolve("builtins", "getattr", &user),
            Resolution::Blocked(_)
        ));
    }
}
