//! [`Cuda`]: the [`Backend`] on a GPU (or on the kernel emulator). Every method checks shapes
//! on the host as the CPU backend does, then queues kernels on the device's one stream.

use crate::buf::{CudaBuf, CudaIds, DType};
use crate::device::{Device, Launch, Mem, P, Tv};
use crate::probe::DeviceInfo;
use boost_tensor::cpu::IGNORE;
use boost_tensor::{AdamStep, AttnShape, Backend, Mat, MatMut, Scalar};
use std::sync::{Arc, Mutex};

/// What a backend stores and multiplies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything fp32; cuBLAS in plain fp32 arithmetic. For checks against the CPU engine.
    F32,
    /// Mixed precision: bf16 activations (`alloc_act`) and a bf16 compute copy of fp32 master
    /// weights (`alloc_param`); GEMMs multiply in bf16 and accumulate in fp32; gradients,
    /// optimizer state and statistics (`alloc`) are fp32.
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// Threads of row kernels and full reductions (`NT` in kernels/common.cuh).
const NT: u32 = 256;
/// Column-reduction blocks (`CR_X` × `CR_Y`).
const CR_X: u32 = 32;
const CR_Y: u32 = 8;
/// Blocks of a full reduction: fixed, so its summation order is too.
const SUM_BLOCKS: u32 = 64;
/// Row chunks whose Kronecker-factor gradient partials are summed in order.
const KRON_CHUNKS: usize = 64;
/// Upper bound on the blocks of a grid-stride launch.
const MAX_BLOCKS: usize = 4096;

/// Workspace slots: each operation uses each slot at most once.
pub(crate) const WS_A: usize = 0;
pub(crate) const WS_B: usize = 1;
const WS_PART: usize = 2;
const WS_KRON_U: usize = 3;
const WS_KRON_DU: usize = 4;
pub(crate) const WS_ATTN: usize = 5;
const WS_SLOTS: usize = 6;

/// The CUDA backend: one device, one stream, cuBLAS, the kernels of `kernels/`.
/// Cloning shares the device and its stream.
#[derive(Clone)]
pub struct Cuda {
    inner: Arc<Inner>,
}

struct Inner {
    dev: Box<dyn Device>,
    prec: Precision,
    ws: Mutex<Vec<Option<Mem>>>,
    emulated: bool,
}

impl Cuda {
    /// The backend on GPU `ordinal`. Fails (without panicking) when [`crate::probe_device`]
    /// does, or when the context, cuBLAS or the kernels cannot be set up.
    #[cfg(feature = "cuda")]
    pub fn new(ordinal: usize, prec: Precision) -> Result<Self, String> {
        let info = crate::probe::probe_device(ordinal)?;
        let dev = crate::cuda_dev::CudaDev::new(info)?;
        Ok(Self::with_device(Box::new(dev), prec, false))
    }

    /// The backend on the CPU emulator of the kernels and of cuBLAS.
    #[cfg(feature = "emulate")]
    pub fn emulated(prec: Precision) -> Self {
        Self::with_device(Box::new(crate::emu_dev::EmuDev::new()), prec, true)
    }

    fn with_device(dev: Box<dyn Device>, prec: Precision, emulated: bool) -> Self {
        let ws = Mutex::new((0..WS_SLOTS).map(|_| None).collect());
        Self { inner: Arc::new(Inner { dev, prec, ws, emulated }) }
    }

    pub fn precision(&self) -> Precision {
        self.inner.prec
    }
    pub fn info(&self) -> &DeviceInfo {
        self.inner.dev.info()
    }
    pub fn is_emulated(&self) -> bool {
        self.inner.emulated
    }
    /// Where the kernels came from (sm_90 cubin, PTX or NVRTC, and the compiler version).
    pub fn kernel_source(&self) -> String {
        self.inner.dev.kernel_source()
    }

    pub(crate) fn dev(&self) -> &dyn Device {
        &*self.inner.dev
    }

    /// A buffer of `n` elements of `dtype` (plus a bf16 copy when `shadow`).
    pub fn alloc_dtype(&self, n: usize, dtype: DType, shadow: bool) -> CudaBuf {
        let mem = self.dev().alloc(n * dtype.size());
        let shadow = shadow.then(|| self.dev().alloc(2 * n));
        CudaBuf { mem, len: n, dtype, shadow }
    }

    /// Device address of `bytes` of workspace in `slot`, valid until the slot grows.
    pub(crate) fn ws(&self, slot: usize, bytes: usize) -> u64 {
        let mut ws = self.inner.ws.lock().unwrap();
        if ws[slot].as_ref().is_none_or(|m| m.bytes < bytes) {
            ws[slot] = None;
            ws[slot] = Some(self.dev().alloc(bytes.max(256)));
        }
        ws[slot].as_ref().unwrap().ptr
    }

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

