//! Predicted iteration time of a set-up on a cluster, with its breakdown.
//!
//! Timing assumptions: every op of a rank runs one after the other (no overlap of
//! tensor-parallel communication with compute, as in Megatron-style TP without
//! sequence-parallel overlap), except, with `overlap`, the data-parallel gradient buckets,
//! which hide behind the last micro-batch's backward, and ZeRO-1's parameter gathers, which
//! hide behind the update and the next step's first forward ([`crate::overlap`]). The pipeline runs
//! `(m + pp − 1)` slots of the slowest stage's micro-batch time (1F1B and AFAB alike); the
//! `pp − 1` extra slots are the bubble, a fraction `(pp − 1)/(m + pp − 1)`.

use crate::hardware::{Hardware, Timer};
use crate::ops::{CollGroup, CostOp, Phase};
use crate::setup::Setup;
use crate::step::{Memory, StageOps, memory, model_flops_per_token, stage_ops, step_ops, unhidden_dp_elements};
use serde::Serialize;

/// Seconds of one micro-batch (or one step's once-only work) by category.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Breakdown {
    pub gemm_s: f64,
    pub attention_s: f64,
    pub elementwise_s: f64,
    /// gemm + attention + elementwise.
    pub compute_s: f64,
    /// The part of `compute_s` (and of `tp_comm_s`) spent redoing forward work.
    pub recompute_s: f64,
    /// Tensor-parallel traffic: the time it adds to the step (exposed); all of it unless the
    /// micro-batch runs in chunks (`parallel.tp_chunks`, [`crate::chunks`]).
    pub tp_comm_s: f64,
    /// The same traffic's whole duration, every chunk's calls counted.
    pub tp_in_flight_s: f64,
    pub pp_comm_s: f64,
    /// Data-parallel gradient traffic, tied-embedding and gradient-norm all-reduces: the time
    /// they add to the step (exposed).
    pub dp_comm_s: f64,
    /// The same traffic's whole duration, exposed or hidden behind computation.
    pub dp_in_flight_s: f64,
    /// tp + pp + dp communication.
    pub communication_s: f64,
    pub bubble_s: f64,
    pub optimizer_s: f64,
}

impl Breakdown {
    fn add_op(&mut self, t: f64, op: &CostOp) {
        if op.phase() == Phase::Recompute {
            self.recompute_s += t;
        }
        match op {
            CostOp::Gemm(_) => self.gemm_s += t,
            CostOp::Attention(_) => self.attention_s += t,
            CostOp::Elementwise(e) if e.label == "optimizer" => self.optimizer_s += t,
            CostOp::Elementwise(_) => self.elementwise_s += t,
            CostOp::Collective(c) => match c.group {
                CollGroup::Tp => {
                    self.tp_comm_s += t;
                    self.tp_in_flight_s += t;
                }
                CollGroup::Pp if c.label.starts_with("pp.") => self.pp_comm_s += t,
                _ => {
                    self.dp_comm_s += t;
                    self.dp_in_flight_s += t;
                }
            },
        }
    }
    /// A step-level collective of `in_flight` seconds of which `exposed` adds to the step.
    fn add_hidden(&mut self, exposed: f64, in_flight: f64) {
        self.dp_comm_s += exposed;
        self.dp_in_flight_s += in_flight;
    }
    fn finish(&mut self) {
        self.compute_s = self.gemm_s + self.attention_s + self.elementwise_s;
        self.communication_s = self.tp_comm_s + self.pp_comm_s + self.dp_comm_s;
    }
    fn total(&self) -> f64 {
        self.compute_s + self.communication_s + self.bubble_s + self.optimizer_s
    }
    fn scale(&mut self, k: f64) {
        for v in [
            &mut self.gemm_s,
            &mut self.attention_s,
            &mut self.elementwise_s,
            &mut self.compute_s,
            &mut self.recompute_s,
            &mut self.tp_comm_s,
            &mut self.tp_in_flight_s,
            &mut self.pp_comm_s,
            &mut self.dp_comm_s,
            &mut self.dp_in_flight_s,
            &mut self.communication_s,
            &mut self.bubble_s,
            &mut self.optimizer_s,
        ] {
            *v *= k;
        }
    }
    fn plus(&mut self, o: &Breakdown) {
        self.gemm_s += o.gemm_s;
        self.attention_s += o.attention_s;
        self.elementwise_s += o.elementwise_s;
        self.recompute_s += o.recompute_s;
        self.tp_comm_s += o.tp_comm_s;
        self.tp_in_flight_s += o.tp_in_flight_s;
        self.pp_comm_s += o.pp_comm_s;
        self.dp_comm_s += o.dp_comm_s;
        self.dp_in_flight_s += o.dp_in_flight_s;
        self.bubble_s += o.bubble_s;
        self.optimizer_s += o.optimizer_s;
        self.finish();
    }
}

