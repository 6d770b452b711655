//! The element math against the library and f64 references.

use super::exp::pow2i;
use super::*;

#[test]
fn fast_exp_is_within_two_ulp_of_the_library() {
    let mut worst: f64 = 0.0;
    let mut x = -87.0f32;
    while x < 88.0 {
        let (a, b) = (expf(x) as f64, (x as f64).exp());
        worst = worst.max(((a - b) / b).abs());
        x += 0.0137;
    }
    assert!(worst < 2.5e-7, "relative error {worst:e}");
    assert_eq!(expf(0.0), 1.0);
    assert!(expf(f32::NAN).is_nan());
    assert!(expf(-1e30) >= 0.0 && expf(-1e30) < 1e-37);
}

#[test]
fn two_to_the_n_from_bits_equals_the_integer_conversion_on_its_whole_domain() {
    // After the clamp, n = round(x·log₂e) is an integer in [-126, 128]: every one of them.
    for n in -126..=128 {
        let want = f32::from_bits(((n + 127) as u32) << 23);
        assert_eq!(pow2i(n as f32).to_bits(), want.to_bits(), "2^{n}");
    }
    assert_eq!(pow2i(0.0), 1.0);
    assert_eq!(pow2i(128.0), f32::INFINITY);
}

#[test]
fn lane_reductions_are_exact_and_fixed() {
    let x: Vec<f32> = (0..1037).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3).collect();
    let y: Vec<f32> = (0..1037).map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-3).collect();
    let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
    assert!((f32::dot(&x, &y) as f64 - exact).abs() < 1e-5);
    assert!((f32::total(&x) as f64 - x.iter().map(|v| *v as f64).sum::<f64>()).abs() < 1e-4);
    assert_eq!(f32::max_of(&x), x.iter().cloned().fold(f32::MIN, f32::max));
    assert_eq!(f32::dot3(&x, &y, &x).to_bits(), f32::dot3(&x, &y, &x).to_bits());
    // The lane order is part of the contract: the same bits as this scalar rendering.
    let mut acc = [0.0f32; 16];
    for (i, (a, b)) in x.iter().zip(&y).enumerate().take(1024) {
        acc[i % 16] += a * b;
    }
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    let tail = x[1024..].iter().zip(&y[1024..]).fold(0.0f32, |s, (a, b)| s + a * b);
    assert_eq!(f32::dot(&x, &y).to_bits(), (acc[0] + tail).to_bits());
}

#[test]
fn dispatched_rows_equal_the_scalar_formulas() {
    let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
    let mut y = vec![0.0f32; 1000];
    f32::silu_row(&mut y, &x);
    for (a, v) in y.iter().zip(&x) {
        assert_eq!(a.to_bits(), (*v * (1.0 / (1.0 + expf(-*v)))).to_bits());
    }
    let mut e = x.clone();
    let s = f32::exp_shifted(&mut e, 1.5);
    for (a, v) in e.iter().zip(&x) {
        assert_eq!(a.to_bits(), expf(*v - 1.5).to_bits());
    }
    // Exponentials and sum in one pass: the sum in `total`'s lane order, the same bits.
    assert_eq!(s.to_bits(), f32::total(&e).to_bits());
    let mut u = x.clone();
    f32::exp_shifted_unsummed(&mut u, 1.5);
    assert_eq!(u, e);
    // The sum alone: the same bits again, the input untouched.
    assert_eq!(f32::exp_sum(&x, 1.5).to_bits(), s.to_bits());
    // Against the unvectorised scalar fold (f64 here): within f32 rounding of the terms.
    let naive: f64 = x.iter().map(|v| (*v as f64 - 1.5).exp()).sum();
    assert!((s as f64 - naive).abs() < 1e-6 * naive, "{s} vs {naive}");
}

#[test]
fn causal_rows_take_their_last_entries_masked_and_zero_the_rest() {
    let x: Vec<f32> = (0..70).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 7e-3).collect();
    for n in [1, 5, 16, 17, 37, 64, 70] {
        for live in 0..=n {
            let mut row = x[..n].to_vec();
            // What lies past the live entries is the caller's old tile: even NaN or ∞.
            for (j, v) in row[live..].iter_mut().enumerate() {
                *v = [f32::NAN, f32::INFINITY, 1e30][j % 3];
            }
            let s = f32::exp_shifted_live(&mut row, live, 0.25);
            for j in 0..live {
                assert_eq!(row[j].to_bits(), expf(x[j] - 0.25).to_bits(), "n {n} live {live} entry {j}");
            }
            assert!(row[live..].iter().all(|v| v.to_bits() == 0), "n {n} live {live}: dead entries not +0");
            // The sum: the lanes' order (a masked last vector when the row has room for
            // one), within f32 rounding of the f64 sum.
            let exact: f64 = x[..live].iter().map(|v| (*v as f64 - 0.25).exp()).sum();
            assert!((s as f64 - exact).abs() <= 1e-6 * exact.max(1e-30), "n {n} live {live}: {s} vs {exact}");
            if live / 16 * 16 + 16 <= n || live % 16 == 0 {
                assert_eq!(s.to_bits(), f32::total(&row).to_bits(), "n {n} live {live}: not in lane order");
            }
        }
    }
}

