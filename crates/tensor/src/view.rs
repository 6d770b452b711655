//! Row-major matrix views into device buffers: an offset, a shape and a row stride.
//! Grouped layers keep several logical matrices side by side in one buffer, so kernels
//! take views rather than whole buffers.

/// A device buffer whose length the views can check against.
pub trait DeviceBuf: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of one stored element (a mixed-precision backend stores buffers in several
    /// dtypes, so sizes follow the buffer, not the backend).
    fn elem_bytes(&self) -> usize;
    /// Device bytes the buffer holds: its elements and any copy kept beside them.
    fn bytes(&self) -> usize {
        self.len() * self.elem_bytes()
    }
}

/// A read-only view: `rows × cols`, element (i, j) at `off + i·ld + j`.
/// `trans` marks the view as transposed for GEMM operands only.
pub struct Mat<'a, Buf: ?Sized> {
    pub buf: &'a Buf,
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub trans: bool,
}

impl<Buf: ?Sized> Clone for Mat<'_, Buf> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Buf: ?Sized> Copy for Mat<'_, Buf> {}

/// A mutable view with the same layout rules as [`Mat`].
pub struct MatMut<'a, Buf: ?Sized> {
    pub buf: &'a mut Buf,
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

fn check(len: usize, off: usize, rows: usize, cols: usize, ld: usize) {
    assert!(cols <= ld || rows <= 1, "view: cols {cols} exceed row stride {ld}");
    if rows > 0 && cols > 0 {
        let end = off + (rows - 1) * ld + cols;
        assert!(end <= len, "view [{rows}×{cols}, ld {ld}] at {off} ends at {end}, past buffer length {len}");
    }
}

impl<'a, Buf: DeviceBuf + ?Sized> Mat<'a, Buf> {
    /// The first `rows·cols` elements as a contiguous matrix.
    pub fn new(buf: &'a Buf, rows: usize, cols: usize) -> Self {
        Self::at(buf, 0, rows, cols, cols)
    }
    pub fn at(buf: &'a Buf, off: usize, rows: usize, cols: usize, ld: usize) -> Self {
        check(buf.len(), off, rows, cols, ld);
        Self { buf, off, rows, cols, ld, trans: false }
    }
    /// A vector of `n` elements as a 1×n row.
    pub fn row_vec(buf: &'a Buf, off: usize, n: usize) -> Self {
        Self::at(buf, off, 1, n, n)
    }
    /// Columns `c0..c1` of this view.
    pub fn cols(self, c0: usize, c1: usize) -> Self {
        assert!(!self.trans && c0 <= c1 && c1 <= self.cols, "column block {c0}..{c1} of {} columns", self.cols);
        Self { off: self.off + c0, cols: c1 - c0, ..self }
    }
    /// Rows `r0..r1` of this view.
    pub fn rows(self, r0: usize, r1: usize) -> Self {
        assert!(!self.trans && r0 <= r1 && r1 <= self.rows, "row block {r0}..{r1} of {} rows", self.rows);
        Self { off: self.off + r0 * self.ld, rows: r1 - r0, ..self }
    }
    /// The same matrix, transposed as a GEMM operand.
    pub fn t(self) -> Self {
        Self { trans: !self.trans, ..self }
    }
    /// Shape as seen by a GEMM (after the transpose flag).
    pub fn op_shape(&self) -> (usize, usize) {
        if self.trans { (self.cols, self.rows) } else { (self.rows, self.cols) }
    }
    pub fn is_contiguous(&self) -> bool {
        self.ld == self.cols || self.rows <= 1
    }
}

impl<'a, Buf: DeviceBuf + ?Sized> MatMut<'a, Buf> {
    pub fn new(buf: &'a mut Buf, rows: usize, cols: usize) -> Self {
        Self::at(buf, 0, rows, cols, cols)
    }
    pub fn at(buf: &'a mut Buf, off: usize, rows: usize, cols: usize, ld: usize) -> Self {
        check(buf.len(), off, rows, cols, ld);
        Self { buf, off, rows, cols, ld }
    }
    pub fn row_vec(buf: &'a mut Buf, off: usize, n: usize) -> Self {
        Self::at(buf, off, 1, n, n)
    }
    pub fn cols(self, c0: usize, c1: usize) -> Self {
        assert!(c0 <= c1 && c1 <= self.cols, "column block {c0}..{c1} of {} columns", self.cols);
        Self { off: self.off + c0, cols: c1 - c0, ..self }
    }
    pub fn rows(self, r0: usize, r1: usize) -> Self {
        assert!(r0 <= r1 && r1 <= self.rows, "row block {r0}..{r1} of {} rows", self.rows);
        Self { off: self.off + r0 * self.ld, rows: r1 - r0, ..self }
    }
    /// Reborrow, so a view can be passed on and used again.
    pub fn rb(&mut self) -> MatMut<'_, Buf> {
        MatMut { buf: &mut *self.buf, off: self.off, rows: self.rows, cols: self.cols, ld: self.ld }
    }
    /// A read-only view of the same elements.
    pub fn as_ref(&self) -> Mat<'_, Buf> {
        Mat { buf: &*self.buf, off: self.off, rows: self.rows, cols: self.cols, ld: self.ld, trans: false }
    }
    pub fn is_contiguous(&self) -> bool {
        self.ld == self.cols || self.rows <= 1
    }
}
