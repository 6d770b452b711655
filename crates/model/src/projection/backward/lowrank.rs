//! A low-rank group's backward between its output and its input: the up-projections, φ',
//! the LaX crossing, the online norm's statistic and the down-projection.

use crate::labels;
use crate::params::Slot;
use crate::params::two_mut;
use crate::projection::backward::ProjSaved;
use crate::projection::{Call, Gate, LaxActs, LaxSlots, ProjActs, ProjGroup};
use boost_tensor::{Backend, Mat, MatMut};
use boost_tensor::{KronBwd, LayerNormBwd, SiluNormBwd};

/// What a LaX crossing's backward reads besides the latent gradient: the crossing's slots and
/// saved values, the same group of the layer below with its activations, and where the
/// gradient of that layer's latents goes.
pub(super) struct Crossing<'x, B: Backend> {
    slots: &'x [LaxSlots],
    acts: &'x LaxActs<B>,
    prev: (&'x ProjGroup, &'x ProjActs<B>),
    carry_out: &'x mut B::Buf,
}

impl<'x, B: Backend> Crossing<'x, B> {
    /// `None` when the group's latents do not cross (see [`ProjGroup::crossing`]).
    pub(super) fn of(
        lax: &'x Option<Vec<LaxSlots>>,
        saved: &ProjSaved<'x, B>,
        carry_out: Option<&'x mut B::Buf>,
    ) -> Option<Self> {
        let acts: &'x ProjActs<B> = saved.acts;
        let (Some(slots), Some(la)) = (lax, &acts.lax) else { return None };
        Some(Self {
            slots,
            acts: la,
            prev: saved.prev.expect("a LaX crossing layer has a previous layer"),
            carry_out: carry_out.expect("a LaX crossing layer passes a gradient back"),
        })
    }
}

