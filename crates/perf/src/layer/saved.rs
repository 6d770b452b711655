//! What a layer's forward keeps for backward under each recompute policy, and the working set
//! a recomputed layer rebuilds while its backward runs.

use super::ctx::LayerEmitter;
use crate::setup::{Keeps, Setup};
use boost_config::Recompute;
use serde::Serialize;

/// Bytes of a residual-stream element: fp32 under every activation dtype.
pub const RESIDUAL_BYTES: u64 = 4;

/// A tensor the forward keeps for backward, per token of the micro-batch, on one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saved {
    pub label: String,
    pub elements_per_token: f64,
    pub bytes_per_element: u64,
}

impl Saved {
    pub fn bytes_per_token(&self) -> f64 {
        self.elements_per_token * self.bytes_per_element as f64
    }
}

/// What the forward of `layer` keeps for backward under the set-up's recompute policy,
/// per token of one micro-batch, on one rank.
///
/// Assumptions for `none`: the forward keeps every tensor a hand-written backward reads — the
/// residual at each norm's input (the norm's output is rebuilt from it and its statistic),
/// every latent before φ and (for SiLU) after it, q, k, v after RoPE, the attention output and
/// its per-head log-sum-exp (flash-style: no S² matrix), the SwiGLU gate and up (not their
/// product: the backward rebuilds it); fp32 per-token statistics. The residual stream is fp32
/// whatever the activation dtype (the engine keeps it so: a bf16 running sum would lose the
/// late layers' small updates). Temporary buffers of the backward pass are not counted here
/// (see [`layer_transient`]). This is what the engine allocates, against which its recompute
/// facts are checked; [`Keeps::Autograd`] adds what an autograd implementation also keeps,
/// each norm's output and the SwiGLU product.
pub fn layer_saved(s: &Setup, layer: usize) -> Vec<Saved> {
    LayerEmitter::new(s, layer).saved(s.policy_of(layer))
}

/// The extra activation bytes per token alive while one recomputed layer runs its backward:
/// the layer's tensors that the policy dropped and recompute rebuilt (0 without recompute).
pub fn layer_transient(s: &Setup, layer: usize) -> f64 {
    if s.policy_of(layer) == Recompute::None {
        return 0.0;
    }
    let c = LayerEmitter::new(s, layer);
    c.saved(Recompute::None).iter().map(Saved::bytes_per_token).sum()
}

impl LayerEmitter<'_> {
    /// What a forward keeps per token for backward, by policy.
    fn saved(&self, policy: Recompute) -> Vec<Saved> {
        let a = self.a;
        let autograd = self.s.keeps == Keeps::Autograd;
        let mut out = Vec::new();
        let mut push = |label: &str, e: f64, b: u64| {
            if e > 0.0 {
                out.push(Saved { label: label.to_string(), elements_per_token: e, bytes_per_element: b });
            }
        };
        let w_res = self.w_res() as f64;
        // The latent width a rank holds (r/p under vanilla, r under BTP).
        let lat = self.w_lat() as f64;
        match policy {
            Recompute::Full => push("layer input (residual)", w_res, RESIDUAL_BYTES),
            Recompute::Lowrank => {
                push("pre-φ latents (3r + r + 2r + r)", 7.0 * lat, a);
                push("residual at the two norm inputs", 2.0 * w_res, RESIDUAL_BYTES);
                push("norm statistics", 2.0, 4);
            }
            Recompute::None => {
                let (hl, kvl) = self.heads_local();
                let (hl, kvl, dh) = (hl as f64, kvl as f64, self.d_h as f64);
                let w_ff = self.w_ff() as f64;
                push("residual at the two norm inputs", 2.0 * w_res, RESIDUAL_BYTES);
                if autograd {
                    push("norm outputs (GEMM inputs)", 2.0 * w_res, a);
                }
                push("norm statistics", 2.0, 4);
                if self.s.model.arch.is_low_rank() {
                    // Per latent: its pre-φ value and, when φ is not the identity, φ's output
                    // (the B GEMM's input). LaX crossing layers keep the post-crossing value,
                    // the LN output and φ's output, plus LN statistics.
                    let per = if self.crossing() {
                        if self.silu() { 3.0 } else { 2.0 }
                    } else if self.silu() {
                        2.0
                    } else {
                        1.0
                    };
                    push("latents (7 per layer)", 7.0 * lat * per, a);
                    if self.crossing() {
                        push("LaX LN_r statistics", 14.0, 4);
                    }
                }
                push("q, k, v after RoPE", (hl + 2.0 * kvl) * dh, a);
                push("attention output", hl * dh, a);
                push("attention log-sum-exp", hl, 4);
                push("SwiGLU gate and up", 2.0 * w_ff, a);
                if autograd {
                    push("SwiGLU product", w_ff, a);
                }
            }
        }
        out
    }
}

/// Bytes per token of the buffers a micro-batch's backward works in on this engine (none
/// for [`Keeps::Autograd`], whose temporaries come and go): the gradients of one layer's
/// outputs (q, k, v, the attention output, gate and up, the SwiGLU product), a norm's output
/// rebuilt for its GEMM and that output's gradient (the widest projection input), the
/// latents' gradients and LaX's carried ones, the attention's row statistics, the staging of
/// an online statistic with its latent, and the residual's fp32 gradient (and its copy in the
/// activation dtype, where narrower).
pub fn layer_working(s: &Setup, layer: usize) -> f64 {
    if s.keeps == Keeps::Autograd {
        return 0.0;
    }
    let c = LayerEmitter::new(s, layer);
    let (a, f32) = (c.a as f64, 4.0);
    let (hl, kvl) = c.heads_local();
    let (hl, kvl, dh) = (hl as f64, kvl as f64, c.d_h as f64);
    let (w_res, w_ff, lat) = (c.w_res() as f64, c.w_ff() as f64, c.w_lat() as f64);
    // The residual's gradient cast once for the o and down GEMMs, where activations are
    // narrower than fp32.
    let cast = if c.a < 4 { w_res } else { 0.0 };
    let outputs = (hl + 2.0 * kvl) * dh + hl * dh + 3.0 * w_ff + cast;
    let norm_io = 2.0 * w_res.max(w_ff);
    let low_rank = s.model.arch.is_low_rank();
    let latents = if low_rank { 2.0 * 3.0 * lat } else { 0.0 };
    let carries = if c.lax() { 2.0 * 7.0 * lat } else { 0.0 };
    let staging = if low_rank && c.sharded_norm() && s.norm == crate::NormMode::Online { 1.0 + 3.0 * lat } else { 0.0 };
    (outputs + norm_io + latents + carries) * a + (hl + staging + w_res) * f32
}
