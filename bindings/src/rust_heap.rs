//! The heap of the extension's own Rust allocations: a pure-Rust dlmalloc,
//! apart from the C heap where torch, numpy and our `HeapMemory` keep storages.
//!
//! On one shared heap, a load's scaffolding (the index, the pickle's arena, the
//! VM's stacks) is allocated before its storages and took its bytes from the
//! block the last load's storage had freed, so that block no longer fit the
//! next storage of the same size: for about five loads after the first, every
//! load faulted in each page of its storages anew (4,099 faults a load of a 16
//! MiB tensor), where torch.load settles from its third. Apart, a storage freed
//! is the block the next one gets (benches/repeated.py).
//!
//! After `fork` (a DataLoader's workers), the child must not inherit the heap's
//! lock held by a thread that does not exist there: the lock is taken around
//! `fork`, as glibc does for its own heap.

#![allow(unsafe_code)]

#[global_allocator]
static RUST_HEAP: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Make the heap usable in children of `fork`; called when the module loads.
pub fn keep_usable_after_fork() {
    #[cfg(unix)]
    // SAFETY: registers pthread_atfork handlers that take and release the heap's
    // lock; it runs once, at module init, before any thread of ours exists.
    unsafe {
        dlmalloc::enable_alloc_after_fork();
    }
}