/// The dispatched (SIMD) f32 row kernels against element-by-element scalar renderings of
/// their formulas: the same bits, so a CPU's SIMD path never changes a result.
#[test]
fn dispatched_update_and_norm_rows_equal_the_scalar_formulas() {
    let n = 1037;
    let a: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3).collect();
    let b: Vec<f32> = (0..n).map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-3).collect();
    let c: Vec<f32> = (0..n).map(|i| ((i * 31 % 101) as f32 - 50.0) * 2e-2).collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

    let mut d = a.clone();
    f32::axpy_row(&mut d, &b, -0.37);
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + -0.37 * y).collect();
    assert_eq!(bits(&d), bits(&want));

    let mut d = a.clone();
    f32::scale_row(&mut d, 1.7);
    assert_eq!(bits(&d), bits(&a.iter().map(|x| x * 1.7).collect::<Vec<_>>()));

    for inverse in [false, true] {
        let (mut x1, mut x2) = (a.clone(), b.clone());
        f32::rotate_halves(&mut x1, &mut x2, &c, &b, inverse);
        for j in 0..n {
            let sj = if inverse { -b[j] } else { b[j] };
            assert_eq!(x1[j].to_bits(), (a[j] * c[j] - b[j] * sj).to_bits());
            assert_eq!(x2[j].to_bits(), (b[j] * c[j] + a[j] * sj).to_bits());
        }
    }

    let mut d = a.clone();
    let sum = f32::silu_norm_row(&mut d, &b, &c, 0.7);
    let mut g = a.clone();
    f32::silu_grad_row(&mut g, &b);
    assert_eq!(sum.to_bits(), f32::dot(&g, &c).to_bits());
    f32::scale_row(&mut g, 0.7);
    assert_eq!(bits(&d), bits(&g));

    for outer in [false, true] {
        // The gradient of swiglu_bwd_row and the product of swiglu_row, bit for bit.
        let (mut dg, mut du, mut dm) = (vec![0.0f32; n], vec![0.0f32; n], a.clone());
        f32::swiglu_bwd_row(&mut dg, &mut du, &mut dm, &b, &c, outer, true);
        let (mut dg2, mut du2, mut dm2, mut m) = (vec![0.0f32; n], vec![0.0f32; n], a.clone(), vec![0.0f32; n]);
        f32::swiglu_bwd_row(&mut dg2, &mut du2, &mut dm2, &b, &c, outer, false);
        assert_eq!(dm2, a, "without rebuild, dm is only read");
        f32::swiglu_row(&mut m, &b, &c, outer);
        assert_eq!((bits(&dg), bits(&du), bits(&dm)), (bits(&dg2), bits(&du2), bits(&m)), "outer {outer}");
    }

    let mut d = a.clone();
    f32::softmax_grad_row(&mut d, &b, 0.3);
    assert_eq!(bits(&d), bits(&(0..n).map(|j| b[j] * (a[j] - 0.3)).collect::<Vec<_>>()));

    let mut acc = c.clone();
    f32::add_products(&mut acc, &a, &b);
    let want: Vec<f32> = (0..n).map(|j| c[j] + a[j] * b[j]).collect();
    assert_eq!(bits(&acc), bits(&want));

    for accumulate in [false, true] {
        let mut o = c.clone();
        f32::norm_grad_row(&mut o, &a, &b, &c, 0.25, accumulate);
        let want: Vec<f32> = (0..n)
            .map(|j| {
                let val = c[j] * a[j] + 0.25 * b[j];
                if accumulate { c[j] + val } else { val }
            })
            .collect();
        assert_eq!(bits(&o), bits(&want));
    }

    // Σ x² in f64: element k into lane k mod 8, lanes folded pairwise, the tail in order.
    let mut lanes = [0.0f64; 8];
    for (k, v) in a.iter().enumerate().take(n / 8 * 8) {
        lanes[k % 8] += (*v as f64) * (*v as f64);
    }
    let mut w = 8;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            lanes[i] += lanes[i + w];
        }
    }
    let want = a[n / 8 * 8..].iter().fold(lanes[0], |s, v| s + (*v as f64) * (*v as f64));
    assert_eq!(f32::sumsq_lanes(&a).to_bits(), want.to_bits());

    let k =
        AdamConsts { b1: 0.9, b2: 0.95, ob1: 0.1, ob2: 0.05, keep: 0.999, step: 3e-3, sq_bc2: 0.3, eps: 1e-8, gs: 0.5 };
    let (mut p, mut m, mut v) =
        (a.clone(), b.iter().map(|x| x * 0.1).collect::<Vec<_>>(), c.iter().map(|x| x * x).collect::<Vec<_>>());
    let (p0, m0, v0) = (p.clone(), m.clone(), v.clone());
    f32::adamw_chunk(&mut p, &b, &mut m, &mut v, &k);
    for j in 0..n {
        let g = b[j] * k.gs;
        let mj = k.b1 * m0[j] + k.ob1 * g;
        let vj = k.b2 * v0[j] + k.ob2 * g * g;
        let pj = p0[j] * k.keep - k.step * mj / (vj.sqrt() / k.sq_bc2 + k.eps);
        assert_eq!((p[j].to_bits(), m[j].to_bits(), v[j].to_bits()), (pj.to_bits(), mj.to_bits(), vj.to_bits()));
    }
}
