//! Entering and leaving the decoder stack (docs/PARALLELISM.md §2.3–2.4): the embedding lookup, the gather
//! of a hidden-sharded residual, the final norm, the vocabulary-parallel LM head and its
//! cross-entropy — forward and backward. The plan's [`Entry`] and [`Exit`] choose the path.

use crate::model::{FirstStage, LastStage, Model, Work};
use crate::plan::{Entry, Exit};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut, ReduceOp};
use boost_tensor::{HeadXent, HeadXentGrad, ResidualRmsNorm, RmsNormBwdRows, XentFinish};

fn reduce<B: Backend>(tp: &dyn Collective<B>, buf: &mut B::Buf, n: usize, op: ReduceOp, label: &'static str) {
    if tp.size() > 1 {
        tp.all_reduce(buf, 0, n, op, Label::op(label));
    }
}

impl<B: Backend> Model<B> {
    /// First vocabulary row held here.
    fn vocab_first(&self) -> usize {
        self.layout.tp_rank * self.dims.vocab_loc
    }
    /// Vocabulary rows held here that are real (not padding).
    pub(crate) fn vocab_valid(&self) -> usize {
        let v = self.dims.vocab;
        ((self.layout.tp_rank + 1) * self.dims.vocab_loc).min(v) - self.vocab_first().min(v)
    }
    /// The hidden shards of a t × d matrix side by side, shard c at c·t·d/p: the layout
    /// all-gather and reduce-scatter work on.
    fn to_rank_major(&self, rm: &mut B::Buf, src: Mat<B::Buf>) {
        let (t, p) = (src.rows, self.layout.tp);
        let w = self.dims.d / p;
        for c in 0..p {
            self.be.copy(MatMut::at(rm, c * t * w, t, w, w), src.cols(c * w, (c + 1) * w));
        }
    }
    fn gather_rank_major(&self, dst: &mut B::Buf, rm: &B::Buf, t: usize) {
        let (d, p) = (self.dims.d, self.layout.tp);
        let w = d / p;
        for c in 0..p {
            self.be.copy(MatMut::at(dst, c * w, t, w, d), Mat::at(rm, c * t * w, t, w, w));
        }
    }

    pub(crate) fn embed_forward(&self, first: FirstStage, params: &[B::Buf], tp: &dyn Collective<B>, w: &mut Work<B>) {
        let (t, be, dims) = (w.t(), &self.be, &self.dims);
        let table = first.embed.of(params);
        match self.plan.entry {
            Entry::HiddenShard => be.embed(MatMut::new(&mut w.resid[0], t, dims.d_res), table, &w.ids, 0),
            Entry::VocabAllReduce => {
                be.embed(MatMut::new(&mut w.resid[0], t, dims.d), table, &w.ids, self.vocab_first());
                reduce(tp, &mut w.resid[0], t * dims.d, ReduceOp::Sum, "embed");
            }
            Entry::VocabReduceScatter => {
                be.embed(MatMut::new(&mut w.hf, t, dims.d), table, &w.ids, self.vocab_first());
                self.to_rank_major(&mut w.rm, Mat::new(&w.hf, t, dims.d));
                let n = t * dims.d_res;
                tp.reduce_scatter(&mut w.rm, 0, n, Label::op("embed"));
                be.copy(
                    MatMut::new(&mut w.resid[0], t, dims.d_res),
                    Mat::at(&w.rm, self.layout.tp_rank * n, t, dims.d_res, dims.d_res),
                );
            }
        }
    }

    /// Accumulates the table's gradient into `grads` (the store's, or a chunk's).
    pub(crate) fn embed_backward(
        &self,
        grads: &mut [B::Buf],
        stage: FirstStage,
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
    ) {
        let (t, dims) = (w.t(), self.dims);
        let first = self.vocab_first();
        match self.plan.entry {
            Entry::HiddenShard => {
                self.be.embed_bwd(stage.embed.of_mut(grads), Mat::new(&w.dx, t, dims.d_res), &w.ids, 0)
            }
            Entry::VocabAllReduce => {
                self.be.embed_bwd(stage.embed.of_mut(grads), Mat::new(&w.dx, t, dims.d), &w.ids, first)
            }
            Entry::VocabReduceScatter => {
                let n = t * dims.d_res;
                let r = self.layout.tp_rank;
                self.be.copy(MatMut::at(&mut w.rm, r * n, t, dims.d_res, dims.d_res), Mat::new(&w.dx, t, dims.d_res));
                tp.all_gather(&mut w.rm, 0, n, Label::op("embed.bwd"));
                self.gather_rank_major(&mut w.dhf, &w.rm, t);
                self.be.embed_bwd(stage.embed.of_mut(grads), Mat::new(&w.dhf, t, dims.d), &w.ids, first);
            }
        }
    }

