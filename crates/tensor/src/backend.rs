//! The device seam. Model code is written once against [`Backend`] (kernels on device
//! buffers) and [`Collective`] (communication on device buffers); the CPU backend is
//! [`crate::cpu::Cpu`], a CUDA backend implements the same traits.

use crate::pending::{Handle, Ready};
use crate::scalar::Scalar;
use crate::view::{DeviceBuf, Mat, MatMut};

/// Shape of a causal self-attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub seq: usize,
    /// Query heads held here.
    pub heads: usize,
    /// Key/value heads held here (divides `heads`).
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttnShape {
    pub fn q_width(&self) -> usize {
        self.heads * self.head_dim
    }
    pub fn kv_width(&self) -> usize {
        self.kv_heads * self.head_dim
    }
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }
    /// Elements of the q, k, v blocks together.
    pub fn qkv_len(&self) -> usize {
        self.tokens() * (self.q_width() + 2 * self.kv_width())
    }
    /// Elements of the whole softmax probability matrices (every head's S × S).
    pub fn probs_len(&self) -> usize {
        self.batch * self.heads * self.seq * self.seq
    }
    /// Elements of one statistic per query row and head (a log-sum-exp each).
    pub fn rows_len(&self) -> usize {
        self.batch * self.heads * self.seq
    }
}

/// One AdamW update's scalars.
#[derive(Debug, Clone, Copy)]
pub struct AdamStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// 1 − β1^t and 1 − β2^t.
    pub bias_corr1: f64,
    pub bias_corr2: f64,
    /// Multiplies the gradient first (clipping, loss scaling).
    pub grad_scale: f64,
}

