//! Tensor-parallel chunks (`parallel.tp_chunks`): a micro-batch split into chunks of whole
//! sequences whose computation overlaps each other's tensor-parallel collectives.
//!
//! Every collective of the model is a blocking call in the middle of straight-line layer
//! code, so the overlap comes from threads rather than from restructuring that code: each
//! chunk runs the model's one forward and backward on a thread of its own, with its own work
//! slot, its own gradient buffers and its own tp group (a communicator of the same ranks, so
//! the chunks' collectives never meet each other's). A per-rank [`Baton`] lets one chunk
//! compute at a time and is handed over while a chunk waits in a collective: chunk i + 1
//! computes while chunk i's all-reduce, and the link time behind it, is in flight.
//!
//! The model is only read during the chunks ([`Model::forward`], [`Model::backward`]); each
//! chunk writes only its own work and gradients, so the baton decides speed, never results.
//! Each part's gradients (the head's, each layer's, the embedding's) are handed to the rank's
//! own thread as every chunk's backward finishes that part, and added there in chunk order
//! (`ChunkSum`), so data-parallel buckets can start during the backward: every run
//! gives the same bits, within f32 rounding of the unchunked micro-batch (whose weight
//! gradients sum all tokens in one product).

mod baton;
mod sum;

pub use baton::{Baton, BatonGroup, Holding};
use boost_model::{Batch, GradsReady, LossSum, Model, Params, Work};
use boost_tensor::{Backend, Collective};
use std::time::Duration;
use sum::{ChunkSum, Handed};

/// What a stage's chunked runs keep between micro-batches and steps.
pub struct Chunks<B: Backend> {
    /// The gradients of chunks after the first, added to the store's after each micro-batch.
    grads: Vec<Vec<B::Buf>>,
    /// Exposed tp time of the chunked micro-batches since [`Chunks::take_exposed`].
    exposed: Option<Duration>,
}

impl<B: Backend> Default for Chunks<B> {
    fn default() -> Self {
        Self { grads: Vec::new(), exposed: None }
    }
}

impl<B: Backend> Chunks<B> {
    /// The time the chunked micro-batches since the last call spent with every chunk inside
    /// a tp collective (the tp communication they left exposed); None when none ran. The
    /// recorder's time inside tp calls counts each chunk's wait, most of it behind another
    /// chunk's compute.
    pub fn take_exposed(&mut self) -> Option<Duration> {
        self.exposed.take()
    }

    /// Forward and backward of one micro-batch on a single-stage model, as `tps.len()` chunks
    /// of whole sequences that overlap each other's tensor-parallel collectives (see the
    /// module's text); `tps[c]` is chunk c's tp group, each a different communicator over
    /// the same ranks. Gradients accumulate into the store's, scaled by `grad_scale`, as with
    /// [`Model::forward_backward`]; every parameter must be in place. `ready` is told as each
    /// part's gradients become final in every chunk: they are summed then, in chunk order, so
    /// a reduction can start while the chunks' backward goes on below that part.
    pub fn forward_backward(
        &mut self,
        model: &mut Model<B>,
        tps: &[&dyn Collective<B>],
        b: &Batch,
        grad_scale: f64,
        ready: Option<&mut GradsReady<B>>,
    ) -> LossSum {
        let chunks = tps.len();
        assert_eq!(model.layout().stages, 1, "tp chunks run a whole model (parallel.pp = 1)");
        assert!(
            chunks > 0 && b.batch.is_multiple_of(chunks),
            "a micro-batch of {} sequences does not split into {chunks} chunks",
            b.batch
        );
        let batches: Vec<Batch> = (0..chunks).map(|c| b.chunk(c, chunks)).collect();
        let mut works: Vec<Work<B>> = batches.iter().enumerate().map(|(c, cb)| model.take_work(c, cb)).collect();
        // Chunk 0 accumulates into the store's gradients; the others into buffers of their
        // own, zeroed here. Each chunk hands its final buffers to the summing below.
        let store = model.store_mut().take_grads();
        let mut own = std::mem::take(&mut self.grads);
        own.resize_with(chunks - 1, Vec::new);
        let own = own.into_iter().map(|g| model.store().zeroed_grads(model.be(), g));
        let mut grads: Vec<_> = std::iter::once(store).chain(own).collect();
        let baton = Baton::default();
        let mut sum = ChunkSum::new(model.be(), model.store().buf_count(), chunks);
        let (handed, hands) = std::sync::mpsc::channel::<Handed<B>>();
        let this = &*model;
        let traced = boost_tensor::trace::current();
        let losses: Vec<LossSum> = std::thread::scope(|s| {
            let threads: Vec<_> = (works.iter_mut().zip(grads.iter_mut()).enumerate())
                .zip(tps.iter().zip(&batches))
                .map(|((c, (w, g)), (&tp, cb))| {
                    let (baton, handed) = (&baton, handed.clone());
                    let traced = traced.as_ref().map(|t| t.track(format!("tp chunk {c}")));
                    s.spawn(move || {
                        let _traced = boost_tensor::trace::attach(traced);
                        let tp = BatonGroup { inner: tp, baton };
                        let _holding = baton.hold();
                        this.forward(Params::Ready(this.store().values()), &tp, w, None);
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
                        this.backward(g, &tp, w, Some(&mut hand));
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
                let from = sum.add(parts, this.be(), this.store().bufs());
                if let Some(f) = ready.as_deref_mut() {
                    f(this.be(), from, &sum.total);
                }
            }
            let joined: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
            joined.into_iter().map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        assert_eq!(sum.upto, 0, "every chunk hands over every gradient buffer");
        model.store_mut().put_grads(sum.total);
        self.grads = sum.spare;
        for (c, w) in works.into_iter().enumerate() {
            model.put_work(c, w);
        }
        *self.exposed.get_or_insert_default() += baton.idle();
        losses.iter().fold(LossSum::default(), |a, l| LossSum { sum: a.sum + l.sum, tokens: a.tokens + l.tokens })
    }
}
