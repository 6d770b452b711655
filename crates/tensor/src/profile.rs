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

/// The multiply-adds of `op(a)·op(b)`, counted twice.
pub fn gemm_flops<Buf: DeviceBuf>(a: &Mat<Buf>, b: &Mat<Buf>) -> f64 {
    let (m, k) = a.op_shape();
    let n = b.op_shape().1;
    2.0 * (m * n * k) as f64
}

pub struct Profiled<B> {
    pub inner: B,
    times: Mutex<KernelTimes>,
    /// Time per kernel name, for finer diagnosis.
    detail: Mutex<Vec<(&'static str, Duration, u64)>>,
}

impl<B: Backend> Profiled<B> {
    pub fn new(inner: B) -> Self {
        Self { inner, times: Mutex::new(KernelTimes::default()), detail: Mutex::new(Vec::new()) }
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
    /// Times so far, and reset.
    pub fn take(&self) -> KernelTimes {
        std::mem::take(&mut *self.times.lock().unwrap())
    }
    fn time_named<R>(&self, cat: Cat, name: &'static str, flops: f64, f: impl FnOnce() -> R) -> R {
        if cat == Cat::Untimed {
            return f();
        }
        let t = Instant::now();
        let r = f();
        self.inner.sync();
        let dt = t.elapsed();
        self.note(name, dt);
        let mut k = self.times.lock().unwrap();
        k.calls += 1;
        match cat {
            Cat::Gemm => k.gemm += dt,
            Cat::Attention => k.attention += dt,
            Cat::Other | Cat::Untimed => k.other += dt,
        }
        k.gemm_flops += flops;
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
                let flops = 0.0 $(+ $flops)?;
                self.time_named(Cat::$cat, stringify!($name), flops, || self.inner.$name($($p),*))
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
    fn alloc_ids(&self, n: usize) -> Self::Ids {
        self.inner.alloc_ids(n)
    }
    fn write_ids(&self, dst: &mut Self::Ids, src: &[u32]) {
        self.inner.write_ids(dst, src)
    }
    fn write_mat<H: Scalar>(&self, dst: MatMut<Self::Buf>, src: &[H]) {
        self.inner.write_mat(dst, src)
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
