//! Work cut in parts run over the cores, whatever threads the system gives.
//!
//! A scoped thread started with `std::thread::Scope::spawn` panics where the system refuses a
//! thread (a process at its limit of threads or of memory for their stacks), which turned a
//! request that one thread could answer into a failure. [`each`] runs every part on a thread of
//! its own where one is given and on the calling thread where not: the same results in the same
//! order, only later.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// `work(k)` for every `k` in `0..parts`, in order, each on a scoped thread of its own, or on
/// the calling thread (after the others have started) where the system refuses one. A part that
/// panicked is `Err` with its panic's payload; the others still run.
pub fn each<T: Send>(
    parts: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<std::thread::Result<T>> {
    let work = &work;
    std::thread::scope(|scope| {
        let started: Vec<Result<std::thread::ScopedJoinHandle<'_, T>, usize>> = (0..parts)
            .map(|k| {
                if refused() {
                    return Err(k);
                }
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || work(k))
                    .map_err(|_| k)
            })
            .collect();
        started
            .into_iter()
            .map(|part| match part {
                Ok(handle) => handle.join(),
                Err(k) => catch_unwind(AssertUnwindSafe(|| work(k))),
            })
            .collect()
    })
}

#[cfg(not(test))]
fn refused() -> bool {
    false
}

#[cfg(test)]
thread_local! {
    /// Set by a test: every thread [`each`] asks for on this thread is refused.
    static REFUSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
fn refused() -> bool {
    REFUSE.with(std::cell::Cell::get)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::{REFUSE, each};

    /// `each` over 5 parts, each giving its index squared and the thread it ran on; part 3
    /// panics where `panic_at_3`.
    fn run(panic_at_3: bool) -> (Vec<Option<usize>>, Vec<ThreadId>) {
        let threads = Mutex::new(Vec::new());
        let out = each(5, |k| {
            threads
                .lock()
                .expect("threads")
                .push(std::thread::current().id());
            assert!(!(panic_at_3 && k == 3), "part 3");
            k * k
        });
        let mut threads = threads.into_inner().expect("threads");
        threads.sort_by_key(|t| format!("{t:?}"));
        threads.dedup();
        (out.into_iter().map(Result::ok).collect(), threads)
    }

    #[test]
    fn every_part_runs_once_in_order_on_threads_of_its_own() {
        let (out, threads) = run(false);
        assert_eq!(out, [Some(0), Some(1), Some(4), Some(9), Some(16)]);
        assert_eq!(threads.len(), 5);
        assert!(!threads.contains(&std::thread::current().id()));
        assert!(each(0, |k| k).is_empty());
    }

    #[test]
    fn refused_threads_run_their_parts_on_the_calling_thread() {
        REFUSE.with(|r| r.set(true));
        let (out, threads) = run(false);
        let (with_panic, _) = run(true);
        REFUSE.with(|r| r.set(false));
        assert_eq!(out, [Some(0), Some(1), Some(4), Some(9), Some(16)]);
        assert_eq!(threads, [std::thread::current().id()]);
        assert_eq!(with_panic, [Some(0), Some(1), Some(4), None, Some(16)]);
    }

    #[test]
    fn a_part_that_panics_is_its_own_error() {
        let (out, _) = run(true);
        assert_eq!(out, [Some(0), Some(1), Some(4), None, Some(16)]);
    }
}
