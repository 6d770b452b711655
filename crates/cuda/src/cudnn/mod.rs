//! cuDNN's fused attention (feature `cudnn`): the C++ shim of `cudnn/sdpa.cpp` over the cuDNN
//! frontend's SDPA graphs, with libcudnn opened at run time. [`Sdpa`] is one backend's cuDNN
//! handle on its stream; its graphs are built once per shape, its workspace and bf16 staging
//! come from the backend's allocator (workspace slots).
//!
//! Where libcudnn is looked for, in order: `$BOOST_CUDNN_LIB` (the library or its folder),
//! else `libcudnn.so.9` on the loader's path, then the `nvidia/cudnn/lib` folder of each
//! site-packages of `python3` (PyTorch's CUDA wheels carry it). When it lies in a wheel's
//! `nvidia/cudnn/lib`, the CUDA runtime it was built for is opened from the wheels beside it
//! (`nvidia/cu13/lib`, `nvidia/cuda_runtime/lib`), where the frontend finds it by soname
//! (`CUDNN_FRONTEND_CUDART_LIB_NAME` names another).

mod library;
mod staging;

pub(crate) use library::{library, version_name};

use crate::backend::{Cuda, WS_CUDNN};
use crate::buf::{CudaBuf, DType};
use boost_tensor::{AttentionBwd, AttnShape, MatMut};
use staging::Staging;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

#[repr(C)]
#[derive(Clone, Copy)]
struct BoostSdpa {
    batch: i64,
    seq: i64,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    ld_q: i64,
    ld_kv: i64,
    ld_o: i64,
    ld_do: i64,
    scale: f32,
}

#[repr(C)]
struct Fwd {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    stats: u64,
}

#[repr(C)]
struct Bwd {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
    d_o: u64,
    stats: u64,
    dq: u64,
    dk: u64,
    dv: u64,
}

unsafe extern "C" {
    fn boost_cudnn_load(cudnn: *const c_char, err: *mut c_char, n: usize) -> i32;
    fn boost_cudnn_open_global(path: *const c_char, err: *mut c_char, n: usize) -> i32;
    fn boost_cudnn_version() -> i64;
    fn boost_cudnn_cudart_version() -> i64;
    fn boost_cudnn_create(stream: *mut c_void, err: *mut c_char, n: usize) -> *mut c_void;
    fn boost_cudnn_destroy(ctx: *mut c_void);
    fn boost_cudnn_prepare(
        ctx: *mut c_void,
        s: *const BoostSdpa,
        bwd: i32,
        ws: *mut i64,
        err: *mut c_char,
        n: usize,
    ) -> i32;
    fn boost_cudnn_fwd(
        ctx: *mut c_void,
        s: *const BoostSdpa,
        a: *const Fwd,
        ws: u64,
        err: *mut c_char,
        n: usize,
    ) -> i32;
    fn boost_cudnn_bwd(
        ctx: *mut c_void,
        s: *const BoostSdpa,
        a: *const Bwd,
        ws: u64,
        err: *mut c_char,
        n: usize,
    ) -> i32;
}