/// The trait's kernel methods, from the kernel table.
macro_rules! declare_kernels {
    ({} $(
        $(#[$attr:meta])*
        [$cat:ident $(, flops = $flops:expr)?]
        fn $name:ident($($p:ident: $t:ty),* $(,)?) $(-> $ret:ty)?;
    )*) => {
        $(
            $(#[$attr])*
            // A kernel takes each operand on its own: the model calls them by position.
            fn $name(&self, $($p: $t),*) $(-> $ret)?;
        )*
    };
}

/// Kernels on device buffers. Every kernel is deterministic: float reductions have a fixed
/// order that does not depend on thread count or timing.
pub trait Backend: Send + Sync + Sized + 'static {
    type Buf: DeviceBuf;
    /// Token ids on the device.
    type Ids: Send + Sync;

    fn name(&self) -> String;
    /// Bytes per stored element of an activation buffer ([`Backend::alloc_act`]); every
    /// buffer says its own with [`DeviceBuf::elem_bytes`].
    fn elem_bytes(&self) -> usize;

    // ---- memory ----
    /// A zero-filled buffer of `n` elements.
    fn alloc(&self, n: usize) -> Self::Buf;
    /// A zero-filled buffer for parameters (weights updated by [`Backend::adamw`]). A
    /// mixed-precision backend keeps fp32 master weights here plus a low-precision copy for
    /// its GEMMs.
    fn alloc_param(&self, n: usize) -> Self::Buf {
        self.alloc(n)
    }
    /// A zero-filled buffer for activations, which a mixed-precision backend may store in
    /// lower precision. Gradients, optimizer state and statistics use [`Backend::alloc`].
    fn alloc_act(&self, n: usize) -> Self::Buf {
        self.alloc(n)
    }
    /// Elements of what `attention_fwd` saves for the backward (its `probs` operand): the whole
    /// probability matrices, unless the backend recomputes them (the CPU, and CUDA for heads
    /// of at most 128, keep one log-sum-exp per row).
    fn attention_saved_len(&self, sh: &AttnShape) -> usize {
        sh.probs_len()
    }
    /// Elements of `attention_bwd`'s `scratch` operand (0 when the backend needs none).
    fn attention_scratch_len(&self, sh: &AttnShape) -> usize {
        sh.probs_len()
    }
    /// Wait until every queued kernel has finished (for timers; kernels of an asynchronous
    /// device return before their work is done).
    fn sync(&self) {}
    /// The most bytes of device buffers held at once so far (the allocator's high-water
    /// mark), where the backend counts them: a GPU's. None on the CPU, whose memory is the
    /// process's.
    fn peak_memory_bytes(&self) -> Option<u64> {
        None
    }
    /// Rows of logits at a time when the model's LM head loss should go through
    /// [`Backend::head_xent`] instead of keeping the whole `tokens × vocab` logits (a device
    /// whose memory they would crowd); None, the default and the CPU's: the whole logits.
    fn head_loss_chunk_rows(&self, tokens: usize, vocab: usize) -> Option<usize> {
        let _ = (tokens, vocab);
        None
    }
    /// Which attention kernels a device backend runs (a GPU's: "boost" or "cudnn",
    /// `train.attention`); None on the CPU, which has one.
    fn attention_kernels(&self) -> Option<&'static str> {
        None
    }
    fn alloc_ids(&self, n: usize) -> Self::Ids;
    fn write_ids(&self, dst: &mut Self::Ids, src: &[u32]);
    /// Copy a row-major host matrix into a view.
    fn write_mat<H: Scalar>(&self, dst: MatMut<Self::Buf>, src: &[H]);
    /// Copy a view out to a row-major host matrix.
    fn read_mat<H: Scalar>(&self, src: Mat<Self::Buf>) -> Vec<H>;

    /// Whether [`Backend::queue_grad_sumsq`] keeps the sum on a device.
    fn keeps_grad_sumsq(&self) -> bool {
        false
    }
    /// Queue Σ of the squares of every view, added as `sumsq_each` then the views in order
    /// would be, and PyTorch's clip coefficient for `max_norm` from it, on the device:
    /// [`Backend::adamw_all`] with `device_clip` reads the coefficient there. With `guard`,
    /// the device also judges the norm, and that update obeys its verdict (the step's
    /// report holds it). False where the backend keeps no such sum on a device (the caller
    /// sums on the host).
    fn queue_grad_sumsq(&self, _views: &[Mat<Self::Buf>], _max_norm: f64, _guard: Option<&crate::GuardSpec>) -> bool {
        false
    }
    /// Start a step's loss on the device: the next [`Backend::tally_loss`] sets it.
    fn begin_loss_tally(&self) {}
    /// Add Σ of `x` (per-token losses) to the step's loss on the device, without waiting;
    /// false where the backend keeps no such tally (the caller sums on the host).
    fn tally_loss(&self, _x: Mat<Self::Buf>) -> bool {
        false
    }
    /// Copy the step's report (the loss tally, the gradient norm and the guard's verdict)
    /// aside when the device reaches this point, to read later without waiting for the
    /// work queued after it: its ticket. None where the backend keeps no report.
    fn snapshot_report(&self) -> Option<u64> {
        None
    }
    /// The report of `ticket` ([`Backend::snapshot_report`]): waits for the device to
    /// reach that snapshot, not for later work.
    fn read_report(&self, _ticket: u64) -> crate::StepReport {
        panic!("{}: no step report on a device", self.name())
    }
    /// The sum the last [`Backend::queue_grad_sumsq`] queued (waits for the device).
    fn read_grad_sumsq(&self) -> f64 {
        panic!("{}: no gradient sum queued on a device", self.name())
    }
    /// AdamW on every buffer of a model; a device backend launches a few kernels for all of
    /// them. By default, [`Backend::adamw`] on each buffer in turn.
    fn adamw_all(&self, a: crate::AdamAll<Self::Buf>) {
        adamw_each(self, a)
    }
    /// Zero every view (a model's gradients before a step); a device backend launches one
    /// kernel for all of them. By default, [`Backend::fill`] on each view in turn (an
    /// iterator, so the CPU engine's step allocates nothing here).
    fn zero_all<'a>(&self, views: impl IntoIterator<Item = MatMut<'a, Self::Buf>>) {
        for v in views {
            self.fill(v, 0.0);
        }
    }

    // The kernels, one method each, generated from the kernel table (crate::kernels).
    crate::kernel_table!(declare_kernels {});
}

/// The operation a reduction applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Max,
}

/// Which layer and operation issued a collective (kept allocation-free for the recorder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label {
    pub op: &'static str,
    pub layer: Option<u32>,
}

impl Label {
    pub const fn op(op: &'static str) -> Self {
        Self { op, layer: None }
    }
    pub const fn layer(op: &'static str, layer: usize) -> Self {
        Self { op, layer: Some(layer as u32) }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(l) => write!(f, "layer{l}.{}", self.op),
            None => write!(f, "{}", self.op),
        }
    }
}

