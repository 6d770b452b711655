//! How results are compared with a reference: ‖a − b‖ / ‖b‖ and max |a − b| / max |b|, the
//! second catching a few wrong elements that the norm would average away.

use boost_config::{Arch, LaxGate, ModelConfig, Phi};

/// ‖a − b‖ / ‖b‖ and max |a − b| / max |b|.
pub fn errors(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    let maxd = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    let maxb = b.iter().fold(0.0f64, |m, y| m.max(y.abs()));
    (diff / norm.max(1e-300), maxd / maxb.max(1e-300))
}

/// Assert both error measures are within `tol`.
pub fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    assert_within(what, a, b, tol, tol);
}

/// Assert ‖a − b‖ / ‖b‖ ≤ `norm` and max |a − b| / max |b| ≤ `elem`.
pub fn assert_within(what: &str, a: &[f64], b: &[f64], norm: f64, elem: f64) {
    let (rel, worst) = errors(a, b);
    assert!(
        rel <= norm && worst <= elem,
        "{what}: ‖a−b‖/‖b‖ = {rel:.2e} (tolerance {norm:.1e}), max|a−b|/max|b| = {worst:.2e} (tolerance {elem:.1e})"
    );
}

/// bf16's unit roundoff: 8 significant bits, rounded to nearest (2⁻⁸ relative spacing).
pub const BF16_UNIT_ROUNDOFF: f64 = 1.0 / 512.0;

/// Roundings to bf16 on a value's longest path through the mixed-precision engine's forward,
/// from the embedding to the logits. Per layer: 8 outside the projections (the two norm
/// outputs, the q/k/v and gate/up GEMM outputs, RoPE in place, the probabilities fed to P·V
/// and the attention output, the SwiGLU product; the o and down sums land in the fp32
/// residual); per projection group a full-rank weight's copy (1) or a low-rank group's A
/// copy, latent, φ's output where φ is SiLU and B copy (3 or 4); a LaX crossing layer
/// adds, per group, the crossing value, its LN output and its gate (a dense gate's copy 1;
/// a Kronecker gate's two factor copies and its intermediate, 3, plus 1 for the product).
/// The head adds its input and its weight's copy.
pub fn bf16_forward_roundings(cfg: &ModelConfig) -> usize {
    let low_rank = cfg.arch != Arch::Full;
    let group = if !low_rank {
        1
    } else if cfg.phi() == Phi::Silu {
        4
    } else {
        3
    };
    let crossing = 2 + if cfg.lax.gate == LaxGate::Kron { 4 } else { 1 };
    let layer = |l: usize| 8 + 4 * group + if cfg.arch == Arch::Lax && l > 0 { 4 * crossing } else { 0 };
    (0..cfg.layers).map(layer).sum::<usize>() + 2
}

/// Tolerances of a model run against its reference.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    /// Logits and loss, both measures.
    pub out: f64,
    /// Each gradient tensor, the embedding output's included.
    pub tensor: f64,
    /// Parameter gradients checked on ‖a − b‖ / ‖b‖ only: under bf16 GEMMs a few elements of
    /// a gradient that is a sum with cancellation may be far off while the tensor is right.
    pub per_tensor_norm: bool,
    /// All parameter gradients as one vector, both measures.
    pub all: f64,
    /// The element-wise measure's bound over the norm-wise one (1: the same bound).
    pub elem_scale: f64,
}

/// How close the runs of a suite must come to their reference: fixed tolerances, or bf16's
/// derived for each model the suite runs.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    Fixed(Tol),
    /// [`Tol::bf16`] for each model (at most 10⁶ values a vector), against an fp32 or f64
    /// reference (`sides` 1), or between two mixed-precision runs whose rounding errors are
    /// independent (`sides` 2: √2 times as wide).
    Bf16 {
        sides: u32,
    },
}

impl Bound {
    /// The tolerances for parameter `name` of `cfg`: [`Bound::tol`] with the gradient's own
    /// reduction. A Kronecker gate's factor sums over the tokens and over the other factor's
    /// block (b² terms a token for A, a² for B), every other weight over the tokens alone.
    pub fn tensor_tol(&self, cfg: &ModelConfig, tokens: usize, name: &str) -> Tol {
        let (a, b) = cfg.kron_factors();
        let per_token = if name.ends_with("lax_gate.kron_a") {
            b * b
        } else if name.ends_with("lax_gate.kron_b") {
            a * a
        } else {
            1
        };
        self.tol(cfg, tokens * per_token)
    }

