//! Parameter storage. A rank holds its parameters in a few flat buffers (one per grouped
//! weight); each *canonical* tensor — the unsharded, ungrouped tensor of docs/MODEL.md —
//! maps to a rectangle of one buffer. The same map drives initialisation, checkpoints,
//! export and gathering gradients for parity tests.

use boost_tensor::{Backend, DeviceBuf, Mat, MatMut};
use std::ops::Range;

mod builder;
pub use builder::{BufBuilder, BufOpts, Held, Split, shard};

/// How a canonical tensor is first filled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Normal(f64),
    Uniform(f64),
    Const(f64),
}

/// A rectangle of one parameter buffer: `rows × cols` at `off` with row stride `ld`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub buf: usize,
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

impl Slot {
    pub fn of<'a, Buf: DeviceBuf>(&self, bufs: &'a [Buf]) -> Mat<'a, Buf> {
        Mat::at(&bufs[self.buf], self.off, self.rows, self.cols, self.ld)
    }
    pub fn of_mut<'a, Buf: DeviceBuf>(&self, bufs: &'a mut [Buf]) -> MatMut<'a, Buf> {
        MatMut::at(&mut bufs[self.buf], self.off, self.rows, self.cols, self.ld)
    }
    /// A contiguous 1×n row (a norm's γ) as an n×1 column: the per-row factor of `mul_rows`
    /// and the output of `row_dot`.
    pub fn col<'a, Buf: DeviceBuf>(&self, bufs: &'a [Buf]) -> Mat<'a, Buf> {
        assert_eq!(self.rows, 1, "a column view of a {}×{} slot", self.rows, self.cols);
        Mat::at(&bufs[self.buf], self.off, self.cols, 1, 1)
    }
    /// Mutable [`Slot::col`].
    pub fn col_mut<'a, Buf: DeviceBuf>(&self, bufs: &'a mut [Buf]) -> MatMut<'a, Buf> {
        assert_eq!(self.rows, 1, "a column view of a {}×{} slot", self.rows, self.cols);
        MatMut::at(&mut bufs[self.buf], self.off, self.cols, 1, 1)
    }
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One canonical tensor and the part of it this rank holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Canonical name, e.g. `model.layers.0.self_attn.q_proj.cola_a`.
    pub name: String,
    /// Canonical shape (1 or 2 dims).
    pub shape: Vec<usize>,
    /// Global rows and columns held here (a vector is one row).
    pub rows: Range<usize>,
    pub cols: Range<usize>,
    /// Where they live locally (`rows.len() × cols.len()`).
    pub slot: Slot,
    pub init: Init,
}

impl Piece {
    /// Canonical shape as a matrix (a vector is 1×n).
    pub fn matrix_shape(&self) -> (usize, usize) {
        match self.shape.as_slice() {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            s => panic!("canonical tensors have 1 or 2 dims, {} has {s:?}", self.name),
        }
    }
    pub fn is_whole(&self) -> bool {
        let (r, c) = self.matrix_shape();
        self.rows == (0..r) && self.cols == (0..c)
    }
}

/// What a buffer is, for the optimizer and the gradient norm.
#[derive(Debug, Clone, PartialEq)]
pub struct BufInfo {
    pub name: String,
    pub len: usize,
    /// Weight decay applies (matrices yes; norm weights and biases no).
    pub decay: bool,
    /// Every tensor-parallel rank holds the same values (count once in the gradient norm).
    pub replicated: bool,
    /// A copy of a buffer another pipeline stage holds too (the tied embedding on the last
    /// stage): its gradient is synced with the original and counted there.
    pub pipeline_copy: bool,
}

/// A rank's parameters: buffer i has its values, its gradient and its [`BufInfo`], and each
/// [`Piece`] points into one of them. The fields stay private so that the four lists keep
/// one length and the pieces keep pointing at buffers that exist: buffers are read and
/// written through the methods, never added or dropped from outside.
pub struct ParamStore<B: Backend> {
    values: Vec<B::Buf>,
    grads: Vec<B::Buf>,
    bufs: Vec<BufInfo>,
    pieces: Vec<Piece>,
    /// Record the declaration only: buffers are empty (for reading another rank's share).
    shapes_only: bool,
    /// Builders opened and not yet finished: the next one opened gets id `bufs.len() + opening`.
    opening: usize,
}

/// [`ParamStore::for_update`]: the values writable beside the gradients and buffer infos.
pub struct ForUpdate<'a, B: Backend> {
    pub values: &'a mut [B::Buf],
    pub grads: &'a [B::Buf],
    pub bufs: &'a [BufInfo],
}

impl<B: Backend> ParamStore<B> {
    pub fn new() -> Self {
        Self {
            values: Vec::new(),
            grads: Vec::new(),
            bufs: Vec::new(),
            pieces: Vec::new(),
            shapes_only: false,
            opening: 0,
        }
    }

    /// A store that records tensors, slots and buffer sizes but allocates nothing.
    pub fn shapes_only() -> Self {
        Self { shapes_only: true, ..Self::new() }
    }

    fn add_buf(&mut self, backend: &B, name: &str, len: usize, opts: BufOpts) -> usize {
        let n = if self.shapes_only { 0 } else { len };
        self.values.push(backend.alloc_param(n));
        self.grads.push(backend.alloc(n));
        let BufOpts { decay, replicated } = opts;
        self.bufs.push(BufInfo { name: name.to_string(), len, decay, replicated, pipeline_copy: false });
        self.bufs.len() - 1
    }

