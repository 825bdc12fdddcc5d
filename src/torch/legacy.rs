//! The legacy (pre-1.6, `_use_new_zipfile_serialization=False`) stream: five
//! pickles in a row (magic number, protocol version, sys_info, the object, the
//! sorted storage keys), then each storage as an element count and raw bytes.
//! Every pickle goes through the same VM and allowlist as a zip checkpoint.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, ErrorKind, Location, Refusal};
use crate::limits::Limits;
use crate::pickle::machine::{self, Parsed, StringEncoding};
use crate::pickle::opcodes;
use crate::torch::module_ids;
use crate::torch::policy::{Stubs, UnknownGlobals, UserGlobals};
use crate::torch::semantics::{Refusals, TorchHooks};
use crate::torch::storage_keys::StorageKey;
use crate::torch::storages::{IdFormat, Storages};
use crate::torch::tensor::StorageId;
use crate::torch::value::{Arena, Node};
use crate::value::keys;
use crate::value::NodeId;

/// `pickle(0x1950A86A20F9469CFC6C)` as torch writes it with protocol 2: the prefix
/// that identifies the legacy format.
pub const MAGIC_PICKLE_V2: &[u8] = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e";
/// The magic number's two's-complement little-endian bytes.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
/// The magic number in decimal, as protocols 0 and 1 write it (a text LONG).
const MAGIC_DECIMAL: &str = "119547037146038801333356";
const PROTOCOL_VERSION: i64 = 1001;

/// Is `node` the magic number, from a binary or a text long?
fn is_magic(node: &Node) -> bool {
    match node {
        Node::BigInt(b) => **b == MAGIC,
        // The VM keeps a long text literal as written; pickle reads it with
        // int(text, 0), which also takes a sign and single underscores between
        // digits (and no leading zero).
        Node::DecimalInt(text) => {
            let unsigned = text.strip_prefix('+').unwrap_or(text);
            !unsigned.starts_with('_')
                && !unsigned.ends_with('_')
                && !unsigned.contains("__")
                && unsigned.replace('_', "") == MAGIC_DECIMAL
        }
        _ => false,
    }
}

/// What a legacy stream holds once parsed and checked.
pub struct Legacy {
    pub arena: Arena,
    pub root: NodeId,
    pub protocol: Option<u8>,
    pub storages: Storages,
    /// Where each root storage's bytes start in the stream.
    pub offsets: HashMap<StorageId, u64>,
    /// The byte offset of each of the five pickles, for scanners and error messages.
    pub pickle_offsets: [u64; 5],
    /// Just past the last storage: where the checkpoint ends. What follows is the
    /// caller's to judge (a file's trailing bytes, or a stream's next object).
    pub end: u64,
    /// The globals the main pickle stood in for, in stub mode.
    pub stubs: Stubs,
}

/// Does the stream begin with the legacy magic number (whatever protocol wrote it)?
pub fn is_legacy(data: &[u8]) -> bool {
    let head = data.get(..data.len().min(64)).unwrap_or_default();
    // Most pickles (a state dict's data.pkl) have no STOP in their first bytes;
    // finding that out needs no VM, whose code a scan would otherwise run for
    // the first time on every file it sniffs.
    if !stops_within(head) {
        return false;
    }
    let user = UserGlobals::default();
    let mut hooks = TorchHooks::new(Refusals::Record, &user, Limits::tight(), IdFormat::Legacy);
    let mut arena = Arena::new(&Limits::tight());
    match machine::run(
        head,
        &mut hooks,
        &mut arena,
        &Limits::tight(),
        StringEncoding::Utf8,
    ) {
        Ok(parsed) => is_magic(arena.get(parsed.root)),
        Err(_) => false,
    }
}

