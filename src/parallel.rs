//! Independent pieces of work of known sizes (storage copies, decompressions,
//! reads), spread over a few scoped threads: largest first into the least loaded
//! thread, a near-even split without a work queue.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Below this much work in all, spawning threads costs more than it saves.
const MIN_PARALLEL_BYTES: usize = 1 << 20;

/// Run `work` on every item, spread by `size` over up to `threads` threads (on
/// the calling thread for one thread, one item, or under 1 MiB in all). The
/// error returned is that of the first failing item in the order given, so a
/// failure reads the same whatever the split: once an item fails, items after
/// it in that order are skipped, and items before it still run.
pub fn run_by_size<T, E>(
    items: Vec<T>,
    threads: usize,
    size: impl Fn(&T) -> usize,
    work: impl Fn(T) -> Result<(), E> + Sync,
) -> Result<(), E>
where
    T: Send,
    E: Send,
{
    let threads = threads.clamp(1, items.len().max(1));
    let total = items.iter().map(&size).fold(0usize, usize::saturating_add);
    if threads == 1 || total < MIN_PARALLEL_BYTES {
        return items.into_iter().try_for_each(work);
    }
    let mut order: Vec<(usize, usize, T)> = items
        .into_iter()
        .enumerate()
        .map(|(index, item)| (size(&item).max(1), index, item))
        .collect();
    order.sort_unstable_by_key(|&(size, index, _)| (std::cmp::Reverse(size), index));
    let mut bins: Vec<(usize, Vec<(usize, T)>)> = (0..threads).map(|_| (0, Vec::new())).collect();
    for (size, index, item) in order {
        if let Some(bin) = bins.iter_mut().min_by_key(|(load, _)| *load) {
            bin.0 = bin.0.saturating_add(size);
            bin.1.push((index, item));
        }
    }
    let work = &work;
    // The first failing item's place in the order given, so far: it only falls.
    let first_failure = &AtomicUsize::new(usize::MAX);
    let failures = std::thread::scope(|scope| {
        let handles: Vec<_> = bins
            .into_iter()
            .map(|(_, bin)| {
                scope.spawn(move || {
                    bin.into_iter()
                        .filter(|(index, _)| *index < first_failure.load(Ordering::Relaxed))
                        .filter_map(|(index, item)| {
                            let e = work(item).err()?;
                            first_failure.fetch_min(index, Ordering::Relaxed);
                            Some((index, e))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(errors) => errors,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect::<Vec<_>>()
    });
    failures
        .into_iter()
        .min_by_key(|(index, _)| *index)
        .map_or(Ok(()), |(_, e)| Err(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_on_any_number_of_threads() {
        for threads in [0, 1, 2, 7] {
            for sizes in [vec![], vec![5], vec![1 << 20, 3, 1 << 19, 0, 1 << 21, 7]] {
                let seen: Vec<AtomicUsize> = sizes.iter().map(|_| AtomicUsize::new(0)).collect();
                let items: Vec<(usize, usize)> = sizes.iter().copied().enumerate().collect();
                let result: Result<(), ()> = run_by_size(
                    items,
                    threads,
                    |&(_, size)| size,
                    |(index, _)| {
                        seen[index].fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    },
                );
                assert_eq!(result, Ok(()));
                assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn the_first_failure_in_the_order_given_is_reported() {
        for threads in [1, 2, 4] {
            let items: Vec<usize> = (0..16).collect();
            let ran = AtomicUsize::new(0);
            let result = run_by_size(
                items,
                threads,
                |&index| (index + 1) << 20,
                |index| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    if index % 5 == 3 {
                        Err(index)
                    } else {
                        Ok(())
                    }
                },
            );
            assert_eq!(result, Err(3));
            // Items 0 to 3 run; at most the other threads' items that started
            // before item 3 failed run after it.
            let ran = ran.load(Ordering::Relaxed);
            assert!((4..=16).contains(&ran), "{ran} ran");
            if threads == 1 {
                assert_eq!(ran, 4);
            }
        }
    }
}
