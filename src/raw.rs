//! A bare pickle, with no archive around it: the sidecars TensorDict writes next
//! to its tensors (`other.pickle`, `pickle.pkl`). It runs under exactly the
//! weights-only rules of a checkpoint's `data.pkl`, but with no archive there is no
//! record a storage could live in, so every persistent id is refused.

use std::sync::Arc;

use crate::archive::source::Source;
use crate::checkpoint::{Checkpoint, Format, LoadOptions, Trailing};
use crate::error::{Error, Location};
use crate::pickle::machine;
use crate::torch::{Refusals, TorchHooks};
use crate::torch::IdFormat;
use crate::torch::Arena;
use crate::value::keys;

/// Run the pickle in `data` (named `name` in errors) and validate what it built,
/// as a checkpoint without storages.
pub fn open_pickle(data: &[u8], name: &str, options: &LoadOptions) -> Result<Checkpoint, Error> {
    let mut arena = Arena::new(&options.limits);
    let mut hooks = TorchHooks::new(
        Refusals::Raise,
        &options.user_globals,
        options.limits,
        IdFormat::Zip,
    )
    .without_persistent_ids(
        "a persistent id in a pickle outside a checkpoint archive: there is no storage it could name",
    )
    .stubbing(options.unknown_globals);
    let parsed = machine::run(
        data,
        &mut hooks,
        &mut arena,
        &options.limits,
        options.encoding,
    )
    .map_err(|e| e.in_entry(name))?;
    if options.trailing == Trailing::Refused && parsed.end < data.len() {
        return Err(Error::pickle(
            format!("{} bytes follow the pickle's STOP", data.len() - parsed.end),
            Location {
                entry: Some(name.to_owned()),
                offset: Some(parsed.end as u64),
                opcode: None,
            },
        ));
    }
    keys::check_keys(&arena, options.limits.max_key_values).map_err(|e| e.in_entry(name))?;
    Ok(Checkpoint {
        source: Arc::new(Source::Empty),
        references: arena.reference_counts(),
        arena,
        root: parsed.root,
        storages: Vec::new(),
        protocol: parsed.protocol,
        pickle_entry: name.to_owned(),
        // A pickle of the zip generation: protocol 2 and later, no legacy framing.
        format: Format::Zip,
        end: parsed.end as u64,
        stubs: hooks.stubs.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_load_and_globals_follow_the_allowlist() {
        let options = LoadOptions::default();
        // {'data': {1, 2, 3}} as Python 3.11 pickles it (protocol 4).
        let set = b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x04data\x94\x8f\x94(K\x01K\x02K\x03\x90s.";
        let c = open_pickle(set, "other.pickle", &options).unwrap();
        assert!(c.storages.is_empty());
        let err = open_pickle(b"cos\nsystem\n(S'x'\ntR.", "evil.pkl", &options)
            .err()
            .unwrap();
        assert!(
            matches!(err.kind(), crate::error::ErrorKind::Unsafe(_)),
            "{err}"
        );
        assert!(err.to_string().contains("evil.pkl"));
        let err = open_pickle(b"N.N.", "two.pkl", &options).err().unwrap();
        assert!(err.to_string().contains("follow the pickle's STOP"));
    }

    #[test]
    fn persistent_ids_are_refused() {
        let options = LoadOptions::default();
        // BINPERSID of ('storage', torch.FloatStorage, '0', 'cpu', 1)
        let pid = b"\x80\x02(X\x07\x00\x00\x00storageq\x00ctorch\nFloatStorage\nq\x01X\x01\x00\x00\x000q\x02X\x03\x00\x00\x00cpuq\x03K\x01tq\x04Q.";
        let err = open_pickle(pid, "p.pkl", &options).err().unwrap();
        assert!(err.to_string().contains("persistent id"), "{err}");
    }
}
