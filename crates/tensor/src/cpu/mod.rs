//! The CPU backend: buffers are `Vec<T>`, GEMM goes through the `gemm` crate, everything
//! else is a rayon loop over rows (or column blocks for reductions over rows).

mod act;
mod attention;
pub mod core_speed;
mod elementwise;
mod embed;
pub mod gemm;
mod kron;
mod machine;
mod norm;
mod optim;
pub mod par;
pub mod peak;
pub mod pool;
mod rope;
mod transpose;

pub use embed::IGNORE;
pub use machine::{SimdPaths, simd_paths};

use crate::backend::{AttnShape, Backend};
use crate::scalar::Scalar;
use crate::view::{DeviceBuf, Mat, MatMut};
use par::{row, rows_mut};
use std::marker::PhantomData;

/// Every kernel under its name in the kernel table, where the generated impl finds it (a
/// kernel added to one of these files needs no edit here).
mod ops {
    pub use super::gemm::gemm;
    pub use super::{act::*, attention::*, elementwise::*, embed::*, kron::*, norm::*, optim::*, rope::*};
}

impl<T: Scalar> DeviceBuf for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn elem_bytes(&self) -> usize {
        std::mem::size_of::<T>()
    }
}

/// The host backend, computing in `T` (f32 for training, f64 for gradient checks).
/// Kernels run on the current rayon pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu<T>(PhantomData<T>);

impl<T> Cpu<T> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T: Scalar> Backend for Cpu<T> {
    type Buf = Vec<T>;
    type Ids = Vec<u32>;

    fn name(&self) -> String {
        format!("cpu-{}", T::NAME)
    }
    fn elem_bytes(&self) -> usize {
        std::mem::size_of::<T>()
    }

    fn alloc(&self, n: usize) -> Vec<T> {
        vec![T::zero(); n]
    }
    /// One log-sum-exp per query row: the backward recomputes the probabilities by tiles.
    fn attention_saved_len(&self, sh: &AttnShape) -> usize {
        sh.rows_len()
    }
    /// The dQ terms of the backward's key chunks after the first (none up to 512 positions).
    fn attention_scratch_len(&self, sh: &AttnShape) -> usize {
        attention::attention_bwd_scratch_len(sh)
    }
    fn alloc_ids(&self, n: usize) -> Vec<u32> {
        vec![0; n]
    }
    fn write_ids(&self, dst: &mut Vec<u32>, src: &[u32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn write_mat<H: Scalar>(&self, dst: MatMut<Vec<T>>, src: &[H]) {
        let cols = dst.cols;
        assert_eq!(
            src.len(),
            dst.rows * cols,
            "write_mat: host data has {} elements for {}×{cols}",
            src.len(),
            dst.rows
        );
        for (r, s) in rows_mut(dst).zip(src.chunks_exact(cols.max(1))) {
            for (o, v) in r.iter_mut().zip(s) {
                *o = T::of(v.f64());
            }
        }
    }
    fn read_mat<H: Scalar>(&self, src: Mat<Vec<T>>) -> Vec<H> {
        let mut out = Vec::with_capacity(src.rows * src.cols);
        for i in 0..src.rows {
            out.extend(row(&src, i).iter().map(|v| H::of(v.f64())));
        }
        out
    }

    crate::kernel_table!(crate::forward_kernels { ops });
}
