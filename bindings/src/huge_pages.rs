//! Transparent huge pages for the fresh memory an eager load copies storages
//! into. Copying into fresh memory is bound by its page faults: one per 4 KiB
//! page, or one per 2 MiB where the memory is advised `MADV_HUGEPAGE` before
//! the copy first touches it. The allocation stays the allocator's own (torch's
//! or ours), so the storages stay ordinary: only the 2 MiB-aligned interior of
//! each is advised, and memory with none is left alone.
//!
//! Off where the kernel has THP `never` (or is not Linux), when
//! `TENSORPLAY_HUGE_PAGES=0`, and silently wherever `madvise` refuses. The
//! system's settings are read, never changed.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tensorplay::fill::{FreshPages, Region};

const HUGE_PAGE: usize = 2 << 20;

/// Whether huge pages are asked for, and why, decided once per process.
struct Policy {
    on: bool,
    why: String,
}

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        if std::env::var_os("TENSORPLAY_HUGE_PAGES").is_some_and(|v| v == "0") {
            return Policy {
                on: false,
                why: "off: TENSORPLAY_HUGE_PAGES=0".into(),
            };
        }
        if !cfg!(target_os = "linux") {
            return Policy {
                on: false,
                why: "off: not Linux".into(),
            };
        }
        let setting = |name: &str| {
            let path = format!("/sys/kernel/mm/transparent_hugepage/{name}");
            std::fs::read_to_string(path).ok().and_then(|text| {
                let chosen = text.split_once('[')?.1.split_once(']')?.0;
                Some(chosen.to_owned())
            })
        };
        match (setting("enabled"), setting("defrag")) {
            (Some(enabled), defrag) if enabled != "never" => Policy {
                on: true,
                why: format!(
                    "on: THP enabled={enabled}, defrag={}",
                    defrag.as_deref().unwrap_or("unknown")
                ),
            },
            (Some(_), _) => Policy {
                on: false,
                why: "off: THP enabled=never".into(),
            },
            (None, _) => Policy {
                on: false,
                why: "off: this kernel has no transparent huge pages".into(),
            },
        }
    })
}

/// Set once a load found huge pages slow: later loads of the process do not
/// ask again.
static FOUND_SLOW: AtomicBool = AtomicBool::new(false);

/// Whether an eager load asks for huge pages, and why (`"on: THP
/// enabled=madvise, defrag=madvise"`): what benchmarks report.
#[pyo3::pyfunction]
pub fn huge_pages() -> String {
    let policy = policy();
    if policy.on && FOUND_SLOW.load(Ordering::Relaxed) {
        format!("{}; found slow in this process, so off", policy.why)
    } else {
        policy.why.clone()
    }
}

/// One load's huge-page advice. Each chunk's whole 2 MiB pages are advised
/// just before the copy first writes them, until a chunk shows that huge pages
/// are slow here (a kernel compacting memory, or a virtual machine whose host
/// takes back free memory and must fault each huge page in again): the rest of
/// the load, and every later load of the process, then takes 4 KiB pages.
pub struct HugePages {
    trusted: AtomicBool,
}

impl HugePages {
    pub fn for_load() -> Self {
        HugePages {
            trusted: AtomicBool::new(policy().on && !FOUND_SLOW.load(Ordering::Relaxed)),
        }
    }
}

/// A chunk judged slow took longer than this per MiB: about what 4 KiB pages
/// cost on the machines measured (see benches/README.md), where huge pages
/// that come quickly cost a fifth of it.
const SLOW_PER_MIB: Duration = Duration::from_micros(800);

impl FreshPages for HugePages {
    fn before_first_write(&self, region: Region) -> bool {
        if !self.trusted.load(Ordering::Relaxed) {
            return false;
        }
        let Some((start, len)) = whole_huge_pages(region) else {
            return false;
        };
        advise(start, len)
    }

    fn written(&self, region: Region, took: Duration) {
        let mib = u32::try_from(region.len >> 20).unwrap_or(u32::MAX);
        if mib >= 4 && took > SLOW_PER_MIB * mib {
            self.trusted.store(false, Ordering::Relaxed);
            FOUND_SLOW.store(true, Ordering::Relaxed);
        }
    }
}

/// The 2 MiB-aligned pages that hold bytes of the chunk and lie wholly inside
/// its destination, if any.
fn whole_huge_pages(r: Region) -> Option<(usize, usize)> {
    let round_up = |a: usize| {
        a.checked_add(HUGE_PAGE - 1)
            .map(|a| a / HUGE_PAGE * HUGE_PAGE)
    };
    let round_down = |a: usize| a / HUGE_PAGE * HUGE_PAGE;
    let chunk = r.base.checked_add(r.offset)?;
    let start = round_down(chunk).max(round_up(r.base)?);
    let end = round_up(chunk.checked_add(r.len)?)?.min(round_down(r.base.checked_add(r.total)?));
    (end > start).then(|| (start, end - start))
}

/// `MADV_HUGEPAGE` on `len` bytes at `start`: whether the kernel took it.
fn advise(start: usize, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    // SAFETY: the range lies inside a destination the load owns, in pages the
    // copy has not written yet; MADV_HUGEPAGE changes how pages are backed,
    // never their contents, and a refusal leaves them as they were.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}
