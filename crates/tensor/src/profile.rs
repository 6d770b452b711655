//! A backend wrapper that times every kernel by category, for benchmarks. It changes no
//! result: every call is forwarded unchanged.

use crate::backend::{AdamStep, AttnShape, Backend};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
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

#[derive(Clone, Copy)]
enum Cat {
    Gemm,
    Attn,
    Other,
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
    fn time_named<R>(&self, cat: Cat, name: &'static str, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.inner.sync();
        let dt = t.elapsed();
        if !name.is_empty() {
            self.note(name, dt);
        }
        let mut k = self.times.lock().unwrap();
        k.calls += 1;
        match cat {
            Cat::Gemm => k.gemm += dt,
            Cat::Attn => k.attention += dt,
            Cat::Other => k.other += dt,
        }
        r
    }
}

macro_rules! other {
    ($self:ident . $f:ident ( $($a:expr),* )) => { $self.time_named(Cat::Other, stringify!($f), || $self.inner.$f($($a),*)) };
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
    fn gemm(&self, c: MatMut<Self::Buf>, a: Mat<Self::Buf>, b: Mat<Self::Buf>, alpha: f64, accumulate: bool) {
        let (m, k) = a.op_shape();
        let n = b.op_shape().1;
        self.time_named(Cat::Gemm, "gemm", || self.inner.gemm(c, a, b, alpha, accumulate));
        self.times.lock().unwrap().gemm_flops += 2.0 * (m * n * k) as f64;
    }
    fn fill(&self, x: MatMut<Self::Buf>, v: f64) {
        other!(self.fill(x, v))
    }
    fn copy(&self, dst: MatMut<Self::Buf>, src: Mat<Self::Buf>) {
        other!(self.copy(dst, src))
    }
    fn axpy(&self, dst: MatMut<Self::Buf>, src: Mat<Self::Buf>, alpha: f64) {
        other!(self.axpy(dst, src, alpha))
    }
    fn scale(&self, x: MatMut<Self::Buf>, s: f64) {
        other!(self.scale(x, s))
    }
    fn mul_rows(&self, x: MatMut<Self::Buf>, row: Mat<Self::Buf>) {
        other!(self.mul_rows(x, row))
    }
    fn mul_cols(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>, col: Mat<Self::Buf>) {
        other!(self.mul_cols(y, x, col))
    }
    fn sumsq(&self, x: Mat<Self::Buf>) -> f64 {
        other!(self.sumsq(x))
    }
    fn sum(&self, x: Mat<Self::Buf>) -> f64 {
        other!(self.sum(x))
    }
    fn row_sumsq(&self, out: MatMut<Self::Buf>, x: Mat<Self::Buf>) {
        other!(self.row_sumsq(out, x))
    }
    fn rstd_from_sumsq(&self, s: MatMut<Self::Buf>, n: usize, eps: f64) {
        other!(self.rstd_from_sumsq(s, n, eps))
    }
    fn rmsnorm_apply(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>, gamma: Mat<Self::Buf>, rstd: Mat<Self::Buf>) {
        other!(self.rmsnorm_apply(y, x, gamma, rstd))
    }
    fn rmsnorm_bwd_dot(&self, dot: MatMut<Self::Buf>, dy: Mat<Self::Buf>, x: Mat<Self::Buf>, gamma: Mat<Self::Buf>) {
        other!(self.rmsnorm_bwd_dot(dot, dy, x, gamma))
    }
    fn rmsnorm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dgamma: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        gamma: Mat<Self::Buf>,
        rstd: Mat<Self::Buf>,
        dot: Mat<Self::Buf>,
        n: usize,
        accumulate: bool,
    ) {
        other!(self.rmsnorm_bwd(dx, dgamma, dy, x, gamma, rstd, dot, n, accumulate))
    }
    fn row_dot(
        &self,
        out: MatMut<Self::Buf>,
        a: Mat<Self::Buf>,
        b: Mat<Self::Buf>,
        row: Option<Mat<Self::Buf>>,
        alpha: f64,
        acc: bool,
    ) {
        other!(self.row_dot(out, a, b, row, alpha, acc))
    }
    fn online_norm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dgamma: MatMut<Self::Buf>,
        g: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        gamma: Mat<Self::Buf>,
        ds: Mat<Self::Buf>,
        accumulate: bool,
    ) {
        other!(self.online_norm_bwd(dx, dgamma, g, x, gamma, ds, accumulate))
    }
    fn layernorm_fwd(
        &self,
        y: MatMut<Self::Buf>,
        mean: MatMut<Self::Buf>,
        rstd: MatMut<Self::Buf>,
        x: Mat<Self::Buf>,
        w: Mat<Self::Buf>,
        b: Mat<Self::Buf>,
        eps: f64,
    ) {
        other!(self.layernorm_fwd(y, mean, rstd, x, w, b, eps))
    }
    fn layernorm_bwd(
        &self,
        dx: MatMut<Self::Buf>,
        dw: MatMut<Self::Buf>,
        db: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        x: Mat<Self::Buf>,
        w: Mat<Self::Buf>,
        mean: Mat<Self::Buf>,
        rstd: Mat<Self::Buf>,
    ) {
        other!(self.layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd))
    }
    fn silu(&self, y: MatMut<Self::Buf>, x: Mat<Self::Buf>) {
        other!(self.silu(y, x))
    }
    fn silu_bwd(&self, d: MatMut<Self::Buf>, x: Mat<Self::Buf>) {
        other!(self.silu_bwd(d, x))
    }
    fn swiglu(&self, m: MatMut<Self::Buf>, gu: Mat<Self::Buf>, outer_silu: bool) {
        other!(self.swiglu(m, gu, outer_silu))
    }
    fn swiglu_bwd(&self, dgu: MatMut<Self::Buf>, dm: Mat<Self::Buf>, gu: Mat<Self::Buf>, outer_silu: bool) {
        other!(self.swiglu_bwd(dgu, dm, gu, outer_silu))
    }
    fn add_bias(&self, y: MatMut<Self::Buf>, b: Mat<Self::Buf>) {
        other!(self.add_bias(y, b))
    }
    fn bias_grad(&self, db: MatMut<Self::Buf>, dy: Mat<Self::Buf>) {
        other!(self.bias_grad(db, dy))
    }
    fn rope_table(&self, seq: usize, head_dim: usize, theta: f64) -> Self::Buf {
        self.inner.rope_table(seq, head_dim, theta)
    }
    fn rope(&self, x: MatMut<Self::Buf>, table: &Self::Buf, seq: usize, head_dim: usize, inverse: bool) {
        other!(self.rope(x, table, seq, head_dim, inverse))
    }
    fn attention_fwd(&self, out: MatMut<Self::Buf>, probs: &mut Self::Buf, qkv: &Self::Buf, shape: AttnShape) {
        self.time_named(Cat::Attn, "attention_fwd", || self.inner.attention_fwd(out, probs, qkv, shape))
    }
    fn attention_bwd(
        &self,
        dqkv: &mut Self::Buf,
        dout: Mat<Self::Buf>,
        probs: &Self::Buf,
        scratch: &mut Self::Buf,
        qkv: &Self::Buf,
        shape: AttnShape,
    ) {
        self.time_named(Cat::Attn, "attention_bwd", || self.inner.attention_bwd(dqkv, dout, probs, scratch, qkv, shape))
    }
    fn embed(&self, out: MatMut<Self::Buf>, table: Mat<Self::Buf>, ids: &Self::Ids, first: usize) {
        other!(self.embed(out, table, ids, first))
    }
    fn embed_bwd(&self, dtable: MatMut<Self::Buf>, dout: Mat<Self::Buf>, ids: &Self::Ids, first: usize) {
        other!(self.embed_bwd(dtable, dout, ids, first))
    }
    fn cross_entropy(
        &self,
        losses: MatMut<Self::Buf>,
        logits: MatMut<Self::Buf>,
        targets: &Self::Ids,
        grad_scale: Option<f64>,
    ) {
        other!(self.cross_entropy(losses, logits, targets, grad_scale))
    }
    fn row_max(&self, max: MatMut<Self::Buf>, logits: Mat<Self::Buf>) {
        other!(self.row_max(max, logits))
    }
    fn xent_partials(
        &self,
        stats: MatMut<Self::Buf>,
        logits: Mat<Self::Buf>,
        max: Mat<Self::Buf>,
        targets: &Self::Ids,
        first: usize,
    ) {
        other!(self.xent_partials(stats, logits, max, targets, first))
    }
    fn xent_finish(
        &self,
        losses: MatMut<Self::Buf>,
        logits: MatMut<Self::Buf>,
        max: Mat<Self::Buf>,
        stats: Mat<Self::Buf>,
        targets: &Self::Ids,
        first: usize,
        grad_scale: Option<f64>,
    ) {
        other!(self.xent_finish(losses, logits, max, stats, targets, first, grad_scale))
    }
    fn kron_fwd(
        &self,
        y: MatMut<Self::Buf>,
        z: Mat<Self::Buf>,
        ka: Mat<Self::Buf>,
        kb: Mat<Self::Buf>,
        scratch: &mut Self::Buf,
        accumulate: bool,
    ) {
        other!(self.kron_fwd(y, z, ka, kb, scratch, accumulate))
    }
    fn kron_bwd(
        &self,
        dz: MatMut<Self::Buf>,
        dka: MatMut<Self::Buf>,
        dkb: MatMut<Self::Buf>,
        dy: Mat<Self::Buf>,
        z: Mat<Self::Buf>,
        ka: Mat<Self::Buf>,
        kb: Mat<Self::Buf>,
        scratch: &mut Self::Buf,
    ) {
        other!(self.kron_bwd(dz, dka, dkb, dy, z, ka, kb, scratch))
    }
    fn adamw(
        &self,
        p: &mut Self::Buf,
        g: &Self::Buf,
        m: &mut Self::Buf,
        v: &mut Self::Buf,
        off: usize,
        n: usize,
        step: &AdamStep,
        decay: bool,
    ) {
        other!(self.adamw(p, g, m, v, off, n, step, decay))
    }
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
