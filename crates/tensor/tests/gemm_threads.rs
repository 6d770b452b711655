//! GEMMs give the same bits for any number of threads: work is split over output panels only
//! and K is summed in one fixed order (results must not depend on `train.threads`, and data
//! parallel ranks with different pools must agree).

use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `c (m×n) [+]= op(a)·op(b)` with `threads` threads; `a` stored k×m when `ta`, `b` n×k when `tb`.
fn product(shape: (usize, usize, usize), ta: bool, tb: bool, accumulate: bool, threads: usize) -> Vec<f32> {
    let (m, n, k) = shape;
    let mut rng = ChaCha8Rng::seed_from_u64((m * 31 + n * 7 + k) as u64);
    let a = random(&mut rng, m * k);
    let b = random(&mut rng, k * n);
    let mut c = random(&mut rng, m * n);
    let a = if ta { Mat::new(&a, k, m).t() } else { Mat::new(&a, m, k) };
    let b = if tb { Mat::new(&b, n, k).t() } else { Mat::new(&b, k, n) };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| Cpu::<f32>::default().gemm(MatMut::new(&mut c, m, n), a, b, 0.7, accumulate));
    c
}

#[test]
fn gemm_results_do_not_depend_on_the_thread_count() {
    // The low-rank step's shapes (r = 128, d = 512, d_ff = 1376, 2048 tokens, cut to 1024 to
    // keep the test short) in their transposes, a tall-and-narrow output split by columns,
    // and sizes that leave ragged panels.
    let cases = [
        ((128, 512, 1024), true, false, true),
        ((512, 128, 1024), true, false, true),
        ((1376, 128, 1024), true, false, true),
        ((1024, 128, 512), false, false, false),
        ((1024, 512, 128), false, true, false),
        ((40, 1376, 256), false, false, false),
        ((333, 77, 501), true, true, true),
    ];
    for (shape, ta, tb, acc) in cases {
        let one = product(shape, ta, tb, acc, 1);
        for threads in [2, 3, 5] {
            let many = product(shape, ta, tb, acc, threads);
            let differ = one.iter().zip(&many).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
            assert_eq!(
                differ, 0,
                "{shape:?} (ta {ta}, tb {tb}): {differ} elements differ between 1 and {threads} threads"
            );
        }
    }
}
