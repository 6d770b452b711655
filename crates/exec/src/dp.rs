//! Data parallelism after a step's backward: the gradient all-reduce over data-parallel
//! replicas (bucketed, in buffer order), or ZeRO-1 (reduce-scatter the gradients, update
//! this replica's shard of every buffer with AdamW, all-gather the parameters); the global
//! gradient norm, counting every parameter once across tp, pp and dp.

use crate::optim::{AdamW, adam_step};
use crate::overlap::ParamGathers;
use boost_config::TrainConfig;
use boost_model::params::ParamStore;
use boost_tensor::{Backend, Collective, GuardSpec, Label, Mat, MatMut, ReduceOp};

/// Elements per gradient all-reduce bucket.
pub const BUCKET: usize = 1 << 22;

/// The optimizer of a rank: AdamW on whole buffers, or ZeRO-1 on this replica's shards.
pub enum Optimizer<B: Backend> {
    Replicated(AdamW<B>),
    Zero1(Zero1<B>),
}

/// ZeRO-1 state: buffer i is split into `dp` chunks of `chunk[i]` elements (the last padded);
/// this replica owns chunk `rank` and its AdamW moments.
pub struct Zero1<B: Backend> {
    pub dp: usize,
    pub rank: usize,
    pub chunk: Vec<usize>,
    pub m: Vec<B::Buf>,
    pub v: Vec<B::Buf>,
    /// Per buffer, dp·chunk elements: gradients reduce-scattered in, parameters gathered out.
    stage: Vec<B::Buf>,
    p_shard: B::Buf,
    g_shard: B::Buf,
    pub step: u64,
    /// Start each buffer's parameter all-gather as soon as its shard is updated and leave
    /// them in flight for the next forward to complete ([`crate::overlap::ParamGathers`];
    /// `parallel.overlap`); otherwise each blocks in turn.
    pub overlap: bool,
}

impl<B: Backend> Zero1<B> {
    pub fn new(be: &B, store: &ParamStore<B>, dp: usize, rank: usize) -> Self {
        let chunk: Vec<usize> = store.bufs().iter().map(|b| b.len.div_ceil(dp)).collect();
        let max = chunk.iter().copied().max().unwrap_or(0);
        Self {
            dp,
            rank,
            m: chunk.iter().map(|&c| be.alloc(c)).collect(),
            v: chunk.iter().map(|&c| be.alloc(c)).collect(),
            stage: chunk.iter().map(|&c| be.alloc(c * dp)).collect(),
            p_shard: be.alloc(max),
            g_shard: be.alloc(max),
            chunk,
            step: 0,
            overlap: false,
        }
    }

    /// The staging buffers (gradients are reduce-scattered into them) and the chunk size of
    /// each buffer, for a reduction during the backward ([`crate::overlap`]).
    pub fn staging(&mut self) -> (&mut Vec<B::Buf>, &[usize]) {
        (&mut self.stage, &self.chunk)
    }

    /// The staging buffer of buffer `i`: after `sync_grads`, its elements `owned(i)` (at the
    /// same indices as in the parameter buffer) hold the summed gradient of this shard.
    pub fn shard_grads(&self, i: usize) -> &B::Buf {
        &self.stage[i]
    }

    /// Elements of buffer `i` this replica owns (the last chunk may be short or empty).
    pub fn owned(&self, i: usize, len: usize) -> std::ops::Range<usize> {
        let c = self.chunk[i];
        (self.rank * c).min(len)..((self.rank + 1) * c).min(len)
    }
}

impl<B: Backend> Optimizer<B> {
    pub fn new(be: &B, store: &ParamStore<B>, zero: bool, dp: usize, dp_rank: usize) -> Self {
        if zero && dp > 1 {
            Optimizer::Zero1(Zero1::new(be, store, dp, dp_rank))
        } else {
            Optimizer::Replicated(AdamW::new(be, store))
        }
    }

    /// Overlap ZeRO-1's parameter gathers with the update and the next forward
    /// (`parallel.overlap`).
    pub fn set_overlap(&mut self, on: bool) {
        if let Optimizer::Zero1(z) = self {
            z.overlap = on;
        }
    }