    /// Elementwise kernel over `rows × cols` (sets `n[0]`, `n[1]`).
    fn ew(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        let n = rows * cols;
        if n == 0 {
            return;
        }
        let blocks = n.div_ceil(NT as usize).min(MAX_BLOCKS) as u32;
        self.launch(kernel, Launch { grid: (blocks, 1, 1), block: (NT, 1, 1) }, p)
    }

    /// One block of `NT` threads per row (sets `n[0]`, `n[1]`).
    fn per_row(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        self.launch(kernel, Launch { grid: (rows as u32, 1, 1), block: (NT, 1, 1) }, p)
    }

    /// A column reduction over `rows × cols` (sets `n[0]`, `n[1]`).
    fn per_col(&self, kernel: &'static str, rows: usize, cols: usize, p: &mut P) {
        p.n[0] = rows as i64;
        p.n[1] = cols as i64;
        let blocks = cols.div_ceil(CR_X as usize) as u32;
        self.launch(kernel, Launch { grid: (blocks, 1, 1), block: (CR_X, CR_Y, 1) }, p)
    }

    /// Refresh the bf16 copy of a parameter buffer over a rectangle written in fp32.
    pub(crate) fn resync(&self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) {
        let Some(sp) = buf.shadow_ptr(off) else { return };
        let mut p = P::default();
        p.v[0] = Tv { p: sp, ld: ld as i64, bf: 1, pad: 0 };
        p.v[1] = tv_of(buf, off, ld);
        self.ew("k_copy", rows, cols, &mut p);
    }

    fn touched(&self, m: &MatMut<CudaBuf>) {
        self.resync(m.buf, m.off, m.rows, m.cols, m.ld)
    }

    fn touched_all(&self, b: &CudaBuf) {
        self.resync(b, 0, 1, b.len, b.len)
    }

    /// Σ of (squared) elements: fixed blocks write fp64 partials, summed here in order.
    fn full_sum(&self, x: Mat<CudaBuf>, square: bool) -> f64 {
        if x.rows == 0 || x.cols == 0 {
            return 0.0;
        }
        let part = self.ws(WS_PART, 8 * SUM_BLOCKS as usize);
        let mut p = P::default();
        p.v[0] = tv(&x);
        p.v[1].p = part;
        p.n = [x.rows as i64, x.cols as i64, square as i64, 0, 0, 0];
        self.launch("k_full_sum", Launch { grid: (SUM_BLOCKS, 1, 1), block: (NT, 1, 1) }, &p);
        let mut bytes = vec![0u8; 8 * SUM_BLOCKS as usize];
        self.dev().download(part, &mut bytes);
        bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).sum()
    }
}

/// The kernel view of elements `off..` of a buffer with row stride `ld` (the fp32 master
/// weights of a parameter buffer).
pub(crate) fn tv_of(buf: &CudaBuf, off: usize, ld: usize) -> Tv {
    Tv { p: buf.ptr(off), ld: ld as i64, bf: (buf.dtype == DType::Bf16) as i32, pad: 0 }
}
fn tv(m: &Mat<CudaBuf>) -> Tv {
    tv_of(m.buf, m.off, m.ld)
}
fn tvm(m: &MatMut<CudaBuf>) -> Tv {
    tv_of(m.buf, m.off, m.ld)
}

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

fn same_shape<B>(a: (usize, usize), b: &Mat<B>, what: &str) {
    assert_eq!(a, (b.rows, b.cols), "{what}: shapes differ");
}

impl Backend for Cuda {
    type Buf = CudaBuf;
    type Ids = CudaIds;

