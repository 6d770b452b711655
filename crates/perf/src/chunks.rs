//! Tensor-parallel chunks (`parallel.tp_chunks`): a micro-batch run as C chunks of whole
//! sequences, one chunk computing at a time while the others' tp collectives are in flight
//! (the engine's `Model::forward_backward_chunks`).
//!
//! Model: every chunk runs the same ops in the same order. While one chunk's collective j is
//! in flight (`mⱼ`, on the chunk's tokens), the other C − 1 chunks compute their stretch after
//! it (`cⱼ` each, up to their next collective), so `max(0, mⱼ − (C − 1)·cⱼ)` of it stays
//! exposed. The chunks' computation is the unchunked one's ops on T / C tokens, C times.

use crate::ops::{CollGroup, CostOp, Phase};
use crate::step::StageOps;

/// One micro-batch's ops on a single-stage model in the order the engine runs them: the
/// embedding's forward, the layers' forward, the head's forward and backward, the layers'
/// recompute and backward from the last down, the embedding's backward.
pub fn in_order(ops: &StageOps) -> Vec<&CostOp> {
    let entry = |p: Phase| ops.entry.iter().filter(move |o| (o.phase() == Phase::Forward) == (p == Phase::Forward));
    entry(Phase::Forward)
        .chain(ops.layers.iter().flat_map(|l| &l.forward))
        .chain(&ops.exit)
        .chain(ops.layers.iter().rev().flat_map(|l| l.recompute.iter().chain(&l.backward)))
        .chain(entry(Phase::Backward))
        .collect()
}

/// Exposed tp time of `chunks` chunks, each running `ops` (in order) with op times from `time`.
pub fn exposed_tp<'a>(ops: impl IntoIterator<Item = &'a CostOp>, time: impl Fn(&CostOp) -> f64, chunks: usize) -> f64 {
    // (collective time, compute after it until the next collective)
    let mut stretches: Vec<(f64, f64)> = Vec::new();
    for op in ops {
        let t = time(op);
        match op {
            CostOp::Collective(c) if c.group == CollGroup::Tp => stretches.push((t, 0.0)),
            CostOp::Collective(_) => {}
            _ => {
                if let Some(s) = stretches.last_mut() {
                    s.1 += t;
                }
            }
        }
    }
    let others = chunks.saturating_sub(1) as f64;
    stretches.iter().map(|&(m, c)| (m - others * c).max(0.0)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{CollKind, Collective, Elementwise};

    fn coll(ms: u64) -> CostOp {
        CostOp::Collective(Collective {
            label: "x".into(),
            phase: Phase::Forward,
            kind: CollKind::AllReduce,
            group: CollGroup::Tp,
            elements: ms,
            elements_f32: 0,
            dtype_bytes: 4,
        })
    }
    fn work(ms: f64) -> CostOp {
        CostOp::Elementwise(Elementwise { label: "w".into(), phase: Phase::Forward, bytes: ms })
    }

    #[test]
    fn a_collective_hides_behind_the_other_chunks_stretch_after_it() {
        // Op "times" in ms are their sizes. Compute 4, collective 6, compute 2, collective 1.
        let ops = [work(4.0), coll(6), work(2.0), coll(1)];
        let time = |o: &CostOp| match o {
            CostOp::Collective(c) => c.elements as f64,
            CostOp::Elementwise(e) => e.bytes,
            _ => unreachable!(),
        };
        // One chunk: every collective exposed.
        assert_eq!(exposed_tp(&ops, time, 1), 7.0);
        // Two: the 6 behind the other chunk's 2 (4 stays), the last one with nothing after it.
        assert_eq!(exposed_tp(&ops, time, 2), 5.0);
        // Four: the 6 behind three stretches of 2.
        assert_eq!(exposed_tp(&ops, time, 4), 1.0);
    }
}