    pub fn step_count(&self) -> u64 {
        match self {
            Optimizer::Replicated(a) => a.step,
            Optimizer::Zero1(z) => z.step,
        }
    }

    pub fn set_step_count(&mut self, s: u64) {
        match self {
            Optimizer::Replicated(a) => a.step = s,
            Optimizer::Zero1(z) => z.step = s,
        }
    }

    /// Combine the replicas' gradients: all-reduce (bucketed) or, under ZeRO-1,
    /// reduce-scatter into this replica's shards.
    pub fn sync_grads(
        &mut self,
        be: &B,
        store: &mut ParamStore<B>,
        dp: &dyn Collective<B>,
        bucket: &mut Option<B::Buf>,
    ) {
        if dp.size() == 1 {
            return;
        }
        match self {
            Optimizer::Replicated(_) => all_reduce_bucketed(be, store, dp, bucket),
            Optimizer::Zero1(z) => {
                for (i, info) in store.bufs().iter().enumerate() {
                    let (n, c) = (info.len, z.chunk[i]);
                    be.fill(MatMut::new(&mut z.stage[i], 1, c * z.dp), 0.0);
                    be.copy(MatMut::at(&mut z.stage[i], 0, 1, n, n), Mat::new(store.grad(i), 1, n));
                    dp.reduce_scatter(&mut z.stage[i], 0, c, Label::op("dp.grads"));
                }
            }
        }
    }

    /// ‖g‖₂ of the whole model after [`Optimizer::sync_grads`]: each element counted once —
    /// tensor-parallel replicas on tp rank 0, a tied table on the first stage, data-parallel
    /// replicas on dp rank 0 (or each replica's own shard under ZeRO-1) — summed over `world`.
    pub fn grad_norm(
        &self,
        be: &B,
        store: &ParamStore<B>,
        tp_rank: usize,
        dp_rank: usize,
        world: &dyn Collective<B>,
        scalar: &mut B::Buf,
    ) -> f64 {
        let mut sq = crate::optim::sumsq(be, self.counted(store, tp_rank, dp_rank));
        if world.size() > 1 {
            be.write_mat(MatMut::new(scalar, 1, 1), &[sq]);
            world.all_reduce(scalar, 0, 1, ReduceOp::Sum, Label::op("grad_norm"));
            sq = be.read_mat::<f64>(Mat::new(scalar, 1, 1))[0];
        }
        sq.sqrt()
    }

    /// Queue [`Optimizer::grad_norm`] of a single rank on the device, its clip coefficient
    /// for `max_norm`, and `guard`'s verdict on it ([`Backend::queue_grad_sumsq`]); false
    /// where the backend keeps no norm on a device.
    pub fn queue_guarded_norm(&self, be: &B, store: &ParamStore<B>, max_norm: f64, guard: &GuardSpec) -> bool {
        let views: Vec<Mat<B::Buf>> = self.counted(store, 0, 0).collect();
        be.queue_grad_sumsq(&views, max_norm, Some(guard))
    }

