//! How kernels of `kernels/` are launched: grid shapes, the views they take, and the refresh
//! of a parameter buffer's bf16 copy after a kernel writes its fp32 weights.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use crate::device::{Launch, P, Tv};
use boost_tensor::{Mat, MatMut};

/// Threads of row kernels and full reductions (`NT` in kernels/common.cuh).
pub(crate) const NT: u32 = 256;
/// Column-reduction blocks (`CR_X` × `CR_Y`).
const CR_X: u32 = 32;
const CR_Y: u32 = 8;
/// Upper bound on the blocks of a grid-stride launch.
const MAX_BLOCKS: usize = 4096;

impl P {
    /// A parameter block whose first views are `views`.
    pub(crate) fn of(views: &[Tv]) -> Self {
        let mut p = P::default();
        p.v[..views.len()].copy_from_slice(views);
        p
    }
}

/// The kernel view of elements `off..` of a buffer with row stride `ld` (the fp32 master
/// weights of a parameter buffer).
pub(crate) fn tv_of(buf: &CudaBuf, off: usize, ld: usize) -> Tv {
    Tv { p: buf.ptr(off), ld: ld as i64, bf: (buf.dtype == DType::Bf16) as i32, pad: 0 }
}
pub(crate) fn tv(m: &Mat<CudaBuf>) -> Tv {
    tv_of(m.buf, m.off, m.ld)
}
pub(crate) fn tvm(m: &MatMut<CudaBuf>) -> Tv {
    tv_of(m.buf, m.off, m.ld)
}
/// An fp32 workspace matrix with row stride `ld`.
pub(crate) fn tv_f32(p: u64, ld: usize) -> Tv {
    Tv { p, ld: ld as i64, bf: 0, pad: 0 }
}

pub(crate) fn same_shape<B>(a: (usize, usize), b: &Mat<B>, what: &str) {
    assert_eq!(a, (b.rows, b.cols), "{what}: shapes differ");
}

impl Cuda {
    /// Queue a kernel, after checking the launch against CUDA's limits.
    pub(crate) fn launch(&self, kernel: &'static str, at: Launch, p: &P) {
        let (g, b) = (at.grid, at.block);
        if g.0 == 0 || g.1 == 0 || g.2 == 0 {
            return;
        }
        assert!(b.0 * b.1 * b.2 <= 1024 && b.2 <= 64, "{kernel}: block {b:?} exceeds 1024 threads");
        assert!(g.1 <= 65535 && g.2 <= 65535 && g.0 < (1 << 31), "{kernel}: grid {g:?} too large");
        self.dev().launch(kernel, at, p)
    }

    /// `blocks` blocks of `NT` threads.
    pub(crate) fn blocks(&self, kernel: &'static str, blocks: usize, p: &P) {
        self.launch(kernel, Launch { grid: (blocks as u32, 1, 1), block: (NT, 1, 1) }, p)
    }

    /// A grid-stride kernel over `n` items (nothing when `n` is 0).
    pub(crate) fn flat(&self, kernel: &'static str, n: usize, p: &P) {
        if n > 0 {
            self.blocks(kernel, n.div_ceil(NT as usize).min(MAX_BLOCKS), p)
        }
    }

    /// Elementwise kernel over `rows × cols` (sets `n[0]`, `n[1]`).
    pub(crate) fn ew(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        self.flat(kernel, rows * cols, p)
    }

    /// One block of `NT` threads per row (sets `n[0]`, `n[1]`).
    pub(crate) fn per_row(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        self.blocks(kernel, rows, p)
    }

    /// A column reduction over `rows × cols` (sets `n[0]`, `n[1]`).
    pub(crate) fn per_col(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        let blocks = cols.div_ceil(CR_X as usize) as u32;
        self.launch(kernel, Launch { grid: (blocks, 1, 1), block: (CR_X, CR_Y, 1) }, p)
    }

    /// Refresh the bf16 copy of a parameter buffer over a rectangle written in fp32.
    pub(crate) fn resync(&self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) {
        let Some(sp) = buf.shadow_ptr(off) else { return };
        let mut p = P::of(&[Tv { p: sp, ld: ld as i64, bf: 1, pad: 0 }, tv_of(buf, off, ld)]);
        self.ew("k_copy", rows, cols, &mut p);
    }

    /// After a kernel wrote view `m`.
    pub(crate) fn touched(&self, m: &MatMut<CudaBuf>) {
        self.resync(m.buf, m.off, m.rows, m.cols, m.ld)
    }

    /// After a kernel wrote anywhere in `b`.
    pub(crate) fn touched_all(&self, b: &CudaBuf) {
        self.resync(b, 0, 1, b.len, b.len)
    }
}
