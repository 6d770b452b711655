//! A rank's right to compute, handed between its tp chunks at every collective.

use boost_tensor::{Backend, Collective, Label, ReduceOp};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// One rank's right to compute: held by one chunk at a time, handed over at collectives.
/// A chunk that panics opens it for good, so the others run on to their own end (or
/// error) instead of waiting for a holder that is gone.
#[derive(Default)]
pub struct Baton {
    state: Mutex<BatonState>,
    free: Condvar,
}

#[derive(Default)]
struct BatonState {
    busy: bool,
    open: bool,
    /// When the baton was last released, until a chunk takes it again.
    idle_since: Option<Instant>,
    /// Time no chunk held it between a release and the next acquire: every live chunk was
    /// inside a collective, so the rank waited on tp communication (exposed).
    idle: Duration,
}

impl Baton {
    fn state(&self) -> std::sync::MutexGuard<'_, BatonState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Wait for the baton and take it.
    pub fn acquire(&self) {
        let mut s = self.state();
        while s.busy && !s.open {
            s = self.free.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.busy = true;
        if let Some(t) = s.idle_since.take() {
            let now = Instant::now();
            s.idle += now - t;
            // The exposed tp time of the step's time split, as it happens.
            if boost_tensor::trace::on() {
                let track = Some("tp chunks exposed".into());
                boost_tensor::trace::record(track, "tp.exposed", "every chunk in a tp call".into(), t, now, Vec::new());
            }
        }
    }
    /// Give the baton to a waiting chunk.
    pub fn release(&self) {
        let mut s = self.state();
        s.busy = false;
        s.idle_since = Some(Instant::now());
        drop(s);
        self.free.notify_one();
    }
    /// The exposed time so far: how long the baton lay between a release and the next
    /// acquire (the last release, after the last chunk, is not counted).
    pub fn idle(&self) -> Duration {
        self.state().idle
    }
    /// Run `f` without the baton (another chunk computes meanwhile), then take it back.
    pub fn away<R>(&self, f: impl FnOnce() -> R) -> R {
        self.release();
        let r = f();
        self.acquire();
        r
    }
    /// Hold the baton until the guard drops (released; opened for good when dropped by a
    /// panic).
    pub fn hold(&self) -> Holding<'_> {
        self.acquire();
        Holding(self)
    }
}

pub struct Holding<'a>(&'a Baton);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.state().open = true;
            self.0.free.notify_all();
        } else {
            self.0.release();
        }
    }
}

/// A chunk's tp group: every collective hands the rank's baton to another chunk while it runs.
pub struct BatonGroup<'a, B: Backend> {
    pub inner: &'a dyn Collective<B>,
    pub baton: &'a Baton,
}

impl<B: Backend> Collective<B> for BatonGroup<'_, B> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_reduce(&self, buf: &mut B::Buf, off: usize, n: usize, op: ReduceOp, label: Label) {
        self.baton.away(|| self.inner.all_reduce(buf, off, n, op, label))
    }
    fn all_gather(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label) {
        self.baton.away(|| self.inner.all_gather(buf, off, n, label))
    }
    fn reduce_scatter(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label) {
        self.baton.away(|| self.inner.reduce_scatter(buf, off, n, label))
    }
    fn broadcast(&self, buf: &mut B::Buf, off: usize, n: usize, root: usize, label: Label) {
        self.baton.away(|| self.inner.broadcast(buf, off, n, root, label))
    }
    fn send(&self, buf: &B::Buf, off: usize, n: usize, to: usize, label: Label) {
        self.baton.away(|| self.inner.send(buf, off, n, to, label))
    }
    fn recv(&self, buf: &mut B::Buf, off: usize, n: usize, from: usize, label: Label) {
        self.baton.away(|| self.inner.recv(buf, off, n, from, label))
    }
    fn barrier(&self) {
        self.baton.away(|| self.inner.barrier())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn one_holder_at_a_time_and_handed_over_while_away() {
        let baton = Baton::default();
        let inside = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let steps = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let _holding = baton.hold();
                    for _ in 0..50 {
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        steps.fetch_add(1, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        baton.away(std::thread::yield_now);
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1, "two chunks computed at once");
        assert_eq!(steps.load(Ordering::SeqCst), 150);
    }

    #[test]
    fn idle_time_is_the_time_no_chunk_held_the_baton() {
        let baton = Baton::default();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _holding = baton.hold();
                // Alone and "in a collective" for 30 ms: all of it exposed.
                baton.away(|| std::thread::sleep(Duration::from_millis(30)));
            });
        });
        let alone = baton.idle();
        assert!(alone >= Duration::from_millis(30) && alone < Duration::from_millis(300), "{alone:?}");
        // One chunk's 200 ms collective behind another's 300 ms of compute: exposed is only
        // the hand-over (bounded here by half the collective, for loaded machines).
        let baton = Baton::default();
        let (inside, wait) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _holding = baton.hold();
                baton.away(|| {
                    inside.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(200))
                });
            });
            wait.recv().unwrap();
            let _holding = baton.hold();
            std::thread::sleep(Duration::from_millis(300));
        });
        assert!(baton.idle() < Duration::from_millis(100), "{:?}", baton.idle());
    }

    #[test]
    fn a_panicking_holder_opens_the_baton() {
        let baton = Baton::default();
        std::thread::scope(|s| {
            let failed = s.spawn(|| {
                let _holding = baton.hold();
                panic!("a chunk failed");
            });
            assert!(failed.join().is_err());
            // Would wait forever if the panic had left the baton taken.
            let _holding = baton.hold();
        });
    }
}
