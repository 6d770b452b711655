//! A group's forward: norm → down-projection (or dense weight) → collective → crossing/φ →
//! up-projections → collective. Each scheme's collectives are the marked `all_reduce`s.

use super::*;

impl Group {
    /// Run the group on `x` (`t × d_in_loc`), writing the component-major output to `out`.
    /// `prev` is the same group of the previous layer (LaX crossing).
    #[allow(clippy::too_many_arguments)]
    pub fn forward<B: Backend>(
        &self,
        cx: &Ctx<B>,
        params: &[B::Buf],
        x: Mat<B::Buf>,
        acts: &mut GroupActs<B>,
        prev: Option<(&Group, &GroupActs<B>)>,
        out: &mut B::Buf,
        sc: &mut Scratch<B>,
    ) {
        let (be, t, din) = (cx.be, cx.t, self.d_in_loc);
        assert_eq!((x.rows, x.cols), (t, din), "group input shape");
        let online = self.norm.is_some() && cx.layout.norm_placement() == NormPlacement::ShardedOnline;
        let GroupActs { lat, z, lax: lax_acts } = acts;

        // The GEMM input: x, its RMSNorm, or x ⊙ γ (online: the norm is finished after the
        // all-reduce, which also sums the statistic).
        if let Some(gamma) = self.norm {
            let g = gamma.of(params);
            be.row_sumsq(MatMut::at(lat, 0, t, 1, 1), x);
            if online {
                be.mul_cols(MatMut::new(&mut sc.h, t, din), x, g);
            } else {
                if cx.layout.norm_placement() == NormPlacement::ShardedSync {
                    cx.all_reduce(lat, 0, t, labels::stat(self.kind, false), self.layer);
                }
                be.rstd_from_sumsq(MatMut::at(lat, 0, t, 1, 1), self.d_in, cx.norm_eps);
                be.rmsnorm_apply(MatMut::new(&mut sc.h, t, din), x, g, Mat::at(lat, 0, t, 1, 1));
            }
        }
        let input = if self.norm.is_some() { Mat::new(&sc.h, t, din) } else { x };

        match &self.w {
            Weights::Full { w } => {
                for (j, wj) in w.iter().enumerate() {
                    be.gemm(self.out_mut(out, t, j), input, wj.of(params).t(), 1.0, false);
                }
                // Megatron row-parallel (o, down): g = all-reduce of the partial output.
                if self.norm.is_none() && cx.layout.scheme == Scheme::Megatron {
                    cx.all_reduce(out, 0, t * self.outs[0], labels::out_fwd(self.kind, 0), self.layer);
                }
            }
            Weights::LowRank { a, b, lax } => {
                let geo = self.geom(t);
                let r = self.r_loc;
                let a_comp = |j: usize| Mat::at(&params[a.buf], a.off + j * r, din, r, a.ld);
                if self.grouped {
                    be.gemm(geo.whole_mut(lat, t), input, a.of(params), 1.0, false);
                } else {
                    for j in 0..self.c {
                        be.gemm(geo.comp_mut(lat, t, j), input, a_comp(j), 1.0, false);
                    }
                }
                // BTP: g = all-reduce of the partial latent (with the norm statistic riding
                // in front of it when online).
                if cx.layout.btp() {
                    if self.grouped {
                        let (off, n) = if online { (0, t + geo.len()) } else { (t, geo.len()) };
                        cx.all_reduce(lat, off, n, labels::a_fwd(self.kind, None), self.layer);
                    } else {
                        for j in 0..self.c {
                            let o = t + geo.comp(j).0;
                            let (off, n) = if online && j == 0 { (0, t + t * r) } else { (o, t * r) };
                            cx.all_reduce(lat, off, n, labels::a_fwd(self.kind, Some(j)), self.layer);
                        }
                    }
                }
                if online {
                    be.rstd_from_sumsq(MatMut::at(lat, 0, t, 1, 1), self.d_in, cx.norm_eps);
                    be.copy(MatMut::new(&mut sc.row, t, 1), Mat::at(lat, 0, t, 1, 1));
                    for j in 0..self.c {
                        be.mul_rows(geo.comp_mut(lat, t, j), Mat::new(&sc.row, t, 1));
                    }
                }
                // LaX crossing a = P + G(z_prev), u = LN(a); then z = φ(u or P).
                let phi_in: (&B::Buf, usize) = match (lax, lax_acts.as_mut()) {
                    (Some(lx), Some(la)) => {
                        let (pg, pa) = prev.expect("a LaX crossing layer has a previous layer");
                        for (j, s) in lx.iter().enumerate() {
                            be.copy(geo.comp_mut(&mut la.a, 0, j), geo.comp_mat(lat, t, j));
                            let zp = pg.z_mat(pa, t, j);
                            match &s.gate {
                                Gate::Dense { w, b } => {
                                    be.gemm(geo.comp_mut(&mut la.a, 0, j), zp, w.of(params).t(), 1.0, true);
                                    be.add_bias(geo.comp_mut(&mut la.a, 0, j), b.of(params));
                                }
                                Gate::Kron { ka, kb } => be.kron_fwd(
                                    geo.comp_mut(&mut la.a, 0, j),
                                    zp,
                                    ka.of(params),
                                    kb.of(params),
                                    &mut sc.kron,
                                    true,
                                ),
                            }
                            be.layernorm_fwd(
                                geo.comp_mut(&mut la.u, 0, j),
                                MatMut::at(&mut la.mean, j * t, t, 1, 1),
                                MatMut::at(&mut la.rstd, j * t, t, 1, 1),
                                geo.comp_mat(&la.a, 0, j),
                                s.ln_w.of(params),
                                s.ln_b.of(params),
                                cx.lax_eps,
                            );
                        }
                        (&la.u, 0)
                    }
                    _ => (&*lat, t),
                };
                if let Some(z) = z.as_mut() {
                    be.silu(geo.whole_mut(z, 0), geo.whole_mat(phi_in.0, phi_in.1));
                }
                for (j, bj) in b.iter().enumerate() {
                    be.gemm(
                        self.out_mut(out, t, j),
                        self.z_of::<B>(lat, z.as_ref(), lax_acts.as_ref(), t, j),
                        bj.of(params),
                        1.0,
                        false,
                    );
                    // Vanilla: B is row-parallel, g = all-reduce of each partial output.
                    if cx.layout.vanilla() {
                        cx.all_reduce(
                            out,
                            self.out_off(t, j),
                            t * self.outs[j],
                            labels::out_fwd(self.kind, j),
                            self.layer,
                        );
                    }
                }
            }
        }
    }
}
