//! One step's micro-batches through every rank of a (dp, pp, tp) grid, each rank reporting
//! its loss share and the gradients it holds after the data-parallel reduction.

use super::{B, Case, Out, S, SEED, batches};
use crate::engine::Engine;
use boost_comm::{GridDims, GridOptions, RunOptions, run_ranks_with};
use boost_config::Config;
use boost_exec::RankSetup;
use boost_exec::dp::Optimizer;
use boost_exec::pipeline::schedule::table;
use boost_exec::pipeline::{Hooks, Links, StageRunner};
use boost_model::{Batch, Model};
use boost_tensor::{Backend, Mat};

///
/// With `overlap`, the pipeline and data-parallel groups have progress threads: stages post
/// their receives ahead and send without waiting (`parallel.overlap`).
pub(super) fn run<E: Backend>(engine: &Engine<E>, cfg: &Config, case: &Case, overlap: bool) -> Vec<Out> {
    let (tp, pp, dp) = (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp);
    let (kind, policy, mbs) = (case.kind, case.policy, case.micro_batches);
    let data = batches(cfg.model.vocab, mbs);
    let opts = RunOptions::default().grid(GridOptions::default().overlap(overlap));
    run_ranks_with(GridDims::new(dp, pp, tp), &opts, |_, grid| {
        let c = grid.coord;
        let setup = RankSetup::new(cfg, c).seed(SEED).recompute(policy);
        let be = engine.backend();
        let (tpg, ppg, dpg) =
            (engine.collective(&be, &grid.tp), engine.collective(&be, &grid.pp), engine.collective(&be, &grid.dp));
        // The overlapped path must be the one running, or the comparison proves nothing.
        assert_eq!(ppg.overlaps(), overlap && pp > 1, "pipeline group overlap");
        let mut m = setup.model(be)?;
        // Replica r trains on micro-batches r·acc .. (r+1)·acc.
        let acc = mbs / dp;
        let bs: Vec<Batch> = data[c.dp * acc..(c.dp + 1) * acc]
            .iter()
            .map(|(i, t)| Batch { ids: i, targets: t, batch: B, seq: S })
            .collect();
        let mut runner = StageRunner::new(table(kind, c.pp, pp, acc));
        let scale = 1.0 / (mbs * B * S) as f64;
        let links = Links { tp: &[&*tpg], pp: &*ppg };
        let loss = runner.run(&mut m, links, &bs, scale, Hooks::default());
        let mut learner = setup.learner(m);
        learner.sync_grads(&*dpg, &mut None);
        let (m, opt) = (&learner.model, &learner.opt);
        let pieces = m.store().pieces().iter().map(|p| (p.clone(), held_grads(m, opt, p))).collect();
        // The loss of each replica's last stage (tp rank 0), summed by the caller.
        let reports = m.layout().last_stage() && c.tp == 0;
        Ok((if reports { loss.sum * scale } else { 0.0 }, pieces))
    })
    .unwrap()
}

/// The gradient of piece `p` this rank holds: all of it, or under ZeRO-1 only the elements
/// in this replica's shard of the reduced buffer (None elsewhere).
fn held_grads<E: Backend>(m: &Model<E>, opt: &Optimizer<E>, p: &boost_model::params::Piece) -> Vec<Option<f64>> {
    match opt {
        Optimizer::Replicated(_) => m.be().read_mat(p.slot.of(m.store().grads())).into_iter().map(Some).collect(),
        Optimizer::Zero1(z) => {
            let own = z.owned(p.slot.buf, m.store().bufs()[p.slot.buf].len);
            // The reduced shard sits at its own offsets of the staging buffer.
            let n = own.len().max(1);
            let shard: Vec<f64> = m.be().read_mat(Mat::at(z.shard_grads(p.slot.buf), own.start, 1, n, n));
            let mut out = vec![None; p.rows.len() * p.cols.len()];
            for r in 0..p.slot.rows {
                for q in 0..p.slot.cols {
                    let e = p.slot.off + r * p.slot.ld + q;
                    if own.contains(&e) {
                        out[r * p.slot.cols + q] = Some(shard[e - own.start]);
                    }
                }
            }
            out
        }
    }
}
