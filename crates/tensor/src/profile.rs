//! A backend wrapper that times every kernel by category, for benchmarks. It changes no
//! result: every call is forwarded unchanged.

use crate::backend::{AttnShape, Backend};
use crate::scalar::Scalar;
use crate::view::{DeviceBuf, Mat, MatMut};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where kernel time went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KernelTimes {
    pub gemm: Duration,
    pub attention: Duration,
    pub other: Duration,
    pub gemm_flops: f64,
    pub calls: u64,
}

impl KernelTimes {
    pub fn total(&self) -> Duration {
        self.gemm + self.attention + self.other
    }
}

/// Where [`Profiled`] books a kernel's time (the kernel table's categories).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cat {
    Gemm,
    Attention,
    Other,
    /// Not timed: set-up work outside the training step.
    Untimed,
}

/// One GEMM's shape as the engine calls it: `c (m×n) = op(a) (m×k) · op(b) (k×n)`, with
/// whether each operand is read transposed and whether `c` accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub accumulate: bool,
}

impl GemmShape {
    /// The multiply-adds, counted twice.
    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }
}

/// The time, calls and FLOPs of every GEMM of one shape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GemmTotals {
    pub time: Duration,
    pub calls: u64,
    pub flops: f64,
}

/// What one kernel call computes, as far as the profile counts it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Work {
    pub flops: f64,
    pub gemm: Option<GemmShape>,
}

/// The work of `op(a)·op(b)`.
pub fn gemm_work<Buf: DeviceBuf>(a: &Mat<Buf>, b: &Mat<Buf>, accumulate: bool) -> Work {
    let (m, k) = a.op_shape();
    let n = b.op_shape().1;
    let shape = GemmShape { m, n, k, trans_a: a.trans, trans_b: b.trans, accumulate };
    Work { flops: shape.flops(), gemm: Some(shape) }
}

pub struct Profiled<B> {
    pub inner: B,
    times: Mutex<KernelTimes>,
    /// Time per kernel name, for finer diagnosis.
    detail: Mutex<Vec<(&'static str, Duration, u64)>>,
    /// Time per GEMM shape (a step calls a few dozen distinct shapes).
    gemms: Mutex<Vec<(GemmShape, GemmTotals)>>,
}

impl<B: Backend> Profiled<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            times: Mutex::new(KernelTimes::default()),
            detail: Mutex::new(Vec::new()),
            gemms: Mutex::new(Vec::new()),
        }
    }
    /// Time and calls per kernel name so far, and reset.
    pub fn take_detail(&self) -> Vec<(&'static str, Duration, u64)> {
        std::mem::take(&mut *self.detail.lock().unwrap())
    }
    fn note(&self, name: &'static str, dt: Duration) {
        let mut d = self.detail.lock().unwrap();
        match d.iter_mut().find(|e| e.0 == name) {
            Some(e) => {
                e.1 += dt;
                e.2 += 1;
            }
            None => d.push((name, dt, 1)),
        }
    }
    /// Time, calls and FLOPs per GEMM shape so far, in order of first call, and reset.
    pub fn take_gemm_shapes(&self) -> Vec<(GemmShape, GemmTotals)> {
        std::mem::take(&mut *self.gemms.lock().unwrap())
    }
    fn note_gemm(&self, shape: GemmShape, dt: Duration) {
        let mut g = self.gemms.lock().unwrap();
        let i = match g.iter().position(|e| e.0 == shape) {
            Some(i) => i,
            None => {
                g.push((shape, GemmTotals::default()));
                g.len() - 1
            }
        };
        let t = &mut g[i].1;
        t.time += dt;
        t.calls += 1;
        t.flops += shape.flops();
    }
    /// Times so far, without resetting them.
    pub fn peek(&self) -> KernelTimes {
        *self.times.lock().unwrap()
    }
    /// Times so far, and reset.
    pub fn take(&self) -> KernelTimes {
        std::mem::take(&mut *self.times.lock().unwrap())
    }
    fn time_named<R>(&self, cat: Cat, name: &'static str, work: Work, f: impl FnOnce() -> R) -> R {
        if cat == Cat::Untimed {
            return f();
        }
        let t = Instant::now();
        let r = f();
        self.inner.sync();
        let dt = t.elapsed();
        self.note(name, dt);
        if let Some(shape) = work.gemm {
            self.note_gemm(shape, dt);
        }
        let mut k = self.times.lock().unwrap();
        k.calls += 1;
        match cat {
            Cat::Gemm => k.gemm += dt,
            Cat::Attention => k.attention += dt,
            Cat::Other | Cat::Untimed => k.other += dt,
        }
        k.gemm_flops += work.flops;
        r
    }
}

