//! The norm's two ends of a group's backward: the GEMM input recomputed as the forward saw
//! it, and the norm's own backward into the residual gradient.

use crate::labels;
use crate::plan::NormPlacement;
use crate::projection::backward::ProjSaved;
use crate::projection::{Call, ProjGroup};
use boost_tensor::{Backend, Mat, MatMut};
use boost_tensor::{OnlineNormBwd, RmsNormBwd, RmsNormBwdRows};

impl ProjGroup {
    /// The GEMM input as the forward saw it: norm(x) or x ⊙ γ recomputed into `h`, or x itself
    /// (no norm, or γ folded into A). `None` when x was not kept.
    pub(super) fn recompute_gemm_input<'i, B: Backend>(
        &self,
        s: &Call<B>,
        saved: &ProjSaved<'i, B>,
        h: &'i mut B::Buf,
    ) -> Option<Mat<'i, B::Buf>> {
        let (Some(gamma), Some(x)) = (self.norm, saved.x) else { return saved.x };
        let g = gamma.of(s.cx.params);
        if !s.online {
            let stat = self.stat(saved.acts, s.t);
            s.be.rmsnorm_apply(MatMut::new(h, s.t, s.din), x, g, stat);
        } else if !s.fold {
            s.be.mul_cols(MatMut::new(h, s.t, s.din), x, g);
        } else {
            return Some(x);
        }
        Some(Mat::new(&*h, s.t, s.din))
    }

    /// The norm's backward from the gradient of its output (`dh`), accumulated into the
    /// residual gradient `dx`. The online norm reads dS from `row` (left there by the
    /// statistic's backward); the RMSNorm computes its dot there, summed over the hidden
    /// shards when sync.
    pub(super) fn norm_backward<B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        saved: &ProjSaved<B>,
        dh: &B::Buf,
        row: &mut B::Buf,
        dx: &mut B::Buf,
    ) {
        let (Some(gamma), Some(x)) = (self.norm, saved.x) else { return };
        let (be, cx, t, din) = (s.be, s.cx, s.t, s.din);
        let g = gamma.of(cx.params);
        let gy = Mat::new(dh, t, din);
        if s.online {
            be.online_norm_bwd(OnlineNormBwd {
                dx: MatMut::new(dx, t, din),
                // Folded: dγ came from A's gradient.
                dgamma: (!s.fold).then(|| gamma.of_mut(grads)),
                g: gy,
                x,
                gamma: g,
                ds: Mat::new(&*row, t, 1),
                accumulate: true,
            });
            return;
        }
        if self.joins_residual(cx.plan.norm) {
            // Whole rows: the dot and dx in one pass.
            be.rmsnorm_bwd_rows(RmsNormBwdRows {
                dx: MatMut::new(dx, t, din),
                dgamma: gamma.of_mut(grads),
                dy: gy,
                x,
                gamma: g,
                rstd: self.stat(saved.acts, t),
                dot: MatMut::new(row, t, 1),
                accumulate: true,
            });
            return;
        }
        be.rmsnorm_bwd_dot(MatMut::new(row, t, 1), gy, x, g);
        if cx.plan.norm == NormPlacement::ShardedSync {
            cx.stat_sum(row, 0, t, labels::stat(self.kind, true), self.layer);
        }
        be.rmsnorm_bwd(RmsNormBwd {
            dx: MatMut::new(dx, t, din),
            dgamma: gamma.of_mut(grads),
            dy: gy,
            x,
            gamma: g,
            rstd: self.stat(saved.acts, t),
            dot: Mat::new(&*row, t, 1),
            n: self.d_in,
            accumulate: true,
        });
    }
}
