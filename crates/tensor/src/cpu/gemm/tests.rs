//! The product against a reference, and the cuts against their rules.

use super::panels::{PANEL_MIN, panels};
use super::*;

/// A product's operands, `a` read transposed when `ta` (a weight gradient's layout), and
/// its output before the call.
struct Product {
    mnk: (usize, usize, usize),
    ta: bool,
    a: Vec<f32>,
    b: Vec<f32>,
    c0: Vec<f32>,
}

impl Product {
    fn new((m, n, k): (usize, usize, usize), ta: bool) -> Self {
        let fill = |len: usize, seed: usize| -> Vec<f32> {
            (0..len).map(|i| (((i * 7919 + seed * 104729) % 2003) as f32) * 1e-3 - 1.0).collect()
        };
        Self { mnk: (m, n, k), ta, a: fill(m * k, 1), b: fill(k * n, 2), c0: fill(m * n, 3) }
    }

    fn a_op(&self) -> Operand<f32> {
        let (m, _, k) = self.mnk;
        let (rs, cs) = if self.ta { (1, m as isize) } else { (k as isize, 1) };
        Operand { ptr: self.a.as_ptr(), rs, cs }
    }

    fn b_op(&self) -> Operand<f32> {
        Operand { ptr: self.b.as_ptr(), rs: self.mnk.1 as isize, cs: 1 }
    }

    /// The output of one serial call on the whole product (alpha 0.7): the bits every
    /// other way of computing it must give.
    fn one_call(&self, acc: bool) -> Vec<f32> {
        let mut c = self.c0.clone();
        // SAFETY: the operands cover their shapes with these strides.
        unsafe { gemm_serial(self.mnk, c.as_mut_ptr(), self.mnk.1, self.a_op(), self.b_op(), 0.7, acc) };
        c
    }
}

/// Elements whose bits differ.
fn differing(c: &[f32], whole: &[f32]) -> usize {
    c.iter().zip(whole).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
}

#[test]
fn panels_cut_anywhere_on_16_give_the_bits_of_one_call() {
    let cases = [
        ((128, 512, 768), true, true),
        ((512, 128, 640), true, true),
        ((640, 96, 128), false, false),
        ((336, 200, 72), false, false),
    ];
    for ((m, n, k), ta, acc) in cases {
        let p = Product::new((m, n, k), ta);
        let whole = p.one_call(acc);
        let along_m = m >= n;
        let side = if along_m { m } else { n };
        // Two panels cut at every multiple of 16 leaving each at least 32, and three at a
        // spread of pairs.
        let mut cut_lists: Vec<Vec<usize>> = (2..side / 16 - 1).map(|i| vec![0, i * 16, side]).collect();
        cut_lists.extend((2..side / 16 - 4).step_by(3).map(|i| vec![0, i * 16, (i + 2) * 16, side]));
        for cuts in cut_lists {
            let mut c = p.c0.clone();
            for w in cuts.windows(2) {
                // SAFETY: the operands cover their shapes; the panels lie within the side.
                unsafe {
                    gemm_panel((m, n, k), along_m, (w[0], w[1]), (c.as_mut_ptr(), n), p.a_op(), p.b_op(), 0.7, acc)
                };
            }
            let differ = differing(&c, &whole);
            assert_eq!(differ, 0, "{m}×{n}·k {k} cut at {cuts:?}: {differ} elements differ from one call");
        }
    }
}

#[test]
fn a_large_output_over_a_long_k_is_cut_into_more_panels_with_the_bits_of_one_call() {
    // The LM head's weight gradient: 16 MiB of output over 2048 tokens, 8 panels of 2 MiB
    // on 2 threads or 1; its input gradient (4 MiB) and forward (K = 512) one a thread.
    assert_eq!(panels((8192, 512, 2048), 4, 2), (true, 8));
    assert_eq!(panels((8192, 512, 2048), 4, 1), (true, 8));
    assert_eq!(panels((2048, 512, 8192), 4, 2), (true, 2));
    assert_eq!(panels((2048, 8192, 512), 4, 2), (false, 2));
    assert_eq!(panels((128, 1376, 2048), 4, 2), (false, 2));
    // An 8 MiB output over K = 544: 4 panels, on a pool of 2 threads and on the calling
    // thread, each bit for bit one serial call.
    let (m, n, k) = (2048, 1024, 544);
    assert_eq!(panels((m, n, k), 4, 2), (true, 4));
    let p = Product::new((m, n, k), true);
    let whole = p.one_call(true);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for parallel in [true, false] {
        let mut c = p.c0.clone();
        // SAFETY: the operands cover their shapes with these strides.
        pool.install(|| unsafe { gemm_raw((m, n, k), (c.as_mut_ptr(), n), p.a_op(), p.b_op(), 0.7, true, parallel) });
        let differ = differing(&c, &whole);
        assert_eq!(differ, 0, "parallel {parallel}: {differ} elements differ from one call");
    }
}

