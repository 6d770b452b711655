//! A whole `model.safetensors` from a sharded checkpoint (for `boost export`): streamed one
//! canonical tensor at a time, in blocks of rows, from the mapped rectangles, so memory
//! holds one block.

use super::Checkpoint;
use super::part::{Slice, write_file};
use anyhow::Result;
use std::path::Path;

/// Write every weight of `ck` whole, canonical names, fp32, to `dest`.
pub fn write_whole(ck: &Checkpoint, dest: &Path) -> Result<()> {
    let shapes = ck.tensor_shapes(|n| !n.starts_with("m.") && !n.starts_with("v."));
    let slices: Vec<Slice> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let (r, c) = match shape.as_slice() {
                [n] => (1, *n),
                [r, c] => (*r, *c),
                _ => (0, 0),
            };
            Slice { name, shape, rows: 0..r, cols: 0..c }
        })
        .collect();
    let keys: Vec<String> = slices.iter().map(|s| s.name.clone()).collect();
    let meta = [("format", "1".to_string()), ("step", ck.meta.step.to_string())];
    let mut failed = None;
    let mut fetch = |i: usize, rows: std::ops::Range<usize>| {
        let s: &Slice = &slices[i];
        let global = s.rows.start + rows.start..s.rows.start + rows.end;
        ck.read_rect(&s.name, &s.shape, global, s.cols.clone()).unwrap_or_else(|e| {
            failed.get_or_insert(e);
            vec![0.0; rows.len() * s.cols.len()]
        })
    };
    let written = write_file(dest, &slices, &keys, &meta, &mut fetch);
    if let Some(e) = failed {
        std::fs::remove_file(dest).ok();
        return Err(e);
    }
    written.map(|_| ())
}
