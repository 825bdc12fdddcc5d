//! What a TorchScript archive says only in its `code/` folder: which attributes
//! of each module class are parameters and buffers. The TorchScript printer
//! writes them as the class body's first lines,
//!
//! ```text
//! class Linear(Module):
//!   __parameters__ = ["weight", "bias", ]
//!   __buffers__ = []
//! ```
//!
//! and those two lines (and the `class` lines that say whose they are) are all
//! that is read here: every other line is skipped unread, never parsed, run or
//! evaluated, so code that does not parse elsewhere in a file changes nothing.
//! The two lines themselves must have exactly the printer's shape (string
//! literals without escapes, each followed by `, `): anything else is refused,
//! never guessed at.

use crate::error::{Error, Location};

/// The folder of a TorchScript archive's code, under its root.
pub const CODE_FOLDER: &str = "code/";
const SOURCE_SUFFIX: &str = ".py";
/// A class attribute is indented by two spaces in the printer's output; method
/// bodies by four, so a line there never starts with these.
const PARAMETERS: &[u8] = b"  __parameters__";
const BUFFERS: &[u8] = b"  __buffers__";

/// One module class: its qualified name as `data.pkl` names it
/// (`__torch__.torch.nn.modules.linear.Linear`), and its lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleLists {
    pub class: String,
    pub parameters: Vec<String>,
    pub buffers: Vec<String>,
}

/// The Python module a code record defines (`code/__torch__/a/b.py` is
/// `__torch__.a.b`), when `record` is one.
pub fn code_module(record: &str) -> Option<String> {
    let path = record
        .strip_prefix(CODE_FOLDER)?
        .strip_suffix(SOURCE_SUFFIX)?;
    let parts: Vec<&str> = path.split('/').collect();
    parts
        .iter()
        .all(|p| is_identifier(p.as_bytes()))
        .then(|| parts.join("."))
}

fn is_identifier(s: &[u8]) -> bool {
    s.first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && s.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// The module classes of `code` (the record `entry`, defining `module`) that
/// declare their parameters and buffers.
pub fn module_lists(code: &[u8], module: &str, entry: &str) -> Result<Vec<ModuleLists>, Error> {
    let mut out: Vec<ModuleLists> = Vec::new();
    let mut class: Option<Class> = None;
    let mut offset = 0usize;
    for (i, line) in code.split(|b| *b == b'\n').enumerate() {
        let at = Where {
            entry,
            line: i + 1,
            offset,
        };
        offset = offset.saturating_add(line.len() + 1);
        if let Some(rest) = line.strip_prefix(b"class ") {
            if let Some(done) = class.take() {
                done.finish(module, &mut out)?;
            }
            let end = rest
                .iter()
                .position(|b| *b == b'(' || *b == b':')
                .unwrap_or(rest.len());
            let name = rest.get(..end).unwrap_or_default();
            if !is_identifier(name) {
                return Err(at.error("a class line whose name is not an identifier"));
            }
            let name = String::from_utf8_lossy(name).into_owned();
            if out.iter().any(|m| m.class.ends_with(&format!(".{name}"))) {
                return Err(at.error(format!("class {name} is defined twice")));
            }
            class = Some(Class {
                name,
                at: at.clone(),
                parameters: None,
                buffers: None,
            });
            continue;
        }
        let (key, rest) = if let Some(rest) = assignment(line, PARAMETERS) {
            ("__parameters__", rest)
        } else if let Some(rest) = assignment(line, BUFFERS) {
            ("__buffers__", rest)
        } else {
            continue;
        };
        let Some(current) = class.as_mut() else {
            return Err(at.error(format!("{key} outside a class")));
        };
        let list = string_list(rest).ok_or_else(|| {
            at.error(format!(
                "{key} is not a list of plain string literals as TorchScript writes it"
            ))
        })?;
        let slot = match key {
            "__parameters__" => &mut current.parameters,
            _ => &mut current.buffers,
        };
        if slot.is_some() {
            return Err(at.error(format!("{key} is given twice in class {}", current.name)));
        }
        *slot = Some(list);
    }
    if let Some(done) = class.take() {
        done.finish(module, &mut out)?;
    }
    Ok(out)
}

/// The rest of `line` after `key`, when the line assigns to it (the key is not
/// the start of a longer name).
fn assignment<'l>(line: &'l [u8], key: &[u8]) -> Option<&'l [u8]> {
    let rest = line.strip_prefix(key)?;
    match rest.first() {
        Some(b) if b.is_ascii_alphanumeric() || *b == b'_' => None,
        _ => Some(rest),
    }
}

