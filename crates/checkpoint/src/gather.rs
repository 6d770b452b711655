//! Whole canonical tensors from a model sharded over tensor-parallel ranks: every rank's
//! rectangles all-gathered and placed where the canonical layout has them.

use super::{Named, Tensors};
use anyhow::Result;
use boost_exec::optim::AdamW;
use boost_model::params::Piece;
use boost_model::{Layout, Model};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut};

/// The whole canonical tensors of a model and its moments sharded over `tp` (see
/// [`gather_sets`]).
pub fn gather<B: Backend>(model: &Model<B>, opt: &AdamW<B>, tp: &dyn Collective<B>) -> Result<Tensors> {
    gather_with(model, &opt.m, &opt.v, tp)
}

/// [`gather`] with the AdamW moments given as buffers aligned with the parameters.
pub fn gather_with<B: Backend>(
    model: &Model<B>,
    m: &[B::Buf],
    v: &[B::Buf],
    tp: &dyn Collective<B>,
) -> Result<Tensors> {
    let [weights, mut moments, v] = gather_sets(model, [("", model.store().values()), ("m.", m), ("v.", v)], tp)?;
    moments.extend(v);
    Ok(Tensors { weights, moments })
}

/// Whole canonical tensors of sets of buffers aligned with the parameter buffers (values,
/// gradients, moments), sharded over `tp`; each set's names get its prefix. Every rank
/// calls this; every rank gets the result. Each buffer is all-gathered, then every rank's
/// rectangles are placed into the canonical tensors.
pub fn gather_sets<B: Backend, const N: usize>(
    model: &Model<B>,
    sets: [(&str, &[B::Buf]); N],
    tp: &dyn Collective<B>,
) -> Result<[Vec<Named>; N]> {
    let p = tp.size();
    let be = model.be();
    let pieces_of: Vec<Vec<Piece>> = (0..p)
        .map(|r| {
            if r == model.layout().tp_rank {
                Ok(model.store().pieces().to_vec())
            } else {
                boost_model::layout_pieces(model.cfg(), Layout { tp_rank: r, ..*model.layout() })
            }
        })
        .collect::<Result<_>>()?;
    // Every rank's copy of each buffer of `bufs`, as host f32.
    let all = |bufs: &[B::Buf]| -> Vec<Vec<Vec<f32>>> {
        bufs.iter()
            .zip(model.store().bufs())
            .map(|(buf, info)| {
                let n = info.len;
                if p == 1 {
                    return vec![be.read_mat::<f32>(Mat::new(buf, 1, n))];
                }
                let mut tmp = be.alloc(p * n);
                be.copy(MatMut::at(&mut tmp, model.layout().tp_rank * n, 1, n, n), Mat::new(buf, 1, n));
                tp.all_gather(&mut tmp, 0, n, Label::op("checkpoint.gather"));
                (0..p).map(|r| be.read_mat::<f32>(Mat::at(&tmp, r * n, 1, n, n))).collect()
            })
            .collect()
    };
    let assemble = |per_buf: &[Vec<Vec<f32>>], prefix: &str| -> Vec<Named> {
        model
            .store()
            .pieces()
            .iter()
            .enumerate()
            .map(|(i, p0)| {
                let (rows, cols) = p0.matrix_shape();
                let mut full = vec![0.0f32; rows * cols];
                for (r, pieces) in pieces_of.iter().enumerate() {
                    let pc = &pieces[i];
                    let s = pc.slot;
                    let data = &per_buf[s.buf][r];
                    let mut local = Vec::with_capacity(pc.rows.len() * pc.cols.len());
                    for k in 0..pc.rows.len() {
                        local.extend_from_slice(&data[s.off + k * s.ld..s.off + k * s.ld + pc.cols.len()]);
                    }
                    pc.scatter_into(&mut full, &local);
                }
                (format!("{prefix}{}", p0.name), p0.shape.clone(), full)
            })
            .collect()
    };
    Ok(sets.map(|(prefix, bufs)| assemble(&all(bufs), prefix)))
}