/// Communication of one decoder layer on one rank, per micro-batch, per token.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LayerComm {
    pub forward_calls: usize,
    pub forward_elements_per_token: f64,
    pub forward_bytes: f64,
    pub backward_calls: usize,
    pub backward_elements_per_token: f64,
    pub backward_bytes: f64,
    pub recompute_calls: usize,
    pub recompute_bytes: f64,
}

/// Summarise the TP collectives of one layer (layer 1, so that LaX crossings are included).
pub fn layer_comm(s: &Setup) -> LayerComm {
    let layer = if s.model.layers > 1 { 1 } else { 0 };
    let ops = crate::layer::layer_ops(s, layer);
    let t = s.tokens() as f64;
    let mut c = LayerComm::default();
    for x in ops.collectives() {
        let (calls, elems, bytes) = match x.phase {
            Phase::Forward => (&mut c.forward_calls, Some(&mut c.forward_elements_per_token), &mut c.forward_bytes),
            Phase::Backward => (&mut c.backward_calls, Some(&mut c.backward_elements_per_token), &mut c.backward_bytes),
            Phase::Recompute => (&mut c.recompute_calls, None, &mut c.recompute_bytes),
        };
        *calls += 1;
        if let Some(e) = elems {
            *e += x.elements as f64 / t;
        }
        *bytes += x.bytes() as f64;
    }
    c
}

#[derive(Debug, Clone, Serialize)]
pub struct Flops {
    /// Model FLOPs of one iteration over all ranks (6·N + attention by `attention_convention`).
    pub model_flops: f64,
    /// FLOPs executed by the busiest stage's ranks times world size, recompute and redundant
    /// (replicated) work included, attention as the kernel runs it.
    pub hardware_flops: f64,
    pub attention_convention: String,
    /// Model FLOP utilisation against the device peak.
    pub mfu: f64,
    /// Hardware FLOP utilisation (executed FLOPs, recompute included).
    pub hfu: f64,
    /// Achieved GEMM throughput over time spent in GEMMs, as a fraction of peak.
    pub gemm_utilization: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// One-line description of the set-up.
    pub setup: String,
    /// The set-up itself (model, layout, micro-batch, dtype).
    pub config: Setup,
    pub cluster: String,
    pub iteration_time_s: f64,
    pub tokens_per_s: f64,
    /// Whole iteration, by category (sums to `iteration_time_s`).
    pub breakdown: Breakdown,
    /// One micro-batch of the slowest stage.
    pub micro_batch: Breakdown,
    pub slowest_stage: usize,
    pub bubble_fraction: f64,
    pub memory: Memory,
    pub memory_limit_bytes: f64,
    pub fits: bool,
    pub flops: Flops,
    pub layer_comm: LayerComm,
}

/// The 1F1B (and AFAB) bubble fraction (pp − 1)/(m + pp − 1).
pub fn bubble_fraction(pp: usize, m: usize) -> f64 {
    (pp as f64 - 1.0) / (m as f64 + pp as f64 - 1.0)
}

/// One micro-batch on one stage: its time by category, GEMM and executed FLOPs, and the
/// compute of its forward and backward (pipeline transfers excluded).
#[derive(Default)]
struct StageMicroBatch {
    time: Breakdown,
    gemm_flops: f64,
    exec_flops: f64,
    forward: f64,
    backward: f64,
}

fn stage_micro_batch(s: &Setup, timer: &Timer, stage: usize) -> StageMicroBatch {
    if s.tp_chunks > 1 {
        return chunked_micro_batch(s, timer);
    }
    micro_batch_of(&stage_ops(s, stage), timer)
}

/// [`stage_micro_batch`] of a stage's ops.
fn micro_batch_of(ops: &StageOps, timer: &Timer) -> StageMicroBatch {
    let mut out = StageMicroBatch::default();
    for op in ops.all() {
        let t = timer.op(op);
        out.time.add_op(t, op);
        if !matches!(op, CostOp::Collective(c) if c.group == CollGroup::Pp) {
            if op.phase() == Phase::Forward {
                out.forward += t;
            } else {
                out.backward += t;
            }
        }
        match op {
            CostOp::Gemm(g) => {
                out.gemm_flops += g.flops();
                out.exec_flops += g.flops();
            }
            CostOp::Attention(a) => out.exec_flops += a.executed_flops(),
            _ => {}
        }
    }
    out.time.finish();
    out
}

/// A single-stage micro-batch as `tp_chunks` chunks: each chunk's ops on its share of the
/// sequences, C times over, with only the tp time the other chunks' compute does not cover
/// exposed ([`crate::chunks`]).
fn chunked_micro_batch(s: &Setup, timer: &Timer) -> StageMicroBatch {
    let c = s.tp_chunks;
    let chunk = Setup { micro_batch: s.micro_batch / c, tp_chunks: 1, ..s.clone() };
    let ops = stage_ops(&chunk, 0);
    let one = micro_batch_of(&ops, timer);
    let exposed = crate::chunks::exposed_tp(crate::chunks::in_order(&ops), |o| timer.op(o), c);
    let mut time = one.time;
    time.scale(c as f64);
    time.tp_comm_s = exposed;
    time.finish();
    let k = c as f64;
    StageMicroBatch {
        time,
        gemm_flops: one.gemm_flops * k,
        exec_flops: one.exec_flops * k,
        forward: one.forward * k,
        backward: one.backward * k,
    }
}