/// ` = ["a", "b", ]` exactly: names free of quotes, backslashes and control
/// characters, each followed by `, `.
fn string_list(rest: &[u8]) -> Option<Vec<String>> {
    let mut rest = rest.strip_prefix(b" = [")?;
    let mut names = Vec::new();
    loop {
        if rest == b"]" {
            return Some(names);
        }
        rest = rest.strip_prefix(b"\"")?;
        let end = rest.iter().position(|b| *b == b'"')?;
        let (name, after) = rest.split_at(end);
        if name.is_empty() || name.iter().any(|b| *b == b'\\' || *b < 0x20 || *b == 0x7f) {
            return None;
        }
        names.push(std::str::from_utf8(name).ok()?.to_owned());
        rest = after.strip_prefix(b"\", ")?;
    }
}

#[derive(Clone)]
struct Where<'e> {
    entry: &'e str,
    line: usize,
    offset: usize,
}

impl Where<'_> {
    fn error(&self, reason: impl std::fmt::Display) -> Error {
        Error::archive(
            format!("{reason} (line {})", self.line),
            Location {
                entry: Some(self.entry.to_owned()),
                offset: Some(self.offset as u64),
                opcode: None,
            },
        )
    }
}

struct Class<'e> {
    name: String,
    at: Where<'e>,
    parameters: Option<Vec<String>>,
    buffers: Option<Vec<String>>,
}

impl Class<'_> {
    fn finish(self, module: &str, out: &mut Vec<ModuleLists>) -> Result<(), Error> {
        match (self.parameters, self.buffers) {
            // Not a module: the printer gives other classes neither list.
            (None, None) => Ok(()),
            (Some(parameters), Some(buffers)) => {
                out.push(ModuleLists {
                    class: format!("{module}.{}", self.name),
                    parameters,
                    buffers,
                });
                Ok(())
            }
            _ => Err(self.at.error(format!(
                "class {} gives only one of __parameters__ and __buffers__",
                self.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINEAR: &[u8] = b"class Linear(Module):\n  __parameters__ = [\"weight\", \"bias\", ]\n  __buffers__ = []\n  weight : Tensor\n  def forward(self: __torch__.Linear,\n    x: Tensor) -> Tensor:\n    return )(syntax error\nclass Plain(Object):\n  a : int\n";

    #[test]
    fn reads_the_two_lines_of_each_module_class() {
        let lists = module_lists(LINEAR, "__torch__.m", "code/__torch__/m.py").unwrap();
        assert_eq!(
            lists,
            vec![ModuleLists {
                class: "__torch__.m.Linear".into(),
                parameters: vec!["weight".into(), "bias".into()],
                buffers: vec![],
            }]
        );
    }

    #[test]
    fn refuses_anything_but_the_printers_shape() {
        for bad in [
            "  __parameters__ = [\"a\"]",
            "  __parameters__ = [\"a\",]",
            "  __parameters__ = ['a', ]",
            "  __parameters__ = [\"a\" + \"b\", ]",
            "  __parameters__ = [\"a\\\"\", ]",
            "  __parameters__ = [\"\", ]",
            "  __parameters__ = __import__(\"os\")",
            "  __parameters__ = [\"a\", ] # comment",
            "  __parameters__: List[str] = []",
            "  __parameters__ =[]",
            "  __parameters__",
        ] {
            let code = format!("class A(Module):\n{bad}\n  __buffers__ = []\n");
            let e = module_lists(code.as_bytes(), "__torch__", "code/__torch__.py").unwrap_err();
            assert!(e.to_string().contains("line 2"), "{bad}: {e}");
        }
        for bad in [
            "class A(Module):\n  __parameters__ = []\n",
            "class A(Module):\n  __parameters__ = []\n  __buffers__ = []\n  __buffers__ = []\n",
            "  __parameters__ = []\n",
            "class A(Module):\n  __parameters__ = []\n  __buffers__ = []\nclass A(Module):\n  __parameters__ = []\n  __buffers__ = []\n",
            "class (Module):\n",
        ] {
            assert!(module_lists(bad.as_bytes(), "__torch__", "x").is_err(), "{bad}");
        }
        // Longer names and deeper lines are not the lists.
        let code = "class A(Module):\n  __parameters__x = 1\n    __parameters__ = 1\n";
        assert_eq!(
            module_lists(code.as_bytes(), "__torch__", "x").unwrap(),
            vec![]
        );
    }

    #[test]
    fn code_records_name_their_modules() {
        assert_eq!(
            code_module("code/__torch__.py").as_deref(),
            Some("__torch__")
        );
        assert_eq!(
            code_module("code/__torch__/torch/nn/modules/linear/___torch_mangle_0.py").as_deref(),
            Some("__torch__.torch.nn.modules.linear.___torch_mangle_0")
        );
        for not in [
            "code/__torch__.py.debug_pkl",
            "data.pkl",
            "code/a b.py",
            "code/.py",
            "code//x.py",
        ] {
            assert_eq!(code_module(not), None, "{not}");
        }
    }
}
