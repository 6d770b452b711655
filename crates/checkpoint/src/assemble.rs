//! A whole `model.safetensors` for `boost export`: streamed one canonical tensor at a time,
//! in blocks of rows, from the mapped rectangles (of any layout), so memory holds one block.

use super::Checkpoint;
use super::part::{Slice, write_file};
use super::read::matrix;
use anyhow::Result;
use std::path::Path;

impl Checkpoint {
    /// The whole `model.safetensors` as an export ships it: every weight whole, with the
    /// header metadata `format = "pt"` that transformers 4 requires of a PyTorch file (a copy of
    /// the checkpoint's own file carried its `format = "1"`, which transformers 4 refuses).
    pub fn write_model_file(&self, dest: &Path) -> Result<()> {
        write_whole(self, dest)
    }
}

/// Write every weight of `ck` whole, canonical names, fp32, to `dest`.
fn write_whole(ck: &Checkpoint, dest: &Path) -> Result<()> {
    let shapes = ck.tensor_shapes(|n| !n.starts_with("m.") && !n.starts_with("v."));
    let slices: Vec<Slice> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let (r, c) = matrix(&shape);
            Slice { name, shape, rows: 0..r, cols: 0..c }
        })
        .collect();
    let keys: Vec<String> = slices.iter().map(|s| s.name.clone()).collect();
    let meta = [("format", "pt".to_string()), ("step", ck.meta.step.to_string())];
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
