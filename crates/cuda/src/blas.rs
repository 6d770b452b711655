//! Row-major GEMMs on cuBLAS (column-major), and the choice of what they multiply in.
//!
//! A row-major `C = op(A)·op(B)` is the column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`: cuBLAS gets B's
//! memory as its first operand and A's as its second, each transposed when the view is.
//!
//! Input precision: bf16 products (fp32 accumulation) when both operands have a bf16 form
//! (bf16 storage, or a parameter's bf16 copy), or when either has only a bf16 form, or when
//! C is bf16; otherwise fp32 storage with `CUBLAS_COMPUTE_32F_FAST_16BF` under
//! [`Precision::Bf16`], plain fp32 under [`Precision::F32`]. An operand without the chosen
//! form is converted into a workspace first.

use crate::backend::{Cuda, Precision, WS_A, WS_B};
use crate::buf::{CudaBuf, DType};
use crate::device::{Compute, Gemm, P, Tv};
use boost_tensor::Mat;

/// A GEMM operand: the addresses of its element (0, 0) in fp32 and/or bf16, its stored
/// shape and row stride, whether it is used transposed, and the element stride between the
/// matrices of a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operand {
    pub f32: Option<u64>,
    pub bf16: Option<u64>,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub trans: bool,
    pub stride: usize,
}

impl Operand {
    /// Elements `off..` of a buffer as a `rows × cols` matrix with row stride `ld`.
    pub fn of(buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize, trans: bool, stride: usize) -> Self {
        let (f32, bf16) = match buf.dtype {
            DType::F32 => (Some(buf.ptr(off)), buf.shadow_ptr(off)),
            DType::Bf16 => (None, Some(buf.ptr(off))),
        };
        Self { f32, bf16, rows, cols, ld, trans, stride }
    }
    pub fn view(m: &Mat<CudaBuf>) -> Self {
        Self::of(m.buf, m.off, m.rows, m.cols, m.ld, m.trans, 0)
    }
    /// Shape after the transpose flag.
    fn op_shape(&self) -> (usize, usize) {
        if self.trans { (self.cols, self.rows) } else { (self.rows, self.cols) }
    }
    /// Row stride as cuBLAS needs it (a one-row view may carry a short stride).
    fn ld_eff(&self) -> usize {
        if self.rows <= 1 { self.ld.max(self.cols).max(1) } else { self.ld }
    }
    /// Elements the batch spans from element (0, 0).
    fn extent(&self, batch: usize) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return 0;
        }
        (batch - 1) * self.stride + (self.rows - 1) * self.ld + self.cols
    }
}

/// A GEMM output: address, storage type, row stride, batch stride.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Out {
    pub ptr: u64,
    pub dtype: DType,
    pub ld: usize,
    pub stride: usize,
}

impl Out {
    /// Elements `off..` of a buffer (its fp32 master weights, for a parameter buffer).
    pub fn of(buf: &CudaBuf, off: usize, ld: usize, stride: usize) -> Self {
        Self { ptr: buf.ptr(off), dtype: buf.dtype, ld, stride }
    }
}

impl Cuda {
    /// `operand` with a `want` form: as is, or converted into workspace `slot`.
    fn form(&self, x: &Operand, want: DType, slot: usize, batch: usize) -> u64 {
        let (have, other) = match want {
            DType::F32 => (x.f32, x.bf16),
            DType::Bf16 => (x.bf16, x.f32),
        };
        if let Some(p) = have {
            return p;
        }
        let src = other.expect("an operand has an fp32 or a bf16 form");
        let n = x.extent(batch);
        let dst = self.ws(slot, n * want.size());
        let from = if want == DType::F32 { DType::Bf16 } else { DType::F32 };
        let mut p = P::of(&[
            Tv { p: dst, ld: n as i64, bf: (want == DType::Bf16) as i32, pad: 0 },
            Tv { p: src, ld: n as i64, bf: (from == DType::Bf16) as i32, pad: 0 },
        ]);
        self.ew("k_copy", 1, n, &mut p);
        dst
    }

    /// `C_i = alpha·op(A_i)·op(B_i) + beta·C_i` for `batch` row-major matrices, `C_i` m×n.
    pub(crate) fn gemm_batched(
        &self,
        c: Out,
        a: Operand,
        b: Operand,
        (m, n, k): (usize, usize, usize),
        batch: usize,
        (alpha, beta): (f64, f64),
    ) {
        assert_eq!(a.op_shape(), (m, k), "gemm: A is {:?}, expected {m}×{k}", a.op_shape());
        assert_eq!(b.op_shape(), (k, n), "gemm: B is {:?}, expected {k}×{n}", b.op_shape());
        if m == 0 || n == 0 || batch == 0 {
            return;
        }
        if k == 0 {
            if beta == 0.0 {
                for i in 0..batch {
                    let ci = c.ptr + (i * c.stride * c.dtype.size()) as u64;
                    let mut p = P::of(&[Tv { p: ci, ld: c.ld as i64, bf: (c.dtype == DType::Bf16) as i32, pad: 0 }]);
                    self.ew("k_fill", m, n, &mut p);
                }
            }
            return;
        }
        let bf16_in = c.dtype == DType::Bf16
            || match self.precision() {
                Precision::F32 => false,
                Precision::Bf16 => (a.bf16.is_some() && b.bf16.is_some()) || a.f32.is_none() || b.f32.is_none(),
            };
        let (want, compute) = match (bf16_in, self.precision()) {
            (true, _) => (DType::Bf16, Compute::Bf16),
            (false, Precision::F32) => (DType::F32, Compute::F32),
            (false, Precision::Bf16) => (DType::F32, Compute::F32FastBf16),
        };
        let pa = self.form(&a, want, WS_A, batch);
        let pb = self.form(&b, want, WS_B, batch);
        let c_ld = if m <= 1 { c.ld.max(n).max(1) } else { c.ld };
        self.dev().gemm(&Gemm {
            ta: b.trans,
            tb: a.trans,
            m: n,
            n: m,
            k,
            a: pb,
            lda: b.ld_eff(),
            sa: b.stride,
            b: pa,
            ldb: a.ld_eff(),
            sb: a.stride,
            c: c.ptr,
            ldc: c_ld,
            sc: c.stride,
            c_type: c.dtype,
            batch,
            alpha: alpha as f32,
            beta: beta as f32,
            compute,
        });
    }
}