/// Calls `f` with a message buffer; its text when `f` returns non-zero.
fn checked(f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<(), String> {
    let mut buf = vec![0u8; 2048];
    if f(buf.as_mut_ptr().cast(), buf.len()) == 0 {
        return Ok(());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Err(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}

/// One backend's cuDNN handle and, per shape, whether cuDNN's graphs take it.
pub(crate) struct Sdpa {
    ctx: *mut c_void,
    /// Held across every call into the shim (its graph cache is not thread-safe).
    shapes: Mutex<HashMap<[usize; 5], Result<(), String>>>,
}

// SAFETY: the handle is used by one thread at a time (`shapes`' lock is held across every
// call into the shim) and its work goes on the backend's one stream.
unsafe impl Send for Sdpa {}
unsafe impl Sync for Sdpa {}

impl Drop for Sdpa {
    fn drop(&mut self) {
        // SAFETY: made by boost_cudnn_create, destroyed once.
        unsafe { boost_cudnn_destroy(self.ctx) }
    }
}

fn key(sh: &AttnShape) -> [usize; 5] {
    [sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim]
}

/// The shim's view of a shape: q/k/v at the row strides of `qkv`, o and dO at theirs.
fn layout(sh: &AttnShape, ld_o: usize, ld_do: usize) -> BoostSdpa {
    BoostSdpa {
        batch: sh.batch as i64,
        seq: sh.seq as i64,
        heads: sh.heads as i64,
        kv_heads: sh.kv_heads as i64,
        head_dim: sh.head_dim as i64,
        ld_q: sh.q_width() as i64,
        ld_kv: sh.kv_width() as i64,
        ld_o: ld_o as i64,
        ld_do: ld_do as i64,
        scale: 1.0 / (sh.head_dim as f32).sqrt(),
    }
}

impl Sdpa {
    /// A handle on `be`'s stream (the GPU's; never the emulator's).
    pub(crate) fn new(be: &Cuda) -> Result<Self, String> {
        library()?;
        let dev = be.gpu().ok_or("cuDNN needs a GPU; this backend is the CUDA emulator")?;
        dev.bind();
        let stream = dev.stream.cu_stream() as *mut c_void;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the stream belongs to the context bound on this thread.
        checked(|e, n| {
            ctx = unsafe { boost_cudnn_create(stream, e, n) };
            ctx.is_null() as i32
        })?;
        Ok(Self { ctx, shapes: Mutex::new(HashMap::new()) })
    }

    /// Whether cuDNN's forward and backward graphs of `sh` (contiguous o and dO) build on
    /// this GPU: once per shape, the answer kept.
    pub(crate) fn supports(&self, be: &Cuda, sh: &AttnShape) -> Result<(), String> {
        self.check(be, sh).0
    }

    /// Whether cuDNN runs `sh` (both passes; else ours does, for both). A shape it refuses
    /// is said once on stderr.
    pub(crate) fn takes(&self, be: &Cuda, sh: &AttnShape) -> bool {
        match self.check(be, sh) {
            (Ok(()), _) => true,
            (Err(e), first) => {
                if first {
                    eprintln!(
                        "note: train.attention: cuDNN does not take attention of batch {}, seq {}, {} heads over {} kv heads, head_dim {} ({e}); our kernels run it",
                        sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim
                    );
                }
                false
            }
        }
    }

    /// The answer for `sh`, and whether it was found now.
    fn check(&self, be: &Cuda, sh: &AttnShape) -> (Result<(), String>, bool) {
        let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = shapes.get(&key(sh)) {
            return (r.clone(), false);
        }
        let r = if !(sh.head_dim <= 128 && sh.head_dim.is_multiple_of(8)) {
            Err(format!("head_dim {}: cuDNN takes multiples of 8 up to 128", sh.head_dim))
        } else {
            let s = layout(sh, sh.q_width(), sh.q_width());
            self.workspace(be, &s, 0).and(self.workspace(be, &s, 1)).map(|_| ())
        };
        shapes.insert(key(sh), r.clone());
        (r, true)
    }

    /// Bytes of workspace the pass needs (building its graph on first use).
    fn workspace(&self, be: &Cuda, s: &BoostSdpa, bwd: i32) -> Result<usize, String> {
        be.gpu().expect("a GPU").bind();
        let mut ws = 0i64;
        // SAFETY: `s` and `ws` outlive the call; the context is bound.
        checked(|e, n| unsafe { boost_cudnn_prepare(self.ctx, s, bwd, &mut ws, e, n) })?;
        Ok(ws as usize)
    }

    fn must(&self, what: &str, r: Result<(), String>) {
        r.unwrap_or_else(|e| panic!("cuDNN attention {what}: {e}"))
    }

    pub(crate) fn fwd(&self, be: &Cuda, out: MatMut<CudaBuf>, lse: &mut CudaBuf, qkv: &CudaBuf, sh: AttnShape) {
        assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()), "attention: output shape");
        assert!(lse.dtype() == DType::F32 && lse.len >= sh.rows_len(), "attention: the log-sum-exp buffer");
        let _calls = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = Staging::default();
        let q = st.input(qkv, 0, 1, sh.qkv_len(), sh.qkv_len());
        let o = st.output(out.buf, out.off, out.rows, out.cols, out.ld);
        let s = layout(&sh, o.1, sh.q_width());
        let ws = self.workspace(be, &s, 0).unwrap_or_else(|e| panic!("cuDNN attention forward: {e}"));
        let ws = be.ws(WS_CUDNN, ws);
        let io = st.commit(be);
        let (q, o) = (io(q), io(o));
        let (k, v) = (
            q + 2 * (sh.tokens() * sh.q_width()) as u64,
            q + 2 * (sh.tokens() * (sh.q_width() + sh.kv_width())) as u64,
        );
        let a = Fwd { q, k, v, o, stats: lse.ptr(0) };
        // SAFETY: every address covers its tensor at the strides of `s` (shapes checked).
        self.must("forward", checked(|e, n| unsafe { boost_cudnn_fwd(self.ctx, &s, &a, ws, e, n) }));
        st.write_back(be, io);
        be.touched(&out);
    }

    pub(crate) fn bwd(&self, be: &Cuda, args: AttentionBwd<CudaBuf>) {
        let AttentionBwd { dqkv, dout, out, saved: lse, scratch: _, qkv, shape: sh } = args;
        assert_eq!((dout.rows, dout.cols), (sh.tokens(), sh.q_width()), "attention: dout shape");
        assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()), "attention: output shape");
        assert!(
            dqkv.len >= sh.qkv_len() && qkv.len >= sh.qkv_len(),
            "attention: q, k, v need {} elements",
            sh.qkv_len()
        );
        let _calls = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = Staging::default();
        let n = sh.qkv_len();
        let q = st.input(qkv, 0, 1, n, n);
        let o = st.input(out.buf, out.off, sh.tokens(), sh.q_width(), out.ld);
        let d_o = st.input(dout.buf, dout.off, sh.tokens(), sh.q_width(), dout.ld);
        let dq = st.output(dqkv, 0, 1, n, n);
        let s = layout(&sh, o.1, d_o.1);
        let ws = self.workspace(be, &s, 1).unwrap_or_else(|e| panic!("cuDNN attention backward: {e}"));
        let ws = be.ws(WS_CUDNN, ws);
        let io = st.commit(be);
        let (q, dq) = (io(q), io(dq));
        let (k_off, v_off) =
            (2 * (sh.tokens() * sh.q_width()) as u64, 2 * (sh.tokens() * (sh.q_width() + sh.kv_width())) as u64);
        let a = Bwd {
            q,
            k: q + k_off,
            v: q + v_off,
            o: io(o),
            d_o: io(d_o),
            stats: lse.ptr(0),
            dq,
            dk: dq + k_off,
            dv: dq + v_off,
        };
        // SAFETY: as in `fwd`.
        self.must("backward", checked(|e, n| unsafe { boost_cudnn_bwd(self.ctx, &s, &a, ws, e, n) }));
        st.write_back(be, io);
        be.touched_all(dqkv);
    }
}