    /// Exit, final norm and this rank's logits.
    pub(crate) fn head_forward(&self, stage: LastStage, params: &[B::Buf], tp: &dyn Collective<B>, w: &mut Work<B>) {
        let (t, be, dims) = (w.t(), &self.be, &self.dims);
        let last = self.blocks.len();
        if self.plan.exit == Exit::Gather {
            let n = t * dims.d_res;
            be.copy(
                MatMut::at(&mut w.rm, self.layout.tp_rank * n, t, dims.d_res, dims.d_res),
                Mat::new(&w.resid[last], t, dims.d_res),
            );
            tp.all_gather(&mut w.rm, 0, n, Label::op("head.gather"));
            self.gather_rank_major(&mut w.xf, &w.rm, t);
        }
        let xf = if self.plan.exit == Exit::Gather {
            Mat::new(&w.xf, t, dims.d)
        } else {
            Mat::new(&w.resid[last], t, dims.d)
        };
        let final_norm = stage.final_norm;
        if let Some(k) = self.deferred_set() {
            let mid = &w.blocks[k].mid;
            // The last layer's residual add, with the final norm (`exit` is not Gather here).
            be.residual_rmsnorm(ResidualRmsNorm {
                x: MatMut::new(&mut w.resid[last], t, dims.d),
                r: Mat::new(mid, t, dims.d),
                y: MatMut::new(&mut w.hf, t, dims.d),
                rstd: MatMut::new(&mut w.frstd, t, 1),
                gamma: final_norm.of(params),
                eps: self.cfg.norm_eps,
            });
        } else {
            be.row_sumsq(MatMut::new(&mut w.frstd, t, 1), xf);
            be.rstd_from_sumsq(MatMut::new(&mut w.frstd, t, 1), dims.d, self.cfg.norm_eps);
            be.rmsnorm_apply(MatMut::new(&mut w.hf, t, dims.d), xf, final_norm.of(params), Mat::new(&w.frstd, t, 1));
        }
        // A chunked loss computes its logits itself.
        if w.head_chunk.is_none() {
            self.head_logits(stage, params, &w.hf, t, &mut w.logits);
        }
    }

    /// This rank's logits of the final norm's output `hf` into `logits` (t × vocab_loc).
    pub(crate) fn head_logits(&self, stage: LastStage, params: &[B::Buf], hf: &B::Buf, t: usize, logits: &mut B::Buf) {
        let (valid, d) = (self.vocab_valid(), self.dims.d);
        let hs = stage.head;
        let head = Mat::at(&params[hs.buf], hs.off, valid, d, d);
        let out = MatMut::at(logits, 0, t, valid, self.dims.vocab_loc);
        self.be.gemm(out, Mat::new(hf, t, d), head.t(), 1.0, false);
    }

