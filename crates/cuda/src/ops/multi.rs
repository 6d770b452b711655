//! The optimizer's multi-tensor kernels: the fp64 partial sums of many views in one launch,
//! the gradient norm and clip coefficient finished on the device, and AdamW over every
//! parameter buffer in one launch that reads the step's scalars from device memory. Their
//! tables of addresses are uploaded when the buffers change (the first step), never in a
//! step after it; the step's scalars go up without waiting for the device.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, DType};
use crate::device::{Launch, Mem, P, Tv};
use crate::launch::{NT, tv, tv_of, tvm};
use boost_tensor::{AdamAll, AdamStep, GuardSpec, Mat, MatMut};

/// Blocks of a full reduction: fixed, so its summation order is too (`k_full_sum`'s grid).
pub(crate) const SUM_BLOCKS: usize = 64;
/// Elements of an AdamW chunk (one block's share of a tensor).
const CHUNK: usize = 32 * NT as usize;
/// Upper bound on the blocks of the multi-tensor AdamW (each walks chunks grid-stride).
const ADAM_BLOCKS: usize = 8192;
/// Views per multi-tensor sum launch (CUDA's limit on gridDim.y).
const Y_MAX: usize = 65535;
/// Doubles of the step scalars (kernels/common.cuh's `S_*`), and the slots named here.
pub(crate) const SCALARS: usize = 96;
/// The first slot the host writes before each update, and how many.
const S_HOST: usize = 3;
const HOST_SLOTS: usize = 12;
pub(crate) const S_NORM: usize = 1;
pub(crate) const S_VERDICT: usize = 15;
pub(crate) const S_Z: usize = 16;
pub(crate) const S_LOSS: usize = 19;
/// The device guard's window (`S_WIN_MAX`).
const WIN_MAX: usize = 64;

/// A device table of plain words, rebuilt and uploaded only when its contents change.
#[derive(Default)]
pub(crate) struct Table {
    key: Vec<u64>,
    mem: Option<Mem>,
}

impl Table {
    /// The table's device address holding `words` (uploaded when they changed).
    fn of(&mut self, be: &Cuda, words: Vec<u64>) -> u64 {
        if self.mem.is_none() || self.key != words {
            let bytes = 8 * words.len();
            if self.mem.as_ref().is_none_or(|m| m.bytes < bytes) {
                self.mem = Some(be.dev().alloc(bytes.max(64)));
            }
            let raw: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            be.dev().upload(self.mem.as_ref().unwrap().ptr, &raw);
            self.key = words;
        }
        self.mem.as_ref().unwrap().ptr
    }
}

/// A buffer of at least `bytes`, grown (never shrunk) when too small.
fn grown(be: &Cuda, slot: &mut Option<Mem>, bytes: usize) -> u64 {
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        *slot = Some(be.dev().alloc(bytes.max(64)));
    }
    slot.as_ref().unwrap().ptr
}

/// What the optimizer keeps on the device between steps.
#[derive(Default)]
pub(crate) struct OptimState {
    /// The gradient norm's views, its partials, and the step's scalars (`k_adamw_multi`).
    norm: Table,
    norm_part: Option<Mem>,
    norm_views: usize,
    scalars: Option<Mem>,
    /// The step's loss tally (`Backend::tally_loss`): the next one sets it; one was queued
    /// since `begin_loss_tally`.
    pub(crate) tally_fresh: bool,
    pub(crate) tallied: bool,
    /// Step reports copied aside (`Backend::snapshot_report`): the next ticket, and whether
    /// each slot's step tallied a loss.
    pub(crate) tickets: u64,
    pub(crate) ticket_tallied: [bool; super::report::RING],
    /// Views of other sums of many views (`sumsq_each`) and their partials.
    each: Table,
    each_part: Option<Mem>,
    /// AdamW's chunks and tensors.
    chunks: Table,
    tensors: Table,
    /// The views zeroed together (`zero_all`: a model's gradients).
    zero: Table,
}

fn tv_words(t: Tv) -> [u64; 3] {
    [t.p, t.ld as u64, (t.bf as u32 as u64) | ((t.pad as u32 as u64) << 32)]
}

/// The `SumView` table of `views` (kernels/reduce.cu): the view, rows, cols.
fn sum_table(views: &[Mat<CudaBuf>]) -> Vec<u64> {
    views.iter().flat_map(|x| tv_words(tv(x)).into_iter().chain([x.rows as u64, x.cols as u64])).collect()
}

