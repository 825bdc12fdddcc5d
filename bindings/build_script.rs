//! Lays out the extension's hot functions together (hot_code_order.txt, written
//! by benches/link_order.py), so that a fresh process's first call runs code the
//! import already paged in instead of faulting in new pages of the library.
//!
//! Only where the linker is known to be LLD: rustc 1.90 and later link
//! x86_64-unknown-linux-gnu with its bundled LLD unless a linker is configured.
//! GNU ld refuses the option, so anywhere else the build is left as it was.
//! `TENSORPLAY_LINK_ORDER=0` turns it off.

use std::env;
use std::process::Command;

const ORDER_FILE: &str = "hot_code_order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-changed=build_script.rs");
    println!("cargo:rerun-if-env-changed=TENSORPLAY_LINK_ORDER");
    if env::var("TENSORPLAY_LINK_ORDER").as_deref() == Ok("0") || !links_with_bundled_lld() {
        return;
    }
    let Ok(dir) = env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,--symbol-ordering-file={dir}/{ORDER_FILE}");
    // Names the build does not have (another toolchain's hashes) are skipped, not errors.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-warn-symbol-ordering");
}

fn links_with_bundled_lld() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    // A linker from cargo's config, or any linker or link flag in RUSTFLAGS, may
    // not be LLD: leave such builds alone.
    let linker_configured =
        env::var_os("RUSTC_LINKER").is_some() || var("CARGO_ENCODED_RUSTFLAGS").contains("link");
    var("TARGET") == "x86_64-unknown-linux-gnu" && !linker_configured && rustc_minor() >= Some(90)
}

/// The minor version of the rustc cargo builds with (`rustc 1.95.0 (...)` gives 95).
fn rustc_minor() -> Option<u32> {
    let out = Command::new(env::var_os("RUSTC")?)
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.split_whitespace().nth(1)?;
    version.strip_prefix("1.")?.split('.').next()?.parse().ok()
}
