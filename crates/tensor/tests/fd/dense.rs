//! The LaX Kronecker gate and GEMMs over transposes, strides and accumulation.

use crate::{CPU, check, dot, mat, mat_mut, rnd};
use boost_tensor::KronBwd;
use boost_tensor::{Backend, Mat, MatMut};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn kronecker_gate() {
    let (t, a, b) = (5, 2, 3);
    let r = a * b;
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let z = rnd(&mut rng, t * r, 1.0);
    let ka = rnd(&mut rng, a * a, 1.0);
    let kb = rnd(&mut rng, b * b, 1.0);
    let w = rnd(&mut rng, t * r, 1.0);
    let mut scratch = vec![0.0; 2 * t * r + 64 * (a * a + b * b)];
    let fwd = |z: &Vec<f64>, ka: &Vec<f64>, kb: &Vec<f64>| {
        let mut y = vec![0.0; t * r];
        let mut s = vec![0.0; t * r];
        CPU.kron_fwd(mat_mut(&mut y, t, r), mat(z, t, r), mat(ka, a, a), mat(kb, b, b), &mut s, false);
        y
    };
    // Against the explicit Kronecker product z·kron(Ka, Kb).
    let y = fwd(&z, &ka, &kb);
    for i in 0..t {
        for col in 0..r {
            let (k, l) = (col / b, col % b);
            let mut s = 0.0;
            for row in 0..r {
                let (ii, j) = (row / b, row % b);
                s += z[i * r + row] * ka[ii * a + k] * kb[j * b + l];
            }
            assert!((s - y[i * r + col]).abs() < 1e-12);
        }
    }
    let (mut dz, mut dka, mut dkb) = (vec![0.0; t * r], vec![0.0; a * a], vec![0.0; b * b]);
    CPU.kron_bwd(KronBwd {
        dz: mat_mut(&mut dz, t, r),
        dka: mat_mut(&mut dka, a, a),
        dkb: mat_mut(&mut dkb, b, b),
        dy: mat(&w, t, r),
        z: mat(&z, t, r),
        ka: mat(&ka, a, a),
        kb: mat(&kb, b, b),
        scratch: &mut scratch,
    });
    check("kron dz", &z, &dz, |p| dot(&fwd(&p.to_vec(), &ka, &kb), &w));
    check("kron dKa", &ka, &dka, |p| dot(&fwd(&z, &p.to_vec(), &kb), &w));
    check("kron dKb", &kb, &dkb, |p| dot(&fwd(&z, &ka, &p.to_vec()), &w));
}

#[test]
fn gemm_transposes_strides_and_accumulation() {
    let (m, k, n) = (5, 7, 3);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // a stored transposed (k×m) inside a wider buffer; b plain.
    let a_t = rnd(&mut rng, k * (m + 2), 1.0);
    let b = rnd(&mut rng, k * n, 1.0);
    let c0 = rnd(&mut rng, m * (n + 1), 1.0);
    let mut c = c0.clone();
    let av = Mat::at(&a_t, 1, k, m, m + 2).t();
    CPU.gemm(MatMut::at(&mut c, 0, m, n, n + 1), av, mat(&b, k, n), 0.5, true);
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| a_t[1 + p * (m + 2) + i] * b[p * n + j]).sum();
            let want = c0[i * (n + 1) + j] + 0.5 * s;
            assert!((c[i * (n + 1) + j] - want).abs() < 1e-12);
        }
        assert_eq!(c[i * (n + 1) + n], c0[i * (n + 1) + n], "column outside the view untouched");
    }
}