    /// The head's weight rows that are real vocabulary (valid × d).
    fn head_weight<'a>(&self, stage: LastStage, params: &'a [B::Buf]) -> Mat<'a, B::Buf> {
        let hs = stage.head;
        Mat::at(&params[hs.buf], hs.off, self.vocab_valid(), self.dims.d, self.dims.d)
    }

    /// Per-token losses (and, with `grad_scale`, dL/dlogits in place of the logits).
    pub fn loss(
        &self,
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
        grad_scale: Option<f64>,
        targets: &[u32],
    ) -> crate::LossSum {
        let _s = boost_tensor::trace::span("forward", || "loss");
        let (t, be) = (w.t(), &self.be);
        let (valid, vl) = (self.vocab_valid(), self.dims.vocab_loc);
        if let Some(rows) = w.head_chunk {
            // By chunks of logits, losses only: the backward recomputes them with the gradient.
            let stage = self.last.expect("the last stage computes the loss");
            w.grad_scale = grad_scale;
            be.head_xent(HeadXent {
                losses: MatMut::new(&mut w.losses, t, 1),
                h: Mat::new(&w.hf, t, self.dims.d),
                w: self.head_weight(stage, self.store.values()),
                targets: &w.targets,
                chunk_rows: rows,
                grad: None,
            });
        } else if tp.size() == 1 {
            be.cross_entropy(
                MatMut::new(&mut w.losses, t, 1),
                MatMut::at(&mut w.logits, 0, t, valid, vl),
                &w.targets,
                grad_scale,
            );
        } else {
            let first = self.vocab_first();
            be.row_max(MatMut::new(&mut w.lmax, t, 1), Mat::at(&w.logits, 0, t, valid, vl));
            reduce(tp, &mut w.lmax, t, ReduceOp::Max, "loss.max");
            be.xent_partials(
                MatMut::new(&mut w.lstats, t, 2),
                Mat::at(&w.logits, 0, t, valid, vl),
                Mat::new(&w.lmax, t, 1),
                &w.targets,
                first,
            );
            reduce(tp, &mut w.lstats, 2 * t, ReduceOp::Sum, "loss.sumexp");
            be.xent_finish(XentFinish {
                losses: MatMut::new(&mut w.losses, t, 1),
                logits: MatMut::at(&mut w.logits, 0, t, valid, vl),
                max: Mat::new(&w.lmax, t, 1),
                stats: Mat::new(&w.lstats, t, 2),
                targets: &w.targets,
                first,
                grad_scale,
            });
        }
        let tokens = targets.iter().filter(|&&x| x != boost_tensor::cpu::IGNORE).count();
        let losses = Mat::new(&w.losses, t, 1);
        // Summed on the device, its sum read with the step's report: NaN stands in for it.
        let on_device = self.loss_on_device && grad_scale.is_some() && be.tally_loss(losses);
        crate::LossSum { sum: if on_device { f64::NAN } else { be.sum(losses) }, tokens }
    }

    /// LM head, its `f`, the final norm and the exit, backward: leaves dL/d(stack output) in
    /// `dx`, the head's and the norm's gradients in `grads`.
    pub(crate) fn head_backward(
        &self,
        grads: &mut [B::Buf],
        stage: LastStage,
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
    ) {
        let (t, dims) = (w.t(), self.dims);
        let (valid, vl) = (self.vocab_valid(), dims.vocab_loc);
        let (be, values) = (&self.be, self.store.values());
        let h = stage.head;
        if let Some(rows) = w.head_chunk {
            let scale = w.grad_scale.expect("the loss was computed with a gradient scale");
            be.head_xent(HeadXent {
                losses: MatMut::new(&mut w.losses, t, 1),
                h: Mat::new(&w.hf, t, dims.d),
                w: self.head_weight(stage, values),
                targets: &w.targets,
                chunk_rows: rows,
                grad: Some(HeadXentGrad {
                    scale,
                    dh: MatMut::new(&mut w.dhf, t, dims.d),
                    dw: MatMut::at(&mut grads[h.buf], h.off, valid, dims.d, dims.d),
                }),
            });
        } else {
            let dl = Mat::at(&w.logits, 0, t, valid, vl);
            be.gemm(
                MatMut::at(&mut grads[h.buf], h.off, valid, dims.d, dims.d),
                dl.t(),
                Mat::new(&w.hf, t, dims.d),
                1.0,
                true,
            );
            be.gemm(
                MatMut::new(&mut w.dhf, t, dims.d),
                dl,
                Mat::at(&values[h.buf], h.off, valid, dims.d, dims.d),
                1.0,
                false,
            );
        }
        reduce(tp, &mut w.dhf, t * dims.d, ReduceOp::Sum, "head.f.bwd");
        let last = self.blocks.len();
        let xf = if self.plan.exit == Exit::Gather {
            Mat::new(&w.xf, t, dims.d)
        } else {
            Mat::new(&w.resid[last], t, dims.d)
        };
        let final_norm = stage.final_norm;
        let g = final_norm.of(values);
        let dst = if self.plan.exit == Exit::Gather { &mut w.rm } else { &mut w.dx };
        // The final norm is over whole rows (d): its dot and dx in one pass.
        be.rmsnorm_bwd_rows(RmsNormBwdRows {
            dx: MatMut::new(dst, t, dims.d),
            dgamma: final_norm.of_mut(grads),
            dy: Mat::new(&w.dhf, t, dims.d),
            x: xf,
            gamma: g,
            rstd: Mat::new(&w.frstd, t, 1),
            dot: MatMut::new(&mut w.dot, t, 1),
            accumulate: false,
        });
        if self.plan.exit == Exit::Gather {
            // The head's f made dhf whole on every rank, so each keeps its own columns.
            let c = self.layout.tp_rank * dims.d_res;
            be.copy(MatMut::new(&mut w.dx, t, dims.d_res), Mat::at(&w.rm, c, t, dims.d_res, dims.d));
        }
    }
}
