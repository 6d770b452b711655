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

use crate::backend::{Cuda, WS_CUDNN, WS_CUDNN_IO};
use crate::buf::{CudaBuf, DType};
use crate::device::{P, Tv};
use crate::launch::tv_of;
use boost_tensor::{AttentionBwd, AttnShape, MatMut};
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

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

/// The oldest cuDNN taken: 9.0 (causal bf16 SDPA with grouped-query heads, forward and
/// backward).
const MIN_VERSION: i64 = 90000;

/// libcudnn, opened once per process: where it came from and its version, or why not.
pub(crate) fn library() -> Result<&'static (String, i64), String> {
    static LIB: OnceLock<Result<(String, i64), String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<(String, i64), String> {
    let mut tried = Vec::new();
    for cudnn in candidates() {
        let c = CString::new(cudnn.as_str()).map_err(|_| format!("{cudnn}: a path with a NUL byte"))?;
        // SAFETY: a NUL-terminated string that outlives the call.
        match checked(|e, n| unsafe { boost_cudnn_load(c.as_ptr(), e, n) }) {
            Ok(()) => {
                // SAFETY: the library is open; the shim catches a missing symbol.
                let v = unsafe { boost_cudnn_version() };
                if v < MIN_VERSION {
                    return Err(format!("{cudnn} is cuDNN {}; at least 9.0 is needed", version_name(v)));
                }
                open_cudart(Path::new(&cudnn))?;
                return Ok((cudnn, v));
            }
            Err(e) => tried.push(format!("{cudnn} ({e})")),
        }
    }
    Err(format!(
        "libcudnn.so.9 was not found (tried: {}); set BOOST_CUDNN_LIB to it or its folder (PyTorch's CUDA wheels carry it in site-packages/nvidia/cudnn/lib)",
        tried.join("; ")
    ))
}

/// For a libcudnn from a wheel (`…/nvidia/cudnn/lib/`): the CUDA runtime it was built for, from
/// the wheel beside it when there (else the frontend looks on the loader's path).
fn open_cudart(cudnn: &Path) -> Result<(), String> {
    // SAFETY: the library is open.
    let major = unsafe { boost_cudnn_cudart_version() } / 1000;
    let Some(nvidia) = cudnn.parent().and_then(Path::parent).and_then(Path::parent) else { return Ok(()) };
    let rt = match major {
        13 => nvidia.join("cu13/lib/libcudart.so.13"),
        12 => nvidia.join("cuda_runtime/lib/libcudart.so.12"),
        _ => return Ok(()),
    };
    if !rt.is_file() {
        return Ok(());
    }
    let c = CString::new(rt.display().to_string()).map_err(|_| format!("{}: a path with a NUL byte", rt.display()))?;
    // SAFETY: a NUL-terminated string that outlives the call.
    checked(|e, n| unsafe { boost_cudnn_open_global(c.as_ptr(), e, n) }).map_err(|e| format!("{}: {e}", rt.display()))
}

/// 91301 → "9.13.1".
pub(crate) fn version_name(v: i64) -> String {
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
}

/// The libcudnn paths (or soname) in the order tried.
fn candidates() -> Vec<String> {
    const SO: &str = "libcudnn.so.9";
    if let Some(p) = std::env::var_os("BOOST_CUDNN_LIB") {
        let p = PathBuf::from(p);
        let lib = if p.is_dir() { p.join(SO) } else { p };
        return vec![lib.display().to_string()];
    }
    let mut c = vec![SO.to_string()];
    for sp in site_packages() {
        let lib = sp.join("nvidia/cudnn/lib").join(SO);
        if lib.is_file() {
            c.push(lib.display().to_string());
        }
    }
    c
}

/// python3's site-packages folders (none without python3).
fn site_packages() -> Vec<PathBuf> {
    let code = "import site, sys; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))";
    let Ok(out) = std::process::Command::new("python3").args(["-c", code]).output() else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
        let p = Path::new(l).to_path_buf();
        if !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    dirs
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

/// Where a tensor of the shim lives: a bf16 operand's own address, or an offset into the
/// staging workspace; with its row stride.
type Place = (Loc, usize);

#[derive(Clone, Copy)]
enum Loc {
    At(u64),
    Staged(usize),
}

/// fp32 operands copied to bf16 in a workspace slot, and an output copied back after the
/// run: (offset in the slot, the fp32 view, rows, cols).
#[derive(Default)]
struct Staging {
    bytes: usize,
    ins: Vec<(usize, Tv, usize, usize)>,
    out: Option<(usize, Tv, usize, usize)>,
}

impl Staging {
    fn reserve(&mut self, elems: usize) -> usize {
        let at = self.bytes;
        self.bytes += (2 * elems).next_multiple_of(256);
        at
    }

    /// `rows × cols` at `off` of `buf` with row stride `ld`, as bf16: in place when the
    /// buffer is bf16, else staged.
    fn input(&mut self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) -> Place {
        if buf.dtype() == DType::Bf16 {
            return (Loc::At(buf.ptr(off)), ld);
        }
        let at = self.reserve(rows * cols);
        self.ins.push((at, tv_of(buf, off, ld), rows, cols));
        (Loc::Staged(at), cols)
    }

    /// Where the shim writes `rows × cols` at `off` of `buf` (one output per run).
    fn output(&mut self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) -> Place {
        if buf.dtype() == DType::Bf16 {
            return (Loc::At(buf.ptr(off)), ld);
        }
        let at = self.reserve(rows * cols);
        self.out = Some((at, tv_of(buf, off, ld), rows, cols));
        (Loc::Staged(at), cols)
    }

    /// Allocates the staging slot and copies the inputs in; the address of each place.
    fn commit(&self, be: &Cuda) -> impl Fn(Place) -> u64 + use<> {
        let base = if self.bytes > 0 { be.ws(WS_CUDNN_IO, self.bytes) } else { 0 };
        for &(at, src, rows, cols) in &self.ins {
            let dst = Tv { p: base + at as u64, ld: cols as i64, bf: 1, pad: 0 };
            be.ew("k_copy", rows, cols, &mut P::of(&[dst, src]));
        }
        move |(l, _): Place| match l {
            Loc::At(p) => p,
            Loc::Staged(at) => base + at as u64,
        }
    }

    /// Copies a staged output into its fp32 view.
    fn write_back(&self, be: &Cuda, io: impl Fn(Place) -> u64) {
        if let Some((at, dst, rows, cols)) = self.out {
            let src = Tv { p: io((Loc::Staged(at), cols)), ld: cols as i64, bf: 1, pad: 0 };
            be.ew("k_copy", rows, cols, &mut P::of(&[dst, src]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// libcudnn opens without a GPU, where it is (`BOOST_CUDNN_LIB`, as CI sets it to the
    /// loader the headers script keeps, or PyTorch's wheels), and reports cuDNN 9; where it is
    /// nowhere, the error says where to put it.
    #[test]
    fn opens_libcudnn_or_says_where_to_put_it() {
        let given = std::env::var("BOOST_CUDNN_LIB").ok();
        match library() {
            Ok((path, version)) => {
                assert!((90000..100000).contains(version), "cuDNN {}", version_name(*version));
                if let Some(g) = &given {
                    assert!(path.starts_with(g.as_str()), "{path} is not under BOOST_CUDNN_LIB = {g}");
                }
                eprintln!("{path}: cuDNN {}", version_name(*version));
            }
            Err(e) => {
                assert!(given.is_none(), "BOOST_CUDNN_LIB is set but: {e}");
                assert!(e.contains("not found") && e.contains("set BOOST_CUDNN_LIB"), "{e}");
            }
        }
    }
}
