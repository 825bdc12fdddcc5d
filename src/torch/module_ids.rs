//! The other persistent id of a legacy file: a whole pickled `nn.Module`
//! (`torch.save(model, f, _use_new_zipfile_serialization=False)`) stands each
//! module class in as `('module', cls, source_file, source)`, the class's
//! source text recorded so that torch's loader can warn when it has changed.
//! torch's weights-only load refuses such an id; in stub mode the class is a
//! stub and its source one of its attributes, text that is never compiled.

use crate::error::{Error, Location};
use crate::torch::policy::{Global, Stubs};
use crate::torch::value::{Arena, Node, Torch};
use crate::value::NodeId;

const TAG: &[u8] = b"module";

/// Is `pid` tagged as a module id? (torch reads the tag as ASCII, from a str or bytes.)
pub fn is_module_id(arena: &Arena, pid: NodeId) -> bool {
    let tag = arena.tuple(pid).and_then(|items| items.first());
    matches!(tag.map(|t| arena.get(*t)), Some(Node::Str(s) | Node::Bytes(s)) if arena.payload(*s) == TAG)
}

/// The refusal of a whole pickled module where stubs cannot stand in for its
/// classes; `class` names the first one, when known.
pub fn refusal(class: Option<&str>, at: Location) -> Error {
    let class = class.map_or_else(String::new, |c| format!(" ({c} among its classes)"));
    Error::unsupported(
        format!(
            "a whole pickled nn.Module{class}: torch.save(model) in the legacy format stands each \
             module class in with its source code as a persistent id, which weights-only loading \
             refuses (as torch.load(weights_only=True) does); its tensors load with \
             unknown_globals=\"stub\" (each module a tensorplay.Stub, the class source kept as text \
             in Stub.source and never run) or tensorplay.module_state_dict"
        ),
        at,
    )
}

/// Take a module id apart in stub mode: the class's stub, with its source
/// recorded in `stubs`. Anything but the exact shape torch writes is refused.
pub fn load(arena: &Arena, pid: NodeId, stubs: &mut Stubs, at: &Location) -> Result<NodeId, Error> {
    let bad = |why: String| Error::forbidden(format!("a module persistent id {why}"), at.clone());
    let items = arena
        .tuple(pid)
        .ok_or_else(|| bad("must be a tuple".into()))?;
    let &[_, class, source_file, source] = items else {
        return Err(bad(format!(
            "must be ('module', class, source_file, source), 4 items; this one has {}",
            items.len()
        )));
    };
    let index =
        match arena.get(class) {
            Node::Domain(Torch::Global(Global::Stub(i))) => *i,
            Node::Domain(Torch::Global(_)) => return Err(bad(
                "must name a module class outside the allowlist, which stub mode stands in for; \
                 this one names an allowlisted global"
                    .into(),
            )),
            other => {
                return Err(bad(format!(
                    "must name its module class as a global, not a {}",
                    other.kind_name()
                )))
            }
        };
    let text = |id: NodeId, what: &str| -> Result<Option<String>, Error> {
        match arena.get(id) {
            Node::None => Ok(None),
            Node::Str(s) | Node::Bytes(s) => String::from_utf8(arena.payload(*s).to_vec())
                .map(Some)
                .map_err(|_| bad(format!("has a {what} that is not UTF-8 text"))),
            other => Err(bad(format!(
                "must have a str or None {what}, not a {}",
                other.kind_name()
            ))),
        }
    };
    text(source_file, "source file name")?;
    let source = text(source, "source")?;
    // torch writes one id per class; the later uses of a class name it as a plain global.
    if !stubs.set_source(index, source) {
        let (module, name) = stubs
            .names()
            .get(index as usize)
            .cloned()
            .unwrap_or_default();
        return Err(bad(format!(
            "names {module}.{name} a second time (torch writes one for each class)"
        )));
    }
    Ok(class)
}
