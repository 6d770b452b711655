//! Data-parallel gradient reduction during the backward (`parallel.overlap`), as Megatron's
//! and PyTorch's DDP do it: the gradient buffers are grouped into buckets of about
//! `parallel.bucket_mb`, from the last buffer down (the order the backward finishes them);
//! during the last micro-batch's backward on this stage, each bucket's reduction is started
//! on the dp group's progress thread as soon as the model reports its buffers final, so it
//! runs while the layers below compute. [`GradSync::finish`] starts what is left (the tied
//! table once the stages have summed it), waits for everything and copies the results back.
//!
//! ZeRO-1's parameter all-gathers, started by the update buffer by buffer ([`ParamGathers`]),
//! are completed as the next step's first forward reaches each buffer, so they run while the
//! layers before it compute.
//!
//! Every element is still summed over the replicas in rank order, and the gathered
//! parameters are the same bytes, so losses and gradients are bit-identical to the blocking
//! order's whatever the buckets.

use boost_config::BucketSize;
use boost_model::params::ParamStore;
use boost_tensor::{Backend, Collective, DeviceBuf, Handle, Label, Mat, MatMut, ReduceOp};
use std::collections::VecDeque;

/// A run of consecutive gradient buffers reduced as one call.
struct Bucket {
    bufs: std::ops::Range<usize>,
    len: usize,
}

/// Buckets of about `bytes` bytes over buffers of `lens`, from the last buffer down; buffer
/// `hold` (the tied table of a pipeline's end stages) goes alone and last.
fn plan(lens: &[usize], elem_bytes: usize, bytes: usize, hold: Option<usize>) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    let mut open: Option<Bucket> = None;
    for i in (0..lens.len()).rev() {
        if Some(i) == hold {
            out.extend(open.take());
            continue;
        }
        let b = open.get_or_insert(Bucket { bufs: i + 1..i + 1, len: 0 });
        b.bufs.start = i;
        b.len += lens[i];
        if b.len * elem_bytes >= bytes {
            out.extend(open.take());
        }
    }
    out.extend(open);
    out.extend(hold.map(|h| Bucket { bufs: h..h + 1, len: lens[h] }));
    out
}

/// ZeRO-1's parameter all-gathers of one update, in buffer order: each returns the staging
/// buffer of its parameter buffer, whose first elements are the updated parameters.
pub struct ParamGathers<'a, B: Backend> {
    /// (buffer, its elements, the gather).
    flights: VecDeque<(usize, usize, Handle<'a, B::Buf>)>,
}

impl<'a, B: Backend> ParamGathers<'a, B> {
    pub fn new() -> Self {
        Self { flights: VecDeque::new() }
    }

    /// Buffer `i`'s gather (of `n` parameters), started after every earlier buffer's.
    pub fn push(&mut self, i: usize, n: usize, h: Handle<'a, B::Buf>) {
        debug_assert!(self.flights.back().is_none_or(|&(j, ..)| j < i), "gathers start in buffer order");
        self.flights.push_back((i, n, h));
    }

    /// Complete the gathers of buffers `..k`: their parameters go into `values`, their staging
    /// buffers back into `stage`.
    pub fn complete(&mut self, be: &B, k: usize, values: &mut [B::Buf], stage: &mut [B::Buf]) {
        while self.flights.front().is_some_and(|&(i, ..)| i < k) {
            let (i, n, h) = self.flights.pop_front().expect("a gather in flight");
            stage[i] = h.wait();
            be.copy(MatMut::new(&mut values[i], 1, n), Mat::new(&stage[i], 1, n));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }
}

impl<B: Backend> Default for ParamGathers<'_, B> {
    fn default() -> Self {
        Self::new()
    }
}

/// What a started call will hand back and where it goes.
enum Flight<'a, B: Backend> {
    /// A packed bucket (index into the plan): copied back into the gradients.
    Bucket(usize, Handle<'a, B::Buf>),
    /// ZeRO-1 staging buffer `i`: kept as the shard's gradient.
    Stage(usize, Handle<'a, B::Buf>),
}

/// The reduction state of one step's gradients over `dp`.
pub struct GradSync<'a, B: Backend> {
    dp: &'a dyn Collective<B>,
    buckets: &'a [Bucket],
    /// Elements of each gradient buffer.
    lens: &'a [usize],
    /// Packing buffers per bucket (replicated), reused step after step.
    packs: &'a mut Vec<Option<B::Buf>>,
    /// ZeRO-1: the per-buffer staging buffers and chunk sizes; none when replicated.
    zero: Option<(&'a mut Vec<B::Buf>, &'a [usize])>,
    /// Buckets started so far (they start in plan order).
    started: usize,
    /// The tied table's bucket waits for [`GradSync::finish`].
    hold: Option<usize>,
    flights: Vec<Flight<'a, B>>,
    /// ZeRO-1: the last update's parameter gathers, completed by [`GradSync::need`].
    gathers: ParamGathers<'a, B>,
}

