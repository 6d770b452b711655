//! The calibration's fit and measurement (the file it writes is tested in `file::tests`).

#[test]
fn calibration_fit_recovers_a_known_curve() {
    use boost_calibrate::{GemmSample, SHAPES, fit_curve};
    let (p, c) = (120e9, 24.0);
    let f = |x: usize| x as f64 / (x as f64 + c);
    let samples: Vec<GemmSample> =
        SHAPES.iter().map(|&(m, n, k)| GemmSample { m, n, k, flops_per_s: p * f(m) * f(n) * f(k) }).collect();
    let (fp, fc, rms) = fit_curve(&samples);
    assert!((fp / p - 1.0).abs() < 1e-3, "{fp}");
    assert!((fc - c).abs() < 0.5, "{fc}");
    assert!(rms < 1e-3);
}

#[test]
fn the_per_dimension_fit_recovers_a_curve_of_three_half_dimensions() {
    use boost_calibrate::{GemmSample, SHAPES, fit_curve, fit_curve_per_dim};
    let (p, c) = (200e9, [48.0, 10.0, 6.0]);
    let f = |x: usize, c: f64| x as f64 / (x as f64 + c);
    let samples: Vec<GemmSample> = SHAPES
        .iter()
        .map(|&(m, n, k)| GemmSample { m, n, k, flops_per_s: p * f(m, c[0]) * f(n, c[1]) * f(k, c[2]) })
        .collect();
    let (fp, fc, rms) = fit_curve_per_dim(&samples);
    assert!((fp / p - 1.0).abs() < 1e-3, "{fp}");
    for (got, want) in fc.iter().zip(c) {
        assert!((got - want).abs() < 0.5, "{fc:?} against {c:?}");
    }
    assert!(rms < 1e-3, "{rms}");
    // One c for all three cannot: the per-dimension fit is the better one here.
    assert!(fit_curve(&samples).2 > 10.0 * rms.max(1e-6));
}

#[test]
fn calibration_measures_a_gemm() {
    let r = boost_calibrate::measure_gemm(64, 64, 64);
    assert!(r > 1e8, "{r}");
}