/// Queue the partials of every view (`SUM_BLOCKS` each, view-major) into `part`.
fn launch_partials(be: &Cuda, table: u64, part: u64, n: usize, square: bool) {
    for first in (0..n).step_by(Y_MAX) {
        let rows = (n - first).min(Y_MAX);
        let mut p = P::default();
        p.v[0].p = table;
        p.v[1].p = part;
        p.n[1] = first as i64;
        p.n[2] = square as i64;
        let at = Launch { grid: (SUM_BLOCKS as u32, rows as u32, 1), block: (NT, 1, 1) };
        be.launch("k_full_sum_multi", at, &p);
    }
}

/// The fp64 partials of several non-empty views (`SUM_BLOCKS` each, in view order), read back.
pub(crate) fn partials_each(be: &Cuda, xs: &[Mat<CudaBuf>], square: bool) -> Vec<f64> {
    let mut st = be.optim();
    let table = st.each.of(be, sum_table(xs));
    let part = grown(be, &mut st.each_part, 8 * SUM_BLOCKS * xs.len());
    launch_partials(be, table, part, xs.len(), square);
    let mut bytes = vec![0u8; 8 * SUM_BLOCKS * xs.len()];
    be.dev().download(part, &mut bytes);
    bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The step scalars' address: allocated and zeroed (the guard's state, the skips) once.
pub(crate) fn scalars(be: &Cuda, st: &mut OptimState) -> u64 {
    if st.scalars.is_none() {
        let mem = be.dev().alloc(8 * SCALARS);
        be.dev().upload(mem.ptr, &[0u8; 8 * SCALARS]);
        st.scalars = Some(mem);
    }
    st.scalars.as_ref().unwrap().ptr
}

/// `Backend::queue_grad_sumsq`: the partials of every non-empty view in one launch, then
/// one thread adds them as the host would, computes the clip coefficient and, with `guard`,
/// judges the norm (kernels/step.cu).
pub(crate) fn queue_grad_sumsq(be: &Cuda, views: &[Mat<CudaBuf>], max_norm: f64, guard: Option<&GuardSpec>) -> bool {
    let views: Vec<Mat<CudaBuf>> = views.iter().copied().filter(|x| x.rows > 0 && x.cols > 0).collect();
    let mut st = be.optim();
    let table = st.norm.of(be, sum_table(&views));
    let part = grown(be, &mut st.norm_part, 8 * SUM_BLOCKS * views.len().max(1));
    let scalars = scalars(be, &mut st);
    st.norm_views = views.len();
    launch_partials(be, table, part, views.len(), true);
    let mut p = P::default();
    p.v[0].p = part;
    p.v[1].p = scalars;
    p.n[0] = views.len() as i64;
    p.n[2] = SUM_BLOCKS as i64;
    p.f[0] = max_norm;
    if let Some(g) = guard {
        assert!((1..=WIN_MAX).contains(&g.window), "the device guard keeps 1 to {WIN_MAX} norms, not {}", g.window);
        p.n[1] = g.skip_nonfinite as i64;
        p.n[3] = 1;
        p.n[4] = g.window as i64;
        p.n[5] = g.min_history as i64;
        p.f[1] = g.z_max;
    }
    be.launch("k_norm_finish", Launch { grid: (1, 1, 1), block: (1, 1, 1) }, &p);
    true
}

pub(crate) fn read_grad_sumsq(be: &Cuda) -> f64 {
    let st = be.optim();
    let s = st.scalars.as_ref().expect("read_grad_sumsq: no gradient sum was queued");
    let mut b = [0u8; 8];
    be.dev().download(s.ptr, &mut b);
    f64::from_le_bytes(b)
}

/// The host's share of the step scalars (`k_adamw_multi`'s [3..15]): update `t`'s, and the
/// device's skips the host has seen.
fn host_scalars(s: &AdamStep, t: u64, skips_seen: u64) -> [f64; HOST_SLOTS] {
    [
        s.beta1,
        s.beta2,
        1.0 - s.beta1,
        1.0 - s.beta2,
        1.0 - s.lr * s.weight_decay,
        s.lr / s.bias_corr1,
        s.bias_corr2.sqrt(),
        s.eps,
        s.grad_scale,
        t as f64,
        s.lr,
        skips_seen as f64,
    ]
}

