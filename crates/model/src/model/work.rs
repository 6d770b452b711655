//! The buffers of one micro-batch shape: allocated on first use, kept per pipeline slot and
//! reused every step; and the activation memory they amount to.

use crate::block::{BlockActs, BlockGrads, Kept};
use crate::model::{Batch, Model};
use crate::plan::Entry;
use crate::projection::{Packed, Scratch};
use boost_config::{Arch, LaxGate, Recompute};
use boost_tensor::Backend;

/// Activation memory of one micro-batch shape under the model's recompute policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationMemory {
    pub policy: Recompute,
    pub tokens: usize,
    /// Bytes of an activation element ([`Backend::elem_bytes`]); the byte counts below follow
    /// each buffer's own dtype (the residual stream and the statistics stay fp32).
    pub elem_bytes: usize,
    /// Elements each layer keeps from its forward until its backward (its input residual
    /// included).
    pub per_layer: Vec<usize>,
    /// The same in device bytes.
    pub per_layer_bytes: Vec<usize>,
    /// Elements of the buffers a recompute runs in (two layers' worth, reused by every layer).
    pub recompute_scratch: usize,
    /// The same in device bytes.
    pub recompute_scratch_bytes: usize,
}

impl ActivationMemory {
    pub fn layers_bytes(&self) -> usize {
        self.per_layer_bytes.iter().sum()
    }
    pub fn total_bytes(&self) -> usize {
        self.layers_bytes() + self.recompute_scratch_bytes
    }
}

/// Buffers for one (batch, seq) shape.
///
/// Opaque outside the model: an executor takes a slot's with [`Model::take_work`], runs
/// [`Model::forward`] and [`Model::backward`] on it, and puts it back.
pub struct Work<B: Backend> {
    pub(crate) batch: usize,
    pub(crate) seq: usize,
    pub(crate) ids: B::Ids,
    pub(crate) targets: B::Ids,
    pub(crate) rope: B::Buf,
    /// resid[l] is layer l's input; resid[L] the stack's output (t × d_res each).
    pub(crate) resid: Vec<B::Buf>,
    /// Per layer (no recompute), or two reused in turn (recompute).
    pub(crate) blocks: Vec<BlockActs<B>>,
    /// What each layer keeps when its activations are recomputed.
    pub(crate) kept: Vec<Kept<B>>,
    /// LaX on a later pipeline stage: the previous stage's last-layer latents (z only).
    pub(crate) z_in: Option<BlockActs<B>>,
    /// The whole final residual (t × d), gathered from the shards under BTP.
    pub(crate) xf: B::Buf,
    /// Rank-major scratch (t × d) for gathers and scatters of hidden shards.
    pub(crate) rm: B::Buf,
    pub(crate) frstd: B::Buf,
    pub(crate) hf: B::Buf,
    /// The whole logits; empty when the loss goes by chunks of `head_chunk` rows.
    pub(crate) logits: B::Buf,
    /// Rows of logits at a time ([`Backend::head_xent`]) where the backend asks for it and
    /// the vocabulary is whole here.
    pub(crate) head_chunk: Option<usize>,
    /// The loss's gradient scale, for a chunked loss's backward.
    pub(crate) grad_scale: Option<f64>,
    pub(crate) losses: B::Buf,
    pub(crate) lmax: B::Buf,
    pub(crate) lstats: B::Buf,
    pub(crate) sc: Scratch<B>,
    pub(crate) bg: BlockGrads<B>,
    pub(crate) dx: B::Buf,
    pub(crate) dhf: B::Buf,
    pub(crate) dot: B::Buf,
}

impl<B: Backend> Work<B> {
    pub fn t(&self) -> usize {
        self.batch * self.seq
    }
}

impl<B: Backend> Model<B> {
    /// The activation memory of a (batch, seq) micro-batch under the current policy, from
    /// the buffers the engine allocates for it.
    pub fn activation_memory(&mut self, batch: usize, seq: usize) -> ActivationMemory {
        let w = match self.works.get_mut(0).and_then(|w| w.take()) {
            Some(w) if w.batch == batch && w.seq == seq => w,
            _ => self.alloc_work(batch, seq),
        };
        use boost_tensor::DeviceBuf;
        let n = self.blocks.len();
        // What layer l keeps: its input residual and its activations (or what recompute keeps).
        let layer = |l: usize, size: fn(&B::Buf) -> usize| {
            size(&w.resid[l])
                + match self.policy_of(l) {
                    Recompute::None => w.blocks[self.act_set(l)].bufs().map(size).sum(),
                    _ => w.kept[l].bufs().map(size).sum::<usize>(),
                }
        };
        let scratch = |size: fn(&B::Buf) -> usize| -> usize {
            w.blocks[..self.recomputed().min(2)].iter().flat_map(|b| b.bufs()).map(size).sum()
        };
        let m = ActivationMemory {
            policy: self.recompute,
            tokens: batch * seq,
            elem_bytes: self.be.elem_bytes(),
            per_layer: (0..n).map(|l| layer(l, B::Buf::len)).collect(),
            per_layer_bytes: (0..n).map(|l| layer(l, B::Buf::bytes)).collect(),
            recompute_scratch: scratch(B::Buf::len),
            recompute_scratch_bytes: scratch(B::Buf::bytes),
        };
        self.put_work(0, w);
        m
    }

