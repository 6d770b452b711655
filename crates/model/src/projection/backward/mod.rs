//! A group's backward, the forward in reverse: up-projections → collective → φ' → LaX
//! crossing → down-projection → collective → norm. `dx` receives the gradient of the
//! group's input: accumulated into the residual gradient when a norm feeds the group,
//! overwritten otherwise. Each step is one method: the low-rank steps in `lowrank.rs`, the
//! norm's two ends (the recomputed GEMM input, the norm's backward) in `norm.rs`.

mod lowrank;
mod norm;

use crate::labels;
use crate::params::Slot;
use crate::pass::Ctx;
use crate::projection::{Call, ProjActs, ProjGroup, Scratch, Weights};
use boost_tensor::{Backend, Mat, MatMut};
use lowrank::Crossing;

/// What a group's backward reads of its forward.
pub struct ProjSaved<'a, B: Backend> {
    /// The group's input; `None` when it was not kept (a group without a norm only): the
    /// weight gradients that read it then wait for [`ProjGroup::input_weight_grads`].
    pub x: Option<Mat<'a, B::Buf>>,
    pub acts: &'a ProjActs<B>,
    /// The same group of the layer below and its activations (a LaX crossing reads them).
    pub prev: Option<(&'a ProjGroup, &'a ProjActs<B>)>,
}

/// The gradients flowing through a group's backward.
pub struct GradFlow<'a, B: Backend> {
    /// dL/d(output), in.
    pub dout: &'a B::Buf,
    /// dL/d(input), out (accumulated or overwritten, see the module doc).
    pub dx: &'a mut B::Buf,
    /// LaX: the gradient the layer above's crossing passed into this group's latents.
    pub carry_in: Option<&'a B::Buf>,
    /// LaX: where this group's crossing passes the gradient of the layer below's latents.
    pub carry_out: Option<&'a mut B::Buf>,
}

impl ProjGroup {
    pub fn backward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        grads: &mut [B::Buf],
        saved: ProjSaved<B>,
        flow: GradFlow<B>,
        sc: &mut Scratch<B>,
    ) {
        let GradFlow { dout, dx, carry_in, carry_out } = flow;
        let Scratch { h, dwa, dh, dlat, dlat2, row, kron, .. } = sc;
        let (s, acts) = (self.call(cx), saved.acts);
        assert!(saved.x.is_some() || !s.has_norm, "a group after a norm keeps its input");
        let input = self.recompute_gemm_input(&s, &saved, h);
        // The gradient w.r.t. the GEMM input lands in `dh` when a norm follows, else in `dx`.
        let gin = if s.has_norm { &mut *dh } else { &mut *dx };
        match &self.w {
            Weights::Full { w } => self.full_backward(&s, grads, w, dout, input, gin),
            Weights::LowRank { a, b, lax } => {
                self.up_backward(&s, grads, b, acts, dout, dlat);
                self.add_carry(&s, dlat, carry_in);
                let crossing = Crossing::of(lax, &saved, carry_out);
                // With the online norm and no LaX crossing, φ's backward runs in one pass with
                // the statistic's gradient (the same arithmetic).
                let fused = s.online && crossing.is_none() && acts.z.is_some();
                if acts.z.is_some() && !fused {
                    self.phi_backward(&s, acts, dlat);
                }
                let dp = self.crossing_backward(&s, grads, crossing, dlat, dlat2, kron);
                if s.online {
                    self.online_stat_backward(&s, acts, dp, row, fused);
                }
                self.down_input_grad(&s, a, dp, gin);
                self.down_weight_grads(&s, grads, a, input, dp, dwa);
            }
        }
        self.input_grad_sum(&s, gin);
        self.norm_backward(&s, grads, &saved, dh, row, dx);
    }

    /// A full-rank group: dX = Σ_j dY_j·W_j into `gin`, then dW_j += dY_jᵀ·input.
    fn full_backward<B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        w: &[Slot],
        dout: &B::Buf,
        input: Option<Mat<B::Buf>>,
        gin: &mut B::Buf,
    ) {
        for (j, wj) in w.iter().enumerate() {
            let dy = self.out_mat(dout, s.t, j);
            s.be.gemm(MatMut::new(gin, s.t, s.din), dy, wj.of(s.cx.params), 1.0, j > 0);
        }
        if let Some(input) = input {
            self.input_products(s.cx, grads, input, dout, None);
        }
    }

    /// `f`: the input gradient of a column-parallel first op is partial over tp ranks.
    fn input_grad_sum<B: Backend>(&self, s: &Call<B>, gin: &mut B::Buf) {
        if self.plan.first.sum_input_grad {
            s.cx.f_backward(gin, 0, s.t * s.din, labels::in_bwd(self.kind), self.layer);
        }
    }

    /// The weight gradients of a group whose input was not kept (`ProjSaved::x` = `None`),
    /// from that input rebuilt by the caller: after [`ProjGroup::backward`], while `sc` still
    /// holds its latent gradient. `dout` is the backward's output gradient.
    pub fn input_weight_grads<B: Backend>(
        &self,
        cx: &Ctx<B>,
        grads: &mut [B::Buf],
        input: Mat<B::Buf>,
        dout: &B::Buf,
        acts: &ProjActs<B>,
        sc: &Scratch<B>,
    ) {
        assert!(self.norm.is_none(), "a group after a norm keeps its input");
        let dz = match self.w {
            Weights::Full { .. } => dout,
            Weights::LowRank { .. } if self.crossing(acts) => &sc.dlat2,
            Weights::LowRank { .. } => &sc.dlat,
        };
        self.input_products(cx, grads, input, dz, None);
    }

    /// Whether this group's latents cross from the layer below (LaX): its backward then
    /// leaves the latent gradient in `dlat2`.
    fn crossing<B: Backend>(&self, acts: &ProjActs<B>) -> bool {
        matches!((&self.w, &acts.lax), (Weights::LowRank { lax: Some(_), .. }, Some(_)))
    }

    /// The products that read the group's input, from the gradient `dz` of what the input
    /// feeds: dW_j += dY_jᵀ·x (full rank, `dz` = dY), or dA += xᵀ·dP (low rank, `dz` = dP;
    /// into `wa`, overwritten, when γ is folded into A).
    fn input_products<B: Backend>(
        &self,
        cx: &Ctx<B>,
        grads: &mut [B::Buf],
        input: Mat<B::Buf>,
        dz: &B::Buf,
        wa: Option<&mut B::Buf>,
    ) {
        let (be, t, din) = (cx.be, cx.t, self.d_in_loc);
        match &self.w {
            Weights::Full { w } => {
                for (j, wj) in w.iter().enumerate() {
                    be.gemm(wj.of_mut(grads), self.out_mat(dz, t, j).t(), input, 1.0, true);
                }
            }
            Weights::LowRank { a, .. } => {
                let (geo, r, fold) = (self.geom(t), self.r_loc, wa.is_some());
                let (da_buf, da_off, da_ld) = match wa {
                    Some(wa) => (wa, 0, a.cols),
                    None => (&mut grads[a.buf], a.off, a.ld),
                };
                if self.grouped {
                    let da = MatMut::at(da_buf, da_off, din, a.cols, da_ld);
                    be.gemm(da, input.t(), geo.whole_mat(dz, 0), 1.0, !fold);
                } else {
                    for j in 0..self.c {
                        let da = MatMut::at(&mut *da_buf, da_off + j * r, din, r, da_ld);
                        be.gemm(da, input.t(), geo.comp_mat(dz, 0, j), 1.0, !fold);
                    }
                }
            }
        }
    }
}
