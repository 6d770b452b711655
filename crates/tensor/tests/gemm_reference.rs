//! GEMMs agree with a plain f64 triple loop on the step's shapes and ragged ones, in f32 and
//! f64, whichever SIMD path the gemm crate takes on this CPU (AVX-512 on a CPU that has it,
//! with the default `avx512` feature; AVX2+FMA otherwise): the path is chosen at run time, so
//! these checks cover the one that runs here.

use boost_tensor::cpu::{Cpu, simd_paths};
use boost_tensor::{Backend, Mat, MatMut, Scalar};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `c = beta·c_in + alpha·op(a)·op(b)` in f64 (beta 1 when accumulating, else 0), and, per
/// element, Σ|alpha·a·b| + |c_in| for the error bound.
#[allow(clippy::too_many_arguments)]
fn reference(
    a: &[f64],
    b: &[f64],
    c: &[f64],
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
    alpha: f64,
    accumulate: bool,
) -> (Vec<f64>, Vec<f64>) {
    let at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
    let bt = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
    let mut out = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut g) = (0.0, 0.0);
            for p in 0..k {
                s += at(i, p) * bt(p, j);
                g += (at(i, p) * bt(p, j)).abs();
            }
            let c0 = if accumulate { c[i * n + j] } else { 0.0 };
            out[i * n + j] = c0 + alpha * s;
            mag[i * n + j] = c0.abs() + alpha.abs() * g;
        }
    }
    (out, mag)
}

fn check<T: Scalar>(shape: (usize, usize, usize), ta: bool, tb: bool, accumulate: bool, unit_roundoff: f64) {
    let (m, n, k) = shape;
    let mut rng = ChaCha8Rng::seed_from_u64((m * 131 + n * 17 + k) as u64);
    let mut random = |len: usize| -> Vec<f64> {
        // Values exactly representable in f32, so both precisions start from the same numbers.
        (0..len).map(|_| rng.random_range(-1.0f32..1.0) as f64).collect()
    };
    let (a, b, c) = (random(m * k), random(k * n), random(m * n));
    let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from(x).unwrap()).collect() };
    let (a_t, b_t, mut c_t) = (cast(&a), cast(&b), cast(&c));
    let am = if ta { Mat::new(&a_t, k, m).t() } else { Mat::new(&a_t, m, k) };
    let bm = if tb { Mat::new(&b_t, n, k).t() } else { Mat::new(&b_t, k, n) };
    let alpha = 0.75;
    Cpu::<T>::default().gemm(MatMut::new(&mut c_t, m, n), am, bm, alpha, accumulate);
    let (want, mag) = reference(&a, &b, &c, shape, ta, tb, alpha, accumulate);
    // Any summation order of k products plus one addition of c errs by at most about
    // (k + 2)·u·Σ|terms| (the standard bound for a recursive dot product, with FMA); twice
    // that leaves room for alpha's scaling and the reference's own rounding, still far below what a wrong element gives (a
    // dropped product of k ≥ 64 random terms is ~1/√k of the magnitude, ≫ k·u).
    for i in 0..m * n {
        let err = (c_t[i].to_f64().unwrap() - want[i]).abs();
        let bound = 2.0 * (k as f64 + 2.0) * unit_roundoff * mag[i];
        assert!(
            err <= bound,
            "{} GEMM {shape:?} (ta {ta}, tb {tb}, acc {accumulate}) on {}: element {} is {} against {} \
             (error {err:.3e} > bound {bound:.3e})",
            std::any::type_name::<T>(),
            simd_paths().gemm,
            i,
            c_t[i].to_f64().unwrap(),
            want[i]
        );
    }
}

/// (m, n, k), a read transposed, b read transposed, accumulate into c.
type Case = ((usize, usize, usize), bool, bool, bool);

/// The low-rank step's shapes (cut in tokens to keep the test short) in their transposes and
/// accumulations, and sizes that leave ragged register tiles and panels (AVX-512 tiles are
/// 16 f32 or 8 f64 wide, AVX2 tiles half that).
const CASES: [Case; 9] = [
    ((128, 512, 512), true, false, true),
    ((512, 128, 512), true, false, true),
    ((512, 128, 128), false, false, false),
    ((256, 384, 512), false, true, false),
    ((40, 1376, 130), false, false, false),
    ((333, 77, 501), true, true, true),
    ((17, 31, 9), false, true, true),
    ((1, 257, 65), true, false, false),
    ((129, 1, 300), false, false, true),
];

#[test]
fn f32_gemm_matches_an_f64_reference() {
    for (shape, ta, tb, acc) in CASES {
        check::<f32>(shape, ta, tb, acc, f32::EPSILON as f64 / 2.0);
    }
}

#[test]
fn f64_gemm_matches_an_f64_reference_to_its_own_rounding() {
    for (shape, ta, tb, acc) in CASES {
        check::<f64>(shape, ta, tb, acc, f64::EPSILON / 2.0);
    }
}
