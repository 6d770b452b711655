//! The order of each pass over the layer: forward (or full recompute), backward, and the
//! low-rank recompute from the saved latents.

use super::ctx::LayerEmitter;
use crate::ops::Phase;

/// Which parts of a low-rank group a pass runs.
#[derive(Clone, Copy)]
pub(super) struct Parts {
    pub(super) a: bool,
    pub(super) latent: bool,
    pub(super) b: bool,
}

impl Parts {
    const ALL: Parts = Parts { a: true, latent: true, b: true };
}

impl LayerEmitter<'_> {
    pub(super) fn forward(&mut self, phase: Phase) {
        self.phase = phase;
        let [qkv, o, gu, down] = self.groups();
        self.norm_fwd("attn", false);
        self.group(&qkv, Parts::ALL);
        self.rope();
        self.attention();
        self.group(&o, Parts::ALL);
        self.residual("attn");
        self.norm_fwd("mlp", false);
        self.group(&gu, Parts::ALL);
        self.act();
        self.group(&down, Parts::ALL);
        self.residual("mlp");
    }

    pub(super) fn backward(&mut self) {
        self.phase = Phase::Backward;
        let [qkv, o, gu, down] = self.groups();
        self.group(&down, Parts::ALL);
        self.act();
        self.group(&gu, Parts::ALL);
        self.norm_bwd("mlp");
        self.group(&o, Parts::ALL);
        self.attention();
        self.rope();
        self.group(&qkv, Parts::ALL);
        self.norm_bwd("attn");
    }

    /// Low-rank checkpointing (docs/PARALLELISM.md §5): rebuild from the saved pre-φ latents, residual
    /// shards and norm statistics; no A GEMM and no B_o / B_down.
    pub(super) fn recompute_lowrank(&mut self) {
        self.phase = Phase::Recompute;
        self.from_saved_latents = true;
        let [qkv, o, gu, down] = self.groups();
        let latent_only = Parts { a: false, latent: true, b: false };
        let latent_b = Parts { a: false, latent: true, b: true };
        self.norm_fwd("attn", true);
        self.group(&qkv, latent_b);
        self.rope();
        self.attention();
        self.group(&o, latent_only);
        self.norm_fwd("mlp", true);
        self.group(&gu, latent_b);
        self.act();
        self.group(&down, latent_only);
        self.from_saved_latents = false;
    }
}
