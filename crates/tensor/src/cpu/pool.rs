//! Keeping the compute pool's workers awake: through a training step, and in a parallel
//! loop's wait for its last task.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
            let _done = OnExit(|| done.store(true, Ordering::Release));
            let f = f.lock().unwrap_or_else(|e| e.into_inner()).take().expect("worker 0 runs the step once");
            let r = f();
            *out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        } else {
            wait_awake(|| done.load(Ordering::Acquire));
        }
    });
    out.into_inner().unwrap_or_else(|e| e.into_inner()).expect("worker 0 returned a result")
}

/// Runs `f(0)` … `f(n − 1)` over the current pool, the caller taking part, each index once;
/// returns when all have. The caller waits for the last by looking for work and yielding its
/// core, never sleeping: rayon's join sleeps after a few idle rounds and is woken through the
/// kernel. GEMM panels end at different times (core speeds, the host), and the caller is the
/// step's thread: its sleeps there were more than half of a cola-60m step's context switches
/// with the pool held awake ([`hold_pool`]).
///
/// From outside the pool (a rank of an in-process parallel run on its own thread) the pool
/// alone runs the tasks, as a rayon loop does, and the caller blocks: it would otherwise add a
/// thread of its own to the pool's.
pub fn for_each_awake(n: usize, f: impl Fn(usize) + Sync) {
    if rayon::current_thread_index().is_none() {
        use rayon::prelude::*;
        (0..n).into_par_iter().for_each(&f);
        return;
    }
    let next = AtomicUsize::new(0);
    let left = AtomicUsize::new(n);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            // Counted on return and on unwind: a panicking task must not leave the caller
            // waiting (the scope then passes the panic on).
            let _finished = OnExit(|| {
                left.fetch_sub(1, Ordering::Release);
            });
            f(i);
        }
    };
    rayon::in_place_scope(|s| {
        for _ in 1..n.min(rayon::current_num_threads()) {
            s.spawn(|_| work());
        }
        work();
        wait_awake(|| left.load(Ordering::Acquire) == 0);
    });
}

/// Until `done()`, run the pool's pending work, yielding the core when there is none.
fn wait_awake(done: impl Fn() -> bool) {
    while !done() {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::thread::yield_now();
        }
    }
}

/// Runs its closure when dropped: on return and on unwind alike.
struct OnExit<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnExit<F> {
    fn drop(&mut self) {
        (self.0)()
    }
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
    fn the_step_runs_once_on_worker_0_and_its_parallel_work_completes() {
        for threads in [1, 2, 3] {
            let runs = AtomicUsize::new(0);
            let (sum, worker) = pool(threads).install(|| {
                hold_pool(|| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let sum: u64 = (0..1_000_000u64).into_par_iter().sum();
                    (sum, rayon::current_thread_index())
                })
            });
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{threads} threads");
            assert_eq!(sum, 999_999 * 1_000_000 / 2);
            assert_eq!(worker, Some(0));
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

    #[test]
    fn for_each_awake_runs_every_index_once_on_every_thread_count() {
        for threads in [1, 2, 3] {
            for n in [0, 1, 2, 7, 100] {
                // In the pool, and from a thread outside it.
                for inside in [true, false] {
                    let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                    let run = || {
                        for_each_awake(n, |i| {
                            counts[i].fetch_add(1, Ordering::SeqCst);
                        })
                    };
                    if inside {
                        pool(threads).install(run)
                    } else {
                        run()
                    }
                    assert!(counts.iter().all(|c| c.load(Ordering::SeqCst) == 1), "{threads} threads, {n} tasks");
                }
            }
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_without_a_hang() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let caught = std::panic::catch_unwind(|| {
                pool(2).install(|| {
                    for_each_awake(8, |i| {
                        if i == 5 {
                            panic!("task 5 failed");
                        }
                    })
                })
            });
            tx.send(caught.is_err()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_secs(60)).expect("for_each_awake hung after a panic"));
    }
}
