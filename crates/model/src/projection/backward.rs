//! A group's backward, the forward in reverse: up-projections → collective → φ' → LaX
//! crossing → down-projection → collective → norm. `dx` receives the gradient of the
//! group's input: accumulated into the residual gradient when a norm feeds the group,
//! overwritten otherwise.

use super::*;
use crate::params::two_mut;
use boost_tensor::{KronBwd, LayerNormBwd, OnlineNormBwd, RmsNormBwd, SiluNormBwd};

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
        let ProjSaved { x, acts, prev } = saved;
        let GradFlow { dout, dx, carry_in, carry_out } = flow;
        let (be, t, din) = (cx.be, cx.t, self.d_in_loc);
        let placement = cx.plan.norm;
        let online = self.norm.is_some() && placement == NormPlacement::ShardedOnline;
        let fold = self.folds_gamma(cx.plan.norm);
        let Scratch { h, wa, dh, dlat, dlat2, row, kron } = sc;
        // Gradient w.r.t. the GEMM input lands in `dh` when a norm follows, else in `dx`.
        let has_norm = self.norm.is_some();

        assert!(x.is_some() || !has_norm, "a group after a norm keeps its input");
        // The GEMM input as the forward saw it (recomputed: x, norm(x), or x ⊙ γ; x itself
        // when γ is folded into A).
        if let (Some(gamma), Some(x)) = (self.norm, x) {
            let stat = self.stat(&acts.lat, t);
            if online {
                if !fold {
                    be.mul_cols(MatMut::new(h, t, din), x, gamma.of(cx.params));
                }
            } else {
                be.rmsnorm_apply(MatMut::new(h, t, din), x, gamma.of(cx.params), stat);
            }
        }
        // `f`: the input gradient of a column-parallel first op is partial over tp ranks.
        let needs_f = self.plan.first.sum_input_grad;

        match &self.w {
            Weights::Full { w } => {
                let gin = if has_norm { &mut *dh } else { &mut *dx };
                for (j, wj) in w.iter().enumerate() {
                    let dy = self.out_mat(dout, t, j);
                    be.gemm(MatMut::new(gin, t, din), dy, wj.of(cx.params), 1.0, j > 0);
                }
                let input = if has_norm { Some(Mat::new(&*h, t, din)) } else { x };
                if let Some(input) = input {
                    self.input_products(cx, grads, input, dout, None);
                }
            }
            Weights::LowRank { a, b, lax } => {
                let geo = self.geom(t);
                let r = self.r_loc;
                // dB_j += z_jᵀ·dY_j ; dZ_j = dY_j·B_jᵀ
                for (j, bj) in b.iter().enumerate() {
                    let dy = self.out_mat(dout, t, j);
                    be.gemm(bj.of_mut(grads), self.z_mat(acts, t, j).t(), dy, 1.0, true);
                    be.gemm(geo.comp_mut(dlat, t, j), dy, bj.of(cx.params).t(), 1.0, false);
                }
                // f in front of a column-parallel B (BTP): all-reduce the latent gradient.
                if self.plan.second.is_some_and(|b| b.sum_input_grad) {
                    if self.grouped {
                        cx.f_backward(dlat, t, geo.len(), labels::b_bwd(self.kind, None), self.layer);
                    } else {
                        for j in 0..self.c {
                            cx.f_backward(
                                dlat,
                                t + geo.comp(j).0,
                                t * r,
                                labels::b_bwd(self.kind, Some(j)),
                                self.layer,
                            );
                        }
                    }
                }
                // LaX: the next layer's crossing read this z.
                if let Some(c) = carry_in {
                    be.axpy(geo.whole_mut(dlat, t), geo.whole_mat(c, 0), 1.0);
                }
                // With the online norm and no LaX crossing, φ's backward runs in one pass with the
                // statistic's gradient and rstd below (the same arithmetic).
                let crossing = self.crossing(acts);
                let fused = online && !crossing && acts.z.is_some();
                if acts.z.is_some() && !fused {
                    let (pp, base) = self.pre_phi(acts, t);
                    be.silu_bwd(geo.whole_mut(dlat, t), geo.whole_mat(pp, base));
                }
                // LaX: back through LN and the gate; the latent gradient moves to dlat2.
                let dp: &mut B::Buf = match (lax, &acts.lax) {
                    (Some(lx), Some(la)) => {
                        let (pg, pa) = prev.expect("a LaX crossing layer has a previous layer");
                        let carry_out = carry_out.expect("a LaX crossing layer passes a gradient back");
                        for (j, s) in lx.iter().enumerate() {
                            let (dw, db) = two_mut(grads, s.ln_w, s.ln_b);
                            be.layernorm_bwd(LayerNormBwd {
                                dx: geo.comp_mut(dlat2, t, j),
                                dw,
                                db,
                                dy: geo.comp_mat(dlat, t, j),
                                x: geo.comp_mat(&la.a, 0, j),
                                w: s.ln_w.of(cx.params),
                                mean: Mat::at(&la.mean, j * t, t, 1, 1),
                                rstd: Mat::at(&la.rstd, j * t, t, 1, 1),
                            });
                            let zp = pg.z_mat(pa, t, j);
                            let da = geo.comp_mat(dlat2, t, j);
                            match &s.gate {
                                Gate::Dense { w, b } => {
                                    be.gemm(w.of_mut(grads), da.t(), zp, 1.0, true);
                                    be.bias_grad(b.of_mut(grads), da);
                                    be.gemm(geo.comp_mut(carry_out, 0, j), da, w.of(cx.params), 1.0, false);
                                }
                                Gate::Kron { ka, kb } => {
                                    be.fill(geo.comp_mut(carry_out, 0, j), 0.0);
                                    let (dka, dkb) = two_mut(grads, *ka, *kb);
                                    be.kron_bwd(KronBwd {
                                        dz: geo.comp_mut(carry_out, 0, j),
                                        dka,
                                        dkb,
                                        dy: da,
                                        z: zp,
                                        ka: ka.of(cx.params),
                                        kb: kb.of(cx.params),
                                        scratch: kron,
                                    });
                                }
                            }
                        }
                        dlat2
                    }
                    _ => dlat,
                };
                if online {
                    // dS = −Σ (dY ⊙ Y)·rstd² / (2d) over every output of the statistic, then
                    // dH = dY·rstd (docs/PARALLELISM.md §3; Y is the saved normalised latent).
                    let stat = self.stat(&acts.lat, t);
                    let alpha = -0.5 / self.d_in as f64;
                    if fused {
                        let (pp, base) = self.pre_phi(acts, t);
                        for j in 0..self.c {
                            be.silu_norm_bwd(SiluNormBwd {
                                dp: geo.comp_mut(dp, t, j),
                                x: geo.comp_mat(pp, base, j),
                                p: geo.comp_mat(&acts.lat, t, j),
                                stat,
                                ds: MatMut::new(row, t, 1),
                                alpha,
                                accumulate: j > 0,
                            });
                        }
                    } else {
                        for j in 0..self.c {
                            let (dpj, pj) = (geo.comp_mat(dp, t, j), geo.comp_mat(&acts.lat, t, j));
                            be.row_dot(MatMut::new(row, t, 1), dpj, pj, Some(stat), alpha, j > 0);
                        }
                        for j in 0..self.c {
                            be.mul_rows(geo.comp_mut(dp, t, j), stat);
                        }
                    }
                }
                let gin = if has_norm { &mut *dh } else { &mut *dx };
                let a_comp = |j: usize| Mat::at(&cx.params[a.buf], a.off + j * r, din, r, a.ld);
                if self.grouped {
                    be.gemm(MatMut::new(gin, t, din), geo.whole_mat(dp, t), a.of(cx.params).t(), 1.0, false);
                } else {
                    for j in 0..self.c {
                        be.gemm(MatMut::new(gin, t, din), geo.comp_mat(dp, t, j), a_comp(j).t(), 1.0, j > 0);
                    }
                }
                // dA's GEMM: into the grads, or, with γ folded, xᵀ·dP into `wa` first.
                let input = if has_norm && !fold { Some(Mat::new(&*h, t, din)) } else { x };
                if let Some(input) = input {
                    self.input_products(cx, grads, input, dp, fold.then_some(&mut *wa));
                }
                if fold {
                    // With A' = diag(γ)·A: dA += diag(γ)·(xᵀ·dP) and dγ_j += Σ_k A_jk·(xᵀ·dP)_jk.
                    let gamma = self.norm.expect("a folded group has a norm");
                    let xt_dp = Mat::new(&*wa, din, a.cols);
                    be.row_dot(gamma.col_mut(grads), a.of(cx.params), xt_dp, None, 1.0, true);
                    be.mul_rows(MatMut::new(&mut *wa, din, a.cols), gamma.col(cx.params));
                    be.axpy(a.of_mut(grads), Mat::new(&*wa, din, a.cols), 1.0);
                }
            }
        }
        if needs_f {
            let gin = if has_norm { &mut *dh } else { &mut *dx };
            cx.f_backward(gin, 0, t * din, labels::in_bwd(self.kind), self.layer);
        }
        // The norm's backward, accumulating into the residual gradient.
        if let (Some(gamma), Some(x)) = (self.norm, x) {
            let g = gamma.of(cx.params);
            let gy = Mat::new(&*dh, t, din);
            if online {
                be.online_norm_bwd(OnlineNormBwd {
                    dx: MatMut::new(dx, t, din),
                    // Folded: dγ came from A's gradient above.
                    dgamma: (!fold).then(|| gamma.of_mut(grads)),
                    g: gy,
                    x,
                    gamma: g,
                    ds: Mat::new(&*row, t, 1),
                    accumulate: true,
                });
            } else {
                be.rmsnorm_bwd_dot(MatMut::new(row, t, 1), gy, x, g);
                if placement == NormPlacement::ShardedSync {
                    cx.stat_sum(row, 0, t, labels::stat(self.kind, true), self.layer);
                }
                let stat = self.stat(&acts.lat, t);
                be.rmsnorm_bwd(RmsNormBwd {
                    dx: MatMut::new(dx, t, din),
                    dgamma: gamma.of_mut(grads),
                    dy: gy,
                    x,
                    gamma: g,
                    rstd: stat,
                    dot: Mat::new(&*row, t, 1),
                    n: self.d_in,
                    accumulate: true,
                });
            }
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
                    be.gemm(da, input.t(), geo.whole_mat(dz, t), 1.0, !fold);
                } else {
                    for j in 0..self.c {
                        let da = MatMut::at(&mut *da_buf, da_off + j * r, din, r, da_ld);
                        be.gemm(da, input.t(), geo.comp_mat(dz, t, j), 1.0, !fold);
                    }
                }
            }
        }
    }
}