/// The bucket plan of a model, kept across steps by the step runner.
pub struct SyncPlan<B: Backend> {
    buckets: Vec<Bucket>,
    lens: Vec<usize>,
    packs: Vec<Option<B::Buf>>,
    hold: Option<usize>,
    bytes: usize,
}

impl<B: Backend> SyncPlan<B> {
    /// Buckets of `bucket` over `store`'s buffers (`auto`: sized from their total); `hold` as
    /// in `plan`.
    pub fn new(store: &ParamStore<B>, bucket: BucketSize, hold: Option<usize>) -> Self {
        let lens: Vec<usize> = store.bufs().iter().map(|b| b.len).collect();
        // Buckets hold gradients, which a mixed-precision backend keeps in fp32.
        let elem_bytes = store.grads().first().map_or(4, |g| g.elem_bytes());
        let total = lens.iter().sum::<usize>() * elem_bytes;
        let bytes = (bucket.mb_for(total as f64) * 1e6).max(1.0) as usize;
        let buckets = plan(&lens, elem_bytes, bytes, hold);
        let packs = buckets.iter().map(|_| None).collect();
        Self { buckets, lens, packs, hold, bytes }
    }

    /// The bucket size chosen (bytes) and the number of buckets.
    pub fn sizes(&self) -> (usize, usize) {
        (self.bytes, self.buckets.len())
    }

    /// Start a step's reduction: replicated (`zero` None) or into ZeRO-1's staging buffers
    /// (each buffer its own reduce-scatter of `dp`·chunk elements), whose last update's
    /// parameter `gathers` may still be in flight.
    pub fn begin<'a>(
        &'a mut self,
        dp: &'a dyn Collective<B>,
        zero: Option<(&'a mut Vec<B::Buf>, &'a [usize])>,
        gathers: ParamGathers<'a, B>,
    ) -> GradSync<'a, B> {
        assert!(zero.is_some() || gathers.is_empty(), "parameter gathers belong to ZeRO-1");
        GradSync {
            dp,
            buckets: &self.buckets,
            lens: &self.lens,
            packs: &mut self.packs,
            zero,
            started: 0,
            hold: self.hold,
            flights: Vec::new(),
            gathers,
        }
    }
}

impl<'a, B: Backend> GradSync<'a, B> {
    /// The backward's report: buffers `k..` of `grads` are final. Starts every bucket now
    /// wholly final (in plan order, so every replica starts the same calls in the same order).
    pub fn ready(&mut self, be: &B, k: usize, grads: &[B::Buf]) {
        while let Some(b) = self.buckets.get(self.started) {
            if b.bufs.start < k || Some(b.bufs.start) == self.hold {
                break;
            }
            self.launch(be, self.started, grads);
            self.started += 1;
        }
    }

    /// The forward's report: parameter buffers `..k` are read next. Completes their gathers.
    pub fn need(&mut self, be: &B, k: usize, values: &mut [B::Buf]) {
        if let Some((stage, _)) = self.zero.as_mut() {
            self.gathers.complete(be, k, values, stage);
        }
    }

    fn launch(&mut self, be: &B, idx: usize, grads: &[B::Buf]) {
        let b = &self.buckets[idx];
        let dp = self.dp;
        if let Some((stage, chunk)) = self.zero.as_mut() {
            for i in b.bufs.clone() {
                let (n, c) = (self.lens[i], chunk[i]);
                // Every stage's first op is a forward, which completes all the gathers.
                assert!(stage[i].len() >= c * dp.size(), "ZeRO-1: buffer {i}'s parameters were still being gathered");
                let mut s = std::mem::replace(&mut stage[i], be.alloc(0));
                be.fill(MatMut::new(&mut s, 1, c * dp.size()), 0.0);
                be.copy(MatMut::at(&mut s, 0, 1, n, n), Mat::new(&grads[i], 1, n));
                self.flights.push(Flight::Stage(i, dp.start_reduce_scatter(s, 0, c, Label::op("dp.grads"))));
            }
            return;
        }
        let mut pack = self.packs[idx].take().unwrap_or_else(|| be.alloc(b.len));
        let mut off = 0;
        for i in b.bufs.clone() {
            let n = self.lens[i];
            be.copy(MatMut::at(&mut pack, off, 1, n, n), Mat::new(&grads[i], 1, n));
            off += n;
        }
        self.flights
            .push(Flight::Bucket(idx, dp.start_all_reduce(pack, 0, b.len, ReduceOp::Sum, Label::op("dp.grads"))));
    }