/// Is there a STOP at an opcode boundary of `head`? Opcodes are read one after
/// another by their argument shapes, as the VM reads them: without one, the VM
/// cannot reach the end of a pickle inside `head`.
fn stops_within(head: &[u8]) -> bool {
    let mut pos = 0usize;
    while let Some(&op) = head.get(pos) {
        let Some((_, arg)) = opcodes::info(op) else {
            return false;
        };
        if op == opcodes::STOP {
            return true;
        }
        let rest = head.get(pos + 1..).unwrap_or_default();
        let arg_len = opcodes::arg_len(arg, rest);
        let Some(next) = arg_len.and_then(|n| pos.checked_add(n.checked_add(1)?)) else {
            return false;
        };
        pos = next;
    }
    false
}

fn aux_pickle(
    data: &[u8],
    at: u64,
    user: &UserGlobals,
    limits: &Limits,
    encoding: StringEncoding,
    what: &str,
) -> Result<(Arena, Parsed), Error> {
    let mut hooks = TorchHooks::new(Refusals::Raise, user, *limits, IdFormat::Legacy)
        .without_persistent_ids("unsupported persistent id encountered");
    let mut arena = Arena::new(limits);
    let parsed = machine::run(data, &mut hooks, &mut arena, limits, encoding)
        .map_err(|e| shift(e, at, what))?;
    // torch builds these pickles too, so a dict key it cannot hash refuses the file.
    keys::check_keys(&arena, limits.max_key_values).map_err(|e| shift(e, at, what))?;
    Ok((arena, parsed))
}

/// When the main pickle is a whole pickled module that stub mode reads, the
/// first module class it names: a load refused for a module class then says what
/// the file is and how its tensors load. Run only on that refusal.
fn whole_module(
    data: &[u8],
    user: &UserGlobals,
    limits: &Limits,
    encoding: StringEncoding,
) -> Option<String> {
    let mut hooks = TorchHooks::new(Refusals::Raise, user, *limits, IdFormat::Legacy)
        .stubbing(UnknownGlobals::Stub);
    let mut arena = Arena::new(limits);
    machine::run(data, &mut hooks, &mut arena, limits, encoding).ok()?;
    let stubs = hooks.stubs?;
    let (module, name) = stubs.module_classes().next()?;
    Some(format!("{module}.{name}"))
}

/// Make an error's offset absolute in the file, and say which pickle it was in.
fn shift(mut e: Error, base: u64, what: &str) -> Error {
    if let Some(loc) = e.location_mut() {
        loc.offset = Some(loc.offset.unwrap_or(0).saturating_add(base));
        if loc.entry.is_none() {
            loc.entry = Some(format!("legacy {what} pickle"));
        }
    }
    e
}

fn rest(data: &[u8], pos: u64) -> &[u8] {
    usize::try_from(pos)
        .ok()
        .and_then(|p| data.get(p..))
        .unwrap_or_default()
}