    pub(super) fn alloc_work(&self, batch: usize, seq: usize) -> Work<B> {
        let be = &self.be;
        let (t, dims) = (batch * seq, &self.dims);
        let groups = self.blocks.iter().flat_map(|b| b.groups());
        let max_in = groups.clone().map(|g| g.d_in_loc).max().unwrap_or(0);
        let max_lat = groups.clone().map(|g| g.geom(t).len()).max().unwrap_or(0);
        // diag(γ)·A and xᵀ·dP of a group whose online norm's γ is folded into A.
        let max_wa = groups
            .clone()
            .filter(|g| g.folds_gamma(self.plan.norm))
            .map(|g| g.d_in_loc * g.c * g.r_loc)
            .max()
            .unwrap_or(0);
        // [stat | latent] of a group whose online statistic rides with A's all-reduce.
        let max_sum = groups
            .clone()
            .filter(|g| g.stages_sum(&self.plan))
            .map(|g| Packed::stat_then_latent(g.geom(t)).len())
            .max()
            .unwrap_or(0);
        let kron = if self.cfg.arch == Arch::Lax && self.cfg.lax.gate == LaxGate::Kron {
            let (a, b) = self.cfg.kron_factors();
            3 * max_lat + 64 * (a * a + b * b)
        } else {
            0
        };
        let phi = self.cfg.phi();
        let sharded = self.layout.tp > 1;
        let last = self.layout.last_stage();
        let head = |n: usize| be.alloc(if last { n } else { 0 });
        // Logits are a GEMM's output and, overwritten by their gradient, two GEMMs' operand:
        // activation dtype, the cross-entropy reading them in fp32.
        let head_act = |n: usize| be.alloc_act(if last { n } else { 0 });
        let head_chunk =
            if last && self.layout.tp == 1 { be.head_loss_chunk_rows(t, self.vocab_valid()) } else { None };
        let z_in =
            (!self.layout.first_stage() && self.cfg.arch == Arch::Lax).then(|| self.blocks[0].alloc_boundary(be, t));
        Work {
            batch,
            seq,
            ids: be.alloc_ids(t),
            targets: be.alloc_ids(t),
            rope: be.rope_table(seq, &crate::rope::inv_freq(&self.cfg)),
            resid: (0..=self.blocks.len()).map(|_| be.alloc(t * dims.d_res)).collect(),
            blocks: {
                // Recomputed layers: two sets used in turn by even and odd layers, each sized by
                // the deepest layer of its parity (layer 0 has no LaX crossing, later ones do).
                // Then one set per layer that keeps everything.
                let r = self.recomputed();
                let shared = (0..r.min(2)).map(|k| &self.blocks[k + (r - 1 - k) / 2 * 2]);
                shared.chain(&self.blocks[r..]).map(|b| b.alloc_acts(be, dims, batch, seq, phi)).collect()
            },
            kept: (0..self.recomputed())
                .filter_map(|l| self.blocks[l].alloc_kept(be, dims, t, self.recompute))
                .collect(),
            z_in,
            xf: head(if dims.d_res < dims.d { t * dims.d } else { 0 }),
            rm: be.alloc(if sharded { t * dims.d } else { 0 }),
            frstd: head(t),
            hf: be.alloc_act(if last || self.plan.entry == Entry::VocabReduceScatter { t * dims.d } else { 0 }),
            logits: head_act(if head_chunk.is_some() { 0 } else { t * dims.vocab_loc }),
            head_chunk,
            grad_scale: None,
            losses: head(t),
            lmax: head(t),
            lstats: head(2 * t),
            sc: Scratch {
                h: be.alloc_act(t * max_in),
                wa: be.alloc_act(max_wa),
                dwa: be.alloc(max_wa),
                dh: be.alloc_act(t * max_in),
                dlat: be.alloc_act(max_lat),
                dlat2: be.alloc_act(max_lat),
                sum: be.alloc(max_sum),
                row: be.alloc(t),
                kron: be.alloc(kron),
            },
            bg: self.blocks[0].alloc_grads(be, dims, batch, seq),
            dx: be.alloc(t * dims.d_res),
            dhf: be.alloc_act(if last || self.plan.entry == Entry::VocabReduceScatter { t * dims.d } else { 0 }),
            dot: head(t),
        }
    }

