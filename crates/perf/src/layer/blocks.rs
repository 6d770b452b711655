//! The pieces around the projections: RMSNorm (with the global statistic when the residual is
//! sharded), the residual adds, RoPE, the attention core and the SwiGLU product.

use super::ctx::LayerEmitter;
use crate::ops::{Attention, CollKind, CostOp, Phase};
use crate::setup::NormMode;

impl LayerEmitter<'_> {
    /// RMSNorm forward (`recompute` = norm output rebuilt from the saved residual and statistic).
    pub(super) fn norm_fwd(&mut self, block: &str, recompute: bool) {
        let label = format!("{block}.norm");
        let w = self.w_res();
        if !recompute {
            self.ew(label.clone(), w, 0, 1);
            if self.sharded_norm() && self.s.norm == NormMode::Sync {
                self.coll(format!("{block}.norm.stat"), CollKind::AllReduce, 0, 1);
            }
        }
        self.ew(label, w, w, 1);
    }

    pub(super) fn norm_bwd(&mut self, block: &str) {
        let label = format!("{block}.norm");
        let w = self.w_res();
        if self.sharded_norm() && self.s.norm == NormMode::Sync {
            self.ew(label.clone(), 2 * w, 0, 1);
            self.coll(format!("{block}.norm.stat"), CollKind::AllReduce, 0, 1);
        }
        self.ew(label, 2 * w, w, 1);
        // The residual's gradient: skip path plus branch.
        self.residual(block);
    }

    pub(super) fn residual(&mut self, block: &str) {
        let w = self.w_res();
        self.ew(format!("{block}.residual"), 2 * w, w, 0);
    }

    pub(super) fn rope(&mut self) {
        let (hl, kvl) = self.heads_local();
        let w = (hl + kvl) * self.d_h;
        self.ew("attn.rope".into(), w, w, 0);
    }

    pub(super) fn attention(&mut self) {
        let (hl, kvl) = self.heads_local();
        self.ops.push(CostOp::Attention(Attention {
            label: "attn.core".into(),
            phase: self.phase,
            batch: self.s.micro_batch as u64,
            seq: self.s.seq as u64,
            heads: hl,
            kv_heads: kvl,
            head_dim: self.d_h,
            dtype_bytes: self.a,
        }));
    }

    pub(super) fn act(&mut self) {
        let w = self.w_ff();
        if self.phase == Phase::Backward {
            self.ew("mlp.act".into(), 3 * w, 2 * w, 0);
        } else {
            self.ew("mlp.act".into(), 2 * w, w, 0);
        }
    }
}
