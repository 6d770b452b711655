//! Running a training step with the compute pool held awake.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on worker 0 of the current rayon pool while the other workers keep looking for
/// work until `f` returns, rather than sleeping after rayon's few idle rounds.
///
/// - Why: a step alternates parallel kernels with short serial stretches. A worker asleep
///   when the next kernel starts is woken through the kernel (tens of µs on a VM) and starts
///   its share late. A cola-60m step on the 2-vCPU AMD EPYC did about 400 such sleeps
///   (context switches), and ran 2–3 % slower in step and GEMM time than with workers that
///   never slept.
/// - Between looks an idle worker yields its core (`sched_yield`), so other threads of the
///   process (a data loader, a checkpoint writer) still run.
/// - For a caller that owns the pool while `f` runs, as a single-rank step does. A worker
///   that picks up this loop while waiting on other work (another caller's step on the same
///   pool) holds that work until `f` is done: slower, never wrong.
pub fn hold_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    let f = Mutex::new(Some(f));
    let out = Mutex::new(None);
    rayon::broadcast(|ctx| {
        if ctx.index() == 0 {
            // Set on return and on unwind, so a panic in `f` ends the other workers' loops.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _done = Done(&done);
            let f = f.lock().unwrap_or_else(|e| e.into_inner()).take().expect("worker 0 runs the step once");
            let r = f();
            *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        } else {
            while !done.load(Ordering::Acquire) {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::thread::yield_now();
                }
            }
        }
    });
    out.into_inner().unwrap_or_else(|e| e.into_inner()).expect("worker 0 returned a result")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
    }

    #[test]
    fn the_step_runs_once_on_worker_0_and_its_parallel_work_on_every_worker() {
        for threads in [1, 2, 3] {
            let runs = AtomicUsize::new(0);
            let (sum, worker, seen) = pool(threads).install(|| {
                hold_pool(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let seen: Vec<AtomicBool> = (0..threads).map(|_| AtomicBool::new(false)).collect();
                    let sum: u64 = (0..1_000_000usize)
                        .into_par_iter()
                        .with_max_len(1000)
                        .map(|i| {
                            seen[rayon::current_thread_index().unwrap()].store(true, Ordering::SeqCst);
                            i as u64
                        })
                        .sum();
                    let seen = seen.iter().filter(|s| s.load(Ordering::SeqCst)).count();
                    (sum, rayon::current_thread_index(), seen)
                })
            });
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{threads} threads");
            assert_eq!(sum, 999_999 * 1_000_000 / 2);
            assert_eq!(worker, Some(0));
            // A thousand tasks, the other workers awake and looking: each takes some.
            assert_eq!(seen, threads, "{threads} threads: workers that took part");
        }
    }

    #[test]
    fn a_panic_in_the_step_reaches_the_caller_and_frees_the_pool() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let p = pool(2);
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                p.install(|| hold_pool(|| -> u32 { panic!("step failed") }))
            }));
            // The pool still runs work afterwards.
            let after = p.install(|| hold_pool(|| 7));
            tx.send((caught.is_err(), after)).unwrap();
        });
        let (panicked, after) = rx.recv_timeout(Duration::from_secs(60)).expect("hold_pool hung after a panic");
        assert!(panicked);
        assert_eq!(after, 7);
    }
}
