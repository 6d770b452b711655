//! How results are compared with a reference: ‖a − b‖ / ‖b‖ and max |a − b| / max |b|, the
//! second catching a few wrong elements that the norm would average away.

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
    let (rel, elem) = errors(a, b);
    assert!(
        rel <= tol && elem <= tol,
        "{what}: ‖a−b‖/‖b‖ = {rel:.2e}, max|a−b|/max|b| = {elem:.2e} (tolerance {tol:.0e})"
    );
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
}

impl Tol {
    /// One bound for everything, on both measures.
    pub const fn uniform(tol: f64) -> Self {
        Self { out: tol, tensor: tol, per_tensor_norm: false, all: tol }
    }

    /// Check one parameter gradient.
    pub fn check_tensor(&self, what: &str, a: &[f64], b: &[f64]) {
        if self.per_tensor_norm {
            let (rel, _) = errors(a, b);
            assert!(rel <= self.tensor, "{what}: ‖a−b‖/‖b‖ = {rel:.2e} (tolerance {:.0e})", self.tensor);
        } else {
            assert_close(what, a, b, self.tensor);
        }
    }
}