    /// The buffers of micro-batch slot `slot` for batch `b` (allocated on first use), with
    /// its ids and targets written.
    pub fn take_work(&mut self, slot: usize, b: &Batch) -> Work<B> {
        assert_eq!(b.ids.len(), b.batch * b.seq, "batch: {} ids for {}×{}", b.ids.len(), b.batch, b.seq);
        // Callers check ids against the vocabulary (the loader, eval, decode) with an error
        // naming the input; past it the embedding would silently read zero vectors.
        if let Some(id) = b.ids.iter().find(|&&id| id as usize >= self.cfg.vocab) {
            panic!("token id {id} is outside the vocabulary of {} (model.vocab)", self.cfg.vocab);
        }
        let mut w = match self.works.get_mut(slot).and_then(|w| w.take()) {
            Some(w) if w.batch == b.batch && w.seq == b.seq => w,
            _ => self.alloc_work(b.batch, b.seq),
        };
        self.be.write_ids(&mut w.ids, b.ids);
        if !b.targets.is_empty() {
            assert_eq!(b.targets.len(), b.ids.len());
            self.be.write_ids(&mut w.targets, b.targets);
        }
        w
    }

    pub fn put_work(&mut self, slot: usize, w: Work<B>) {
        if self.works.len() <= slot {
            self.works.resize_with(slot + 1, || None);
        }
        self.works[slot] = Some(w);
    }

    /// The work of `slot`, shared.
    pub(super) fn slot_work_ref(&self, slot: usize) -> &Work<B> {
        self.works
            .get(slot)
            .and_then(|w| w.as_ref())
            .unwrap_or_else(|| panic!("micro-batch slot {slot} has no forward"))
    }
}

/// The work of `slot`, borrowed from the slot list alone (the model's backend stays free).
pub(super) fn slot_of<B: Backend>(works: &mut [Option<Work<B>>], slot: usize) -> &mut Work<B> {
    works.get_mut(slot).and_then(|w| w.as_mut()).unwrap_or_else(|| panic!("micro-batch slot {slot} has no forward"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;
    use boost_config::Config;
    use boost_tensor::cpu::Cpu;

    /// The latent buffers (saved latents, their gradients, the kept latents) hold latents only,
    /// and every norm statistic has a t-value buffer of its own: the latents can then be stored
    /// narrower than the fp32 statistics. Only a group whose online statistic rides with A's
    /// all-reduce gets the [stat | latent] staging buffer.
    #[test]
    fn latent_buffers_hold_no_norm_statistics() {
        let (b, s) = (2, 6);
        let t = b * s;
        for arch in ["cola", "lax"] {
            for (tp, norm) in [(1, "online"), (2, "online"), (2, "sync")] {
                for policy in [Recompute::None, Recompute::Lowrank] {
                    let sets: Vec<String> = [
                        "model.d=32",
                        "model.d_ff=48",
                        "model.heads=4",
                        "model.rank=8",
                        "model.vocab=40",
                        "model.layers=2",
                        &format!("model.arch={arch}"),
                        &format!("parallel.tp={tp}"),
                        &format!("parallel.norm={norm}"),
                    ]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                    let cfg = Config::load(None, &sets).unwrap();
                    let layout = Layout::from_config(&cfg.model, &cfg.parallel, 0);
                    let mut m = Model::declare(Cpu::<f32>::new(), &cfg.model, layout).unwrap();
                    m.set_recompute(policy);
                    let w = m.alloc_work(b, s);
                    let what = format!("{arch} tp={tp} {norm} {policy:?}");
                    let mut max_lat = 0;
                    let mut staged = false;
                    for (l, block) in m.blocks.iter().enumerate() {
                        for (k, g) in block.groups().iter().enumerate() {
                            let n = g.geom(t).len();
                            max_lat = max_lat.max(n);
                            staged |= g.stages_sum(&m.plan);
                            if policy == Recompute::None {
                                let acts = w.blocks[m.act_set(l)].group(k);
                                assert_eq!(acts.lat.len(), n, "{what}: layer {l} group {k}: latent only");
                                assert_eq!(acts.stat.len(), t, "{what}: layer {l} group {k}: statistic");
                            } else {
                                let kept = &w.kept[l];
                                assert_eq!(kept.lats[k].len(), n, "{what}: layer {l} group {k}: kept latent only");
                                let want = if g.norm.is_some() { t } else { 0 };
                                assert_eq!(kept.stats[k].len(), want, "{what}: layer {l} group {k}: kept statistic");
                            }
                        }
                    }
                    assert!(max_lat > 0, "{what}: a low-rank model has latents");
                    assert_eq!((w.sc.dlat.len(), w.sc.dlat2.len()), (max_lat, max_lat), "{what}: latent gradients");
                    assert_eq!(staged, tp > 1 && norm == "online", "{what}: the online statistic rides under BTP");
                    assert_eq!(w.sc.sum.len(), if staged { t + max_lat } else { 0 }, "{what}: staging");
                }
            }
        }
    }
}
