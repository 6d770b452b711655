//! Tensor-parallel chunks (`parallel.tp_chunks`): a micro-batch split into chunks of whole
//! sequences whose computation overlaps each other's tensor-parallel collectives.
//!
//! Every collective of the model is a blocking call in the middle of straight-line layer
//! code, so the overlap comes from threads rather than from restructuring that code: each
//! chunk runs the ordinary forward and backward on a thread of its own, with its own work
//! slot, its own gradient buffers and its own tp group (a communicator of the same ranks, so
//! the chunks' collectives never meet each other's). A per-rank [`Baton`] lets one chunk
//! compute at a time and is handed over while a chunk waits in a collective: chunk i + 1
//! computes while chunk i's all-reduce, and the link time behind it, is in flight.
//!
//! The model is only read during the chunks ([`Model::forward_layers_shared`],
//! [`Model::backward_into`]); each chunk writes only its own work and gradients, so the
//! baton decides speed, never results. Each part's gradients (the head's, each layer's, the
//! embedding's) are handed to the rank's own thread as every chunk's backward finishes that
//! part, and added there in chunk order ([`ChunkSum`]), so data-parallel buckets can start
//! during the backward: every run gives the same bits, within f32 rounding of the unchunked
//! micro-batch (whose weight gradients sum all tokens in one product).

use super::*;
use boost_tensor::{Label, MatMut, ReduceOp};
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
            s.idle += t.elapsed();
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

impl<B: Backend> Model<B> {
    /// The time the chunked micro-batches since the last call spent with every chunk inside
    /// a tp collective (the tp communication they left exposed); None when none ran. The
    /// recorder's time inside tp calls counts each chunk's wait, most of it behind another
    /// chunk's compute.
    pub fn take_chunk_exposed(&mut self) -> Option<Duration> {
        self.chunk_exposed.take()
    }

