//! The bf16 staging of cuDNN's operands: fp32 buffers (a caller's; the trainer's activations
//! are bf16 under mixed precision) are copied to bf16 in a workspace slot before a run, and an
//! fp32 output copied back after it; bf16 buffers are read and written in place.

use crate::backend::{Cuda, WS_CUDNN_IO};
use crate::buf::{CudaBuf, DType};
use crate::device::{P, Tv};
use crate::launch::tv_of;

/// Where a tensor of the shim lives: a bf16 operand's own address, or an offset into the
/// staging workspace; with its row stride.
pub(super) type Place = (Loc, usize);

#[derive(Clone, Copy)]
pub(super) enum Loc {
    At(u64),
    Staged(usize),
}

/// fp32 operands copied to bf16 in a workspace slot, and an output copied back after the
/// run: (offset in the slot, the fp32 view, rows, cols).
#[derive(Default)]
pub(super) struct Staging {
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
    pub(super) fn input(&mut self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) -> Place {
        if buf.dtype() == DType::Bf16 {
            return (Loc::At(buf.ptr(off)), ld);
        }
        let at = self.reserve(rows * cols);
        self.ins.push((at, tv_of(buf, off, ld), rows, cols));
        (Loc::Staged(at), cols)
    }

    /// Where the shim writes `rows × cols` at `off` of `buf` (one output per run).
    pub(super) fn output(&mut self, buf: &CudaBuf, off: usize, rows: usize, cols: usize, ld: usize) -> Place {
        if buf.dtype() == DType::Bf16 {
            return (Loc::At(buf.ptr(off)), ld);
        }
        let at = self.reserve(rows * cols);
        self.out = Some((at, tv_of(buf, off, ld), rows, cols));
        (Loc::Staged(at), cols)
    }

    /// Allocates the staging slot and copies the inputs in; the address of each place.
    pub(super) fn commit(&self, be: &Cuda) -> impl Fn(Place) -> u64 + use<> {
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
    pub(super) fn write_back(&self, be: &Cuda, io: impl Fn(Place) -> u64) {
        if let Some((at, dst, rows, cols)) = self.out {
            let src = Tv { p: io((Loc::Staged(at), cols)), ld: cols as i64, bf: 1, pad: 0 };
            be.ew("k_copy", rows, cols, &mut P::of(&[dst, src]));
        }
    }
}
