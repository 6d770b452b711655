//! A group's forward in three stages, so activation recompute can re-run only the later
//! ones: down (norm → A or the dense weight → collective), latent (LaX crossing → LN → φ),
//! up (B → vanilla's collective). Each scheme's collectives are the marked `all_reduce`s.

use crate::labels;
use crate::params::Slot;
use crate::pass::Ctx;
use crate::plan::NormPlacement;
use crate::projection::{Call, Gate, LaxSlots, Packed, ProjActs, ProjGroup, Scratch, Weights};
use boost_tensor::{Backend, Mat, MatMut};
use boost_tensor::{LayerNormFwd, ResidualRmsNorm};

/// How [`ProjGroup::forward_latent`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latent {
    /// From P: the full forward.
    Compute,
    /// From a kept crossing value `a` (LaX); `rebuild_p` also recovers P for the backward.
    FromA { rebuild_p: bool },
}

/// What [`ProjGroup::residual_norm`] did of a group's norm, which its forward then skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pre {
    /// Nothing: the forward runs the whole norm.
    Nothing,
    /// The sum of squares, in the statistic's place.
    SumSq,
    /// The whole RMSNorm: its output in `sc.h`, rstd in `acts.stat`.
    Norm,
}

impl ProjGroup {
    /// Run the group on `x` (`t × d_in_loc`), writing the component-major output to `out`.
    /// `prev` is the same group of the previous layer (LaX crossing).
    pub fn forward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        x: Mat<B::Buf>,
        acts: &mut ProjActs<B>,
        prev: Option<(&ProjGroup, &ProjActs<B>)>,
        out: &mut B::Buf,
        sc: &mut Scratch<B>,
    ) {
        self.forward_from(cx, x, acts, prev, out, sc, Pre::Nothing)
    }

    /// [`forward`](Self::forward) after [`residual_norm`](Self::residual_norm) did `pre`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_from<B: Backend>(
        &self,
        cx: &Ctx<B>,
        x: Mat<B::Buf>,
        acts: &mut ProjActs<B>,
        prev: Option<(&ProjGroup, &ProjActs<B>)>,
        out: &mut B::Buf,
        sc: &mut Scratch<B>,
        pre: Pre,
    ) {
        self.forward_down(cx, x, acts, out, sc, pre);
        self.forward_latent(cx, acts, prev, sc, Latent::Compute);
        self.forward_up(cx, acts, out);
    }

    /// Whether the group's norm is an ordinary RMSNorm over whole rows (the residual
    /// replicated), which one kernel runs with the residual add before it.
    pub fn joins_residual(&self, norm: NormPlacement) -> bool {
        self.norm.is_some() && norm == NormPlacement::Replicated && self.d_in_loc == self.d_in
    }

    /// `x += r` with as much of the group's norm as one kernel takes, writing what
    /// [`forward_down`](Self::forward_down) would: the whole RMSNorm where
    /// [`joins_residual`](Self::joins_residual) ([`Backend::residual_rmsnorm`]: the output in
    /// `sc.h`, rstd in `acts.stat`), else the sum of squares of this shard
    /// ([`Backend::residual_sumsq`]) in the statistic's place. The group has a norm.
    pub fn residual_norm<B: Backend>(
        &self,
        cx: &Ctx<B>,
        x: MatMut<B::Buf>,
        r: Mat<B::Buf>,
        acts: &mut ProjActs<B>,
        sc: &mut Scratch<B>,
    ) -> Pre {
        let gamma = self.norm.expect("the residual add joins a group's norm").of(cx.params);
        let (t, din) = (cx.t, self.d_in_loc);
        if self.joins_residual(cx.plan.norm) {
            cx.be.residual_rmsnorm(ResidualRmsNorm {
                x,
                r,
                y: MatMut::new(&mut sc.h, t, din),
                rstd: MatMut::at(&mut acts.stat, 0, t, 1, 1),
                gamma,
                eps: cx.norm_eps,
            });
            return Pre::Norm;
        }
        let stat = if self.stages_sum(&cx.plan) { &mut sc.sum } else { &mut acts.stat };
        cx.be.residual_sumsq(x, r, MatMut::at(stat, 0, t, 1, 1));
        Pre::SumSq
    }

    /// Norm, down-projection and its collective: leaves the latent P (after the all-reduce,
    /// normalised) in `acts.lat` and the norm's rstd in `acts.stat`. A full-rank group is
    /// finished here: its output goes to `out`. `pre`: what [`residual_norm`](Self::residual_norm)
    /// did of the norm already.
    pub fn forward_down<B: Backend>(
        &self,
        cx: &Ctx<B>,
        x: Mat<B::Buf>,
        acts: &mut ProjActs<B>,
        out: &mut B::Buf,
        sc: &mut Scratch<B>,
        pre: Pre,
    ) {
        let s = self.call(cx);
        assert_eq!((x.rows, x.cols), (s.t, s.din), "group input shape");
        let Scratch { h, wa, sum, .. } = sc;
        // One all-reduce sums the statistic and the latent: both go through `sum`, [stat | P].
        let staged = self.stages_sum(&cx.plan);
        let input = self.gemm_input(&s, x, if staged { &mut *sum } else { &mut acts.stat }, h, wa, pre);
        match &self.w {
            Weights::Full { w } => self.full_forward(&s, w, input, out),
            Weights::LowRank { a, .. } if staged => {
                let (t, geo) = (s.t, self.geom(s.t));
                let packed = Packed::stat_then_latent(geo);
                self.down_gemm(&s, a, input, wa, sum, packed);
                self.down_sum(&s, sum, packed);
                s.be.copy(MatMut::new(&mut acts.stat, t, 1), packed.stat_mat(sum));
                s.be.copy(geo.whole_mut(&mut acts.lat, 0), packed.whole_mat(sum));
                self.online_norm_finish(&s, acts);
            }
            Weights::LowRank { a, .. } => {
                let packed = Packed::latent_only(self.geom(s.t));
                self.down_gemm(&s, a, input, wa, &mut acts.lat, packed);
                self.down_sum(&s, &mut acts.lat, packed);
                if s.online {
                    self.online_norm_finish(&s, acts);
                }
            }
        }
    }

    /// The GEMM input: x, its RMSNorm, or x ⊙ γ (online: the norm is finished after the
    /// all-reduce, which also sums the statistic), the last two in `h`. A low-rank group folds
    /// γ into A instead (`wa`): (x ⊙ γ)·A = x·(diag(γ)·A), a d_in × c·r pass rather than a
    /// t × d_in one. The norm's sum of squares (then rstd) goes to the first t values of `stat`.
    fn gemm_input<'i, B: Backend>(
        &self,
        s: &Call<B>,
        x: Mat<'i, B::Buf>,
        stat: &mut B::Buf,
        h: &'i mut B::Buf,
        wa: &mut B::Buf,
        pre: Pre,
    ) -> Mat<'i, B::Buf> {
        let Some(gamma) = self.norm else { return x };
        let (be, cx, t, din) = (s.be, s.cx, s.t, s.din);
        let g = gamma.of(cx.params);
        match pre {
            Pre::Norm => return Mat::new(&*h, t, din),
            Pre::SumSq => {}
            Pre::Nothing => be.row_sumsq(MatMut::at(stat, 0, t, 1, 1), x),
        }
        if s.fold {
            let Weights::LowRank { a, .. } = &self.w else { unreachable!("only low-rank groups fold γ") };
            let mut wa = MatMut::new(wa, din, a.cols);
            be.copy(wa.rb(), a.of(cx.params));
            be.mul_rows(wa, gamma.col(cx.params));
            return x;
        }
        if s.online {
            be.mul_cols(MatMut::new(h, t, din), x, g);
        } else {
            if cx.plan.norm == NormPlacement::ShardedSync {
                cx.stat_sum(stat, 0, t, labels::stat(self.kind, false), self.layer);
            }
            be.rstd_from_sumsq(MatMut::at(stat, 0, t, 1, 1), self.d_in, cx.norm_eps);
            be.rmsnorm_apply(MatMut::new(h, t, din), x, g, Mat::at(stat, 0, t, 1, 1));
        }
        Mat::new(&*h, t, din)
    }

    /// A full-rank group: y_j = input·W_jᵀ; a row-parallel W (Megatron o, down) all-reduces
    /// the partial output (g).
    fn full_forward<B: Backend>(&self, s: &Call<B>, w: &[Slot], input: Mat<B::Buf>, out: &mut B::Buf) {
        let (cx, t) = (s.cx, s.t);
        for (j, wj) in w.iter().enumerate() {
            s.be.gemm(self.out_mut(out, t, j), input, wj.of(cx.params).t(), 1.0, false);
        }
        if self.plan.first.sum_output {
            cx.g(out, 0, t * self.outs[0], labels::out_fwd(self.kind, 0), self.layer);
        }
    }

    /// P = input·A into the latent of `lat` (laid out as `packed`): one GEMM when grouped,
    /// else one per component. With γ folded, A is diag(γ)·A in `wa`.
    fn down_gemm<B: Backend>(
        &self,
        s: &Call<B>,
        a: &Slot,
        input: Mat<B::Buf>,
        wa: &B::Buf,
        lat: &mut B::Buf,
        packed: Packed,
    ) {
        let (din, r) = (s.din, self.r_loc);
        let (a_buf, a_off, a_ld) = if s.fold { (wa, 0, a.cols) } else { (&s.cx.params[a.buf], a.off, a.ld) };
        if self.grouped {
            s.be.gemm(packed.whole_mut(lat), input, Mat::at(a_buf, a_off, din, a.cols, a_ld), 1.0, false);
        } else {
            for j in 0..self.c {
                let aj = Mat::at(a_buf, a_off + j * r, din, r, a_ld);
                s.be.gemm(packed.comp_mut(lat, j), input, aj, 1.0, false);
            }
        }
    }

    /// Row-parallel A (BTP): g = all-reduce of the partial latent of `buf` (laid out as
    /// `packed`), the staged norm statistic ahead of it riding in the first call.
    fn down_sum<B: Backend>(&self, s: &Call<B>, buf: &mut B::Buf, packed: Packed) {
        if !self.plan.first.sum_output {
            return;
        }
        if self.grouped {
            s.cx.g(buf, 0, packed.len(), labels::a_fwd(self.kind, None), self.layer);
        } else {
            for j in 0..self.c {
                let (off, n) = packed.comp_span(j);
                s.cx.g(buf, off, n, labels::a_fwd(self.kind, Some(j)), self.layer);
            }
        }
    }

    /// The online norm, finished on the summed latent: rstd from the summed squares, then
    /// P ⊙= rstd per row.
    fn online_norm_finish<B: Backend>(&self, s: &Call<B>, acts: &mut ProjActs<B>) {
        let (be, t, geo) = (s.be, s.t, self.geom(s.t));
        let ProjActs { stat, lat, .. } = acts;
        be.rstd_from_sumsq(MatMut::new(stat, t, 1), self.d_in, s.cx.norm_eps);
        for j in 0..self.c {
            be.mul_rows(geo.comp_mut(lat, 0, j), Mat::new(stat, t, 1));
        }
    }

    /// The latent's transform: the LaX crossing `a = P + G(z_prev)` and `u = LN(a)`, then
    /// `z = φ(u or P)`. With [`Latent::FromA`] the crossing value `a` is already in place (the
    /// low-rank recompute kept it instead of P): only LN and φ run, and, if asked, P =
    /// a − G(z_prev) is rebuilt (the online norm's backward needs it). No collective.
    pub fn forward_latent<B: Backend>(
        &self,
        cx: &Ctx<B>,
        acts: &mut ProjActs<B>,
        prev: Option<(&ProjGroup, &ProjActs<B>)>,
        sc: &mut Scratch<B>,
        mode: Latent,
    ) {
        let from_kept_a = mode != Latent::Compute;
        let Weights::LowRank { lax, .. } = &self.w else { return };
        let (be, t) = (cx.be, cx.t);
        let geo = self.geom(t);
        let ProjActs { lat, z, lax: lax_acts, .. } = acts;
        let phi_in: &B::Buf = match (lax, lax_acts.as_mut()) {
            (Some(lx), Some(la)) => {
                let online = self.norm.is_some() && cx.plan.norm == NormPlacement::ShardedOnline;
                let rebuild_p = online && mode == (Latent::FromA { rebuild_p: true });
                let zp = |j: usize| {
                    let (pg, pa) = prev.expect("a LaX crossing layer reads the previous layer's latent");
                    pg.z_mat(pa, t, j)
                };
                for (j, s) in lx.iter().enumerate() {
                    if !from_kept_a {
                        be.copy(geo.comp_mut(&mut la.a, 0, j), geo.comp_mat(lat, 0, j));
                        self.gate(cx, s, zp(j), geo.comp_mut(&mut la.a, 0, j), &mut sc.kron, true);
                    } else if rebuild_p {
                        // P = a − G(z_prev), for dS (docs/PARALLELISM.md §3) in the backward.
                        self.gate(cx, s, zp(j), geo.comp_mut(&mut sc.dlat2, 0, j), &mut sc.kron, false);
                        be.copy(geo.comp_mut(lat, 0, j), geo.comp_mat(&la.a, 0, j));
                        be.axpy(geo.comp_mut(lat, 0, j), geo.comp_mat(&sc.dlat2, 0, j), -1.0);
                    }
                    be.layernorm_fwd(LayerNormFwd {
                        y: geo.comp_mut(&mut la.u, 0, j),
                        mean: MatMut::at(&mut la.mean, j * t, t, 1, 1),
                        rstd: MatMut::at(&mut la.rstd, j * t, t, 1, 1),
                        x: geo.comp_mat(&la.a, 0, j),
                        w: s.ln_w.of(cx.params),
                        b: s.ln_b.of(cx.params),
                        eps: cx.lax_eps,
                    });
                }
                &la.u
            }
            _ => &*lat,
        };
        if let Some(z) = z.as_mut() {
            be.silu(geo.whole_mut(z, 0), geo.whole_mat(phi_in, 0));
        }
    }

    /// `y (+)= G(z)` for one component's gate.
    fn gate<B: Backend>(
        &self,
        cx: &Ctx<B>,
        s: &LaxSlots,
        z: Mat<B::Buf>,
        mut y: MatMut<B::Buf>,
        kron: &mut B::Buf,
        accumulate: bool,
    ) {
        let be = cx.be;
        match &s.gate {
            Gate::Dense { w, b } => {
                be.gemm(y.rb(), z, w.of(cx.params).t(), 1.0, accumulate);
                be.add_bias(y, b.of(cx.params));
            }
            Gate::Kron { ka, kb } => be.kron_fwd(y, z, ka.of(cx.params), kb.of(cx.params), kron, accumulate),
        }
    }

    /// Up-projections `y_j = z_j · B_j` into `out`; a row-parallel B (vanilla) all-reduces
    /// each partial output.
    pub fn forward_up<B: Backend>(&self, cx: &Ctx<B>, acts: &ProjActs<B>, out: &mut B::Buf) {
        let Weights::LowRank { b, .. } = &self.w else { return };
        let t = cx.t;
        let sum = self.plan.last().sum_output;
        for (j, bj) in b.iter().enumerate() {
            cx.be.gemm(self.out_mut(out, t, j), self.z_mat(acts, t, j), bj.of(cx.params), 1.0, false);
            if sum {
                cx.g(out, self.out_off(t, j), t * self.outs[j], labels::out_fwd(self.kind, j), self.layer);
            }
        }
    }
}
