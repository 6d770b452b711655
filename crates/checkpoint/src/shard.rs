//! Which rectangles of the canonical tensors a rank owns. A parameter piece sits in a flat
//! buffer, row by row (`slot.off + k·ld`); a range of that buffer's elements (the whole of it,
//! or a ZeRO-1 chunk) covers at most three rectangles of the piece: a partial first row, full
//! middle rows and a partial last row. Sharded checkpoints store exactly these rectangles, so
//! a reader of any layout takes its own rectangles from them.

use boost_model::params::Piece;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// A rectangle of a piece that lives in a range of its buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rect {
    /// Global rows and columns of the canonical tensor (as a matrix).
    pub rows: Range<usize>,
    pub cols: Range<usize>,
    /// Offset of its first element in the range's storage (0 = the range's first element)
    /// and the stride between its rows there.
    pub at: usize,
    pub ld: usize,
}

/// Elements moved at a time when a rectangle is saved or loaded (4 MiB of fp32): a save or
/// a load holds one block, never a whole tensor (a vocabulary table is hundreds of MB).
pub const BLOCK: usize = 1 << 20;

/// The row ranges (relative to its first row) of a `rows × cols` rectangle in blocks of at
/// most [`BLOCK`] elements, or of one row where a row is longer.
pub fn row_blocks(rows: usize, cols: usize) -> impl Iterator<Item = Range<usize>> {
    let step = (BLOCK / cols.max(1)).max(1);
    (0..rows).step_by(step).map(move |a| a..(a + step).min(rows))
}

/// The rectangles of `p` among the buffer elements `range`, stored from element
/// `range.start` on.
pub fn rects_in(p: &Piece, range: Range<usize>) -> Vec<Rect> {
    let s = p.slot;
    let w = p.cols.len();
    let mut out: Vec<Rect> = Vec::new();
    if w == 0 || range.is_empty() {
        return out;
    }
    for k in 0..p.rows.len() {
        let start = s.off + k * s.ld;
        let (lo, hi) = (start.max(range.start), (start + w).min(range.end));
        if lo >= hi {
            continue;
        }
        let (c0, c1) = (lo - start, hi - start);
        let row = p.rows.start + k;
        // Full rows following a rectangle of full rows extend it.
        if let Some(last) = out.last_mut()
            && c0 == 0
            && c1 == w
            && last.cols == p.cols
            && last.rows.end == row
        {
            last.rows.end += 1;
            continue;
        }
        out.push(Rect {
            rows: row..row + 1,
            cols: p.cols.start + c0..p.cols.start + c1,
            at: lo - range.start,
            ld: s.ld,
        });
    }
    out
}

/// One stored rectangle of a canonical tensor, as a sharded checkpoint's manifest lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SliceRef {
    /// The file (in the checkpoint directory) and its safetensors key.
    pub file: String,
    pub key: String,
    pub rows: [usize; 2],
    pub cols: [usize; 2],
}

/// What a sharded checkpoint holds of one canonical tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// Global (canonical) shape.
    pub shape: Vec<usize>,
    pub slices: Vec<SliceRef>,
}

/// The rows of `want` (global rows × cols of a tensor with `ncols` columns) that a stored
/// rectangle `have` supplies: for each, (row, cols, offset in `have`'s row-major data,
/// offset in `want`'s row-major data).
pub fn overlap(
    want: (&Range<usize>, &Range<usize>),
    have: (&Range<usize>, &Range<usize>),
) -> Vec<(usize, Range<usize>, usize, usize)> {
    let (r0, r1) = (want.0.start.max(have.0.start), want.0.end.min(have.0.end));
    let (c0, c1) = (want.1.start.max(have.1.start), want.1.end.min(have.1.end));
    if r0 >= r1 || c0 >= c1 {
        return Vec::new();
    }
    let (hw, ww) = (have.1.len(), want.1.len());
    (r0..r1)
        .map(|r| {
            let from = (r - have.0.start) * hw + (c0 - have.1.start);
            let to = (r - want.0.start) * ww + (c0 - want.1.start);
            (r, c0..c1, from, to)
        })
        .collect()
}

/// `shards.json`: the manifest of a sharded checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The layout that wrote it (for reports; any layout reads it).
    pub dp: usize,
    pub pp: usize,
    pub tp: usize,
    pub zero: bool,
    /// Every data file with its size and SHA-256 (also in SHA256SUMS).
    pub files: Vec<FileSum>,
    /// Every canonical tensor (weights, `m.` and `v.` moments) and its rectangles.
    pub tensors: std::collections::BTreeMap<String, TensorEntry>,
}

pub const MANIFEST: &str = "shards.json";

/// A written file: name, size and SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSum {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use boost_model::params::{Init, Slot};

    fn piece(rows: Range<usize>, cols: Range<usize>, off: usize, ld: usize) -> Piece {
        let slot = Slot { buf: 0, off, rows: rows.len(), cols: cols.len(), ld };
        Piece { name: "t".into(), shape: vec![10, 8], rows, cols, slot, init: Init::Const(0.0) }
    }

    #[test]
    fn a_whole_range_is_one_rectangle_and_chunks_cut_rows() {
        // Rows 2..6, columns 4..8 of a 10×8 tensor, stored from element 3 with stride 5.
        let p = piece(2..6, 4..8, 3, 5);
        assert_eq!(rects_in(&p, 0..30), vec![Rect { rows: 2..6, cols: 4..8, at: 3, ld: 5 }]);
        // Elements 10..20: row 1 (elements 8..12) from column 2, row 2 (13..17) whole, row 3
        // (18..22) up to column 2.
        let r = rects_in(&p, 10..20);
        assert_eq!(
            r,
            vec![
                Rect { rows: 3..4, cols: 6..8, at: 0, ld: 5 },
                Rect { rows: 4..5, cols: 4..8, at: 3, ld: 5 },
                Rect { rows: 5..6, cols: 4..6, at: 8, ld: 5 },
            ]
        );
        // Every element of the piece is in exactly one chunk of a three-way split.
        let total: usize = [0..9, 9..18, 18..27, 27..30]
            .into_iter()
            .flat_map(|c| rects_in(&p, c))
            .map(|r| r.rows.len() * r.cols.len())
            .sum();
        assert_eq!(total, 16);
    }

    #[test]
    fn overlap_maps_rows_between_rectangles() {
        let o = overlap((&(2..4), &(0..8)), (&(3..6), &(4..8)));
        // Row 3, columns 4..8: row 0 of `have` (offset 0), row 1 column 4 of `want` (12).
        assert_eq!(o, vec![(3, 4..8, 0, 12)]);
        assert!(overlap((&(0..2), &(0..4)), (&(2..3), &(0..4))).is_empty());
    }
}