/// `Backend::adamw_all`: one launch over every buffer (fp32 ones; any other goes through the
/// per-buffer kernel, as does everything when there are no buffers).
pub(crate) fn adamw_all(be: &Cuda, a: AdamAll<CudaBuf>) {
    let k = a.lens.len();
    assert!(a.p.len() == k && a.g.len() == k && a.m.len() == k && a.v.len() == k, "adamw_all: {k} buffers");
    let f32s = |b: &CudaBuf| b.dtype == DType::F32;
    let multi = a.p.iter().chain(a.g).chain(a.m.iter()).chain(a.v.iter()).all(f32s);
    if !multi {
        assert!(!a.device_clip, "adamw_all: the clip coefficient on the device needs fp32 buffers");
        assert!(a.guarded.is_none(), "adamw_all: a guarded update needs fp32 buffers");
        let it = a.p.iter_mut().zip(a.g).zip(a.m.iter_mut().zip(a.v.iter_mut())).zip(a.lens);
        for (((p, g), (m, v)), &(n, decay)) in it {
            super::adamw(be, boost_tensor::AdamUpdate { p, g, m, v, off: 0, n, step: a.step, decay });
        }
        return;
    }
    let (mut tensors, mut chunks) = (Vec::new(), Vec::new());
    for (i, &(n, decay)) in a.lens.iter().enumerate() {
        for (b, what) in [(&a.p[i], "p"), (&a.g[i], "g"), (&a.m[i], "m"), (&a.v[i], "v")] {
            assert!(n <= b.len, "adamw: {what} has {} elements, the update needs {n}", b.len);
        }
        let p = &a.p[i];
        let shadow = p.shadow_ptr(0).map_or(Tv::default(), |sp| Tv { p: sp, ld: n as i64, bf: 1, pad: 0 });
        let views = [tv_of(p, 0, n), tv_of(&a.g[i], 0, n), tv_of(&a.m[i], 0, n), tv_of(&a.v[i], 0, n), shadow];
        tensors.extend(views.into_iter().flat_map(tv_words));
        tensors.extend([p.shadow.is_some() as u64, decay as u64]);
        for off in (0..n).step_by(CHUNK) {
            chunks.extend([i as u64, off as u64, CHUNK.min(n - off) as u64]);
        }
    }
    let nchunks = chunks.len() / 3;
    if nchunks == 0 {
        return;
    }
    let mut st = be.optim();
    let chunk_table = st.chunks.of(be, chunks);
    let tensor_table = st.tensors.of(be, tensors);
    let scalars = scalars(be, &mut st);
    let (t, seen) = a.guarded.map_or((0, 0), |g| (g.t, g.skips_seen));
    let words: Vec<u8> = host_scalars(a.step, t, seen).iter().flat_map(|v| v.to_le_bytes()).collect();
    be.dev().upload(scalars + 8 * S_HOST as u64, &words);
    let mut p = P::default();
    p.v[0].p = chunk_table;
    p.v[1].p = tensor_table;
    p.v[2].p = scalars;
    p.n[0] = nchunks as i64;
    p.n[1] = a.device_clip as i64;
    p.n[2] = a.guarded.is_some() as i64;
    be.blocks("k_adamw_multi", nchunks.min(ADAM_BLOCKS), &p);
}

/// `Backend::zero_all`: every view zeroed in one launch (a grid row per view, `Y_MAX` views a
/// launch). A view of a buffer with a bf16 copy to refresh goes through `fill` instead.
pub(crate) fn zero_all(be: &Cuda, views: Vec<MatMut<CudaBuf>>) {
    let (plain, shadowed): (Vec<_>, Vec<_>) =
        views.into_iter().filter(|v| v.rows > 0 && v.cols > 0).partition(|v| v.buf.shadow.is_none());
    for v in shadowed {
        super::fill(be, v, 0.0);
    }
    if plain.is_empty() {
        return;
    }
    let words: Vec<u64> =
        plain.iter().flat_map(|x| tv_words(tvm(x)).into_iter().chain([x.rows as u64, x.cols as u64])).collect();
    let table = be.optim().zero.of(be, words);
    for first in (0..plain.len()).step_by(Y_MAX) {
        let mut p = P::default();
        p.v[0].p = table;
        p.n[1] = first as i64;
        let rows = (plain.len() - first).min(Y_MAX);
        be.launch("k_zero_multi", Launch { grid: (SUM_BLOCKS as u32, rows as u32, 1), block: (NT, 1, 1) }, &p);
    }
}