    /// Number of buffers.
    pub fn buf_count(&self) -> usize {
        self.bufs.len()
    }
    /// What each buffer is.
    pub fn bufs(&self) -> &[BufInfo] {
        &self.bufs
    }
    /// Every canonical tensor this rank holds a part of, in declaration order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
    /// The pieces, the buffers dropped (a declaration read for its layout).
    pub fn into_pieces(self) -> Vec<Piece> {
        self.pieces
    }
    /// Buffer `i`'s values.
    pub fn value(&self, i: usize) -> &B::Buf {
        &self.values[i]
    }
    pub fn value_mut(&mut self, i: usize) -> &mut B::Buf {
        &mut self.values[i]
    }
    /// Buffer `i`'s gradient.
    pub fn grad(&self, i: usize) -> &B::Buf {
        &self.grads[i]
    }
    pub fn grad_mut(&mut self, i: usize) -> &mut B::Buf {
        &mut self.grads[i]
    }
    /// Every buffer's values (what [`Slot::of`] reads).
    pub fn values(&self) -> &[B::Buf] {
        &self.values
    }
    pub fn values_mut(&mut self) -> &mut [B::Buf] {
        &mut self.values
    }
    /// Every buffer's gradient.
    pub fn grads(&self) -> &[B::Buf] {
        &self.grads
    }
    pub fn grads_mut(&mut self) -> &mut [B::Buf] {
        &mut self.grads
    }
    /// Values to update, the gradients that update them and what each buffer is, together
    /// (an optimizer step, ZeRO-1's gather of the updated shards).
    pub fn for_update(&mut self) -> ForUpdate<'_, B> {
        ForUpdate { values: &mut self.values, grads: &self.grads, bufs: &self.bufs }
    }
    /// Lend the values out (a pass that fills them as it reads); [`ParamStore::put_values`]
    /// gives them back.
    pub fn take_values(&mut self) -> Vec<B::Buf> {
        std::mem::take(&mut self.values)
    }
    pub fn put_values(&mut self, values: Vec<B::Buf>) {
        assert_eq!(values.len(), self.bufs.len(), "values given back for {} buffers", self.bufs.len());
        self.values = values;
    }
    /// Lend the gradients out (a backward, or the summing of tp chunks);
    /// [`ParamStore::put_grads`] gives them (or their replacement) back.
    pub fn take_grads(&mut self) -> Vec<B::Buf> {
        std::mem::take(&mut self.grads)
    }
    pub fn put_grads(&mut self, grads: Vec<B::Buf>) {
        assert_eq!(grads.len(), self.bufs.len(), "gradients given back for {} buffers", self.bufs.len());
        self.grads = grads;
    }
    /// Mark buffer `i` as a copy another pipeline stage holds too ([`BufInfo::pipeline_copy`]).
    pub fn mark_pipeline_copy(&mut self, i: usize) {
        self.bufs[i].pipeline_copy = true;
    }

    pub fn piece(&self, name: &str) -> Option<&Piece> {
        self.pieces.iter().find(|p| p.name == name)
    }

    /// Elements held on this rank.
    pub fn local_len(&self) -> usize {
        self.bufs.iter().map(|b| b.len).sum()
    }

    /// Elements of the canonical (global) model.
    pub fn global_len(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| {
                let (r, c) = p.matrix_shape();
                r * c
            })
            .sum()
    }

    pub fn zero_grads(&mut self, backend: &B) {
        zero_like(backend, &mut self.grads, &self.bufs);
    }
    /// Gradient buffers of this store's sizes, zeroed (allocated when `bufs` is empty): a tp
    /// chunk's own gradients.
    pub fn zeroed_grads(&self, backend: &B, mut bufs: Vec<B::Buf>) -> Vec<B::Buf> {
        if bufs.is_empty() {
            bufs = self.bufs.iter().map(|i| backend.alloc(i.len)).collect();
        }
        zero_like(backend, &mut bufs, &self.bufs);
        bufs
    }
}

/// Zero each of `bufs`, buffer i holding `infos[i].len` elements.
fn zero_like<B: Backend>(backend: &B, bufs: &mut [B::Buf], infos: &[BufInfo]) {
    backend.zero_all(bufs.iter_mut().zip(infos).map(|(g, info)| MatMut::new(g, 1, info.len)));
}

impl<B: Backend> Default for ParamStore<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// Two slots of different buffers, both mutable.
pub fn two_mut<'a, Buf: DeviceBuf>(bufs: &'a mut [Buf], a: Slot, b: Slot) -> (MatMut<'a, Buf>, MatMut<'a, Buf>) {
    assert_ne!(a.buf, b.buf, "two_mut: both slots are in buffer {}", a.buf);
    let (lo, hi, swap) = if a.buf < b.buf { (a, b, false) } else { (b, a, true) };
    let (left, right) = bufs.split_at_mut(hi.buf);
    let x = MatMut::at(&mut left[lo.buf], lo.off, lo.rows, lo.cols, lo.ld);
    let y = MatMut::at(&mut right[0], hi.off, hi.rows, hi.cols, hi.ld);
    if swap { (y, x) } else { (x, y) }
}

impl Piece {
    /// This piece's data in global row-major order, placed into `full` (the whole canonical
    /// tensor) from a row-major `local` rectangle.
    pub fn scatter_into(&self, full: &mut [f32], local: &[f32]) {
        let ncols = self.matrix_shape().1;
        let w = self.cols.len();
        for (k, r) in self.rows.clone().enumerate() {
            full[r * ncols + self.cols.start..r * ncols + self.cols.end].copy_from_slice(&local[k * w..(k + 1) * w]);
        }
    }
}
