//! A low-rank projection group: the A GEMMs, the latent's kernels (φ, the LaX crossing and its
//! gate), the B GEMMs, and the collectives the plan puts between them.

use super::ctx::LayerEmitter;
use super::groups::GroupShape;
use super::passes::Parts;
use crate::ops::{CollKind, Phase};
use crate::setup::NormMode;
use boost_config::LaxGate;
use boost_plan::{GroupPlan, Placement, Shard};

impl LayerEmitter<'_> {
    /// A low-rank group: A, the latent's kernels, B, and the collectives the plan puts
    /// between them (BTP: g after a row-parallel A, f in front of a column-parallel B;
    /// vanilla: g after each row-parallel B, f in front of a column-parallel A).
    pub(super) fn low_rank_group(&mut self, g: &GroupShape, gp: &GroupPlan, parts: Parts) {
        let (a, b) = (gp.first, gp.second.expect("a low-rank group has B"));
        let n = g.n();
        let grouped = self.s.grouping && n > 1;
        let a_in = |c: &Self, d_in: u64| c.local(d_in, a.shard == Shard::Input);
        let lat = self.w_lat();
        let b_out = |c: &Self, d_out: u64| c.local(d_out, b.shard == Shard::Output);
        // The latent is whole on every rank: its kernels repeat on each.
        let redundant = gp.latent() == Some(Placement::Replicated);
        let stat = u64::from(g.after_norm && self.s.norm == NormMode::Online && self.sharded_norm());
        let latent_label = format!("{}.{}", g.label(), if self.lax() { "cross" } else { "phi" });
        // Forward: each A's output is summed behind it when A is row-parallel (the online
        // statistic rides with the first). Backward: the ungrouped input gradients add up.
        let a_gemms = |c: &mut Self| {
            let fwd = c.phase != Phase::Backward;
            if grouped {
                let label = format!("{}.A", g.label());
                c.linear(label.clone(), a_in(c, g.d_in()), n * lat, 1, false);
                if fwd && a.sum_output {
                    c.coll(label, CollKind::AllReduce, n * lat, stat);
                }
            } else {
                for (i, pr) in g.projs.iter().enumerate() {
                    let label = format!("{}.A", g.proj_label(pr));
                    c.linear(label.clone(), a_in(c, pr.d_in), lat, 1, false);
                    if fwd && a.sum_output {
                        c.coll(label, CollKind::AllReduce, lat, if i == 0 { stat } else { 0 });
                    }
                }
                if !fwd && n > 1 {
                    let w = a_in(c, g.d_in());
                    c.grad_sum(format!("{}.A", g.label()), n, w);
                }
            }
        };
        // B's GEMMs batch over projections of one shape unless each output is summed alone.
        let batched_b = grouped && !b.sum_output && g.projs.iter().all(|pr| pr.d_out == g.projs[0].d_out);
        let b_gemms = |c: &mut Self| {
            if batched_b {
                c.linear(format!("{}.B", g.label()), lat, b_out(c, g.projs[0].d_out), n, false);
            } else {
                for pr in &g.projs {
                    let label = format!("{}.B", g.proj_label(pr));
                    c.linear(label.clone(), lat, b_out(c, pr.d_out), 1, false);
                    if c.phase != Phase::Backward && b.sum_output {
                        c.coll(label, CollKind::AllReduce, pr.d_out, 0);
                    }
                }
            }
        };
        if self.phase != Phase::Backward {
            if parts.a {
                a_gemms(self);
                if stat == 1 && !self.latent_kernel() {
                    // Y = H / sqrt(S/d + ε) on the replicated latent (fused into φ or the
                    // crossing when the latent has a kernel of its own).
                    self.ew(format!("{}.norm", g.block), n * lat, n * lat, 1);
                }
            }
            if parts.latent {
                self.latent_fwd(latent_label, n, lat, redundant);
            }
            if parts.b {
                b_gemms(self);
            }
        } else {
            b_gemms(self);
            if b.sum_input_grad {
                if grouped {
                    self.coll(format!("{}.B", g.label()), CollKind::AllReduce, n * lat, 0);
                } else {
                    for pr in &g.projs {
                        self.coll(format!("{}.B", g.proj_label(pr)), CollKind::AllReduce, lat, 0);
                    }
                }
            }
            self.latent_bwd(latent_label, n, lat, redundant);
            if stat == 1 && !self.latent_kernel() {
                // dH = dY/ρ and dS = −Σ(dY ⊙ Y)/(2dρ²) over the replicated latent (fused into
                // φ's or the crossing's backward when there is one).
                self.ew(format!("{}.norm", g.block), 2 * n * lat, n * lat, 1);
            }
            a_gemms(self);
            if a.sum_input_grad {
                self.coll(format!("{}.f", g.label()), CollKind::AllReduce, g.d_in(), 0);
            }
        }
    }

    /// The LaX crossing (or φ) on a latent of width `width` per projection, `n` projections,
    /// forward. `redundant` = the latent is replicated (BTP, or vanilla after its all-gather).
    fn latent_fwd(&mut self, label: String, n: u64, width: u64, redundant: bool) {
        if self.crossing() {
            if !self.from_saved_latents {
                self.gate(label.clone(), n, redundant);
                self.ew(label.clone(), 2 * n * width, n * width, 0);
            }
            // LN_r over the latent: statistics and affine.
            self.ew(label.clone(), n * width, n * width, 2 * n);
        }
        if self.silu() {
            self.ew(label, n * width, n * width, 0);
        }
    }

    fn latent_bwd(&mut self, label: String, n: u64, width: u64, redundant: bool) {
        if self.silu() {
            self.ew(label.clone(), 2 * n * width, n * width, 0);
        }
        if self.crossing() {
            self.ew(label.clone(), 2 * n * width, n * width, 2 * n);
            self.gate(label.clone(), n, redundant);
            // The gate's input gradient adds into the previous layer's latent gradient.
            self.ew(label, 2 * n * width, n * width, 0);
        }
    }

    /// The r×r crossing gate G applied to `n` latents (dense with bias, or Kronecker).
    fn gate(&mut self, label: String, n: u64, redundant: bool) {
        let r = self.r;
        match self.s.model.lax.gate {
            LaxGate::Dense => {
                self.linear(label.clone(), r, r, n, redundant);
                self.ew(label, n * r, n * r, 0);
            }
            LaxGate::Kron => {
                // Z (a×b per token) ↦ K_aᵀ·Z·K_b: two small GEMMs over all tokens.
                let (ka, kb) = self.s.model.kron_factors();
                let (ka, kb) = (ka as u64, kb as u64);
                let t = self.t;
                self.t = t * kb;
                self.linear(label.clone(), ka, ka, n, redundant);
                self.t = t * ka;
                self.linear(label, kb, kb, n, redundant);
                self.t = t;
            }
        }
    }
}