impl ProjGroup {
    /// dB_j += z_jᵀ·dY_j and dZ_j = dY_j·B_jᵀ into `dlat`; then f in front of a
    /// column-parallel B (BTP) all-reduces the latent gradient.
    pub(super) fn up_backward<B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        b: &[Slot],
        acts: &ProjActs<B>,
        dout: &B::Buf,
        dlat: &mut B::Buf,
    ) {
        let (be, cx, t, geo) = (s.be, s.cx, s.t, self.geom(s.t));
        for (j, bj) in b.iter().enumerate() {
            let dy = self.out_mat(dout, t, j);
            be.gemm(bj.of_mut(grads), self.z_mat(acts, t, j).t(), dy, 1.0, true);
            be.gemm(geo.comp_mut(dlat, 0, j), dy, bj.of(cx.params).t(), 1.0, false);
        }
        if !self.plan.second.is_some_and(|b| b.sum_input_grad) {
            return;
        }
        if self.grouped {
            cx.f_backward(dlat, 0, geo.len(), labels::b_bwd(self.kind, None), self.layer);
        } else {
            for j in 0..self.c {
                let off = geo.comp(j).0;
                cx.f_backward(dlat, off, t * self.r_loc, labels::b_bwd(self.kind, Some(j)), self.layer);
            }
        }
    }

    /// LaX: the next layer's crossing read this z; its gradient joins the latent gradient.
    pub(super) fn add_carry<B: Backend>(&self, s: &Call<B>, dlat: &mut B::Buf, carry_in: Option<&B::Buf>) {
        if let Some(c) = carry_in {
            let geo = self.geom(s.t);
            s.be.axpy(geo.whole_mut(dlat, 0), geo.whole_mat(c, 0), 1.0);
        }
    }

    /// φ's backward (silu), in place on the latent gradient.
    pub(super) fn phi_backward<B: Backend>(&self, s: &Call<B>, acts: &ProjActs<B>, dlat: &mut B::Buf) {
        let (geo, pp) = (self.geom(s.t), self.pre_phi(acts));
        s.be.silu_bwd(geo.whole_mut(dlat, 0), geo.whole_mat(pp, 0));
    }

    /// Back through the LaX crossing, per component: LayerNorm's backward moves the latent
    /// gradient from `dlat` to `dlat2`, the gate's passes the layer below's. Returns the buffer
    /// that holds the latent gradient dP: `dlat2` after a crossing, else `dlat`.
    pub(super) fn crossing_backward<'d, B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        crossing: Option<Crossing<B>>,
        dlat: &'d mut B::Buf,
        dlat2: &'d mut B::Buf,
        kron: &mut B::Buf,
    ) -> &'d mut B::Buf {
        let Some(Crossing { slots, acts: la, prev: (pg, pa), carry_out }) = crossing else { return dlat };
        let (be, cx, t, geo) = (s.be, s.cx, s.t, self.geom(s.t));
        for (j, sl) in slots.iter().enumerate() {
            let (dw, db) = two_mut(grads, sl.ln_w, sl.ln_b);
            be.layernorm_bwd(LayerNormBwd {
                dx: geo.comp_mut(dlat2, 0, j),
                dw,
                db,
                dy: geo.comp_mat(dlat, 0, j),
                x: geo.comp_mat(&la.a, 0, j),
                w: sl.ln_w.of(cx.params),
                mean: Mat::at(&la.mean, j * t, t, 1, 1),
                rstd: Mat::at(&la.rstd, j * t, t, 1, 1),
            });
            let dz = geo.comp_mut(carry_out, 0, j);
            sl.gate.backward(s, grads, pg.z_mat(pa, t, j), geo.comp_mat(dlat2, 0, j), dz, kron);
        }
        dlat2
    }

    /// The online norm's statistic: dS = −Σ (dP ⊙ P)·rstd² / (2d) over every output of the
    /// statistic into `row`, then dP ⊙= rstd (docs/PARALLELISM.md §3; P is the saved
    /// normalised latent). `fused`: φ's backward runs in the same pass.
    pub(super) fn online_stat_backward<B: Backend>(
        &self,
        s: &Call<B>,
        acts: &ProjActs<B>,
        dp: &mut B::Buf,
        row: &mut B::Buf,
        fused: bool,
    ) {
        let (be, t, geo) = (s.be, s.t, self.geom(s.t));
        let stat = self.stat(acts, t);
        let alpha = -0.5 / self.d_in as f64;
        if fused {
            let pp = self.pre_phi(acts);
            for j in 0..self.c {
                be.silu_norm_bwd(SiluNormBwd {
                    dp: geo.comp_mut(dp, 0, j),
                    x: geo.comp_mat(pp, 0, j),
                    p: geo.comp_mat(&acts.lat, 0, j),
                    stat,
                    ds: MatMut::new(row, t, 1),
                    alpha,
                    accumulate: j > 0,
                });
            }
        } else {
            for j in 0..self.c {
                let (dpj, pj) = (geo.comp_mat(dp, 0, j), geo.comp_mat(&acts.lat, 0, j));
                be.row_dot(MatMut::new(row, t, 1), dpj, pj, Some(stat), alpha, j > 0);
            }
            for j in 0..self.c {
                be.mul_rows(geo.comp_mut(dp, 0, j), stat);
            }
        }
    }

    /// dX = dP·Aᵀ into `gin`: one GEMM when grouped, else one per component, summed.
    pub(super) fn down_input_grad<B: Backend>(&self, s: &Call<B>, a: &Slot, dp: &B::Buf, gin: &mut B::Buf) {
        let (be, cx, t, din, r, geo) = (s.be, s.cx, s.t, s.din, self.r_loc, self.geom(s.t));
        if self.grouped {
            be.gemm(MatMut::new(gin, t, din), geo.whole_mat(dp, 0), a.of(cx.params).t(), 1.0, false);
        } else {
            for j in 0..self.c {
                let aj = Mat::at(&cx.params[a.buf], a.off + j * r, din, r, a.ld);
                be.gemm(MatMut::new(gin, t, din), geo.comp_mat(dp, 0, j), aj.t(), 1.0, j > 0);
            }
        }
    }

    /// dA += inputᵀ·dP. With γ folded (A' = diag(γ)·A) the product xᵀ·dP goes to `wa` first:
    /// dA += diag(γ)·(xᵀ·dP) and dγ_j += Σ_k A_jk·(xᵀ·dP)_jk.
    pub(super) fn down_weight_grads<B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        a: &Slot,
        input: Option<Mat<B::Buf>>,
        dp: &B::Buf,
        wa: &mut B::Buf,
    ) {
        if let Some(input) = input {
            self.input_products(s.cx, grads, input, dp, s.fold.then_some(&mut *wa));
        }
        if !s.fold {
            return;
        }
        let (be, params, din) = (s.be, s.cx.params, s.din);
        let gamma = self.norm.expect("a folded group has a norm");
        let xt_dp = Mat::new(&*wa, din, a.cols);
        be.row_dot(gamma.col_mut(grads), a.of(params), xt_dp, None, 1.0, true);
        be.mul_rows(MatMut::new(&mut *wa, din, a.cols), gamma.col(params));
        be.axpy(a.of_mut(grads), Mat::new(&*wa, din, a.cols), 1.0);
    }
}

impl Gate {
    /// One component's gate backward from dA (`dy`): its weight gradients, and dz = the
    /// gradient of the layer below's latent `z` (overwritten).
    fn backward<B: Backend>(
        &self,
        s: &Call<B>,
        grads: &mut [B::Buf],
        z: Mat<B::Buf>,
        dy: Mat<B::Buf>,
        mut dz: MatMut<B::Buf>,
        kron: &mut B::Buf,
    ) {
        let (be, params) = (s.be, s.cx.params);
        match self {
            Gate::Dense { w, b } => {
                be.gemm(w.of_mut(grads), dy.t(), z, 1.0, true);
                be.bias_grad(b.of_mut(grads), dy);
                be.gemm(dz, dy, w.of(params), 1.0, false);
            }
            Gate::Kron { ka, kb } => {
                be.fill(dz.rb(), 0.0);
                let (dka, dkb) = two_mut(grads, *ka, *kb);
                be.kron_bwd(KronBwd { dz, dka, dkb, dy, z, ka: ka.of(params), kb: kb.of(params), scratch: kron });
            }
        }
    }
}
