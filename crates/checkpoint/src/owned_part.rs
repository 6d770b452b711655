//! What one rank of a (dp, pp, tp) run writes into a sharded checkpoint: the rectangles of
//! its weights (replica 0) and of its AdamW moments (replica 0, or every replica's ZeRO-1
//! chunk), read from the device one block of rows at a time, or all copied to host memory first
//! for a background write.

use crate::shard::{Rect, rects_in};
use crate::{PartFile, Slice};
use boost_exec::dp::Optimizer;
use boost_model::Model;
use boost_tensor::{Backend, Mat};
use std::ops::Range;

#[derive(Debug, Clone, Copy)]
enum Set {
    Values,
    M,
    V,
}

/// Where a rectangle's data lives on this rank: a buffer of a set, and where in it.
#[derive(Debug, Clone)]
struct Src {
    set: Set,
    buf: usize,
    rect: Rect,
}

/// A rank's part: its files, their rectangles and where each rectangle's data lives.
pub struct OwnedPart {
    pub files: Vec<PartFile>,
    srcs: Vec<Vec<Src>>,
}

/// The weights file of (stage, tensor rank) and the optimizer file of (stage, tensor rank,
/// replica); rank (0, 0, 0)'s keep the single-file names.
pub fn file_names(stage: usize, tp: usize, dp: usize) -> (String, String) {
    let model = if stage == 0 && tp == 0 {
        "model.safetensors".into()
    } else {
        format!("model.pp{stage:02}.tp{tp:02}.safetensors")
    };
    let optim = if stage == 0 && tp == 0 && dp == 0 {
        "optim.safetensors".into()
    } else {
        format!("optim.pp{stage:02}.tp{tp:02}.dp{dp:02}.safetensors")
    };
    (model, optim)
}

impl OwnedPart {
    /// The part of the rank holding `model` and `opt` as replica `dp_rank`.
    pub fn of<B: Backend>(model: &Model<B>, opt: &Optimizer<B>, dp_rank: usize) -> Self {
        let l = *model.layout();
        let (model_file, optim_file) = file_names(l.stage, l.tp_rank, dp_rank);
        let (mut w, mut o) =
            (PartFile { file: model_file, slices: vec![] }, PartFile { file: optim_file, slices: vec![] });
        let (mut ws, mut os) = (Vec::new(), Vec::new());
        for p in model.store().pieces() {
            let i = p.slot.buf;
            let info = &model.store().bufs()[i];
            // Every element once: the tied table's copy on the last stage is the first
            // stage's, and every tensor rank holds the same replicated buffers.
            if info.pipeline_copy || (info.replicated && l.tp_rank > 0) {
                continue;
            }
            let slice = |prefix: &str, r: &Rect| Slice {
                name: format!("{prefix}{}", p.name),
                shape: p.shape.clone(),
                rows: r.rows.clone(),
                cols: r.cols.clone(),
            };
            let whole = if dp_rank == 0 { 0..info.len } else { 0..0 };
            for r in rects_in(p, whole.clone()) {
                w.slices.push(slice("", &r));
                ws.push(Src { set: Set::Values, buf: i, rect: r });
            }
            let moments = match opt {
                Optimizer::Replicated(_) => whole,
                Optimizer::Zero1(z) => z.owned(i, info.len),
            };
            for r in rects_in(p, moments) {
                for (prefix, set) in [("m.", Set::M), ("v.", Set::V)] {
                    o.slices.push(slice(prefix, &r));
                    os.push(Src { set, buf: i, rect: r.clone() });
                }
            }
        }
        Self { files: vec![w, o], srcs: vec![ws, os] }
    }

    /// The row-major data of rows `rows` (counted from its first) of slice `i` of file `f`,
    /// read from the device.
    pub fn read<B: Backend>(
        &self,
        model: &Model<B>,
        opt: &Optimizer<B>,
        (f, i): (usize, usize),
        rows: Range<usize>,
    ) -> Vec<f32> {
        let s = &self.srcs[f][i];
        let buf = match (s.set, opt) {
            (Set::Values, _) => model.store().value(s.buf),
            (Set::M, Optimizer::Replicated(a)) => &a.m[s.buf],
            (Set::V, Optimizer::Replicated(a)) => &a.v[s.buf],
            (Set::M, Optimizer::Zero1(z)) => &z.m[s.buf],
            (Set::V, Optimizer::Zero1(z)) => &z.v[s.buf],
        };
        let r = &s.rect;
        model.be().read_mat(Mat::at(buf, r.at + rows.start * r.ld, rows.len(), r.cols.len(), r.ld))
    }

    /// Every slice copied to host memory (the staging copy of a background write).
    pub fn stage<B: Backend>(&self, model: &Model<B>, opt: &Optimizer<B>) -> Vec<Vec<Vec<f32>>> {
        let whole = |f: usize, i: usize| self.read(model, opt, (f, i), 0..self.srcs[f][i].rect.rows.len());
        (0..self.files.len()).map(|f| (0..self.srcs[f].len()).map(|i| whole(f, i)).collect()).collect()
    }

    /// Bytes of state this rank owns in the checkpoint (its slices, fp32).
    pub fn bytes(&self) -> u64 {
        self.files.iter().flat_map(|f| &f.slices).map(|s| 4 * (s.rows.len() * s.cols.len()) as u64).sum()
    }
}
