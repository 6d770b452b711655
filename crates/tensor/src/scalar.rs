//! Element types the CPU backend computes in: f32 for training, f64 for gradient checks.

use num_traits::Float;
use std::fmt::Debug;

pub trait Scalar: Float + Default + Debug + Send + Sync + 'static + std::iter::Sum {
    const NAME: &'static str;
    fn of(x: f64) -> Self;
    fn f64(self) -> f64;
}

impl Scalar for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
}

impl Scalar for f64 {
    const NAME: &'static str = "f64";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
}
