//! The context of one pass over a micro-batch on one rank: the backend, the tp group, the
//! plan and local sizes, the parameters, and the three operators that carry every
//! tensor-parallel collective of a layer. Decoding plugs its cached attention in here.

use crate::layout::Dims;
use crate::plan::Plan;
use boost_config::Phi;
use boost_tensor::{Backend, Collective, Label, ReduceOp};

/// The attention step of a layer when decoding: RoPE at the new tokens' positions, append to
/// the cache, attend over it (`qkv`: the q, k and v blocks of the new rows; `out`: the
/// attention output). Training passes leave it unset.
pub trait CachedAttention<B: Backend> {
    fn attend(&self, layer: usize, cx: &Ctx<B>, qkv: &mut B::Buf, out: &mut B::Buf);
}

/// Everything a group needs to know about this rank and micro-batch.
pub struct Ctx<'a, B: Backend> {
    pub be: &'a B,
    pub tp: &'a dyn Collective<B>,
    pub plan: Plan,
    pub dims: Dims,
    pub phi: Phi,
    pub norm_eps: f64,
    pub lax_eps: f64,
    /// Tokens in the micro-batch (`batch` sequences of `seq`).
    pub t: usize,
    pub batch: usize,
    pub seq: usize,
    /// This rank's parameter values.
    pub params: &'a [B::Buf],
    /// RoPE's cos/sin table for `seq` positions.
    pub rope: &'a B::Buf,
    /// Decoding: the key/value cache that replaces the causal attention step.
    pub attend: Option<&'a dyn CachedAttention<B>>,
}

/// The two operators that carry all tensor-parallel communication (docs/PARALLELISM.md §2), and the norm
/// statistic's sum. Each is one all-reduce over the tp group, named by what it does to a
/// tensor's placement.
impl<B: Backend> Ctx<'_, B> {
    /// `g` (forward): a Partial result — per-rank summands of a row-parallel product —
    /// becomes Replicated. Its backward is the identity.
    pub(crate) fn g(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The backward of `f` (identity forward, in front of a column-parallel product): the
    /// gradient of its Replicated input arrives Partial and is summed.
    pub(crate) fn f_backward(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The sync RMSNorm's statistic (forward) or its gradient (backward), summed over the
    /// hidden shards.
    pub(crate) fn stat_sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    fn sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        if self.plan.tp > 1 {
            self.tp.all_reduce(buf, off, n, ReduceOp::Sum, Label::layer(op, layer));
        }
    }
}