    /// The views [`Optimizer::grad_norm`] sums on this rank.
    fn counted<'s>(
        &'s self,
        store: &'s ParamStore<B>,
        tp_rank: usize,
        dp_rank: usize,
    ) -> impl Iterator<Item = Mat<'s, B::Buf>> + 's {
        store.bufs().iter().enumerate().filter_map(move |(i, info)| {
            if (info.replicated && tp_rank != 0) || info.pipeline_copy {
                return None;
            }
            match self {
                Optimizer::Zero1(z) => {
                    let own = z.owned(i, info.len);
                    Some(Mat::at(&z.stage[i], own.start, 1, own.len(), own.len()))
                }
                Optimizer::Replicated(_) if dp_rank == 0 => Some(Mat::new(store.grad(i), 1, info.len)),
                Optimizer::Replicated(_) => None,
            }
        })
    }

    /// One AdamW update with learning rate `lr`, the gradient scaled by `grad_scale` first.
    /// Under ZeRO-1 with overlap, the parameters are still being gathered when it returns:
    /// the returned gathers must complete before they are read ([`ParamGathers::complete`]).
    pub fn update<'d>(
        &mut self,
        be: &B,
        store: &mut ParamStore<B>,
        cfg: &TrainConfig,
        lr: f64,
        grad_scale: f64,
        dp: &'d dyn Collective<B>,
    ) -> ParamGathers<'d, B> {
        let mut gathers = ParamGathers::new();
        match self {
            Optimizer::Replicated(a) => a.update(be, store, cfg, lr, grad_scale),
            Optimizer::Zero1(z) => {
                z.step += 1;
                let s = adam_step(cfg, z.step, lr, grad_scale);
                let u = store.for_update();
                for (i, info) in u.bufs.iter().enumerate() {
                    let (n, c) = (info.len, z.chunk[i]);
                    let own = z.owned(i, n);
                    let k = own.len();
                    if k > 0 {
                        be.copy(MatMut::new(&mut z.p_shard, 1, k), Mat::at(&u.values[i], own.start, 1, k, k));
                        be.copy(MatMut::new(&mut z.g_shard, 1, k), Mat::at(&z.stage[i], own.start, 1, k, k));
                        be.adamw(boost_tensor::AdamUpdate {
                            p: &mut z.p_shard,
                            g: &z.g_shard,
                            m: &mut z.m[i],
                            v: &mut z.v[i],
                            off: 0,
                            n: k,
                            step: &s,
                            decay: info.decay,
                        });
                        be.copy(MatMut::at(&mut z.stage[i], z.rank * c, 1, k, k), Mat::new(&z.p_shard, 1, k));
                    }
                    if z.overlap {
                        // The gather runs while the next buffers' shards update, and on
                        // into the next forward.
                        let st = std::mem::replace(&mut z.stage[i], be.alloc(0));
                        gathers.push(i, n, dp.start_all_gather(st, 0, c, Label::op("dp.params")));
                        continue;
                    }
                    dp.all_gather(&mut z.stage[i], 0, c, Label::op("dp.params"));
                    be.copy(MatMut::new(&mut u.values[i], 1, n), Mat::new(&z.stage[i], 1, n));
                }
            }
        }
        gathers
    }

    /// Complete `gathers` (of the last update) now: every parameter in place.
    pub fn complete(&mut self, be: &B, store: &mut ParamStore<B>, mut gathers: ParamGathers<'_, B>) {
        if let Optimizer::Zero1(z) = self {
            gathers.complete(be, store.buf_count(), store.values_mut(), &mut z.stage);
        }
        assert!(gathers.is_empty(), "parameter gathers belong to ZeRO-1");
    }
}

/// All-reduce every gradient buffer over `dp`, packing consecutive buffers into buckets of
/// up to [`BUCKET`] elements (a larger buffer goes alone), in buffer order.
fn all_reduce_bucketed<B: Backend>(
    be: &B,
    store: &mut ParamStore<B>,
    dp: &dyn Collective<B>,
    bucket: &mut Option<B::Buf>,
) {
    let lens: Vec<usize> = store.bufs().iter().map(|b| b.len).collect();
    let mut i = 0;
    while i < lens.len() {
        if lens[i] >= BUCKET {
            dp.all_reduce(store.grad_mut(i), 0, lens[i], ReduceOp::Sum, Label::op("dp.grads"));
            i += 1;
            continue;
        }
        let (start, mut total) = (i, 0);
        while i < lens.len() && lens[i] < BUCKET && total + lens[i] <= BUCKET {
            total += lens[i];
            i += 1;
        }
        let b = bucket.get_or_insert_with(|| be.alloc(BUCKET));
        let mut off = 0;
        for (j, &n) in lens.iter().enumerate().take(i).skip(start) {
            be.copy(MatMut::at(b, off, 1, n, n), Mat::new(store.grad(j), 1, n));
            off += n;
        }
        dp.all_reduce(b, 0, total, ReduceOp::Sum, Label::op("dp.grads"));
        let mut off = 0;
        for (j, &n) in lens.iter().enumerate().take(i).skip(start) {
            be.copy(MatMut::new(store.grad_mut(j), 1, n), Mat::at(b, off, 1, n, n));
            off += n;
        }
    }
}
