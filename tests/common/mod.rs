//! Helpers shared by the cargo integration tests: run the VM with torch's hooks,
//! render what it built, and write small zip archives (valid or deliberately not).
#![allow(dead_code)]

pub mod render;
pub mod zipw;

use tensorplay::error::ErrorKind;
use tensorplay::pickle::machine::{self, StringEncoding};
use tensorplay::torch::policy::UserGlobals;
use tensorplay::torch::Arena;
use tensorplay::torch::IdFormat;
use tensorplay::torch::{Refusals, TorchHooks};
use tensorplay::value::NodeId;
use tensorplay::{Error, Limits};

/// Run `data` as a checkpoint pickle with the default limits.
pub fn run(data: &[u8]) -> Result<(Arena, NodeId), Error> {
    run_with(data, &Limits::default(), StringEncoding::Utf8)
}

pub fn run_with(
    data: &[u8],
    limits: &Limits,
    encoding: StringEncoding,
) -> Result<(Arena, NodeId), Error> {
    let user = UserGlobals::default();
    let mut hooks = TorchHooks::new(Refusals::Raise, &user, *limits, IdFormat::Zip);
    let mut arena = Arena::new(limits);
    let parsed = machine::run(data, &mut hooks, &mut arena, limits, encoding)?;
    Ok((arena, parsed.root))
}

/// What `data` loads to, rendered like Python's repr.
pub fn eval(data: &[u8]) -> String {
    match run(data) {
        Ok((arena, root)) => render::render(&arena, root),
        Err(e) => panic!("{e}"),
    }
}

/// The error `data` fails with.
pub fn fail(data: &[u8]) -> Error {
    match run(data) {
        Ok((arena, root)) => panic!("expected an error, got {}", render::render(&arena, root)),
        Err(e) => e,
    }
}

/// The limit named in a limit error.
pub fn limit_name(e: &Error) -> &'static str {
    match e.kind() {
        ErrorKind::Limit { limit, .. } => limit.name(),
        _ => panic!("expected a limit error, got {e}"),
    }
}
