//! One AdamW step against its formula.

use crate::{CPU, rnd};
use boost_tensor::AdamUpdate;
use boost_tensor::{AdamStep, Backend};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn adamw_step() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let p0 = rnd(&mut rng, 10, 1.0);
    let g = rnd(&mut rng, 10, 1.0);
    let (mut p, mut m, mut v) = (p0.clone(), vec![0.1; 10], vec![0.2; 10]);
    let s = AdamStep {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
        bias_corr1: 0.5,
        bias_corr2: 0.3,
        grad_scale: 0.5,
    };
    CPU.adamw(AdamUpdate { p: &mut p, g: &g, m: &mut m, v: &mut v, off: 0, n: 10, step: &s, decay: true });
    for i in 0..10 {
        let gi = g[i] * 0.5;
        let mi = 0.9 * 0.1 + 0.1 * gi;
        let vi = 0.99 * 0.2 + 0.01 * gi * gi;
        let want = p0[i] * (1.0 - 0.01 * 0.1) - 0.01 / 0.5 * mi / (vi.sqrt() / 0.3f64.sqrt() + 1e-8);
        assert!((p[i] - want).abs() < 1e-15 && (m[i] - mi).abs() < 1e-15 && (v[i] - vi).abs() < 1e-15);
    }
}
