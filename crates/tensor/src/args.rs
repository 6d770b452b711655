//! Operands of the kernels that take many: one struct each, so a call names every operand
//! and a backend's implementation destructures them.

use crate::backend::{AdamStep, AttnShape};
use crate::view::{Mat, MatMut};

/// [`crate::Backend::rmsnorm_bwd`]: `dx (+)= rstd·gamma⊙dy − x·rstd³·dot/n`;
/// `dgamma += Σ_i dy⊙x·rstd`.
pub struct RmsNormBwd<'a, Buf> {
    pub dx: MatMut<'a, Buf>,
    pub dgamma: MatMut<'a, Buf>,
    pub dy: Mat<'a, Buf>,
    pub x: Mat<'a, Buf>,
    pub gamma: Mat<'a, Buf>,
    pub rstd: Mat<'a, Buf>,
    /// `Σ_j dy·gamma·x` per row, over every feature (see `rmsnorm_bwd_dot`).
    pub dot: Mat<'a, Buf>,
    /// Features the statistic was taken over (d, also when `x` is a shard).
    pub n: usize,
    pub accumulate: bool,
}

/// [`crate::Backend::residual_rmsnorm`]: `x += r`, then `y = x·rstd·gamma` with
/// `rstd[i] = 1/√(Σ_j x²/n + eps)` over the whole row (n = `x.cols`).
pub struct ResidualRmsNorm<'a, Buf> {
    /// The residual stream, updated in place.
    pub x: MatMut<'a, Buf>,
    /// The branch output added to it.
    pub r: Mat<'a, Buf>,
    pub y: MatMut<'a, Buf>,
    /// rows×1.
    pub rstd: MatMut<'a, Buf>,
    pub gamma: Mat<'a, Buf>,
    pub eps: f64,
}

/// [`crate::Backend::rmsnorm_bwd_rows`]: [`RmsNormBwd`] over whole rows (n = `x.cols`), its
/// per-row dot computed on the way and left in `dot`.
pub struct RmsNormBwdRows<'a, Buf> {
    pub dx: MatMut<'a, Buf>,
    pub dgamma: MatMut<'a, Buf>,
    pub dy: Mat<'a, Buf>,
    pub x: Mat<'a, Buf>,
    pub gamma: Mat<'a, Buf>,
    pub rstd: Mat<'a, Buf>,
    /// rows×1, written.
    pub dot: MatMut<'a, Buf>,
    pub accumulate: bool,
}

/// [`crate::Backend::online_norm_bwd`]: `dx (+)= gamma⊙g + 2·ds[i]·x`; `dgamma += Σ_i x⊙g`.
pub struct OnlineNormBwd<'a, Buf> {
    pub dx: MatMut<'a, Buf>,
    /// None when the caller has dγ another way (γ folded into the next GEMM's weight).
    pub dgamma: Option<MatMut<'a, Buf>>,
    pub g: Mat<'a, Buf>,
    pub x: Mat<'a, Buf>,
    pub gamma: Mat<'a, Buf>,
    pub ds: Mat<'a, Buf>,
    pub accumulate: bool,
}

/// [`crate::Backend::silu_norm_bwd`]: one pass of a normalised latent's backward through φ =
/// SiLU and the online norm's rstd, per row i: `dp ← dp ⊙ silu'(x)`, then
/// `ds[i] (+)= alpha·Σ_j dp·p·stat[i]²`, then `dp ← dp·stat[i]`.
pub struct SiluNormBwd<'a, Buf> {
    pub dp: MatMut<'a, Buf>,
    /// φ's input.
    pub x: Mat<'a, Buf>,
    /// The normalised latent the statistic's gradient is taken against.
    pub p: Mat<'a, Buf>,
    /// rstd, rows × 1.
    pub stat: Mat<'a, Buf>,
    /// rows × 1.
    pub ds: MatMut<'a, Buf>,
    pub alpha: f64,
    pub accumulate: bool,
}

/// [`crate::Backend::layernorm_fwd`]: `y = (x − mean)·rstd·w + b`, saving mean and rstd.
pub struct LayerNormFwd<'a, Buf> {
    pub y: MatMut<'a, Buf>,
    pub mean: MatMut<'a, Buf>,
    pub rstd: MatMut<'a, Buf>,
    pub x: Mat<'a, Buf>,
    pub w: Mat<'a, Buf>,
    pub b: Mat<'a, Buf>,
    pub eps: f64,
}

/// [`crate::Backend::layernorm_bwd`]: overwrites `dx`; accumulates `dw`, `db`.
pub struct LayerNormBwd<'a, Buf> {
    pub dx: MatMut<'a, Buf>,
    pub dw: MatMut<'a, Buf>,
    pub db: MatMut<'a, Buf>,
    pub dy: Mat<'a, Buf>,
    pub x: Mat<'a, Buf>,
    pub w: Mat<'a, Buf>,
    pub mean: Mat<'a, Buf>,
    pub rstd: Mat<'a, Buf>,
}