/// Every kernel of the table, timed under its category and forwarded unchanged.
macro_rules! profiled_kernels {
    ({} $(
        $(#[$attr:meta])*
        [$cat:ident $(, flops = $flops:expr)?]
        fn $name:ident($($p:ident: $t:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        $(
            fn $name(&self, $($p: $t),*) $(-> $ret)? {
                let work: Work = [$($flops)?].into_iter().next().unwrap_or_default();
                self.time_named(Cat::$cat, stringify!($name), work, || self.inner.$name($($p),*))
            }
        )*
    };
}

impl<B: Backend> Backend for Profiled<B> {
    type Buf = B::Buf;
    type Ids = B::Ids;

    fn name(&self) -> String {
        format!("profiled-{}", self.inner.name())
    }
    fn elem_bytes(&self) -> usize {
        self.inner.elem_bytes()
    }
    fn alloc(&self, n: usize) -> Self::Buf {
        self.inner.alloc(n)
    }
    fn alloc_param(&self, n: usize) -> Self::Buf {
        self.inner.alloc_param(n)
    }
    fn alloc_act(&self, n: usize) -> Self::Buf {
        self.inner.alloc_act(n)
    }
    fn attention_saved_len(&self, sh: &AttnShape) -> usize {
        self.inner.attention_saved_len(sh)
    }
    fn attention_scratch_len(&self, sh: &AttnShape) -> usize {
        self.inner.attention_scratch_len(sh)
    }
    fn sync(&self) {
        self.inner.sync()
    }
    fn peak_memory_bytes(&self) -> Option<u64> {
        self.inner.peak_memory_bytes()
    }
    fn head_loss_chunk_rows(&self, tokens: usize, vocab: usize) -> Option<usize> {
        self.inner.head_loss_chunk_rows(tokens, vocab)
    }
    fn attention_kernels(&self) -> Option<&'static str> {
        self.inner.attention_kernels()
    }
    fn alloc_ids(&self, n: usize) -> Self::Ids {
        self.inner.alloc_ids(n)
    }
    fn write_ids(&self, dst: &mut Self::Ids, src: &[u32]) {
        self.inner.write_ids(dst, src)
    }
    fn write_mat<H: Scalar>(&self, dst: MatMut<Self::Buf>, src: &[H]) {
        self.inner.write_mat(dst, src)
    }
    fn keeps_grad_sumsq(&self) -> bool {
        self.inner.keeps_grad_sumsq()
    }
    fn queue_grad_sumsq(&self, views: &[Mat<Self::Buf>], max_norm: f64, guard: Option<&crate::GuardSpec>) -> bool {
        self.time_named(Cat::Other, "queue_grad_sumsq", Work::default(), || {
            self.inner.queue_grad_sumsq(views, max_norm, guard)
        })
    }
    fn begin_loss_tally(&self) {
        self.inner.begin_loss_tally()
    }
    fn tally_loss(&self, x: Mat<Self::Buf>) -> bool {
        self.inner.tally_loss(x)
    }
    fn snapshot_report(&self) -> Option<u64> {
        self.inner.snapshot_report()
    }
    fn read_report(&self, ticket: u64) -> crate::StepReport {
        self.inner.read_report(ticket)
    }
    fn read_grad_sumsq(&self) -> f64 {
        self.inner.read_grad_sumsq()
    }
    /// A device's multi-tensor update, timed as one call; elsewhere each buffer's `adamw`.
    fn adamw_all(&self, a: crate::AdamAll<Self::Buf>) {
        if self.inner.keeps_grad_sumsq() {
            self.time_named(Cat::Other, "adamw_all", Work::default(), || self.inner.adamw_all(a))
        } else {
            crate::backend::adamw_each(self, a)
        }
    }
    /// A device's multi-tensor zeroing, timed as one call; elsewhere each view's `fill`.
    fn zero_all<'a>(&self, views: impl IntoIterator<Item = MatMut<'a, Self::Buf>>) {
        if self.inner.keeps_grad_sumsq() {
            self.time_named(Cat::Other, "zero_all", Work::default(), || self.inner.zero_all(views))
        } else {
            for v in views {
                self.fill(v, 0.0);
            }
        }
    }
    fn read_mat<H: Scalar>(&self, src: Mat<Self::Buf>) -> Vec<H> {
        self.inner.read_mat(src)
    }

    crate::kernel_table!(profiled_kernels {});
}

/// A group of a profiled backend: the wrapped backend's group, unchanged (both backends use
/// the same buffers).
pub struct ProfiledGroup<'a, B: Backend>(pub &'a dyn crate::backend::Collective<B>);

impl<B: Backend> crate::backend::Collective<Profiled<B>> for ProfiledGroup<'_, B> {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn all_reduce(&self, buf: &mut B::Buf, off: usize, n: usize, op: crate::ReduceOp, label: crate::Label) {
        self.0.all_reduce(buf, off, n, op, label)
    }
    fn all_gather(&self, buf: &mut B::Buf, off: usize, n: usize, label: crate::Label) {
        self.0.all_gather(buf, off, n, label)
    }
    fn reduce_scatter(&self, buf: &mut B::Buf, off: usize, n: usize, label: crate::Label) {
        self.0.reduce_scatter(buf, off, n, label)
    }
    fn broadcast(&self, buf: &mut B::Buf, off: usize, n: usize, root: usize, label: crate::Label) {
        self.0.broadcast(buf, off, n, root, label)
    }
    fn send(&self, buf: &B::Buf, off: usize, n: usize, to: usize, label: crate::Label) {
        self.0.send(buf, off, n, to, label)
    }
    fn recv(&self, buf: &mut B::Buf, off: usize, n: usize, from: usize, label: crate::Label) {
        self.0.recv(buf, off, n, from, label)
    }
    fn barrier(&self) {
        self.0.barrier()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Cpu;

    #[test]
    fn gemms_are_booked_per_shape_with_their_flops() {
        let be = Profiled::new(Cpu::<f64>::new());
        let (a, b) = (vec![1.0; 6], vec![2.0; 12]);
        let mut c = vec![0.0; 8];
        // (2×3)·(3×4), twice, then op(a)ᵀ with a stored 3×2, accumulating.
        for _ in 0..2 {
            be.gemm(MatMut::new(&mut c, 2, 4), Mat::new(&a, 2, 3), Mat::new(&b, 3, 4), 1.0, false);
        }
        be.gemm(MatMut::new(&mut c, 2, 4), Mat::new(&a, 3, 2).t(), Mat::new(&b, 3, 4), 1.0, true);
        assert_eq!(c[0], 12.0, "the profiled calls still compute: 6, then 6 + 6");
        let shapes = be.take_gemm_shapes();
        let plain = GemmShape { m: 2, n: 4, k: 3, trans_a: false, trans_b: false, accumulate: false };
        let acc = GemmShape { trans_a: true, accumulate: true, ..plain };
        assert_eq!(shapes.iter().map(|s| (s.0, s.1.calls)).collect::<Vec<_>>(), vec![(plain, 2), (acc, 1)]);
        assert_eq!(shapes[0].1.flops, 2.0 * 48.0);
        assert_eq!(be.take().gemm_flops, 3.0 * 48.0);
        assert!(be.take_gemm_shapes().is_empty(), "taking resets");
    }
}
