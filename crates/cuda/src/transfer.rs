//! Host ↔ device copies of matrix views, converting each element to and from its storage
//! type (a parameter buffer's bf16 copy is refreshed after a write).

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use boost_tensor::{Mat, MatMut, Scalar};

/// Elements from a view's first to its last, row stride included.
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * ld + cols }
}

fn encode(dtype: DType, v: f64, out: &mut [u8]) {
    match dtype {
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::Bf16 => out.copy_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
    }
}

fn decode(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::Bf16 => half::bf16::from_le_bytes(b.try_into().unwrap()).to_f64(),
    }
}

impl Cuda {
    /// Copy a row-major host matrix into a view.
    pub(crate) fn upload_mat<H: Scalar>(&self, dst: MatMut<CudaBuf>, src: &[H]) {
        let (rows, cols, ld) = (dst.rows, dst.cols, dst.ld);
        assert_eq!(src.len(), rows * cols, "write_mat: host data has {} elements for {rows}×{cols}", src.len());
        let n = span(rows, cols, ld);
        if n == 0 {
            return;
        }
        let es = dst.buf.dtype.size();
        let at = dst.buf.ptr(dst.off);
        let mut bytes = vec![0u8; n * es];
        // The gaps between rows keep what the device holds there.
        if !dst.is_contiguous() {
            self.dev().download(at, &mut bytes);
        }
        for i in 0..rows {
            for j in 0..cols {
                let k = (i * ld + j) * es;
                encode(dst.buf.dtype, src[i * cols + j].f64(), &mut bytes[k..k + es]);
            }
        }
        self.dev().upload(at, &bytes);
        self.touched(&dst);
    }

    /// Copy a view out to a row-major host matrix.
    pub(crate) fn download_mat<H: Scalar>(&self, src: Mat<CudaBuf>) -> Vec<H> {
        let (rows, cols, ld) = (src.rows, src.cols, src.ld);
        let n = span(rows, cols, ld);
        let es = src.buf.dtype.size();
        let mut bytes = vec![0u8; n * es];
        if n > 0 {
            self.dev().download(src.buf.ptr(src.off), &mut bytes);
        }
        let mut out = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            for j in 0..cols {
                let k = (i * ld + j) * es;
                out.push(H::of(decode(src.buf.dtype, &bytes[k..k + es])));
            }
        }
        out
    }
}
