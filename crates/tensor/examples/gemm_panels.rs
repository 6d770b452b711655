//! The engine's GEMM (one serial `gemm` call per output panel and thread) against the `gemm`
//! crate's own split (`Parallelism::Rayon`), on the shapes of a cola-60m step.
//!
//! `cargo run --release -p boost-tensor --example gemm_panels [THREADS] [ROUNDS] [FLUSH_MIB]`
//!
//! The two run alternately, each call after FLUSH_MIB of other memory is written (so that
//! operands come from memory or the last-level cache, as in a step, not from a hot loop);
//! the ratio is the median over rounds of each round's ratio, which a host whose speed drifts
//! between rounds affects far less than separate timings.

use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut};
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).and_then(|v| v.parse().ok()).unwrap_or(default);
    let (threads, rounds, flush_mib) = (arg(1, 2), arg(2, 15), arg(3, 8));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    let mut other = vec![1u8; flush_mib << 20];
    // (m, n, k, a transposed, b transposed): c (m×n) = op(a) (m×k) · op(b) (k×n).
    let (t, d, r, ff) = (2048, 512, 128, 1376);
    let shapes = [
        (r, d, t, true, false),
        (d, r, t, true, false),
        (r, ff, t, true, false),
        (ff, r, t, true, false),
        (t, r, d, false, false),
        (t, d, r, false, false),
        (t, r, ff, false, false),
        (t, ff, r, false, false),
        (t, d, 8192, false, false),
    ];
    println!("{threads} threads, {rounds} rounds, {flush_mib} MiB written before each call");
    println!("| m × k · k × n | crate's split GFLOP/s | panels GFLOP/s | panels / crate (median of rounds) |");
    println!("|---|---|---|---|");
    for (m, n, k, ta, tb) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919 % 1013) as f32) * 1e-3 - 0.5).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 104729 % 997) as f32) * 1e-3 - 0.5).collect();
        let mut c = vec![0f32; m * n];
        let av = if ta { Mat::new(&a, k, m).t() } else { Mat::new(&a, m, k) };
        let bv = if tb { Mat::new(&b, n, k).t() } else { Mat::new(&b, k, n) };
        let flops = 2.0 * (m * n * k) as f64;
        let (mut crate_rates, mut panel_rates) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for panels in [false, true] {
                other.iter_mut().step_by(64).for_each(|x| *x = x.wrapping_add(round as u8));
                let start = Instant::now();
                pool.install(|| {
                    if panels {
                        Cpu::<f32>::default().gemm(MatMut::new(&mut c, m, n), av, bv, 1.0, true);
                    } else {
                        let (ars, acs) = if ta { (1, m as isize) } else { (k as isize, 1) };
                        let (brs, bcs) = if tb { (1, k as isize) } else { (n as isize, 1) };
                        // SAFETY: the operands cover their shapes with these strides; c is m×n.
                        unsafe {
                            gemm::gemm(
                                m,
                                n,
                                k,
                                c.as_mut_ptr(),
                                1,
                                n as isize,
                                true,
                                a.as_ptr(),
                                acs,
                                ars,
                                b.as_ptr(),
                                bcs,
                                brs,
                                1.0,
                                1.0,
                                false,
                                false,
                                false,
                                gemm::Parallelism::Rayon(threads),
                            )
                        }
                    }
                });
                let rate = flops / start.elapsed().as_secs_f64() / 1e9;
                if panels { panel_rates.push(rate) } else { crate_rates.push(rate) }
            }
        }
        let ratios: Vec<f64> = panel_rates.iter().zip(&crate_rates).map(|(p, q)| p / q).collect();
        let ta = if ta { "ᵀ" } else { "" };
        println!(
            "| {m}{ta} × {k} · {k} × {n} | {:.1} | {:.1} | {:.2}× |",
            median(crate_rates),
            median(panel_rates),
            median(ratios)
        );
    }
    std::hint::black_box(&other);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
