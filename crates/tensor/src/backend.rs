//! The device seam. Model code is written once against [`Backend`] (kernels on device
//! buffers) and [`Collective`] (communication on device buffers); the CPU backend is
//! [`crate::cpu::Cpu`], a CUDA backend implements the same traits.

use crate::scalar::Scalar;
use crate::view::{DeviceBuf, Mat, MatMut};

/// Shape of a causal self-attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub seq: usize,
    /// Query heads held here.
    pub heads: usize,
    /// Key/value heads held here (divides `heads`).
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttnShape {
    pub fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }
    /// Elements of the q, k, v blocks together.
    pub fn qkv_len(&self) -> usize {
        self.tokens() * (self.q_width() + 2 * self.kv_width())
    }
    /// Elements of the saved softmax probabilities.
    pub fn probs_len(&self) -> usize {
        self.batch * self.heads * self.seq * self.seq
    }
}

/// One AdamW update's scalars.
#[derive(Debug, Clone, Copy)]
pub struct AdamStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// 1 − β1^t and 1 − β2^t.
    pub bias_corr1: f64,
    pub bias_corr2: f64,
    /// Multiplies the gradient first (clipping, loss scaling).
    pub grad_scale: f64,
}

/// Kernels on device buffers. Every kernel is deterministic: float reductions have a fixed
/// order that does not depend on thread count or timing.
pub trait Backend: Send + Sync + Sized + 'static {
    type Buf: DeviceBuf;
    /// Token ids on the device.
    type Ids: Send + Sync;

    fn name(&self) -> String;
    /// Bytes per stored element of an activation or parameter buffer.
    fn elem_bytes(&self) -> usize;

    // ---- memory ----
    /// A zero-filled buffer of `n` elements.
    fn alloc(&self, n: usize) -> Self::Buf;
    /// A zero-filled buffer for parameters (weights updated by [`Backend::adamw`]). A
    /// mixed-precision backend keeps fp32 master weights here plus a low-precision copy for
    /// its GEMMs.
    fn alloc_param(&self, n: usize) -> Self::Buf {
        self.alloc(n)
    }
    /// A zero-filled buffer for activations, which a mixed-precision backend may store in
    /// lower precision. Gradients, optimizer state and statistics use [`Backend::alloc`].
    fn alloc_act(&self, n: usize) -> Self::Buf {
        self.alloc(n)
    }
    /// Wait until every queued kernel has finished (for timers; kernels of an asynchronous
    /// device return before their work is done).
    fn sync(&self) {}
    fn alloc_ids(&self, n: usize) -> Self::Ids;
    fn write_ids(&self, dst: &mut Self::Ids, src: &[u32]);
    /// Copy a row-major host matrix into a view.
    fn write_mat<H: Scalar>(&self, dst: MatMut<Self::Buf>, src: &[H]);
    /// Copy a view out to a row-major host matrix.
    fn read_mat<H: Scalar>(&self, src: Mat<Self::Buf>) -> Vec<H>;

    // ---- dense algebra ----
    /// `c = alpha·op(a)·op(b)` (`+ c` when `accumulate`); `op` honours each view's `trans`.
    fn gemm(&self, c: MatMut<Self::Buf>, a: Mat<Self::Buf>, b: Mat<Self::Buf>, alpha: f64, accumulate: bool);
    fn fill(&self, x: MatMut<Self::Buf>, v: f64);
    fn copy(&self, dst: MatMut<Self::Buf>, src: Mat<Self::Buf>);
    /// `dst += alpha·src`.
    fn axpy(&self, dst: MatMut<Self::Buf>, src: Mat<Self::Buf>, alpha: f64);
    fn scale(&self, x: MatMut<Self::Buf>, s: f64);
    /// `x[i, :] *= row[i]` (row is rows×1).
    fn mul_rows(&self, x: MatMut<Self::Buf>, row: Mat<Self::Buf>);
    /// `y = x ⊙ col` broadcast over rows (col is 1×cols).
    fn mul_cols(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>, col: Mat<Self::Buf>);
    /// Σ of squares of every element, accumulated in f64.
    fn sumsq(&self, x: Mat<Self::Buf>) -> f64;
    /// Σ of every element, accumulated in f64.
    fn sum(&self, x: Mat<Self::Buf>) -> f64;

    // ---- RMSNorm building blocks (plain, and over a hidden-sharded input) ----
    /// `out[i] = Σ_j x[i,j]²` (out is rows×1).
    fn row_sumsq(&self, out: MatMut<Self::Buf>, x: Mat<Self::Buf>);
    /// In place: `s ← 1/√(s/n + eps)` (turns a sum of squares over n features into rstd).
    fn rstd_from_sumsq(&self, s: MatMut<Self::Buf>, n: usize, eps: f64);
    /// `y = x · rstd[i] · gamma[j]`.
    fn rmsnorm_apply(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>, gamma: Mat<Self::Buf>, rstd: Mat<Self::Buf>);
    /// `dot[i] = Σ_j dy·gamma·x` — the per-token sum RMSNorm's backward needs over all features.
    fn rmsnorm_bwd_dot(&self, dot: MatMut<Self::Buf>, dy: Mat<Self::Buf>, x: Mat<Self::Buf>, gamma: Mat<Self::Buf>);
    /// `dx (+)= rstd·gamma⊙dy − x·rstd³·dot/n`; `dgamma += Σ_i dy⊙x·rstd`.
    #[allow(clippy::too_many_arguments)]
    fn rmsnorm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dgamma: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        gamma: Mat<Self::Buf>,
        rstd: Mat<Self::Buf>,
        dot: Mat<Self::Buf>,
        n: usize,
        accumulate: bool,
    );
    /// `out[i] (+)= alpha · Σ_j a[i,j]·b[i,j] · row[i]²` (row optional) — the online norm's dS.
    #[allow(clippy::too_many_arguments)]
    fn row_dot(
        &self,
        out: MatMut<Self::Buf>,
        a: Mat<Self::Buf>,
        b: Mat<Self::Buf>,
        row: Option<Mat<Self::Buf>>,
        alpha: f64,
        accumulate: bool,
    );
    /// Online-norm backward over a shard: `dx (+)= gamma⊙g + 2·ds[i]·x`; `dgamma += Σ_i x⊙g`.
    #[allow(clippy::too_many_arguments)]
    fn online_norm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dgamma: MatMut<Self::Buf>,
        g: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        gamma: Mat<Self::Buf>,
        ds: Mat<Self::Buf>,
        accumulate: bool,
    );

    // ---- LayerNorm over the latent (LaX) ----
    /// `y = (x − mean)·rstd·w + b`; saves mean and rstd (rows×1 each).
    #[allow(clippy::too_many_arguments)]
    fn layernorm_fwd(
        &self,
        y: MatMut<Self::Buf>,
        mean: MatMut<Self::Buf>,
        rstd: MatMut<Self::Buf>,
        x: Mat<Self::Buf>,
        w: Mat<Self::Buf>,
        b: Mat<Self::Buf>,
        eps: f64,
    );
    /// Overwrites `dx`; accumulates `dw`, `db`.
    #[allow(clippy::too_many_arguments)]
    fn layernorm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dw: MatMut<Self::Buf>,
        db: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        w: Mat<Self::Buf>,
        mean: Mat<Self::Buf>,
        rstd: Mat<Self::Buf>,
    );

    // ---- activations ----
    fn silu(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>);
    /// In place: `d ← d ⊙ silu'(x)`.
    fn silu_bwd(&self, d: MatMut<Self::Buf>, x: Mat<Self::Buf>);
    /// `m = act(g) ⊙ u` with `gu` the rows of g stacked over the rows of u (2T × n);
    /// act = SiLU when `outer_silu`, else identity.
    fn swiglu(&self, m: MatMut<Self::Buf>, gu: Mat<Self::Buf>, outer_silu: bool);
    /// Overwrites `dgu` (stacked like `gu`).
    fn swiglu_bwd(&self, dgu: MatMut<Self::Buf>, dm: Mat<Self::Buf>, gu: Mat<Self::Buf>, outer_silu: bool);
    /// `y[i, :] += b`.
    fn add_bias(&self, y: MatMut<Self::Buf>, b: Mat<Self::Buf>);
    /// `db += Σ_i dy[i, :]`.
    fn bias_grad(&self, db: MatMut<Self::Buf>, dy: Mat<Self::Buf>);

    // ---- rotary embedding and attention ----
    /// cos/sin table for positions 0..seq (seq × head_dim/2 each, cos first).
    fn rope_table(&self, seq: usize, head_dim: usize, theta: f64) -> Self::Buf;
    /// Rotate every head of every row in place (position = row mod seq); `inverse` undoes it
    /// (the backward of a rotation is its inverse).
    fn rope(&self, x: MatMut<Self::Buf>, table: &Self::Buf, seq: usize, head_dim: usize, inverse: bool);
    /// Causal softmax attention; saves the probabilities. `qkv` holds three row-major
    /// blocks one after the other: q (`T × heads·d_h`), k and v (`T × kv_heads·d_h` each).
    fn attention_fwd(&self, out: MatMut<Self::Buf>, probs: &mut Self::Buf, qkv: &Self::Buf, shape: AttnShape);
    /// Overwrites `dqkv` (laid out like `qkv`); `scratch` holds `probs_len` elements.
    fn attention_bwd(
        &self,
        dqkv: &mut Self::Buf,
        dout: Mat<Self::Buf>,
        probs: &Self::Buf,
        scratch: &mut Self::Buf,
        qkv: &Self::Buf,
        shape: AttnShape,
    );

    // ---- embedding and loss ----
    /// `out[i] = table[ids[i] − first]` for ids in `first..first+table.rows`, zero otherwise.
    fn embed(&self, out: MatMut<Self::Buf>, table: Mat<Self::Buf>, ids: &Self::Ids, first: usize);
    /// `dtable[ids[i] − first] += dout[i]` for ids in range.
    fn embed_bwd(&self, dtable: MatMut<Self::Buf>, dout: Mat<Self::Buf>, ids: &Self::Ids, first: usize);
    /// Per-token cross-entropy into `losses` (rows×1; 0 for ignored targets `u32::MAX`).
    /// With `grad_scale`, `logits` is overwritten by `grad_scale·(softmax − onehot)`;
    /// without, it is left unchanged.
    fn cross_entropy(
        &self,
        losses: MatMut<Self::Buf>,
        logits: MatMut<Self::Buf>,
        targets: &Self::Ids,
        grad_scale: Option<f64>,
    );

    // ---- vocabulary-parallel cross-entropy (logits split by columns across ranks) ----
    /// `max[i] = max_j logits[i, j]` over this rank's columns.
    fn row_max(&self, max: MatMut<Self::Buf>, logits: Mat<Self::Buf>);
    /// With the global row max: `stats[i] = [Σ_j exp(logits[i,j] − max[i]), logits[i, t − first]]`
    /// (the target logit is 0 when target t is not among this rank's columns).
    fn xent_partials(
        &self,
        stats: MatMut<Self::Buf>,
        logits: Mat<Self::Buf>,
        max: Mat<Self::Buf>,
        targets: &Self::Ids,
        first: usize,
    );
    /// With the global statistics: `losses[i] = ln S_i + max_i − target logit` (0 for ignored
    /// targets); with `grad_scale`, `logits` becomes `grad_scale·(softmax − onehot)`.
    #[allow(clippy::too_many_arguments)]
    fn xent_finish(
        &self,
        losses: MatMut<Self::Buf>,
        logits: MatMut<Self::Buf>,
        max: Mat<Self::Buf>,
        stats: Mat<Self::Buf>,
        targets: &Self::Ids,
        first: usize,
        grad_scale: Option<f64>,
    );

    // ---- LaX Kronecker gate: per row, Z (a×b) ↦ Kaᵀ·Z·Kb ----
    /// `y (+)= kron(ka, kb)` applied to every row of `z`; `scratch` holds rows·a·b elements.
    #[allow(clippy::too_many_arguments)]
    fn kron_fwd(
        &self,
        y: MatMut<Self::Buf>,
        z: Mat<Self::Buf>,
        ka: Mat<Self::Buf>,
        kb: Mat<Self::Buf>,
        scratch: &mut Self::Buf,
        accumulate: bool,
    );
    /// `dz += …`, `dka += …`, `dkb += …`; `scratch` holds 2·rows·a·b + 64·(a² + b²) elements.
    #[allow(clippy::too_many_arguments)]
    fn kron_bwd(
        &self,
        dz: MatMut<Self::Buf>,
        dka: MatMut<Self::Buf>,
        dkb: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        z: Mat<Self::Buf>,
        ka: Mat<Self::Buf>,
        kb: Mat<Self::Buf>,
        scratch: &mut Self::Buf,
    );

    // ---- optimizer ----
    /// AdamW with decoupled weight decay over `n` elements from `off` (p, g, m, v aligned).
    #[allow(clippy::too_many_arguments)]
    fn adamw(
        &self,
        p: &mut Self::Buf,
        g: &Self::Buf,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        off: usize,
        n: usize,
        step: &AdamStep,
        decay: bool,
    );
}

