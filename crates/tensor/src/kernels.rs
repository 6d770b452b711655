//! The kernel table: every kernel of [`crate::Backend`] declared once, with its operands, its
//! timing category and its documentation. Macros expand it into the trait and its impls.

/// Calls `$callback! { { $extra } <entries> }` with one entry per kernel:
///
/// ```text
/// /// docs
/// [Category] fn name(param: Type, …) -> Return;
/// [Gemm, flops = expr] fn gemm(…);
/// ```
///
/// The category (`Gemm`, `Attention`, `Other`, `Untimed`) is where
/// [`crate::profile::Profiled`] books the kernel's time; `flops` (a [`crate::profile::Work`])
/// is counted per call.
/// Types name `Mat`, `MatMut`, `AttnShape` and `AdamStep`, which must be in scope where an
/// impl is generated; a kernel with many operands takes one struct of [`crate::args`]. A new
/// kernel is an entry here and a function of its name in each backend's `ops` module (the CPU
/// backend's here, boost-cuda's).
#[macro_export]
macro_rules! kernel_table {
    ($($callback:ident)::+ { $($extra:tt)* }) => {
        $($callback)::+! { { $($extra)* }
            // ---- dense algebra ----
            /// `c = alpha·op(a)·op(b)` (`+ c` when `accumulate`); `op` honours each view's `trans`.
            [Gemm, flops = $crate::profile::gemm_work(&a, &b, accumulate)]
            fn gemm(c: MatMut<Self::Buf>, a: Mat<Self::Buf>, b: Mat<Self::Buf>, alpha: f64, accumulate: bool);
            [Other] fn fill(x: MatMut<Self::Buf>, v: f64);
            [Other] fn copy(dst: MatMut<Self::Buf>, src: Mat<Self::Buf>);
            /// `dst += alpha·src`.
            [Other] fn axpy(dst: MatMut<Self::Buf>, src: Mat<Self::Buf>, alpha: f64);
            [Other] fn scale(x: MatMut<Self::Buf>, s: f64);
            /// `x[i, :] *= row[i]` (row is rows×1).
            [Other] fn mul_rows(x: MatMut<Self::Buf>, row: Mat<Self::Buf>);
            /// `y = x ⊙ col` broadcast over rows (col is 1×cols).
            [Other] fn mul_cols(y: MatMut<Self::Buf>, x: Mat<Self::Buf>, col: Mat<Self::Buf>);
            /// Σ of squares of every element, accumulated in f64.
            [Other] fn sumsq(x: Mat<Self::Buf>) -> f64;
            /// Σ of every element, accumulated in f64.
            [Other] fn sum(x: Mat<Self::Buf>) -> f64;
            /// `out[i] = sumsq(xs[i])`, the same values: a device reads them back once for all
            /// (the gradient norm's many buffers) instead of once per view.
            [Other] fn sumsq_each(xs: &[Mat<Self::Buf>], out: &mut [f64]);

            // ---- RMSNorm building blocks (plain, and over a hidden-sharded input) ----
            /// `out[i] = Σ_j x[i,j]²` (out is rows×1).
            [Other] fn row_sumsq(out: MatMut<Self::Buf>, x: Mat<Self::Buf>);
            /// In place: `s ← 1/√(s/n + eps)` (turns a sum of squares over n features into rstd).
            [Other] fn rstd_from_sumsq(s: MatMut<Self::Buf>, n: usize, eps: f64);
            /// `y = x · rstd[i] · gamma[j]`.
            [Other] fn rmsnorm_apply(
                y: MatMut<Self::Buf>,
                x: Mat<Self::Buf>,
                gamma: Mat<Self::Buf>,
                rstd: Mat<Self::Buf>,
            );
            /// `dot[i] = Σ_j dy·gamma·x` — the per-token sum RMSNorm's backward needs over all features.
            [Other] fn rmsnorm_bwd_dot(
                dot: MatMut<Self::Buf>,
                dy: Mat<Self::Buf>,
                x: Mat<Self::Buf>,
                gamma: Mat<Self::Buf>,
            );
            /// `dx (+)= rstd·gamma⊙dy − x·rstd³·dot/n`; `dgamma += Σ_i dy⊙x·rstd`.
            [Other] fn rmsnorm_bwd(args: $crate::args::RmsNormBwd<Self::Buf>);
            /// The residual add and the next RMSNorm over whole rows (see the struct): on the CPU,
            /// [`axpy`](Self::axpy), [`row_sumsq`](Self::row_sumsq),
            /// [`rstd_from_sumsq`](Self::rstd_from_sumsq) and [`rmsnorm_apply`](Self::rmsnorm_apply).
            [Other] fn residual_rmsnorm(args: $crate::args::ResidualRmsNorm<Self::Buf>);
            /// `x += r`, then `out[i] = Σ_j x[i,j]²` (out is rows×1): the residual add and the
            /// statistic of a norm over a shard, which is finished elsewhere; on the CPU,
            /// [`axpy`](Self::axpy) then [`row_sumsq`](Self::row_sumsq).
            [Other] fn residual_sumsq(x: MatMut<Self::Buf>, r: Mat<Self::Buf>, out: MatMut<Self::Buf>);
            /// RMSNorm's backward over whole rows, the dot included: on the CPU,
            /// [`rmsnorm_bwd_dot`](Self::rmsnorm_bwd_dot) then [`rmsnorm_bwd`](Self::rmsnorm_bwd).
            [Other] fn rmsnorm_bwd_rows(args: $crate::args::RmsNormBwdRows<Self::Buf>);
            /// `out[i] (+)= alpha · Σ_j a[i,j]·b[i,j] · row[i]²` (row optional) — the online norm's dS.
            [Other] fn row_dot(
                out: MatMut<Self::Buf>,
                a: Mat<Self::Buf>,
                b: Mat<Self::Buf>,
                row: Option<Mat<Self::Buf>>,
                alpha: f64,
                accumulate: bool,
            );
            /// [`row_dot`](Self::row_dot)'s dS and [`mul_rows`](Self::mul_rows)' rstd after
            /// [`silu_bwd`](Self::silu_bwd), in one pass over the latent and the same arithmetic.
            [Other] fn silu_norm_bwd(args: $crate::args::SiluNormBwd<Self::Buf>);
            /// Online-norm backward over a shard: `dx (+)= gamma⊙g + 2·ds[i]·x`; `dgamma += Σ_i x⊙g`.
            [Other] fn online_norm_bwd(args: $crate::args::OnlineNormBwd<Self::Buf>);

            // ---- LayerNorm over the latent (LaX) ----
            /// `y = (x − mean)·rstd·w + b`; saves mean and rstd (rows×1 each).
            [Other] fn layernorm_fwd(args: $crate::args::LayerNormFwd<Self::Buf>);
            /// Overwrites `dx`; accumulates `dw`, `db`.
            [Other] fn layernorm_bwd(args: $crate::args::LayerNormBwd<Self::Buf>);

            // ---- activations ----
            [Other] fn silu(y: MatMut<Self::Buf>, x: Mat<Self::Buf>);
            /// In place: `d ← d ⊙ silu'(x)`.
            [Other] fn silu_bwd(d: MatMut<Self::Buf>, x: Mat<Self::Buf>);
            /// `m = act(g) ⊙ u` with `gu` the rows of g stacked over the rows of u (2T × n);
            /// act = SiLU when `outer_silu`, else identity.
            [Other] fn swiglu(m: MatMut<Self::Buf>, gu: Mat<Self::Buf>, outer_silu: bool);
            /// Overwrites `dgu` (stacked like `gu`) from `dm`. With `rebuild`, then overwrites
            /// `dm`, row by row once read, with the forward's product m, the bits
            /// [`swiglu`](Self::swiglu) gives: a backward that rebuilds the product rather than
            /// keeping it, in lines it has just read.
            [Other] fn swiglu_bwd(
                dgu: MatMut<Self::Buf>,
                dm: MatMut<Self::Buf>,
                gu: Mat<Self::Buf>,
                outer_silu: bool,
                rebuild: bool,
            );
            /// `y[i, :] += b`.
            [Other] fn add_bias(y: MatMut<Self::Buf>, b: Mat<Self::Buf>);
            /// `db += Σ_i dy[i, :]`.
            [Other] fn bias_grad(db: MatMut<Self::Buf>, dy: Mat<Self::Buf>);

            // ---- rotary embedding and attention ----
            /// cos/sin table for positions 0..seq (seq × head_dim/2 each, cos first), one column per
            /// pair's inverse frequency ([`crate::rope::rope_inv_freq`]).
            [Untimed] fn rope_table(seq: usize, inv_freq: &[f64]) -> Self::Buf;
            /// Rotate every head of every row in place (position = row mod seq); `inverse` undoes it
            /// (the backward of a rotation is its inverse).
            [Other] fn rope(x: MatMut<Self::Buf>, table: &Self::Buf, seq: usize, head_dim: usize, inverse: bool);
            /// [`rope`](Self::rope) on q and on k of a `qkv` block laid out as attention reads it
            /// (q: `tokens × q_width` first, k: `tokens × kv_width` after it), in one pass.
            [Other] fn rope_qk(qkv: &mut Self::Buf, table: &Self::Buf, shape: AttnShape, inverse: bool);
            /// Causal softmax attention. `qkv` holds three row-major blocks one after the other:
            /// q (`T × heads·d_h`), k and v (`T × kv_heads·d_h` each). `probs` receives what the
            /// backward needs, `attention_saved_len` elements: each row's log-sum-exp, from which
            /// the backward recomputes the probabilities (or, for CUDA heads wider than 128, the
            /// probabilities themselves).
            [Attention] fn attention_fwd(
                out: MatMut<Self::Buf>,
                probs: &mut Self::Buf,
                qkv: &Self::Buf,
                shape: AttnShape,
            );
            /// The gradient of `qkv` from that of the output (see the struct).
            [Attention] fn attention_bwd(args: $crate::args::AttentionBwd<Self::Buf>);

            // ---- embedding and loss ----
            /// `out[i] = table[ids[i] − first]` for ids in `first..first+table.rows`, zero otherwise.
            [Other] fn embed(out: MatMut<Self::Buf>, table: Mat<Self::Buf>, ids: &Self::Ids, first: usize);
            /// `dtable[ids[i] − first] += dout[i]` for ids in range.
            [Other] fn embed_bwd(dtable: MatMut<Self::Buf>, dout: Mat<Self::Buf>, ids: &Self::Ids, first: usize);
            /// Per-token cross-entropy into `losses` (rows×1; 0 for ignored targets `u32::MAX`).
            /// With `grad_scale`, `logits` is overwritten by `grad_scale·(softmax − onehot)`;
            /// without, it is left unchanged.
            [Other] fn cross_entropy(
                losses: MatMut<Self::Buf>,
                logits: MatMut<Self::Buf>,
                targets: &Self::Ids,
                grad_scale: Option<f64>,
            );

            /// The LM head and its cross-entropy in one call (see the struct): a device backend
            /// holds `chunk_rows` rows of logits at a time, never the whole t × v; the CPU runs
            /// the unfused sequence (GEMM, [`cross_entropy`](Self::cross_entropy), the two GEMMs
            /// of the backward).
            [Gemm, flops = args.work()]
            fn head_xent(args: $crate::args::HeadXent<Self::Buf, Self::Ids>);

            // ---- vocabulary-parallel cross-entropy (logits split by columns across ranks) ----
            /// `max[i] = max_j logits[i, j]` over this rank's columns.
            [Other] fn row_max(max: MatMut<Self::Buf>, logits: Mat<Self::Buf>);
            /// With the global row max: `stats[i] = [Σ_j exp(logits[i,j] − max[i]), logits[i, t − first]]`
            /// (the target logit is 0 when target t is not among this rank's columns).
            [Other] fn xent_partials(
                stats: MatMut<Self::Buf>,
                logits: Mat<Self::Buf>,
                max: Mat<Self::Buf>,
                targets: &Self::Ids,
                first: usize,
            );
            /// With the global statistics: `losses[i] = ln S_i + max_i − target logit` (0 for ignored
            /// targets); with `grad_scale`, `logits` becomes `grad_scale·(softmax − onehot)`.
            [Other] fn xent_finish(args: $crate::args::XentFinish<Self::Buf, Self::Ids>);

            // ---- LaX Kronecker gate: per row, Z (a×b) ↦ Kaᵀ·Z·Kb ----
            /// `y (+)= kron(ka, kb)` applied to every row of `z`; `scratch` holds rows·a·b elements.
            [Other] fn kron_fwd(
                y: MatMut<Self::Buf>,
                z: Mat<Self::Buf>,
                ka: Mat<Self::Buf>,
                kb: Mat<Self::Buf>,
                scratch: &mut Self::Buf,
                accumulate: bool,
            );
            /// `dz += …`, `dka += …`, `dkb += …`; `scratch` holds 2·rows·a·b + 64·(a² + b²) elements.
            [Other] fn kron_bwd(args: $crate::args::KronBwd<Self::Buf>);

            // ---- optimizer ----
            /// AdamW with decoupled weight decay over `n` elements from `off` (p, g, m, v aligned).
            [Other] fn adamw(args: $crate::args::AdamUpdate<Self::Buf>);
        }
    };
}

