//! Checkpoints of a (dp, pp, tp) run: loaded into any layout (each rank reading only its
//! rectangles), and — for the gradient dump — whole canonical tensors assembled on global
//! rank 0: gathered over tp within each stage, from every pipeline stage of replica 0, with
//! ZeRO-1 chunks gathered over dp first. Saving is rank by rank ([`crate::owned_part`]).

use crate::shard::rects_in;
use crate::{Checkpoint, Named, Tensors, gather_sets};
use anyhow::Result;
use boost_exec::Groups;
use boost_exec::dp::{Optimizer, Zero1};
use boost_model::{Layout, Model, layout_pieces};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut};

/// Full-size buffers from this replica's ZeRO-1 chunk of every parameter buffer, gathered
/// over dp: chunk i is the `owned(i)` elements of `src(i).0` from offset `src(i).1`.
fn gather_chunks<'a, B: Backend>(
    model: &Model<B>,
    z: &'a Zero1<B>,
    dp: &dyn Collective<B>,
    label: Label,
    src: impl Fn(usize) -> (&'a B::Buf, usize),
) -> Vec<B::Buf> {
    let be = model.be();
    (0..model.store().buf_count())
        .map(|i| {
            let (n, c) = (model.store().bufs()[i].len, z.chunk[i]);
            let k = z.owned(i, n).len();
            let (buf, off) = src(i);
            let mut all = be.alloc(c * z.dp);
            be.copy(MatMut::at(&mut all, z.rank * c, 1, k, k), Mat::at(buf, off, 1, k, k));
            dp.all_gather(&mut all, 0, c, label);
            let mut full = be.alloc(n);
            be.copy(MatMut::new(&mut full, 1, n), Mat::new(&all, 1, n));
            full
        })
        .collect()
}

/// Whole canonical tensors of the run on global rank 0 (None elsewhere). Every rank calls it.
pub fn gather_run<B: Backend>(
    model: &Model<B>,
    opt: &Optimizer<B>,
    g: &Groups<B>,
    dp_rank: usize,
) -> Result<Option<Tensors>> {
    // Replicated moments are already full-size; ZeRO-1 ones are gathered over dp first.
    let gathered;
    let (m, v): (&[B::Buf], &[B::Buf]) = match opt {
        Optimizer::Replicated(a) => (&a.m, &a.v),
        Optimizer::Zero1(z) => {
            let label = Label::op("checkpoint.gather");
            gathered = (
                gather_chunks(model, z, g.dp, label, |i| (&z.m[i], 0)),
                gather_chunks(model, z, g.dp, label, |i| (&z.v[i], 0)),
            );
            (&gathered.0, &gathered.1)
        }
    };
    let sets = [("", model.store().values()), ("m.", m), ("v.", v)];
    Ok(collect_stages(model, g, dp_rank, sets)?.map(|[weights, mut moments, v]| {
        moments.extend(v);
        Tensors { weights, moments }
    }))
}

/// The whole canonical gradients of the step just accumulated (after `sync_grads`, before
/// clipping and the update) on global rank 0 (None elsewhere). Every rank calls it.
pub fn gather_grads<B: Backend>(
    model: &Model<B>,
    opt: &Optimizer<B>,
    g: &Groups<B>,
    dp_rank: usize,
) -> Result<Option<Vec<Named>>> {
    // After `sync_grads` a replicated optimizer's gradient buffers hold the sums; under ZeRO-1
    // each replica holds its chunk of them, gathered over dp here.
    let gathered;
    let grads: &[B::Buf] = match opt {
        Optimizer::Replicated(_) => model.store().grads(),
        Optimizer::Zero1(z) => {
            let own = |i: usize| z.owned(i, model.store().bufs()[i].len).start;
            gathered = gather_chunks(model, z, g.dp, Label::op("grads.gather"), |i| (z.shard_grads(i), own(i)));
            &gathered
        }
    };
    Ok(collect_stages(model, g, dp_rank, [("", grads)])?.map(|[grads]| grads))
}

/// Sets of buffers aligned with the parameters, gathered over tp and then from every
/// pipeline stage of replica 0 onto global rank 0 (None elsewhere), as canonical tensors.
fn collect_stages<B: Backend, const N: usize>(
    model: &Model<B>,
    g: &Groups<B>,
    dp_rank: usize,
    sets: [(&str, &[B::Buf]); N],
) -> Result<Option<[Vec<Named>; N]>> {
    let prefixes = sets.map(|(prefix, _)| prefix);
    let mine = gather_sets(model, sets, g.tp)?;
    let l = *model.layout();
    if dp_rank != 0 || l.tp_rank != 0 {
        return Ok(None);
    }
    if l.stages == 1 {
        return Ok(Some(mine));
    }
    let be = model.be();
    let label = Label::op("checkpoint.stage");
    if l.stage > 0 {
        for (_, _, data) in mine.iter().flatten() {
            let mut buf = be.alloc(data.len());
            be.write_mat(MatMut::new(&mut buf, 1, data.len()), data);
            g.pp.send(&buf, 0, data.len(), 0, label);
        }
        return Ok(None);
    }
    let mut all = mine;
    for s in 1..l.stages {
        let pieces = layout_pieces(model.cfg(), Layout { tp_rank: 0, stage: s, ..l })?;
        for (set, prefix) in all.iter_mut().zip(prefixes) {
            for p in &pieces {
                let n: usize = p.shape.iter().product();
                let mut buf = be.alloc(n);
                g.pp.recv(&mut buf, 0, n, s, label);
                let name = format!("{prefix}{}", p.name);
                // A tied table appears on both end stages: keep the first stage's.
                if !set.iter().any(|x| x.0 == name) {
                    set.push((name, p.shape.clone(), be.read_mat(Mat::new(&buf, 1, n))));
                }
            }
        }
    }
    Ok(Some(all))
}

/// Load a checkpoint into this rank's model and optimizer (any layout; ZeRO-1 takes its
/// shard of the moments, reading only the rectangles of its chunks).
pub fn load_run<B: Backend>(ck: &Checkpoint, model: &mut Model<B>, opt: &mut Optimizer<B>) -> Result<()> {
    ck.load_model(model)?;
    match opt {
        Optimizer::Replicated(a) => ck.load_optim(model, a)?,
        Optimizer::Zero1(z) => {
            let be = model.be();
            for p in model.store().pieces() {
                let own = z.owned(p.slot.buf, model.store().bufs()[p.slot.buf].len);
                for r in rects_in(p, own) {
                    for (key, bufs) in [("m.", &mut z.m), ("v.", &mut z.v)] {
                        ck.load_rect(be, &format!("{key}{}", p.name), &p.shape, &r, &mut bufs[p.slot.buf])?;
                    }
                }
            }
            z.step = ck.meta.step;
        }
    }
    Ok(())
}
