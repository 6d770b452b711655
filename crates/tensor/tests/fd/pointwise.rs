//! SiLU, SwiGLU and the bias add.

use crate::{CPU, check, dot, mat, mat_mut, rnd};
use boost_tensor::Backend;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn silu_and_swiglu() {
    let (t, n) = (3, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let x = rnd(&mut rng, t * n, 3.0);
    let w = rnd(&mut rng, t * n, 1.0);
    let f = |x: &[f64]| {
        let mut y = vec![0.0; t * n];
        CPU.silu(mat_mut(&mut y, t, n), mat(&x.to_vec(), t, n));
        dot(&y, &w)
    };
    let mut d = w.clone();
    CPU.silu_bwd(mat_mut(&mut d, t, n), mat(&x, t, n));
    check("silu", &x, &d, f);

    for outer in [true, false] {
        let gu = rnd(&mut rng, t * 2 * n, 2.0);
        let f = |p: &[f64]| {
            let mut m = vec![0.0; t * n];
            CPU.swiglu(mat_mut(&mut m, t, n), mat(&p.to_vec(), 2 * t, n), outer);
            dot(&m, &w)
        };
        let (mut dgu, mut dm) = (vec![0.0; t * 2 * n], w.clone());
        CPU.swiglu_bwd(mat_mut(&mut dgu, 2 * t, n), mat_mut(&mut dm, t, n), mat(&gu, 2 * t, n), outer, false);
        check(if outer { "swiglu" } else { "gated product" }, &gu, &dgu, f);
        assert_eq!(dm, w, "without rebuild, dm is only read");
        // Rebuilding the product: the same gradient, and dm then holds the forward's product
        // bit for bit.
        let (mut dgu2, mut m_fwd) = (vec![0.0; t * 2 * n], vec![0.0; t * n]);
        CPU.swiglu_bwd(mat_mut(&mut dgu2, 2 * t, n), mat_mut(&mut dm, t, n), mat(&gu, 2 * t, n), outer, true);
        CPU.swiglu(mat_mut(&mut m_fwd, t, n), mat(&gu, 2 * t, n), outer);
        assert_eq!(dgu2, dgu);
        assert_eq!(dm, m_fwd);
    }
}

#[test]
fn bias() {
    let (t, n) = (6, 5);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let b = rnd(&mut rng, n, 1.0);
    let y0 = rnd(&mut rng, t * n, 1.0);
    let w = rnd(&mut rng, t * n, 1.0);
    let f = |p: &[f64]| {
        let mut y = y0.clone();
        CPU.add_bias(mat_mut(&mut y, t, n), mat(&p.to_vec(), 1, n));
        dot(&y, &w)
    };
    let mut db = vec![0.0; n];
    CPU.bias_grad(mat_mut(&mut db, 1, n), mat(&w, t, n));
    check("bias", &b, &db, f);
}
