//! Pipeline schedules as explicit per-stage op tables. A stage runs its table in order; a
//! forward receives its input from the previous stage (unless first) and sends its output
//! to the next (unless last); a backward receives the output gradient from the next stage
//! (unless last) and sends the input gradient to the previous one (unless first). Tables can
//! be printed and simulated (bubbles) without running a model.

use boost_config::PipeSchedule;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Forward(usize),
    Backward(usize),
}

impl Op {
    /// The micro-batch the op runs.
    pub fn micro_batch(self) -> usize {
        match self {
            Op::Forward(k) | Op::Backward(k) => k,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Forward(m) => write!(f, "F{m}"),
            Op::Backward(m) => write!(f, "B{m}"),
        }
    }
}

/// All forwards, then all backwards (GPipe).
pub fn afab(micro_batches: usize) -> Vec<Op> {
    (0..micro_batches).map(Op::Forward).chain((0..micro_batches).map(Op::Backward)).collect()
}

/// One forward, one backward (PipeDream-flush / Megatron): `stages − stage − 1` warm-up
/// forwards, then alternate, then drain the backwards. At most `stages − stage` micro-batches
/// are in flight on a stage.
pub fn one_f_one_b(stage: usize, stages: usize, micro_batches: usize) -> Vec<Op> {
    let warmup = (stages - stage - 1).min(micro_batches);
    let mut ops: Vec<Op> = (0..warmup).map(Op::Forward).collect();
    let (mut f, mut b) = (warmup, 0);
    while f < micro_batches {
        ops.push(Op::Forward(f));
        f += 1;
        ops.push(Op::Backward(b));
        b += 1;
    }
    ops.extend((b..micro_batches).map(Op::Backward));
    ops
}

/// The op table of `stage`.
pub fn table(kind: PipeSchedule, stage: usize, stages: usize, micro_batches: usize) -> Vec<Op> {
    match kind {
        PipeSchedule::Afab => afab(micro_batches),
        PipeSchedule::OneFOneB => one_f_one_b(stage, stages, micro_batches),
    }
}

/// Micro-batches whose activations a stage holds at most at once.
pub fn max_in_flight(ops: &[Op]) -> usize {
    let (mut live, mut peak) = (0usize, 0usize);
    for op in ops {
        match op {
            Op::Forward(_) => {
                live += 1;
                peak = peak.max(live);
            }
            Op::Backward(_) => live -= 1,
        }
    }
    peak
}

/// Timing of every stage's table under fixed op costs, with the cross-stage dependencies
/// (a forward waits for the previous stage's forward of the same micro-batch, a backward for
/// the next stage's backward). Transfers are free.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    /// End time of the last op of the whole pipeline.
    pub makespan: f64,
    /// Busy time of each stage.
    pub busy: Vec<f64>,
}

impl Simulation {
    /// Fraction of stage-time spent idle: 1 − Σ busy / (stages · makespan).
    pub fn bubble_fraction(&self) -> f64 {
        1.0 - self.busy.iter().sum::<f64>() / (self.busy.len() as f64 * self.makespan)
    }
}

/// Simulate `kind` with forward cost `f` and backward cost `b` per micro-batch per stage.
pub fn simulate(kind: PipeSchedule, stages: usize, micro_batches: usize, f: f64, b: f64) -> Simulation {
    let tables: Vec<Vec<Op>> = (0..stages).map(|s| table(kind, s, stages, micro_batches)).collect();
    let mut fwd_end = vec![vec![f64::NAN; micro_batches]; stages];
    let mut bwd_end = vec![vec![f64::NAN; micro_batches]; stages];
    let mut next = vec![0usize; stages];
    let mut clock = vec![0.0f64; stages];
    let total: usize = tables.iter().map(|t| t.len()).sum();
    let mut done = 0;
    while done < total {
        let mut progressed = false;
        for s in 0..stages {
            while next[s] < tables[s].len() {
                let op = tables[s][next[s]];
                let ready = match op {
                    Op::Forward(m) if s > 0 => fwd_end[s - 1][m],
                    Op::Backward(m) if s + 1 < stages => bwd_end[s + 1][m],
                    Op::Backward(m) => fwd_end[s][m],
                    Op::Forward(_) => 0.0,
                };
                if ready.is_nan() {
                    break;
                }
                let start = clock[s].max(ready);
                match op {
                    Op::Forward(m) => {
                        clock[s] = start + f;
                        fwd_end[s][m] = clock[s];
                    }
                    Op::Backward(m) => {
                        clock[s] = start + b;
                        bwd_end[s][m] = clock[s];
                    }
                }
                next[s] += 1;
                done += 1;
                progressed = true;
            }
        }
        assert!(progressed, "schedule {kind:?} with {stages} stages and {micro_batches} micro-batches deadlocks");
    }
    let busy =
        tables.iter().map(|t| t.iter().map(|op| if matches!(op, Op::Forward(_)) { f } else { b }).sum()).collect();
    Simulation { makespan: clock.iter().cloned().fold(0.0, f64::max), busy }
}

/// The tables of every stage, one line each (`stage 0: F0 F1 B0 …`).
pub fn render(kind: PipeSchedule, stages: usize, micro_batches: usize) -> String {
    (0..stages)
        .map(|s| {
            let ops: Vec<String> = table(kind, s, stages, micro_batches).iter().map(|o| o.to_string()).collect();
            format!("stage {s}: {}", ops.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_runs_each_micro_batch_forward_then_backward_once() {
        for kind in [PipeSchedule::Afab, PipeSchedule::OneFOneB] {
            for stages in 1..=4 {
                for m in 1..=8 {
                    for s in 0..stages {
                        let t = table(kind, s, stages, m);
                        assert_eq!(t.len(), 2 * m);
                        for k in 0..m {
                            let f = t.iter().position(|o| *o == Op::Forward(k)).unwrap();
                            let b = t.iter().position(|o| *o == Op::Backward(k)).unwrap();
                            assert!(f < b);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn one_f_one_b_bounds_activations_and_matches_the_bubble_formula() {
        for stages in 1..=4 {
            for m in stages..=12 {
                for s in 0..stages {
                    assert_eq!(max_in_flight(&one_f_one_b(s, stages, m)), stages - s);
                    assert_eq!(max_in_flight(&afab(m)), m);
                }
                // Equal stage costs: bubble (pp−1)/(m+pp−1), for both schedules.
                let want = (stages - 1) as f64 / (m + stages - 1) as f64;
                for kind in [PipeSchedule::Afab, PipeSchedule::OneFOneB] {
                    let sim = simulate(kind, stages, m, 1.0, 2.0);
                    assert!(
                        (sim.bubble_fraction() - want).abs() < 1e-12,
                        "{kind:?} pp={stages} m={m}: {}",
                        sim.bubble_fraction()
                    );
                }
            }
        }
    }

    #[test]
    fn renders_the_tables() {
        let r = render(PipeSchedule::OneFOneB, 2, 3);
        assert_eq!(r, "stage 0: F0 F1 B0 F2 B1 B2\nstage 1: F0 B0 F1 B1 F2 B2");
    }
}