/// [`crate::Backend::attention_bwd`]: overwrites `dqkv` (laid out like `qkv`).
pub struct AttentionBwd<'a, Buf> {
    pub dqkv: &'a mut Buf,
    pub dout: Mat<'a, Buf>,
    /// What `attention_fwd` gave for this `qkv`: each query row's `D = Σ_j P·dP` equals
    /// `dout·out` of that row, which spares a backend that tiles the keys a pass over them.
    pub out: Mat<'a, Buf>,
    /// What `attention_fwd` saved (its `probs` operand).
    pub saved: &'a Buf,
    /// `attention_scratch_len` elements.
    pub scratch: &'a mut Buf,
    pub qkv: &'a Buf,
    pub shape: AttnShape,
}

/// [`crate::Backend::xent_finish`]: the vocabulary-parallel cross-entropy's last step.
pub struct XentFinish<'a, Buf, Ids> {
    pub losses: MatMut<'a, Buf>,
    pub logits: MatMut<'a, Buf>,
    pub max: Mat<'a, Buf>,
    pub stats: Mat<'a, Buf>,
    pub targets: &'a Ids,
    /// The first vocabulary column held here.
    pub first: usize,
    pub grad_scale: Option<f64>,
}

/// [`crate::Backend::head_xent`]: the LM head's logits `h·wᵀ` and their cross-entropy,
/// with the backward when `grad` is given.
pub struct HeadXent<'a, Buf, Ids> {
    /// Per-token losses (rows×1), as [`crate::Backend::cross_entropy`] gives them.
    pub losses: MatMut<'a, Buf>,
    /// The head's input (t × d).
    pub h: Mat<'a, Buf>,
    /// The head's weight (v × d): row j gives logit j.
    pub w: Mat<'a, Buf>,
    pub targets: &'a Ids,
    /// Rows of logits a backend that chunks them may hold at once (at least 1).
    pub chunk_rows: usize,
    pub grad: Option<HeadXentGrad<'a, Buf>>,
}

impl<Buf: crate::DeviceBuf, Ids> HeadXent<'_, Buf, Ids> {
    /// Its GEMMs' work (the logits, and dW and dh with the backward), for the profile.
    pub fn work(&self) -> crate::profile::Work {
        let gemms = if self.grad.is_some() { 3.0 } else { 1.0 };
        let flops = 2.0 * (self.h.rows * self.w.rows * self.h.cols) as f64 * gemms;
        crate::profile::Work { flops, gemm: None }
    }
}

/// The backward of [`HeadXent`], from dL/dlogits = `scale·(softmax − onehot)`.
pub struct HeadXentGrad<'a, Buf> {
    pub scale: f64,
    /// dL/dh (t × d), overwritten.
    pub dh: MatMut<'a, Buf>,
    /// dL/dw (v × d), accumulated.
    pub dw: MatMut<'a, Buf>,
}

/// [`crate::Backend::kron_bwd`]: `dz += …`, `dka += …`, `dkb += …`.
pub struct KronBwd<'a, Buf> {
    pub dz: MatMut<'a, Buf>,
    pub dka: MatMut<'a, Buf>,
    pub dkb: MatMut<'a, Buf>,
    pub dy: Mat<'a, Buf>,
    pub z: Mat<'a, Buf>,
    pub ka: Mat<'a, Buf>,
    pub kb: Mat<'a, Buf>,
    /// 2·rows·a·b + 64·(a² + b²) elements.
    pub scratch: &'a mut Buf,
}

/// [`crate::Backend::adamw_all`]: one AdamW update of every parameter buffer of a model,
/// buffer i's first `lens[i].0` elements, with weight decay where `lens[i].1`.
pub struct AdamAll<'a, Buf> {
    pub p: &'a mut [Buf],
    pub g: &'a [Buf],
    pub m: &'a mut [Buf],
    pub v: &'a mut [Buf],
    pub lens: &'a [(usize, bool)],
    pub step: &'a AdamStep,
    /// Scale the gradients by the clip coefficient that the last
    /// [`crate::Backend::queue_grad_sumsq`] left on the device, instead of `step.grad_scale`.
    pub device_clip: bool,
    /// With `device_clip` after a norm the device's guard judged
    /// ([`crate::Backend::queue_grad_sumsq`] with a guard): the update obeys its verdict.
    pub guarded: Option<Guarded>,
}

/// [`AdamAll::guarded`]: how the device numbers an update whose predecessors it may have
/// skipped without the host knowing yet.
#[derive(Debug, Clone, Copy)]
pub struct Guarded {
    /// The update's number as the host counts it: applied updates it knows of, plus this one
    /// and the ones it queued since its last report.
    pub t: u64,
    /// Updates the device skipped that the host has seen (in step reports). The device
    /// numbers the update `t` less the skips not seen yet, so bias corrections count
    /// applied updates only.
    pub skips_seen: u64,
}

/// [`crate::Backend::adamw`]: one update of `n` elements from `off` (p, g, m, v aligned).
pub struct AdamUpdate<'a, Buf> {
    pub p: &'a mut Buf,
    pub g: &'a Buf,
    pub m: &'a mut Buf,
    pub v: &'a mut Buf,
    pub off: usize,
    pub n: usize,
    pub step: &'a AdamStep,
    pub decay: bool,
}
