//! The truncated SVD that starts a low-rank projection from a dense weight: Wᵀ ≈ A·B with
//! A = U_r·√Σ_r (d_in × r) and B = √Σ_r·V_rᵀ (r × d_out), the singular values split evenly
//! between the two factors (faer's thin SVD, in f64).

use anyhow::{Result, anyhow};
use faer::Mat;

/// The factors of a rank-`r` approximation of Wᵀ, row-major, and the retained spectral energy
/// Σ_{i<r} σᵢ² / Σ σᵢ².
pub struct Factors {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub energy: f64,
}

/// Factor `w` (Hugging Face orientation: `d_out × d_in`, row-major) at rank `r`.
pub fn factor(w: &[f32], d_out: usize, d_in: usize, r: usize) -> Result<Factors> {
    let wt = Mat::<f64>::from_fn(d_in, d_out, |i, j| w[j * d_in + i] as f64);
    let svd = wt.thin_svd().map_err(|e| anyhow!("the SVD of a {d_out}×{d_in} weight did not converge: {e:?}"))?;
    let (u, s, v) = (svd.U(), svd.S().column_vector(), svd.V());
    let k = s.nrows();
    let total: f64 = (0..k).map(|i| s[i] * s[i]).sum();
    let kept: f64 = (0..r.min(k)).map(|i| s[i] * s[i]).sum();
    let root = |i: usize| if i < k { s[i].max(0.0).sqrt() } else { 0.0 };
    let mut a = vec![0.0f32; d_in * r];
    for row in 0..d_in {
        for c in 0..r.min(k) {
            a[row * r + c] = (u[(row, c)] * root(c)) as f32;
        }
    }
    let mut b = vec![0.0f32; r * d_out];
    for c in 0..r.min(k) {
        for col in 0..d_out {
            b[c * d_out + col] = (root(c) * v[(col, c)]) as f32;
        }
    }
    Ok(Factors { a, b, energy: if total > 0.0 { kept / total } else { 1.0 } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_rank_reproduces_the_weight_and_truncation_reports_energy() {
        let (d_out, d_in) = (5, 4);
        let w: Vec<f32> = (0..d_out * d_in).map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0).collect();
        let f = factor(&w, d_out, d_in, 4).unwrap();
        for i in 0..d_in {
            for j in 0..d_out {
                let ab: f32 = (0..4).map(|c| f.a[i * 4 + c] * f.b[c * d_out + j]).sum();
                assert!((ab - w[j * d_in + i]).abs() < 1e-5, "({i},{j}): {ab} vs {}", w[j * d_in + i]);
            }
        }
        assert!((f.energy - 1.0).abs() < 1e-12);
        let g = factor(&w, d_out, d_in, 1).unwrap();
        assert!(g.energy > 0.0 && g.energy < 1.0, "{}", g.energy);
    }
}