pub fn predict(s: &Setup, hw: &Hardware) -> Prediction {
    let timer = Timer::new(hw, s);
    // Micro-batch time of every stage, and the slowest.
    let mut stages: Vec<StageMicroBatch> = (0..s.pp).map(|stage| stage_micro_batch(s, &timer, stage)).collect();
    let slowest_stage =
        (0..s.pp).fold(0, |best, i| if stages[i].time.total() > stages[best].time.total() { i } else { best });
    // Ranks that share one device (the CPU engine's in-process ranks) hand their cores to the
    // other stages while they wait, so a pipeline keeps the machine busy: the stages' mean
    // work sets the pace, and the bubble costs nothing. On devices of their own, the slowest
    // stage does, and the bubble is pp − 1 of its micro-batches (transfers excluded).
    let shared = hw.ranks_share_device && s.pp > 1;
    let mut mean = Breakdown::default();
    if shared {
        for b in &stages {
            let mut b = b.time.clone();
            b.scale(1.0 / s.pp as f64);
            mean.plus(&b);
        }
    }
    // Executed FLOPs of one micro-batch over every stage: each stage runs its own layers.
    let stages_exec_flops: f64 = stages.iter().map(|b| b.exec_flops).sum();
    let StageMicroBatch { time: mb, gemm_flops, exec_flops: _, forward, backward } = stages.swap_remove(slowest_stage);
    let m = s.accumulation as f64;
    let (mut total, bubble) =
        if shared { (mean, 0.0) } else { (mb.clone(), (s.pp as f64 - 1.0) * (mb.total() - mb.pp_comm_s)) };
    total.scale(m);
    let mut step = Breakdown { bubble_s: bubble, ..Default::default() };
    let ops = step_ops(s, slowest_stage);
    let update: f64 =
        ops.iter().filter(|o| matches!(o, CostOp::Elementwise(e) if e.label == "optimizer")).map(|o| timer.op(o)).sum();
    for op in &ops {
        let t = timer.op(op);
        // What a bucketed collective hides behind with overlap: the last micro-batch's backward
        // (gradients), or the update and the next step's first forward, which completes each
        // buffer's gather as it reaches it (ZeRO-1 parameters; the update alone with tp chunks).
        let hide = match op {
            CostOp::Collective(c) if s.overlap && c.label == "dp.grads" => Some((c, backward, false)),
            // tp chunks share the parameters they read: the gathers complete before the first
            // chunk starts, so only the update hides them.
            CostOp::Collective(c) if s.overlap && c.label == "dp.params" => {
                Some((c, if s.tp_chunks > 1 { update } else { update + forward }, true))
            }
            _ => None,
        };
        match hide {
            Some((c, h, gathers)) => {
                let b = crate::overlap::buckets(c.bytes() as f64, s.bucket_mb.mb_for(c.bytes() as f64));
                // The embedding table's share is exposed whatever the buckets.
                let table = unhidden_dp_elements(s, slowest_stage, gathers) as f64 / c.elements.max(1) as f64;
                step.add_hidden(crate::overlap::exposed(t, h, b).max(t * table.min(1.0)), t);
            }
            None => step.add_op(t, op),
        }
    }
    total.plus(&step);
    let iteration = total.total();
    let tokens = (s.tokens() * s.accumulation as u64 * s.dp as u64) as f64;
    let mem = memory(s);
    let limit = hw.usable_memory();
    // Peak of all ranks together (ranks sharing one device split its peak).
    let all_peak = timer.peak_flops() * s.world() as f64;
    let model_flops = model_flops_per_token(s) * tokens;
    let world = s.world() as f64;
    let hardware_flops = stages_exec_flops * m * (world / s.pp as f64);
    let gemm_utilization = if mb.gemm_s > 0.0 { gemm_flops / (mb.gemm_s * timer.peak_flops()) } else { 0.0 };
    let flops = Flops {
        model_flops,
        hardware_flops,
        attention_convention: s.attention.name().to_string(),
        mfu: model_flops / (iteration * all_peak),
        hfu: hardware_flops / (iteration * all_peak),
        gemm_utilization,
    };
    Prediction {
        setup: s.describe(),
        config: s.clone(),
        cluster: hw.name.clone(),
        iteration_time_s: iteration,
        tokens_per_s: tokens / iteration,
        breakdown: total,
        micro_batch: mb,
        slowest_stage,
        bubble_fraction: bubble_fraction(s.pp, s.accumulation),
        fits: mem.total <= limit,
        memory: mem,
        memory_limit_bytes: limit,
        flops,
        layer_comm: layer_comm(s),
    }
}