    fn name(&self) -> String {
        let kind = if self.inner.emulated { "cuda-emulated" } else { "cuda" };
        format!("{kind}-{}", self.inner.prec.name())
    }
    fn elem_bytes(&self) -> usize {
        match self.inner.prec {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }

    fn alloc(&self, n: usize) -> CudaBuf {
        self.alloc_dtype(n, DType::F32, false)
    }
    fn alloc_param(&self, n: usize) -> CudaBuf {
        self.alloc_dtype(n, DType::F32, self.inner.prec == Precision::Bf16)
    }
    fn alloc_act(&self, n: usize) -> CudaBuf {
        match self.inner.prec {
            Precision::F32 => self.alloc_dtype(n, DType::F32, false),
            Precision::Bf16 => self.alloc_dtype(n, DType::Bf16, false),
        }
    }
    fn sync(&self) {
        self.dev().sync()
    }
    fn alloc_ids(&self, n: usize) -> CudaIds {
        CudaIds { mem: self.dev().alloc(4 * n), host: vec![0; n] }
    }
    fn write_ids(&self, dst: &mut CudaIds, src: &[u32]) {
        dst.host[..src.len()].copy_from_slice(src);
        let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.dev().upload(dst.ptr(), &bytes);
    }

    fn write_mat<H: Scalar>(&self, dst: MatMut<CudaBuf>, src: &[H]) {
        let (rows, cols, ld) = (dst.rows, dst.cols, dst.ld);
        assert_eq!(src.len(), rows * cols, "write_mat: host data has {} elements for {rows}×{cols}", src.len());
        let n = span(rows, cols, ld);
        if n == 0 {
            return;
        }
        let es = dst.buf.dtype.size();
        let at = dst.buf.ptr(dst.off);
        let mut bytes = vec![0u8; n * es];
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

    fn read_mat<H: Scalar>(&self, src: Mat<CudaBuf>) -> Vec<H> {
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

    fn gemm(&self, c: MatMut<CudaBuf>, a: Mat<CudaBuf>, b: Mat<CudaBuf>, alpha: f64, accumulate: bool) {
        self.gemm_views(c, a, b, alpha, accumulate)
    }

    fn fill(&self, x: MatMut<CudaBuf>, v: f64) {
        let mut p = P::default();
        p.v[0] = tvm(&x);
        p.f[0] = v;
        self.ew("k_fill", x.rows, x.cols, &mut p);
        self.touched(&x);
    }
    fn copy(&self, dst: MatMut<CudaBuf>, src: Mat<CudaBuf>) {
        same_shape((dst.rows, dst.cols), &src, "copy");
        let mut p = P::default();
        p.v[0] = tvm(&dst);
        p.v[1] = tv(&src);
        self.ew("k_copy", dst.rows, dst.cols, &mut p);
        self.touched(&dst);
    }
    fn axpy(&self, dst: MatMut<CudaBuf>, src: Mat<CudaBuf>, alpha: f64) {
        same_shape((dst.rows, dst.cols), &src, "axpy");
        let mut p = P::default();
        p.v[0] = tvm(&dst);
        p.v[1] = tv(&src);
        p.f[0] = alpha;
        self.ew("k_axpy", dst.rows, dst.cols, &mut p);
        self.touched(&dst);
    }
    fn scale(&self, x: MatMut<CudaBuf>, s: f64) {
        let mut p = P::default();
        p.v[0] = tvm(&x);
        p.f[0] = s;
        self.ew("k_scale", x.rows, x.cols, &mut p);
        self.touched(&x);
    }
    fn mul_rows(&self, x: MatMut<CudaBuf>, row: Mat<CudaBuf>) {
        assert_eq!((row.rows, row.cols), (x.rows, 1), "mul_rows: one factor per row");
        let mut p = P::default();
        p.v[0] = tvm(&x);
        p.v[1] = tv(&row);
        self.ew("k_mul_rows", x.rows, x.cols, &mut p);
        self.touched(&x);
    }
    fn mul_cols(&self, y: MatMut<CudaBuf>, x: Mat<CudaBuf>, col: Mat<CudaBuf>) {
        assert_eq!(col.rows * col.cols, x.cols, "mul_cols: one factor per column");
        same_shape((y.rows, y.cols), &x, "mul_cols");
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = tv(&x);
        p.v[2] = tv(&col);
        self.ew("k_mul_cols", y.rows, y.cols, &mut p);
        self.touched(&y);
    }
    fn sumsq(&self, x: Mat<CudaBuf>) -> f64 {
        self.full_sum(x, true)
    }
    fn sum(&self, x: Mat<CudaBuf>) -> f64 {
        self.full_sum(x, false)
    }

    fn row_sumsq(&self, out: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
        assert_eq!((out.rows, out.cols), (x.rows, 1), "row_sumsq: one output per row");
        let mut p = P::default();
        p.v[0] = tvm(&out);
        p.v[1] = tv(&x);
        self.per_row("k_row_sumsq", x.rows, x.cols, &mut p);
        self.touched(&out);
    }
    fn rstd_from_sumsq(&self, s: MatMut<CudaBuf>, n: usize, eps: f64) {
        let mut p = P::default();
        p.v[0] = tvm(&s);
        p.n[2] = n as i64;
        p.f[0] = eps;
        self.ew("k_rstd_from_sumsq", s.rows, s.cols, &mut p);
        self.touched(&s);
    }
    fn rmsnorm_apply(&self, y: MatMut<CudaBuf>, x: Mat<CudaBuf>, gamma: Mat<CudaBuf>, rstd: Mat<CudaBuf>) {
        same_shape((y.rows, y.cols), &x, "rmsnorm_apply");
        assert_eq!(gamma.cols, x.cols, "rmsnorm_apply: gamma width");
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = tv(&x);
        p.v[2] = tv(&gamma);
        p.v[3] = tv(&rstd);
        self.ew("k_rmsnorm_apply", y.rows, y.cols, &mut p);
        self.touched(&y);
    }
    fn rmsnorm_bwd_dot(&self, dot: MatMut<CudaBuf>, dy: Mat<CudaBuf>, x: Mat<CudaBuf>, gamma: Mat<CudaBuf>) {
        assert_eq!(dot.rows, x.rows, "rmsnorm_bwd_dot: one output per row");
        let mut p = P::default();
        p.v[0] = tvm(&dot);
        p.v[1] = tv(&dy);
        p.v[2] = tv(&x);
        p.v[3] = tv(&gamma);
        self.per_row("k_rmsnorm_bwd_dot", x.rows, x.cols, &mut p);
        self.touched(&dot);
    }
    fn rmsnorm_bwd(
        &self,
        dx: MatMut<CudaBuf>,
        dgamma: MatMut<CudaBuf>,
        dy: Mat<CudaBuf>,
        x: Mat<CudaBuf>,
        gamma: Mat<CudaBuf>,
        rstd: Mat<CudaBuf>,
        dot: Mat<CudaBuf>,
        n: usize,
        accumulate: bool,
    ) {
        assert_eq!((dgamma.rows, dgamma.cols), (1, x.cols), "rmsnorm_bwd: dgamma is 1×{}", x.cols);
        same_shape((dx.rows, dx.cols), &x, "rmsnorm_bwd");
        let mut p = P::default();
        p.v[0] = tvm(&dgamma);
        p.v[1] = tv(&dy);
        p.v[2] = tv(&x);
        p.v[3] = tv(&rstd);
        self.per_col("k_rmsnorm_dgamma", x.rows, x.cols, &mut p);
        self.touched(&dgamma);
        let mut p = P::default();
        p.v[0] = tvm(&dx);
        p.v[1] = tv(&dy);
        p.v[2] = tv(&x);
        p.v[3] = tv(&gamma);
        p.v[4] = tv(&rstd);
        p.v[5] = tv(&dot);
        p.n[2] = n as i64;
        p.n[3] = accumulate as i64;
        self.ew("k_rmsnorm_bwd_dx", dx.rows, dx.cols, &mut p);
        self.touched(&dx);
    }
    fn row_dot(
        &self,
        out: MatMut<CudaBuf>,
        a: Mat<CudaBuf>,
        b: Mat<CudaBuf>,
        row: Option<Mat<CudaBuf>>,
        alpha: f64,
        accumulate: bool,
    ) {
        assert_eq!(out.rows, a.rows, "row_dot: one output per row");
        same_shape((a.rows, a.cols), &b, "row_dot");
        let mut p = P::default();
        p.v[0] = tvm(&out);
        p.v[1] = tv(&a);
        p.v[2] = tv(&b);
        if let Some(r) = &row {
            p.v[3] = tv(r);
        }
        p.n[2] = row.is_some() as i64;
        p.n[3] = accumulate as i64;
        p.f[0] = alpha;
        self.per_row("k_row_dot", a.rows, a.cols, &mut p);
        self.touched(&out);
    }
    fn online_norm_bwd(
        &self,
        dx: MatMut<CudaBuf>,
        dgamma: MatMut<CudaBuf>,
        g: Mat<CudaBuf>,
        x: Mat<CudaBuf>,
        gamma: Mat<CudaBuf>,
        ds: Mat<CudaBuf>,
        accumulate: bool,
    ) {
        assert_eq!((dgamma.rows, dgamma.cols), (1, x.cols), "online_norm_bwd: dgamma is 1×{}", x.cols);
        same_shape((dx.rows, dx.cols), &x, "online_norm_bwd");
        let mut p = P::default();
        p.v[0] = tvm(&dgamma);
        p.v[1] = tv(&x);
        p.v[2] = tv(&g);
        self.per_col("k_online_norm_dgamma", x.rows, x.cols, &mut p);
        self.touched(&dgamma);
        let mut p = P::default();
        p.v[0] = tvm(&dx);
        p.v[1] = tv(&g);
        p.v[2] = tv(&x);
        p.v[3] = tv(&gamma);
        p.v[4] = tv(&ds);
        p.n[3] = accumulate as i64;
        self.ew("k_online_norm_bwd_dx", dx.rows, dx.cols, &mut p);
        self.touched(&dx);
    }

    fn layernorm_fwd(
        &self,
        y: MatMut<CudaBuf>,
        mean: MatMut<CudaBuf>,
        rstd: MatMut<CudaBuf>,
        x: Mat<CudaBuf>,
        w: Mat<CudaBuf>,
        b: Mat<CudaBuf>,
        eps: f64,
    ) {
        same_shape((y.rows, y.cols), &x, "layernorm_fwd");
        assert!(mean.rows == x.rows && rstd.rows == x.rows, "layernorm_fwd: one mean and rstd per row");
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = tvm(&mean);
        p.v[2] = tvm(&rstd);
        p.v[3] = tv(&x);
        p.v[4] = tv(&w);
        p.v[5] = tv(&b);
        p.f[0] = eps;
        self.per_row("k_layernorm_fwd", x.rows, x.cols, &mut p);
        self.touched(&y);
        self.touched(&mean);
        self.touched(&rstd);
    }
    fn layernorm_bwd(
        &self,
        dx: MatMut<CudaBuf>,
        dw: MatMut<CudaBuf>,
        db: MatMut<CudaBuf>,
        dy: Mat<CudaBuf>,
        x: Mat<CudaBuf>,
        w: Mat<CudaBuf>,
        mean: Mat<CudaBuf>,
        rstd: Mat<CudaBuf>,
    ) {
        same_shape((dx.rows, dx.cols), &x, "layernorm_bwd");
        assert!(dw.rows == 1 && db.rows == 1 && dw.cols == x.cols && db.cols == x.cols, "layernorm_bwd: dw, db");
        let mut p = P::default();
        p.v[0] = tvm(&dw);
        p.v[1] = tv(&dy);
        p.v[2] = tv(&x);
        p.v[3] = tv(&mean);
        p.v[4] = tv(&rstd);
        self.per_col("k_layernorm_dw", x.rows, x.cols, &mut p);
        self.touched(&dw);
        let mut p = P::default();
        p.v[0] = tvm(&db);
        p.v[1] = tv(&dy);
        self.per_col("k_bias_grad", x.rows, x.cols, &mut p);
        self.touched(&db);
        let mut p = P::default();
        p.v[0] = tvm(&dx);
        p.v[1] = tv(&dy);
        p.v[2] = tv(&x);
        p.v[3] = tv(&w);
        p.v[4] = tv(&mean);
        p.v[5] = tv(&rstd);
        self.per_row("k_layernorm_bwd_dx", x.rows, x.cols, &mut p);
        self.touched(&dx);
    }

    fn silu(&self, y: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
        same_shape((y.rows, y.cols), &x, "silu");
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = tv(&x);
        self.ew("k_silu", y.rows, y.cols, &mut p);
        self.touched(&y);
    }
    fn silu_bwd(&self, d: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
        same_shape((d.rows, d.cols), &x, "silu_bwd");
        let mut p = P::default();
        p.v[0] = tvm(&d);
        p.v[1] = tv(&x);
        self.ew("k_silu_bwd", d.rows, d.cols, &mut p);
        self.touched(&d);
    }
    fn swiglu(&self, m: MatMut<CudaBuf>, gu: Mat<CudaBuf>, outer_silu: bool) {
        assert_eq!((gu.rows, gu.cols), (2 * m.rows, m.cols), "swiglu: g stacked over u");
        let mut p = P::default();
        p.v[0] = tvm(&m);
        p.v[1] = tv(&gu);
        p.n[2] = outer_silu as i64;
        self.ew("k_swiglu", m.rows, m.cols, &mut p);
        self.touched(&m);
    }
    fn swiglu_bwd(&self, dgu: MatMut<CudaBuf>, dm: Mat<CudaBuf>, gu: Mat<CudaBuf>, outer_silu: bool) {
        assert_eq!((dgu.rows, dgu.cols), (2 * dm.rows, dm.cols), "swiglu_bwd: dgu stacked like gu");
        assert_eq!((gu.rows, gu.cols), (2 * dm.rows, dm.cols), "swiglu_bwd: gu");
        let mut p = P::default();
        p.v[0] = tvm(&dgu);
        p.v[1] = tv(&dm);
        p.v[2] = tv(&gu);
        p.n[2] = outer_silu as i64;
        self.ew("k_swiglu_bwd", dm.rows, dm.cols, &mut p);
        self.touched(&dgu);
    }
    fn add_bias(&self, y: MatMut<CudaBuf>, b: Mat<CudaBuf>) {
        assert_eq!(b.cols, y.cols, "add_bias: width");
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = tv(&b);
        self.ew("k_add_bias", y.rows, y.cols, &mut p);
        self.touched(&y);
    }
    fn bias_grad(&self, db: MatMut<CudaBuf>, dy: Mat<CudaBuf>) {
        assert_eq!(db.cols, dy.cols, "bias_grad: width");
        assert_eq!(db.rows, 1, "bias_grad: column reduction into a 1×n row");
        let mut p = P::default();
        p.v[0] = tvm(&db);
        p.v[1] = tv(&dy);
        self.per_col("k_bias_grad", dy.rows, dy.cols, &mut p);
        self.touched(&db);
    }

    fn rope_table(&self, seq: usize, head_dim: usize, theta: f64) -> CudaBuf {
        let table: Vec<f64> = boost_tensor::cpu::Cpu::<f64>::new().rope_table(seq, head_dim, theta);
        let mut buf = self.alloc(table.len());
        let n = table.len();
        self.write_mat(MatMut::new(&mut buf, 1, n), &table);
        buf
    }
    fn rope(&self, x: MatMut<CudaBuf>, table: &CudaBuf, seq: usize, head_dim: usize, inverse: bool) {
        assert_eq!(x.cols % head_dim, 0, "rope: width {} is not a multiple of the head dim {head_dim}", x.cols);
        assert_eq!(table.len, seq * (head_dim / 2) * 2, "rope: table for another shape");
        assert_eq!(table.dtype, DType::F32, "rope: the table is fp32");
        let mut p = P::default();
        p.v[0] = tvm(&x);
        p.v[1] = tv_of(table, 0, 0);
        p.n[2] = seq as i64;
        p.n[3] = head_dim as i64;
        p.n[4] = inverse as i64;
        p.n[0] = x.rows as i64;
        p.n[1] = x.cols as i64;
        // One thread per rotated pair.
        let n = x.rows * x.cols / 2;
        if n > 0 {
            let blocks = n.div_ceil(NT as usize).min(MAX_BLOCKS) as u32;
            self.launch("k_rope", Launch { grid: (blocks, 1, 1), block: (NT, 1, 1) }, &p);
        }
        self.touched(&x);
    }
    fn attention_fwd(&self, out: MatMut<CudaBuf>, probs: &mut CudaBuf, qkv: &CudaBuf, shape: AttnShape) {
        self.attn_fwd(out, probs, qkv, shape)
    }
    fn attention_bwd(
        &self,
        dqkv: &mut CudaBuf,
        dout: Mat<CudaBuf>,
        probs: &CudaBuf,
        scratch: &mut CudaBuf,
        qkv: &CudaBuf,
        shape: AttnShape,
    ) {
        self.attn_bwd(dqkv, dout, probs, scratch, qkv, shape);
        self.touched_all(dqkv);
    }

    fn embed(&self, out: MatMut<CudaBuf>, table: Mat<CudaBuf>, ids: &CudaIds, first: usize) {
        assert_eq!(out.rows, ids.len(), "embed: one row per id");
        assert_eq!(out.cols, table.cols, "embed: width");
        let mut p = P::default();
        p.v[0] = tvm(&out);
        p.v[1] = tv(&table);
        p.v[2].p = ids.ptr();
        p.n[2] = first as i64;
        p.n[3] = table.rows as i64;
        self.ew("k_embed", out.rows, out.cols, &mut p);
        self.touched(&out);
    }
    fn embed_bwd(&self, dtable: MatMut<CudaBuf>, dout: Mat<CudaBuf>, ids: &CudaIds, first: usize) {
        assert_eq!(dout.rows, ids.len(), "embed_bwd: one row per id");
        assert_eq!(dtable.cols, dout.cols, "embed_bwd: width");
        let mut p = P::default();
        p.v[0] = tvm(&dtable);
        p.v[1] = tv(&dout);
        p.v[2].p = ids.ptr();
        p.n = [dout.rows as i64, dout.cols as i64, first as i64, dtable.rows as i64, 0, 0];
        let blocks = dout.cols.div_ceil(NT as usize) as u32;
        self.launch("k_embed_bwd", Launch { grid: (blocks, 1, 1), block: (NT, 1, 1) }, &p);
        self.touched(&dtable);
    }
    fn cross_entropy(
        &self,
        losses: MatMut<CudaBuf>,
        logits: MatMut<CudaBuf>,
        targets: &CudaIds,
        grad_scale: Option<f64>,
    ) {
        assert_eq!(logits.rows, targets.len(), "cross_entropy: one target per row");
        assert_eq!((losses.rows, losses.cols), (targets.len(), 1), "cross_entropy: one loss per row");
        let v = logits.cols;
        for &t in &targets.host {
            assert!(t == IGNORE || (t as usize) < v, "target id {t} is outside the vocabulary of {v}");
        }
        let mut p = P::default();
        p.v[0] = tvm(&losses);
        p.v[1] = tvm(&logits);
        p.v[2].p = targets.ptr();
        p.n[2] = grad_scale.is_some() as i64;
        p.f[0] = grad_scale.unwrap_or(0.0);
        self.per_row("k_cross_entropy", logits.rows, v, &mut p);
        self.touched(&losses);
        self.touched(&logits);
    }

    fn row_max(&self, max: MatMut<CudaBuf>, logits: Mat<CudaBuf>) {
        assert_eq!((max.rows, max.cols), (logits.rows, 1), "row_max: one output per row");
        let mut p = P::default();
        p.v[0] = tvm(&max);
        p.v[1] = tv(&logits);
        self.per_row("k_row_max", logits.rows, logits.cols, &mut p);
        self.touched(&max);
    }
    fn xent_partials(
        &self,
        stats: MatMut<CudaBuf>,
        logits: Mat<CudaBuf>,
        max: Mat<CudaBuf>,
        targets: &CudaIds,
        first: usize,
    ) {
        assert_eq!((stats.rows, stats.cols), (logits.rows, 2), "xent_partials: stats are rows×2");
        assert_eq!(logits.rows, targets.len(), "xent_partials: one target per row");
        let mut p = P::default();
        p.v[0] = tvm(&stats);
        p.v[1] = tv(&logits);
        p.v[2] = tv(&max);
        p.v[3].p = targets.ptr();
        p.n[2] = first as i64;
        self.per_row("k_xent_partials", logits.rows, logits.cols, &mut p);
        self.touched(&stats);
    }
    fn xent_finish(
        &self,
        losses: MatMut<CudaBuf>,
        logits: MatMut<CudaBuf>,
        max: Mat<CudaBuf>,
        stats: Mat<CudaBuf>,
        targets: &CudaIds,
        first: usize,
        grad_scale: Option<f64>,
    ) {
        assert_eq!(logits.rows, targets.len(), "xent_finish: one target per row");
        assert_eq!(losses.rows, targets.len(), "xent_finish: one loss per row");
        let mut p = P::default();
        p.v[0] = tvm(&losses);
        p.v[1] = tvm(&logits);
        p.v[2] = tv(&max);
        p.v[3] = tv(&stats);
        p.v[4].p = targets.ptr();
        p.n[2] = first as i64;
        p.n[3] = grad_scale.is_some() as i64;
        p.f[0] = grad_scale.unwrap_or(0.0);
        self.per_row("k_xent_finish", logits.rows, logits.cols, &mut p);
        self.touched(&losses);
        self.touched(&logits);
    }

    fn kron_fwd(
        &self,
        y: MatMut<CudaBuf>,
        z: Mat<CudaBuf>,
        ka: Mat<CudaBuf>,
        kb: Mat<CudaBuf>,
        _scratch: &mut CudaBuf,
        accumulate: bool,
    ) {
        let (a, b, rows) = (ka.rows, kb.rows, z.rows);
        assert_eq!(z.cols, a * b, "kron_fwd: latent width {} is not {a}·{b}", z.cols);
        assert_eq!((y.rows, y.cols), (rows, a * b), "kron_fwd: output shape");
        let u = self.ws(WS_KRON_U, 4 * rows * a * b);
        let uv = Tv { p: u, ld: (a * b) as i64, bf: 0, pad: 0 };
        let mut p = P::default();
        p.v[0] = uv;
        p.v[1] = tv(&z);
        p.v[2] = tv(&kb);
        p.n[2] = a as i64;
        p.n[3] = b as i64;
        self.ew("k_kron_right", rows, a * b, &mut p);
        let mut p = P::default();
        p.v[0] = tvm(&y);
        p.v[1] = uv;
        p.v[2] = tv(&ka);
        p.n[2] = a as i64;
        p.n[3] = b as i64;
        p.n[4] = accumulate as i64;
        self.ew("k_kron_left", rows, a * b, &mut p);
        self.touched(&y);
    }
    fn kron_bwd(
        &self,
        dz: MatMut<CudaBuf>,
        dka: MatMut<CudaBuf>,
        dkb: MatMut<CudaBuf>,
        dy: Mat<CudaBuf>,
        z: Mat<CudaBuf>,
        ka: Mat<CudaBuf>,
        kb: Mat<CudaBuf>,
        _scratch: &mut CudaBuf,
    ) {
        let (a, b, rows) = (ka.rows, kb.rows, z.rows);
        let r = a * b;
        assert_eq!((dz.rows, dz.cols), (rows, r), "kron_bwd: dz shape");
        assert_eq!((dka.rows, dka.cols, dkb.rows, dkb.cols), (a, a, b, b), "kron_bwd: factor gradient shapes");
        let dims = |p: &mut P| {
            p.n[2] = a as i64;
            p.n[3] = b as i64;
        };
        let u = Tv { p: self.ws(WS_KRON_U, 4 * rows * r), ld: r as i64, bf: 0, pad: 0 };
        let du = Tv { p: self.ws(WS_KRON_DU, 4 * rows * r), ld: r as i64, bf: 0, pad: 0 };
        let run = |k: &'static str, rows: usize, cols: usize, v: [Tv; 3], extra: &dyn Fn(&mut P)| {
            let mut p = P::default();
            p.v[..3].copy_from_slice(&v);
            dims(&mut p);
            extra(&mut p);
            self.ew(k, rows, cols, &mut p);
        };
        run("k_kron_right", rows, r, [u, tv(&z), tv(&kb)], &|_| {});
        run("k_kron_du", rows, r, [du, tv(&dy), tv(&ka)], &|_| {});
        run("k_kron_dz", rows, r, [tvm(&dz), du, tv(&kb)], &|_| {});
        self.touched(&dz);
        let per = rows.div_ceil(KRON_CHUNKS).max(1);
        let part = self.ws(WS_PART, 4 * KRON_CHUNKS * (a * a).max(b * b));
        let chunked = |p: &mut P| {
            p.n[0] = rows as i64;
            p.n[4] = KRON_CHUNKS as i64;
            p.n[5] = per as i64;
        };
        for (kernel, width, x, y, out) in
            [("k_kron_dka_part", a, u, tv(&dy), tvm(&dka)), ("k_kron_dkb_part", b, tv(&z), du, tvm(&dkb))]
        {
            let w = width * width;
            let pv = Tv { p: part, ld: w as i64, bf: 0, pad: 0 };
            let mut p = P::default();
            p.v[0] = pv;
            p.v[1] = x;
            p.v[2] = y;
            dims(&mut p);
            chunked(&mut p);
            // The grid covers chunks × width² outputs; n[0] is the row count the kernel reads.
            let blocks = (KRON_CHUNKS * w).div_ceil(NT as usize).min(MAX_BLOCKS) as u32;
            self.launch(kernel, Launch { grid: (blocks, 1, 1), block: (NT, 1, 1) }, &p);
            let mut p = P::default();
            p.v[0] = out;
            p.v[1] = pv;
            p.n[2] = KRON_CHUNKS as i64;
            self.ew("k_sum_parts", width, width, &mut p);
        }
        self.touched(&dka);
        self.touched(&dkb);
    }

    fn adamw(
        &self,
        p: &mut CudaBuf,
        g: &CudaBuf,
        m: &mut CudaBuf,
        v: &mut CudaBuf,
        off: usize,
        n: usize,
        step: &AdamStep,
        decay: bool,
    ) {
        for (b, what) in [(&*p, "p"), (g, "g"), (&*m, "m"), (&*v, "v")] {
            assert!(off + n <= b.len, "adamw: {what} has {} elements, the update needs {}", b.len, off + n);
        }
        let mut q = P::default();
        q.v[0] = tv_of(p, off, n);
        q.v[1] = tv_of(g, off, n);
        q.v[2] = tv_of(m, off, n);
        q.v[3] = tv_of(v, off, n);
        if let Some(sp) = p.shadow_ptr(off) {
            q.v[4] = Tv { p: sp, ld: n as i64, bf: 1, pad: 0 };
            q.n[2] = 1;
        }
        let s = step;
        q.f[..9].copy_from_slice(&[
            s.beta1,
            s.beta2,
            1.0 - s.beta1,
            1.0 - s.beta2,
            if decay { 1.0 - s.lr * s.weight_decay } else { 1.0 },
            s.lr / s.bias_corr1,
            s.bias_corr2.sqrt(),
            s.eps,
            s.grad_scale,
        ]);
        q.n[1] = n as i64;
        if n > 0 {
            let blocks = n.div_ceil(NT as usize).min(MAX_BLOCKS) as u32;
            self.launch("k_adamw", Launch { grid: (blocks, 1, 1), block: (NT, 1, 1) }, &q);
        }
    }
}