/// Collectives over one group of ranks, on device buffers. Ranges are contiguous element
/// ranges of a buffer. Every rank of the group must call the same collectives in the same
/// order with the same sizes.
pub trait Collective<B: Backend>: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Reduce `buf[off..off+n]` over the group; every rank gets the same bits.
    fn all_reduce(&self, buf: &mut B::Buf, off: usize, n: usize, op: ReduceOp, label: Label);
    /// `buf[off..off+size·n]`: rank i contributes its chunk `i·n..(i+1)·n`; all get all chunks.
    fn all_gather(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label);
    /// `buf[off..off+size·n]` is summed over the group; afterwards chunk `rank` of the range
    /// (elements `off+rank·n..off+(rank+1)·n`) holds this rank's part of the sum; the other
    /// chunks are unspecified.
    fn reduce_scatter(&self, buf: &mut B::Buf, off: usize, n: usize, label: Label);
    fn broadcast(&self, buf: &mut B::Buf, off: usize, n: usize, root: usize, label: Label);
    fn send(&self, buf: &B::Buf, off: usize, n: usize, to: usize, label: Label);
    fn recv(&self, buf: &mut B::Buf, off: usize, n: usize, from: usize, label: Label);
    fn barrier(&self);

    // Non-blocking starts ([`crate::pending`]): the handle owns `buf` until it is waited
    // for. Every rank starts the same calls in the same order, as for the blocking ones. By
    // default the call runs to completion when started.

    /// Whether started calls progress in the background (a progress thread), so a receive
    /// may be posted ahead of the work that precedes it. With the default (false), a started
    /// call completes when it is started, and posting a receive early could wait forever.
    fn overlaps(&self) -> bool {
        false
    }

    /// [`Collective::all_reduce`], started.
    fn start_all_reduce(
        &self,
        mut buf: B::Buf,
        off: usize,
        n: usize,
        op: ReduceOp,
        label: Label,
    ) -> Handle<'_, B::Buf> {
        self.all_reduce(&mut buf, off, n, op, label);
        Box::new(Ready(buf))
    }
    /// [`Collective::reduce_scatter`], started.
    fn start_reduce_scatter(&self, mut buf: B::Buf, off: usize, n: usize, label: Label) -> Handle<'_, B::Buf> {
        self.reduce_scatter(&mut buf, off, n, label);
        Box::new(Ready(buf))
    }
    /// [`Collective::all_gather`], started.
    fn start_all_gather(&self, mut buf: B::Buf, off: usize, n: usize, label: Label) -> Handle<'_, B::Buf> {
        self.all_gather(&mut buf, off, n, label);
        Box::new(Ready(buf))
    }
    /// [`Collective::send`], started; the handle gives the buffer back once it is sent.
    fn start_send(&self, buf: B::Buf, off: usize, n: usize, to: usize, label: Label) -> Handle<'_, B::Buf> {
        self.send(&buf, off, n, to, label);
        Box::new(Ready(buf))
    }
    /// [`Collective::recv`], started (posted ahead of the data).
    fn start_recv(&self, mut buf: B::Buf, off: usize, n: usize, from: usize, label: Label) -> Handle<'_, B::Buf> {
        self.recv(&mut buf, off, n, from, label);
        Box::new(Ready(buf))
    }
}

/// The group of one rank: every collective is the identity and costs nothing.
pub struct Solo;

impl<B: Backend> Collective<B> for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce(&self, _: &mut B::Buf, _: usize, _: usize, _: ReduceOp, _: Label) {}
    fn all_gather(&self, _: &mut B::Buf, _: usize, _: usize, _: Label) {}
    fn reduce_scatter(&self, _: &mut B::Buf, _: usize, _: usize, _: Label) {}
    fn broadcast(&self, _: &mut B::Buf, _: usize, _: usize, _: usize, _: Label) {}
    fn send(&self, _: &B::Buf, _: usize, _: usize, _: usize, _: Label) {
        panic!("send within a group of one rank")
    }
    fn recv(&self, _: &mut B::Buf, _: usize, _: usize, _: usize, _: Label) {
        panic!("recv within a group of one rank")
    }
    fn barrier(&self) {}
}

/// [`Backend::adamw_all`] as [`Backend::adamw`] on each buffer in turn.
pub fn adamw_each<B: Backend>(be: &B, a: crate::AdamAll<B::Buf>) {
    assert!(!a.device_clip, "{}: no clip coefficient on a device", be.name());
    let k = a.lens.len();
    assert!(a.p.len() == k && a.g.len() == k && a.m.len() == k && a.v.len() == k, "adamw_all: {k} buffers");
    let it = a.p.iter_mut().zip(a.g).zip(a.m.iter_mut().zip(a.v.iter_mut())).zip(a.lens);
    for (((p, g), (m, v)), &(n, decay)) in it {
        be.adamw(crate::AdamUpdate { p, g, m, v, off: 0, n, step: a.step, decay });
    }
}
