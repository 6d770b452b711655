//! Deterministic inputs of the `collectives` scenario and its results, compared element by
//! element with the in-process backend's.

use anyhow::{bail, ensure};
use boost_comm::CommElem;

/// Deterministic inputs: xorshift64* values of widely spread magnitudes, so that the order
/// of a float sum changes its rounding.
pub fn values(seed: u64, rank: usize, n: usize) -> Vec<f64> {
    let mut x = (seed * 1000 + rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    (0..n)
        .map(|_| {
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            u * 10f64.powi((next() % 9) as i32 - 2)
        })
        .collect()
}

pub fn ints(seed: u64, rank: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| (seed as u32 ^ 0x9e37_79b9).wrapping_mul(rank as u32 * 7 + 3).wrapping_add(i as u32 * 2_654_435_761))
        .collect()
}

/// One result of the script.
pub struct Res {
    pub name: String,
    /// Bits of every element (f32 and u32 widened).
    pub bits: Vec<u64>,
    pub vals: Vec<f64>,
    /// For float sums: Σ_k |x_k| per element and the unit roundoff, bounding the effect of
    /// the summation order.
    pub bound: Option<(Vec<f64>, f64)>,
}

pub trait Elem: CommElem {
    fn of(x: f64) -> Self;
    fn bits(self) -> u64;
    fn val(self) -> f64;
    const EPS: f64;
}

impl Elem for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn val(self) -> f64 {
        self as f64
    }
    const EPS: f64 = f32::EPSILON as f64;
}

impl Elem for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn val(self) -> f64 {
        self
    }
    const EPS: f64 = f64::EPSILON;
}

pub fn res<T: Elem>(name: String, v: &[T], bound: Option<(Vec<f64>, f64)>) -> Res {
    Res { name, bits: v.iter().map(|x| x.bits()).collect(), vals: v.iter().map(|x| x.val()).collect(), bound }
}

pub fn res_u32(name: String, v: &[u32]) -> Res {
    Res { name, bits: v.iter().map(|&x| x as u64).collect(), vals: v.iter().map(|&x| x as f64).collect(), bound: None }
}

/// Compare MPI results with the in-process ones: bit-identical when `exact`, else sums within
/// 2·(p−1)·u·Σ|x| (each order's error is at most (p−1)·u·Σ|x|, u = ε/2) and the rest
/// bit-identical. Returns how many elements differ in their bits.
pub fn compare(mode: &str, mpi: &[Res], reference: &[Res], p: usize, exact: bool) -> anyhow::Result<usize> {
    ensure!(mpi.len() == reference.len(), "{mode}: {} results, in-process {}", mpi.len(), reference.len());
    let mut differ = 0;
    for (m, r) in mpi.iter().zip(reference) {
        ensure!(m.name == r.name && m.bits.len() == r.bits.len(), "{mode}: {} vs {}", m.name, r.name);
        for i in 0..m.bits.len() {
            if m.bits[i] == r.bits[i] {
                continue;
            }
            differ += 1;
            let tol = match (&m.bound, exact) {
                (Some((abs, eps)), false) => (p - 1) as f64 * eps * abs[i],
                _ => bail!(
                    "{mode}: {} element {i}: {} (MPI) but {} (in-process), bits differ",
                    m.name,
                    m.vals[i],
                    r.vals[i]
                ),
            };
            let d = (m.vals[i] - r.vals[i]).abs();
            ensure!(
                d <= tol,
                "{mode}: {} element {i}: {} (MPI) vs {} (in-process) differ by {d:e} > {tol:e}",
                m.name,
                m.vals[i],
                r.vals[i]
            );
        }
    }
    Ok(differ)
}