/// A `Backend` impl's kernels, each calling the function of the same name in module `$ops`
/// with the same operands (`{ $ops }`), or with the backend first (`{ self, $ops }`).
/// Used inside `impl Backend for …` as `kernel_table!(forward_kernels { ops })`.
#[macro_export]
macro_rules! forward_kernels {
    ({ self, $($ops:ident)::+ } $($entries:tt)*) => {
        $crate::forward_kernels! { @each [$($ops)::+] [self] $($entries)* }
    };
    ({ $($ops:ident)::+ } $($entries:tt)*) => {
        $crate::forward_kernels! { @each [$($ops)::+] [] $($entries)* }
    };
    (@each $ops:tt $with:tt $(
        $(#[$attr:meta])*
        [$cat:ident $(, flops = $flops:expr)?]
        fn $name:ident($($p:ident: $t:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        $( $crate::forward_kernels! { @one $ops $with $cat $name($($p: $t),*) $(-> $ret)? } )*
    };
    // A host backend's kernel has run when it returns: its GEMMs and attention are traced
    // here (`crate::trace::kernel`, one relaxed load when tracing is off).
    (@one [$($ops:ident)::+] [] $cat:ident $name:ident($($p:ident: $t:ty),*) $(-> $ret:ty)?) => {
        fn $name(&self, $($p: $t),*) $(-> $ret)? {
            $crate::trace::kernel(stringify!($cat), stringify!($name), || $($ops)::+::$name($($p),*))
        }
    };
    // A device backend's kernel is only queued when it returns: not traced from the host.
    (@one [$($ops:ident)::+] [self] $cat:ident $name:ident($($p:ident: $t:ty),*) $(-> $ret:ty)?) => {
        fn $name(&self, $($p: $t),*) $(-> $ret)? {
            $($ops)::+::$name(self, $($p),*)
        }
    };
}