    /// The tolerances for `cfg` with weight gradients summed over `tokens` tokens.
    pub fn tol(&self, cfg: &ModelConfig, tokens: usize) -> Tol {
        match *self {
            Bound::Fixed(t) => t,
            Bound::Bf16 { sides } => {
                let t = Tol::bf16(bf16_forward_roundings(cfg), tokens, 1_000_000);
                let k = (sides as f64).sqrt();
                Tol { out: t.out * k, tensor: t.tensor * k, all: t.all * k, ..t }
            }
        }
    }
}

impl From<f64> for Bound {
    fn from(tol: f64) -> Self {
        Bound::Fixed(Tol::uniform(tol))
    }
}

impl Tol {
    /// One bound for everything, on both measures.
    pub const fn uniform(tol: f64) -> Self {
        Self { out: tol, tensor: tol, per_tensor_norm: false, all: tol, elem_scale: 1.0 }
    }

    /// Mixed precision (bf16 storage and GEMM operands, fp32 accumulation) against an fp32 or
    /// f64 reference: a forward of `n_f` roundings ([`bf16_forward_roundings`]), weight
    /// gradients summed over `tokens` tokens, at most `elements` values in a compared vector.
    /// Derived from bf16's precision, not from what a run measured:
    /// - A value that met n independent roundings of unit roundoff u carries a relative error
    ///   of standard deviation σ(n) = u·√(n/3) (each rounding uniform in ±u, first order;
    ///   fp32 accumulation adds k·2⁻²⁴, negligible for the reductions here).
    /// - The outputs meet the forward's n_f roundings; a gradient meets those and twice as
    ///   many on its way back (each forward GEMM has two backward GEMMs, their operands and
    ///   the stored gradients rounded alike): 3·n_f.
    /// - A norm over many elements averages the errors: ‖a−b‖/‖b‖ ≤ 3σ. The largest of N
    ///   element errors, each of deviation σ relative to its value (so at most σ·max|b|), is
    ///   below σ·√(2·ln(2N/δ)) but with probability δ = 10⁻⁶ (the Gaussian tail).
    /// - A weight gradient is a sum over the tokens whose terms differ in sign: cancellation
    ///   grows its relative error by up to √tokens (terms of random sign) against the whole
    ///   gradient vector, where the large, well-conditioned tensors dominate.
    pub fn bf16(n_f: usize, tokens: usize, elements: usize) -> Self {
        let u = BF16_UNIT_ROUNDOFF;
        let n_f = n_f as f64;
        let sigma = |n: f64| u * (n / 3.0).sqrt();
        let tail = (2.0 * (2.0 * elements as f64 / 1e-6).ln()).sqrt();
        let all = 3.0 * sigma(3.0 * n_f);
        Self {
            out: 3.0 * sigma(n_f),
            tensor: all * (tokens as f64).sqrt(),
            per_tensor_norm: false,
            all,
            elem_scale: tail / 3.0,
        }
    }

    /// Assert the outputs' measures: norm-wise within `out`, element-wise `elem_scale` times.
    pub fn check_out(&self, what: &str, a: &[f64], b: &[f64]) {
        assert_within(what, a, b, self.out, self.out * self.elem_scale);
    }

    /// Assert all gradients as one vector (both measures, the element-wise one scaled).
    pub fn check_all(&self, what: &str, a: &[f64], b: &[f64]) {
        assert_within(what, a, b, self.all, self.all * self.elem_scale);
    }

    /// Check one parameter gradient.
    pub fn check_tensor(&self, what: &str, a: &[f64], b: &[f64]) {
        if self.per_tensor_norm {
            let (rel, _) = errors(a, b);
            assert!(rel <= self.tensor, "{what}: ‖a−b‖/‖b‖ = {rel:.2e} (tolerance {:.0e})", self.tensor);
        } else {
            assert_within(what, a, b, self.tensor, self.tensor * self.elem_scale);
        }
    }
}
