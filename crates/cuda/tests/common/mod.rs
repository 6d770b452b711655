//! Which device the GPU tests run on: the GPU when `probe()` finds one (feature `cuda`),
//! else the kernel emulator (feature `emulate`), else none (the test says so and passes).
#![allow(dead_code)]

use boost_cuda::{Cuda, HostStaged, Precision};
use boost_testkit::Engine;

#[allow(unused_imports)] // each test binary uses its own subset
pub use boost_testkit::{assert_close, errors};

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

/// The backend for the kit's suites: a fresh one for each rank, whose collectives go through
/// the host over the rank's boost-comm group.
pub fn engine(prec: Precision) -> Option<Engine<Cuda>> {
    backend(prec)?;
    Some(Engine::new(move || backend(prec).unwrap(), |be, g| Box::new(HostStaged::new(g.comm().clone(), be))))
}

/// True when the backend is a real GPU.
pub fn on_gpu(be: &Cuda) -> bool {
    !be.is_emulated()
}

/// Deterministic values in [-1, 1) (xorshift from `seed`).
pub fn rnd(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}