    /// Forward and backward of one micro-batch on a single-stage model, as `tps.len()` chunks
    /// of whole sequences that overlap each other's tensor-parallel collectives (see the
    /// module's text); `tps[c]` is chunk c's tp group, each a different communicator over
    /// the same ranks. Gradients accumulate into the store's, scaled by `grad_scale`, as with
    /// [`Model::forward_backward`]. `need` is completed for every parameter before the
    /// chunks start. `ready` is told as each part's gradients become final in every chunk:
    /// they are summed then, in chunk order, so a reduction can start while the chunks'
    /// backward goes on below that part.
    pub fn forward_backward_chunks(
        &mut self,
        tps: &[&dyn Collective<B>],
        b: &Batch,
        grad_scale: f64,
        need: Option<&mut ParamsNeeded<B>>,
        ready: Option<&mut GradsReady<B>>,
    ) -> LossSum {
        let chunks = tps.len();
        assert_eq!(self.layout.stages, 1, "tp chunks run a whole model (parallel.pp = 1)");
        assert!(
            chunks > 0 && b.batch.is_multiple_of(chunks),
            "a micro-batch of {} sequences does not split into {chunks} chunks",
            b.batch
        );
        if let Some(need) = need {
            need(&self.be, self.store.bufs.len(), &mut self.store.values);
        }
        let batches: Vec<Batch> = (0..chunks).map(|c| b.chunk(c, chunks)).collect();
        let mut works: Vec<Work<B>> = batches.iter().enumerate().map(|(c, cb)| self.take_work(c, cb)).collect();
        // Chunk 0 accumulates into the store's gradients; the others into buffers of their
        // own, zeroed here. Each chunk hands its final buffers to the summing below.
        let store = std::mem::take(&mut self.store.grads);
        let mut own = std::mem::take(&mut self.chunk_grads);
        own.resize_with(chunks - 1, Vec::new);
        let own = own.into_iter().map(|g| self.store.zeroed_grads(&self.be, g));
        let mut grads: Vec<_> = std::iter::once(store).chain(own).collect();
        let baton = Baton::default();
        let mut sum = ChunkSum::new(&self.be, self.store.bufs.len(), chunks);
        let (handed, hands) = std::sync::mpsc::channel::<Handed<B>>();
        let this = &*self;
        let losses: Vec<LossSum> = std::thread::scope(|s| {
            let threads: Vec<_> = (works.iter_mut().zip(grads.iter_mut()).enumerate())
                .zip(tps.iter().zip(&batches))
                .map(|((c, (w, g)), (&tp, cb))| {
                    let (baton, handed) = (&baton, handed.clone());
                    s.spawn(move || {
                        let tp = BatonGroup { inner: tp, baton };
                        let _holding = baton.hold();
                        this.forward_layers_shared(&tp, w, None);
                        let loss = this.loss(&tp, w, Some(grad_scale), cb.targets);
                        // Buffers `from..` are final in this chunk: hand them over (the
                        // backward never writes them again; empty buffers take their place).
                        let mut upto = g.len();
                        let mut hand = |be: &B, from: usize, g: &mut [B::Buf]| {
                            if from < upto {
                                let bufs =
                                    g[from..upto].iter_mut().map(|b| std::mem::replace(b, be.alloc(0))).collect();
                                upto = from;
                                // The summing side hangs up only when a chunk has panicked.
                                handed.send(Handed { chunk: c, from, bufs }).ok();
                            }
                        };
                        this.backward_into(g, &tp, w, Some(&mut hand));
                        loss
                    })
                })
                .collect();
            drop(handed);
            // Sum each part once every chunk has handed it over (the same part, in the same
            // order, from every chunk), holding the baton like any other compute.
            let mut ready = ready;
            for h in hands {
                let Some(parts) = sum.queue(h) else { continue };
                let _holding = baton.hold();
                let from = sum.add(parts, &this.be, &this.store.bufs);
                if let Some(f) = ready.as_deref_mut() {
                    f(&this.be, from, &sum.total);
                }
            }
            let joined: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
            joined.into_iter().map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        assert_eq!(sum.upto, 0, "every chunk hands over every gradient buffer");
        self.store.grads = sum.total;
        self.chunk_grads = sum.spare;
        for (c, w) in works.into_iter().enumerate() {
            self.put_work(c, w);
        }
        *self.chunk_exposed.get_or_insert_default() += baton.idle();
        losses.iter().fold(LossSum::default(), |a, l| LossSum { sum: a.sum + l.sum, tokens: a.tokens + l.tokens })
    }
}

/// Chunk `chunk`'s gradient buffers `from..` (up to its previous hand-over), final.
struct Handed<B: Backend> {
    chunk: usize,
    from: usize,
    bufs: Vec<B::Buf>,
}

/// The chunks' gradients, summed part by part as every chunk hands the part over.
struct ChunkSum<B: Backend> {
    /// Chunk c's hand-overs not yet summed, oldest first.
    queued: Vec<std::collections::VecDeque<Handed<B>>>,
    /// The sums: buffers `upto..` hold them (chunk 0's buffers, the others added in order).
    total: Vec<B::Buf>,
    /// Chunks 1..'s buffers once added, kept for the next micro-batch.
    spare: Vec<Vec<B::Buf>>,
    upto: usize,
}

impl<B: Backend> ChunkSum<B> {
    fn new(be: &B, bufs: usize, chunks: usize) -> Self {
        let empty = || (0..bufs).map(|_| be.alloc(0)).collect::<Vec<_>>();
        Self {
            queued: (0..chunks).map(|_| Default::default()).collect(),
            total: empty(),
            spare: (1..chunks).map(|_| empty()).collect(),
            upto: bufs,
        }
    }

    /// Queue `h`; once every chunk has handed over its next part, that part of each chunk.
    fn queue(&mut self, h: Handed<B>) -> Option<Vec<Handed<B>>> {
        self.queued[h.chunk].push_back(h);
        let all = self.queued.iter().all(|q| !q.is_empty());
        all.then(|| self.queued.iter_mut().filter_map(|q| q.pop_front()).collect())
    }

    /// Sum one part of every chunk in chunk order (so every run and rank adds alike) into
    /// [`ChunkSum::total`]; returns where the part starts.
    fn add(&mut self, mut parts: Vec<Handed<B>>, be: &B, infos: &[BufInfo]) -> usize {
        let from = parts[0].from;
        assert!(parts.iter().all(|p| p.from == from), "the chunks' backward reported different parts");
        let mut total = std::mem::take(&mut parts[0].bufs);
        for p in &parts[1..] {
            for ((dst, src), info) in total.iter_mut().zip(&p.bufs).zip(&infos[from..]) {
                be.axpy(MatMut::new(dst, 1, info.len), Mat::new(src, 1, info.len), 1.0);
            }
        }
        for (i, t) in (from..self.upto).zip(total) {
            self.total[i] = t;
        }
        for (spare, p) in self.spare.iter_mut().zip(parts.into_iter().skip(1)) {
            for (i, b) in (from..self.upto).zip(p.bufs) {
                spare[i] = b;
            }
        }
        self.upto = from;
        from
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