pub fn parse(
    data: &[u8],
    user: &UserGlobals,
    unknown: UnknownGlobals,
    limits: &Limits,
    encoding: StringEncoding,
) -> Result<Legacy, Error> {
    let bad = |reason: String, at: u64| Error::archive(reason, Location::at(at));
    let mut pos = 0u64;
    let mut pickle_offsets = [0u64; 5];

    pickle_offsets[0] = pos;
    let (arena, parsed) = aux_pickle(rest(data, pos), pos, user, limits, encoding, "magic number")?;
    if !is_magic(arena.get(parsed.root)) {
        return Err(bad("Invalid magic number; corrupt file?".into(), 0));
    }
    pos += parsed.end as u64;

    pickle_offsets[1] = pos;
    let (arena, parsed) = aux_pickle(
        rest(data, pos),
        pos,
        user,
        limits,
        encoding,
        "protocol version",
    )?;
    // torch compares with `!=`, so any number equal to 1001 will do.
    const VERSION: f64 = PROTOCOL_VERSION as f64;
    match arena.get(parsed.root) {
        Node::Int(PROTOCOL_VERSION) => {}
        Node::Float(v) if *v == VERSION => {}
        Node::Complex(c) if **c == (VERSION, 0.0) => {}
        Node::Int(v) => return Err(bad(format!("Invalid protocol version: {v}"), pos)),
        other => {
            return Err(bad(
                format!("Invalid protocol version: a {}", other.kind_name()),
                pos,
            ))
        }
    }
    pos += parsed.end as u64;

    pickle_offsets[2] = pos;
    let (_, parsed) = aux_pickle(rest(data, pos), pos, user, limits, encoding, "sys_info")?;
    pos += parsed.end as u64;

    pickle_offsets[3] = pos;
    let main_at = pos;
    let mut hooks =
        TorchHooks::new(Refusals::Raise, user, *limits, IdFormat::Legacy).stubbing(unknown);
    let mut arena = Arena::new(limits);
    let main = match machine::run(rest(data, pos), &mut hooks, &mut arena, limits, encoding) {
        Ok(main) => main,
        Err(e) => {
            let e = shift(e, main_at, "main");
            let refused_class = matches!(
                e.kind(),
                ErrorKind::Unsafe(Refusal::UnsupportedGlobal { .. })
            );
            if refused_class && unknown == UnknownGlobals::Refuse {
                let at = e.location().cloned().unwrap_or_default();
                if let Some(class) = whole_module(rest(data, pos), user, limits, encoding) {
                    return Err(module_ids::refusal(Some(&class), at));
                }
            }
            return Err(e);
        }
    };
    pos += main.end as u64;
    let storages = hooks.storages;
    let stubs = hooks.stubs.unwrap_or_default();

    pickle_offsets[4] = pos;
    let (keys_arena, parsed) =
        aux_pickle(rest(data, pos), pos, user, limits, encoding, "storage keys")?;
    // torch iterates whatever the pickle holds; it writes a list.
    let key_ids = match keys_arena.get(parsed.root) {
        Node::List(items) => &items[..],
        Node::Tuple(span) => keys_arena.items(*span),
        other => {
            return Err(bad(
                format!(
                    "the storage key list must be a list or tuple, not a {}",
                    other.kind_name()
                ),
                pos,
            ))
        }
    };
    let keys: Vec<String> = key_ids
        .iter()
        .map(|id| match keys_arena.get(*id) {
            Node::Str(s) | Node::Bytes(s) => {
                String::from_utf8(keys_arena.payload(*s).to_vec()).ok()
            }
            Node::Int(i) => Some(i.to_string()),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(|| bad("the storage key list must hold strings".into(), pos))?;
    pos += parsed.end as u64;

    // The first storage of each key is the one its records fill; a later one of
    // the same key is a fresh empty storage torch handed a later id.
    let mut by_key: HashMap<&StorageKey, StorageId> = HashMap::new();
    for (i, d) in storages.decls().iter().enumerate() {
        by_key.entry(&d.key).or_insert(StorageId(i as u32));
    }
    let views: HashSet<StorageId> = storages.views().iter().map(|(v, _, _)| *v).collect();
    let mut offsets = HashMap::with_capacity(keys.len());
    for key in &keys {
        let id = *by_key
            .get(&StorageKey::new(key))
            .ok_or_else(|| bad(format!("storage key {key:?} not found in the pickle"), pos))?;
        // torch would read these bytes over the part of the root the view shares;
        // no writer lists a view.
        if views.contains(&id) {
            return Err(bad(
                format!("storage key {key:?} names a view of another storage, not a storage"),
                pos,
            ));
        }
        let decl = storages
            .get(id)
            .ok_or_else(|| bad(format!("storage key {key:?} not found"), pos))?;
        let header = rest(data, pos)
            .get(..8)
            .ok_or_else(|| bad(format!("unexpected EOF before storage {key:?}"), pos))?;
        let mut count = [0u8; 8];
        count.copy_from_slice(header);
        let numel = u64::from_le_bytes(count);
        let nbytes = numel.checked_mul(decl.dtype.itemsize());
        if nbytes != Some(decl.nbytes) {
            return Err(Error::tensor(
                format!(
                    "storage {key:?} has wrong byte size: expected {} got {numel} elements",
                    decl.nbytes
                ),
                Location::at(pos),
            ));
        }
        let start = pos + 8;
        let end = start
            .checked_add(decl.nbytes)
            .filter(|end| *end <= data.len() as u64);
        let end = end.ok_or_else(|| {
            bad(
                format!(
                    "unexpected EOF: storage {key:?} needs {} bytes after offset {start}",
                    decl.nbytes
                ),
                start,
            )
        })?;
        // torch reads the bytes of a key listed twice twice, into one storage: the
        // last copy is what it holds.
        offsets.insert(id, start);
        pos = end;
    }
    for (i, decl) in storages.decls().iter().enumerate() {
        let id = StorageId(i as u32);
        if offsets.contains_key(&id) || views.contains(&id) {
            continue;
        }
        // torch allocates a storage the key list leaves out and never fills it.
        if decl.nbytes > 0 {
            return Err(bad(
                format!(
                    "storage {:?} is used by the pickle but has no data: torch would hand out uninitialised memory",
                    decl.key
                ),
                pos,
            ));
        }
        offsets.insert(id, pos);
    }
    Ok(Legacy {
        arena,
        root: main.root,
        protocol: main.protocol,
        storages,
        offsets,
        pickle_offsets,
        end: pos,
        stubs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `is_legacy` was before the STOP pre-check: the VM alone.
    fn vm_says_legacy(data: &[u8]) -> bool {
        let user = UserGlobals::default();
        let mut hooks = TorchHooks::new(Refusals::Record, &user, Limits::tight(), IdFormat::Legacy);
        let mut arena = Arena::new(&Limits::tight());
        let head = &data[..data.len().min(64)];
        machine::run(
            head,
            &mut hooks,
            &mut arena,
            &Limits::tight(),
            StringEncoding::Utf8,
        )
        .is_ok_and(|p| is_magic(arena.get(p.root)))
    }

    #[test]
    fn every_encoding_of_the_magic_number_is_recognised() {
        let magic_long1 = &MAGIC_PICKLE_V2[2..MAGIC_PICKLE_V2.len() - 1];
        for data in [
            MAGIC_PICKLE_V2.to_vec(),
            // A value popped before the magic number, and a padded LONG1.
            [b"\x80\x02N0", magic_long1, b"."].concat(),
            [b"\x80\x02\x8a\x0b", &MAGIC[..], b"\x00."].concat(),
            b"L119547037146038801333356L\n.".to_vec(),
            b"\x80\x02L+119_547037146038801333356L\n.".to_vec(),
            b"\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.".to_vec(),
        ] {
            assert!(vm_says_legacy(&data), "vm {data:?}");
            assert!(is_legacy(&data), "{data:?}");
        }
        assert!(!is_legacy(b"L0119547037146038801333356L\n."));
        // A counted argument as long as an address can be (found by fuzzing).
        assert!(!is_legacy(b"\x96\xf7\xff\xff\xff\xff\xff\xff\xff\xffb."));
        let state_dict_head =
            b"\x80\x02}q\x00(X\x1b\x00\x00\x00transformer.h.0.attn.c_attn.wq\x01ctorch._utils\n";
        assert!(!is_legacy(state_dict_head));
    }

    proptest! {
        #[test]
        fn the_stop_pre_check_never_changes_the_answer(
            prefix in prop::sample::select(vec![&b""[..], b"\x80\x02", b"\x80\x02N0", b"(", b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00"]),
            body in prop::collection::vec(prop::sample::select(b"\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.NL0(tlq\x00h\x01\n}X\x02\x00\x00\x00ab".to_vec()), 0..40),
        ) {
            let data = [prefix, &body[..]].concat();
            prop_assert_eq!(is_legacy(&data), vm_says_legacy(&data));
        }
    }
}
