//! Independent jobs on several threads, results in input order: what `recommend` does with
//! its candidates and `validate` with its rows. Each job is a whole simulation, so the
//! threads share nothing but a counter; the results do not depend on how many there are.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f(i)` for every `i` in `0..n`, on up to `jobs` threads that each take the next index as
/// they free up, so a slow job never holds a queue behind it. `progress(done, n)` is called
/// after each job. A job that panicked is `None` (the panic's message has gone to stderr);
/// the others still run.
pub fn map<R: Send>(
    n: usize,
    jobs: usize,
    f: &(dyn Fn(usize) -> R + Sync),
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<Option<R>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs.clamp(1, n.max(1)))
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        mine.push((i, catch_unwind(AssertUnwindSafe(|| f(i))).ok()));
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1, n);
                    }
                    mine
                })
            })
            .collect();
        for w in workers {
            // The jobs' panics are caught above, so a worker itself cannot fail.
            for (i, r) in w.join().unwrap_or_default() {
                results[i] = r;
            }
        }
    });
    results
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn results_come_back_in_order_whatever_the_thread_count() {
        let serial = map(50, 1, &|i| i * i, &|_, _| {});
        for jobs in [2, 3, 8, 100] {
            assert_eq!(map(50, jobs, &|i| i * i, &|_, _| {}), serial, "{jobs} threads");
        }
        assert_eq!(serial[7], Some(49));
        assert!(map(0, 4, &|i| i, &|_, _| {}).is_empty());
    }

    #[test]
    fn a_panicking_job_loses_only_itself_and_progress_counts_every_job() {
        let seen = Mutex::new(Vec::new());
        let out = map(
            20,
            3,
            &|i| {
                assert!(i != 5, "job 5 fails on purpose");
                i
            },
            &|d, n| seen.lock().unwrap().push((d, n)),
        );
        assert_eq!(out[5], None);
        assert_eq!(out.iter().flatten().count(), 19);
        assert_eq!(out[19], Some(19));
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, (1..=20).map(|d| (d, 20)).collect::<Vec<_>>());
    }
}