    /// Start what is left, wait for every call (in start order) and put the results in place:
    /// the summed gradients in the store, or ZeRO-1's shards in its staging buffers.
    pub fn finish(mut self, be: &B, store: &mut ParamStore<B>) {
        self.need(be, store.buf_count(), store.values_mut());
        while self.started < self.buckets.len() {
            self.launch(be, self.started, store.grads());
            self.started += 1;
        }
        for f in std::mem::take(&mut self.flights) {
            match f {
                Flight::Stage(i, h) => {
                    let (stage, _) = self.zero.as_mut().expect("ZeRO-1 flights");
                    stage[i] = h.wait();
                }
                Flight::Bucket(idx, h) => {
                    let pack = h.wait();
                    let mut off = 0;
                    for i in self.buckets[idx].bufs.clone() {
                        let n = store.bufs()[i].len;
                        be.copy(MatMut::new(store.grad_mut(i), 1, n), Mat::at(&pack, off, 1, n, n));
                        off += n;
                    }
                    self.packs[idx] = Some(pack);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boost_tensor::Solo;
    use boost_tensor::cpu::Cpu;

    fn spans(b: &[Bucket]) -> Vec<(usize, usize, usize)> {
        b.iter().map(|b| (b.bufs.start, b.bufs.end, b.len)).collect()
    }

    #[test]
    fn buckets_run_from_the_last_buffer_down_and_hold_the_tied_table_for_last() {
        // 4-byte elements, 40-byte buckets: a bucket closes once it reaches 10 elements.
        let lens = [8, 3, 4, 12, 2, 5];
        assert_eq!(spans(&plan(&lens, 4, 40, None)), vec![(3, 6, 19), (0, 3, 15)]);
        assert_eq!(spans(&plan(&lens, 4, 40, Some(0))), vec![(3, 6, 19), (1, 3, 7), (0, 1, 8)]);
        // Every buffer exactly once.
        for hold in [None, Some(0), Some(3)] {
            let mut seen: Vec<usize> = plan(&lens, 4, 16, hold).iter().flat_map(|b| b.bufs.clone()).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..6).collect::<Vec<_>>(), "hold {hold:?}");
        }
    }

    #[test]
    fn parameter_gathers_complete_in_buffer_order_up_to_what_is_needed() {
        let be = Cpu::<f32>::new();
        // Staging buffers (one chunk of a group of one) holding the "gathered" parameters
        // 10·i + j, padded to 4; the parameters hold zeros until their gather completes.
        let lens = [3, 2, 4, 1];
        let mut values: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n]).collect();
        let mut stage: Vec<Vec<f32>> = lens.iter().map(|_| Vec::new()).collect();
        let mut gathers = ParamGathers::new();
        for i in [0, 2, 3] {
            let st: Vec<f32> = (0..4).map(|j| (10 * i + j) as f32).collect();
            let h = Collective::<Cpu<f32>>::start_all_gather(&Solo, st, 0, 4, Label::op("dp.params"));
            gathers.push(i, lens[i], h);
        }
        gathers.complete(&be, 3, &mut values, &mut stage);
        assert_eq!(values[0], [0.0, 1.0, 2.0]);
        assert_eq!(values[2], [20.0, 21.0, 22.0, 23.0]);
        assert_eq!(values[3], [0.0], "buffer 3 is not needed yet");
        assert_eq!(stage[2].len(), 4, "the staging buffer is handed back");
        assert!(stage[3].is_empty() && !gathers.is_empty());
        gathers.complete(&be, 4, &mut values, &mut stage);
        assert_eq!(values[3], [30.0]);
        assert!(gathers.is_empty());
        assert_eq!(values[1], [0.0, 0.0], "a buffer without a gather is left alone");
    }
}
