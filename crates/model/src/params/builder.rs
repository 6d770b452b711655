//! Building a parameter buffer: the canonical tensors (or the parts of them this rank holds)
//! laid out in one buffer of the store, each at its slot.

use super::{Init, ParamStore, Piece, Slot};
use boost_tensor::Backend;
use std::ops::Range;

/// Rank `idx`'s part of `0..n` split into `parts` equal chunks.
pub fn shard(n: usize, parts: usize, idx: usize) -> Range<usize> {
    debug_assert_eq!(n % parts, 0, "{n} does not split into {parts}");
    let k = n / parts;
    idx * k..(idx + 1) * k
}

/// Which canonical dimension a tensor is split along across tensor-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Whole,
    Rows,
    Cols,
}

/// The part of a canonical tensor a rank holds: its name and whole shape, the rows and
/// columns of it held here, and how it is initialised.
pub struct Held {
    pub name: String,
    pub shape: Vec<usize>,
    pub rows: Range<usize>,
    pub cols: Range<usize>,
    pub init: Init,
}

/// How the optimizer and the gradient norm treat a buffer ([`BufInfo`](super::BufInfo)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufOpts {
    /// Weight decay applies.
    pub decay: bool,
    /// Every tensor-parallel rank holds the same values.
    pub replicated: bool,
}

impl BufOpts {
    /// Weight matrices (and the Kronecker gate's factors): decayed.
    pub const MATRIX: Self = Self { decay: true, replicated: false };
    /// Norm weights and biases: not decayed.
    pub const VECTOR: Self = Self { decay: false, replicated: false };

    /// The same, held whole by every tensor-parallel rank when `yes`.
    pub fn replicated_if(self, yes: bool) -> Self {
        Self { replicated: yes, ..self }
    }
}

/// Builds one parameter buffer out of canonical tensors laid out side by side. Its buffer id
/// is fixed when it is opened, so every slot it hands out already points at its buffer;
/// builders are finished in the order they were opened (the order of the buffers).
pub struct BufBuilder {
    id: usize,
    name: String,
    opts: BufOpts,
    /// Registered with the store when the buffer is allocated.
    pieces: Vec<Piece>,
    len: usize,
}

impl BufBuilder {
    /// Open the next buffer of `store`.
    pub fn open<B: Backend>(store: &mut ParamStore<B>, name: impl Into<String>, opts: BufOpts) -> Self {
        let id = store.bufs.len() + store.opening;
        store.opening += 1;
        Self { id, name: name.into(), opts, pieces: Vec::new(), len: 0 }
    }

    /// The buffer's id in its store.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Append `name` as its own contiguous block; returns its slot.
    pub fn block(&mut self, name: String, shape: Vec<usize>, split: Split, tp: usize, rank: usize, init: Init) -> Slot {
        let (r, c) = match shape.as_slice() {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => unreachable!(),
        };
        let rows = if split == Split::Rows { shard(r, tp, rank) } else { 0..r };
        let cols = if split == Split::Cols { shard(c, tp, rank) } else { 0..c };
        let slot = Slot { buf: self.id, off: self.len, rows: rows.len(), cols: cols.len(), ld: cols.len() };
        self.len += rows.len() * cols.len();
        self.pieces.push(Piece { name, shape, rows, cols, slot, init });
        slot
    }

    /// Place `held` at a given rectangle (`off`, `ld`) of a buffer laid out by the caller
    /// (e.g. a column block of a grouped weight); `len` grows to cover it.
    pub fn at(&mut self, held: Held, off: usize, ld: usize) -> Slot {
        let (rows, cols) = (held.rows.len(), held.cols.len());
        let slot = Slot { buf: self.id, off, rows, cols, ld };
        self.len = self.len.max(off + (rows.max(1) - 1) * ld + cols);
        let Held { name, shape, rows, cols, init } = held;
        self.pieces.push(Piece { name, shape, rows, cols, slot, init });
        slot
    }

    pub fn reserve(&mut self, len: usize) {
        self.len = self.len.max(len);
    }

    /// Allocate the buffer and register its pieces.
    pub fn finish<B: Backend>(self, store: &mut ParamStore<B>, backend: &B) {
        assert_eq!(self.id, store.bufs.len(), "buffer {} finished before the buffers opened ahead of it", self.name);
        store.opening -= 1;
        store.add_buf(backend, &self.name, self.len, self.opts);
        store.pieces.extend(self.pieces);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boost_tensor::cpu::Cpu;

    /// Slots point at their buffer from the moment they are handed out, with builders open
    /// side by side; finishing registers the same slots and the buffer's options.
    #[test]
    fn slots_know_their_buffer_when_made() {
        let be = Cpu::<f32>::new();
        let mut store = ParamStore::<Cpu<f32>>::new();
        let mut first = BufBuilder::open(&mut store, "a", BufOpts::MATRIX);
        let mut second = BufBuilder::open(&mut store, "b", BufOpts::VECTOR.replicated_if(true));
        let s = second.block("b.w".into(), vec![3], Split::Whole, 1, 0, Init::Const(1.0));
        let f = first.block("a.w".into(), vec![2, 4], Split::Cols, 2, 1, Init::Const(0.0));
        assert_eq!((f.buf, s.buf), (0, 1));
        assert_eq!((f.rows, f.cols, f.ld, s.off, s.cols), (2, 2, 2, 0, 3));
        first.finish(&mut store, &be);
        second.finish(&mut store, &be);
        let slots: Vec<Slot> = store.pieces().iter().map(|p| p.slot).collect();
        assert_eq!(slots, [f, s]);
        let info = |i: usize| (store.bufs()[i].len, store.bufs()[i].decay, store.bufs()[i].replicated);
        assert_eq!((info(0), info(1)), ((4, true, false), (3, false, true)));
    }

    /// A builder finished ahead of one opened before it would take that one's id.
    #[test]
    #[should_panic(expected = "buffer b finished before the buffers opened ahead of it")]
    fn builders_finish_in_the_order_opened() {
        let be = Cpu::<f32>::new();
        let mut store = ParamStore::<Cpu<f32>>::new();
        let _first = BufBuilder::open(&mut store, "a", BufOpts::MATRIX);
        BufBuilder::open(&mut store, "b", BufOpts::MATRIX).finish(&mut store, &be);
    }
}