/// The operation a reduction applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// Which layer and operation issued a collective (kept allocation-free for the recorder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label {
    pub op: &'static str,
    pub layer: Option<u32>,
}

impl Label {
    pub const fn op(op: &'static str) -> Self {
        Self { op, layer: None }
    }
    pub const fn layer(op: &'static str, layer: usize) -> Self {
        Self { op, layer: Some(layer as u32) }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(l) => write!(f, "layer{l}.{}", self.op),
            None => write!(f, "{}", self.op),
        }
    }
}

/// Collectives over one group of ranks, on device buffers. Ranges are contiguous element
/// ranges of a buffer. Every rank of the group must call the same collectives in the same
/// order with the same sizes.
pub trait Collective<B: Backend>: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Reduce `buf[off..off+n]` over the group; every rank gets the same bits.
    fn all_reduce(&self, buf: &mut B::Buf, off: usize, n: usize, op: ReduceOp, label: Label);
    /// `buf[off..off+size·n]`: rank i contributes its chunk `i·n..(i+1)·n`; all get all chunks.
    fn all_gather(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label);
    /// `buf[off..off+size·n]` is summed over the group; afterwards chunk `rank` of the range
    /// (elements `off+rank·n..off+(rank+1)·n`) holds this rank's part of the sum; the other
    /// chunks are unspecified.
    fn reduce_scatter(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label);
    fn broadcast(&self, buf: &mut B::Buf, off: usize, n: usize, root: usize, label: Label);
    fn send(&self, buf: &B::Buf, off: usize, n: usize, to: usize, label: Label);
    fn recv(&self, buf: &mut B::Buf, off: usize, n: usize, from: usize, label: Label);
    fn barrier(&self);
}

/// The group of one rank: every collective is the identity and costs nothing.
pub struct Solo;

impl<B: Backend> Collective<B> for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce(&self, _: &mut B::Buf, _: usize, _: usize, _: ReduceOp, _: Label) {}
    fn all_gather(&self, _: &mut B::Buf, _: usize, _: usize, _: Label) {}
    fn reduce_scatter(&self, _: &mut B::Buf, _: usize, _: usize, _: Label) {}
    fn broadcast(&self, _: &mut B::Buf, _: usize, _: usize, _: usize, _: Label) {}
    fn send(&self, _: &B::Buf, _: usize, _: usize, _: usize, _: Label) {
        panic!("send within a group of one rank")
    }
    fn recv(&self, _: &mut B::Buf, _: usize, _: usize, _: usize, _: Label) {
        panic!("recv within a group of one rank")
    }
    fn barrier(&self) {}
}
