//! Which device the GPU tests run on: the GPU when `probe()` finds one (feature `cuda`),
//! else the kernel emulator (feature `emulate`), else none (the test says so and passes).
#![allow(dead_code)]

use boost_cuda::{Cuda, Precision};

/// The backend to test, or None after printing why the test is skipped.
pub fn backend(prec: Precision) -> Option<Cuda> {
    #[cfg(feature = "cuda")]
    match boost_cuda::probe() {
        Ok(_) => return Some(Cuda::new(0, prec).expect("the probe found a GPU, so the backend must start")),
        Err(e) => eprintln!("no GPU ({e})"),
    }
    #[cfg(feature = "emulate")]
    {
        eprintln!("running on the kernel emulator");
        Some(Cuda::emulated(prec))
    }
    #[cfg(not(feature = "emulate"))]
    {
        eprintln!("SKIPPED: no GPU and no emulator (build with --features emulate)");
        let _ = prec;
        None
    }
}

/// True when the backend is a real GPU.
pub fn on_gpu(be: &Cuda) -> bool {
    !be.is_emulated()
}

/// ‖a − b‖ / ‖b‖ and max |a − b| / max |b|.
pub fn errors(a: &[f64], b: &[f64]) -> (f64, f64) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    let maxd = a.iter().zip(b).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    let maxb = b.iter().fold(0.0f64, |m, y| m.max(y.abs()));
    if norm == 0.0 && diff == 0.0 {
        return (0.0, 0.0);
    }
    (diff / norm.max(1e-300), maxd / maxb.max(1e-300))
}

/// Both error measures within `tol`.
pub fn assert_close(what: &str, a: &[f64], b: &[f64], tol: f64) {
    let (rel, elem) = errors(a, b);
    assert!(
        rel <= tol && elem <= tol,
        "{what}: ‖a−b‖/‖b‖ = {rel:.2e}, max|a−b|/max|b| = {elem:.2e} (tolerance {tol:.0e})"
    );
}