#[test]
fn a_short_wide_output_over_a_long_k_is_computed_by_columns_with_the_bits_of_one_call() {
    // The r-sided weight gradients of the step go by columns (with the AVX-512 kernels);
    // their transposes, the forward and input-gradient shapes (K = d, r or d_ff) and the
    // LM head do not.
    let is = short_wide_over_long_k;
    assert!(is(128, 512, 2048) && is(128, 1376, 2048));
    assert_eq!(by_columns(128, 512, 2048), super::super::machine::gemm_avx512());
    assert!(!is(512, 128, 2048) && !is(2048, 512, 128) && !is(2048, 128, 1376));
    assert!(!is(8192, 512, 2048) && !is(256, 512, 2048) && !is(128, 512, 512) && !is(1, 8192, 2048));
    // Accumulating or not, a weight gradient's layout or not, ragged sides, one thread or
    // two: bit for bit one serial call (on any CPU: called directly).
    let cases = [((128, 512, 1024), true), ((96, 700, 1100), true), ((128, 333, 1024), false), ((16, 40, 1500), true)];
    for ((m, n, k), ta) in cases {
        assert!(is(m, n, k));
        let p = Product::new((m, n, k), ta);
        for acc in [true, false] {
            let whole = p.one_call(acc);
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut c = p.c0.clone();
                let (a, b) = (p.a_op(), p.b_op());
                // SAFETY: the operands cover their shapes with these strides.
                pool.install(|| unsafe { gemm_by_columns((m, n, k), (c.as_mut_ptr(), n), a, b, 0.7, acc) });
                let differ = differing(&c, &whole);
                assert_eq!(differ, 0, "{m}×{n}·k {k}, accumulate {acc}, {threads} threads: {differ} differ");
            }
        }
    }
}

#[test]
fn column_way_products_in_a_parallel_loop_nest_on_one_thread_without_harm() {
    // Many such products as tasks of one pool: a thread that waits inside one of them
    // runs another (rayon's work stealing), which must find its own scratch.
    let (m, n, k) = (64, 256, 1024);
    let p = Product::new((m, n, k), true);
    let whole = p.one_call(true);
    let (a_op, b_op) = (p.a_op(), p.b_op());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    // (Holding the scratch borrowed across the call panicked here in 2 of 3 runs of 16
    // rounds.)
    for _ in 0..48 {
        let mut outs = vec![p.c0.clone(); 48];
        pool.install(|| {
            outs.par_iter_mut().for_each(|c| {
                // SAFETY: the operands cover their shapes; each task writes its own output.
                unsafe { gemm_by_columns((m, n, k), (c.as_mut_ptr(), n), a_op, b_op, 0.7, true) };
            })
        });
        assert!(outs.iter().all(|c| differing(c, &whole) == 0));
    }
}

#[test]
fn speed_cuts_cover_the_side_in_order_each_at_least_its_minimum() {
    let speeds = [core_speed::SLOWEST, 0.8, 0.95, 1.0, 1.1, 1.25, core_speed::FASTEST];
    for side in [256, 333, 512, 1376, 2048, 8192] {
        for panels in 2..=6 {
            let cuts = Cuts::new(side, 128, panels, true);
            if !cuts.by_speed {
                assert!(side / panels < 2 * PANEL_MIN + 32, "side {side} over {panels} panels not cut by speed");
                continue;
            }
            let mut end = 0;
            for p in 0..panels {
                let (lo, hi) = cuts.take(p, speeds[(p * 5 + side) % speeds.len()]);
                assert_eq!(lo, end, "side {side}, {panels} panels: panel {p} starts at {lo}, not {end}");
                assert_eq!(lo % 16, 0, "side {side}: panel {p} starts off a multiple of 16");
                assert!(hi - lo >= cuts.min, "side {side}, {panels} panels: panel {p} has {} < {}", hi - lo, cuts.min);
                end = hi;
            }
            assert_eq!(end, side, "side {side}, {panels} panels end at {end}");
        }
    }
    // A slower core's panel is the narrower one.
    let cuts = Cuts::new(2048, 512, 2, true);
    let (lo, hi) = cuts.take(0, 0.8);
    assert_eq!((lo, hi), (0, 816));
    assert_eq!(cuts.take(1, 1.2), (816, 2048));
}
