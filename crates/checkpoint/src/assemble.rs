//! A whole `model.safetensors` from a sharded checkpoint (for `boost export`): streamed one
//! canonical tensor at a time, in blocks of rows, from the mapped rectangles, so memory
//! holds one block; or the single file copied when it already holds every weight whole.

use super::Checkpoint;
use super::part::{Slice, write_file};
use super::read::{is_whole, matrix};
use anyhow::{Context, Result};
use std::path::Path;

impl Checkpoint {
    /// The whole `model.safetensors` as an export ships it: the file itself when it holds
    /// every weight whole (a single-file checkpoint, or a sharded one of one rank), else
    /// assembled tensor by tensor from the rectangles.
    pub fn write_model_file(&self, dest: &Path) -> Result<()> {
        let whole = "model.safetensors";
        let one_file = self
            .tensors
            .iter()
            .filter(|(n, _)| !n.starts_with("m.") && !n.starts_with("v."))
            .all(|(_, e)| e.slices.len() == 1 && e.slices[0].file == whole && is_whole(&e.slices[0], &e.shape));
        if !self.sharded || one_file {
            let from = self.dir.join(whole);
            std::fs::copy(&from, dest)
                .with_context(|| format!("cannot write {} (from {})", dest.display(), from.display()))?;
            return Ok(());
        }
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
