//! The recompute policy: which layers drop their activations, and which activation set
//! each layer uses.

use crate::block::BlockActs;
use crate::model::Model;
use boost_config::Recompute;
use boost_tensor::Backend;

impl<B: Backend> Model<B> {
    /// Choose what the forward keeps (drops the buffers of the previous choice). `lowrank`
    /// needs low-rank layers (config validation refuses it for full-rank models).
    pub fn set_recompute(&mut self, policy: Recompute) {
        assert!(policy != Recompute::Lowrank || self.cfg.arch.is_low_rank(), "lowrank recompute of a full-rank model");
        if policy != self.recompute {
            self.recompute = policy;
            self.works.clear();
        }
    }

    /// Recompute only the first `n` layers of this stage (0: every layer).
    pub fn set_recompute_layers(&mut self, n: usize) {
        if n != self.recompute_layers {
            self.recompute_layers = n;
            self.works.clear();
        }
    }

    /// How many layers (the first ones of the stage) recompute their activations.
    pub(super) fn recomputed(&self) -> usize {
        let n = self.blocks.len();
        match (self.recompute, self.recompute_layers) {
            (Recompute::None, _) => 0,
            (_, 0) => n,
            (_, k) => k.min(n),
        }
    }

    /// The policy of layer `l` of this stage.
    pub fn policy_of(&self, l: usize) -> Recompute {
        if l < self.recomputed() { self.recompute } else { Recompute::None }
    }

    pub(super) fn act_set(&self, l: usize) -> usize {
        act_set(self.recomputed(), l)
    }
}

/// Which activation set layer `l` uses when the first `r` layers recompute: those share two
/// sets in turn (even and odd layers), the others have their own, after them.
pub(super) fn act_set(r: usize, l: usize) -> usize {
    if l < r { l % 2 } else { r.min(2) + (l - r) }
}

/// The activation sets `c` of a layer and `p` of the layer below (distinct).
pub(super) fn act_slots<B: Backend>(
    blocks: &mut [BlockActs<B>],
    c: usize,
    p: Option<usize>,
) -> (&mut BlockActs<B>, Option<&mut BlockActs<B>>) {
    match p {
        None => (&mut blocks[c], None),
        Some(p) if p < c => {
            let (lo, hi) = blocks.split_at_mut(c);
            (&mut hi[0], Some(&mut lo[p]))
        }
        Some(p) => {
            let (lo, hi) = blocks.split_at_mut(p);
            (&mut lo[c], Some(&mut hi[0]))
        }
    }
}
