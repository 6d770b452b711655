//! A whole training step: parameter counts, stack entry and exit, pipeline transfers,
//! data-parallel gradient traffic, the optimizer, and memory per rank.

use crate::layer::{LayerOps, RESIDUAL_BYTES, layer_ops, layer_saved, layer_transient, layer_working};
use crate::ops::{CollGroup, CollKind, Collective, CostOp, Elementwise, Gemm, GemmRole, Phase};
use crate::setup::{Dtype, Setup};
use boost_config::{Arch, LaxGate, ModelConfig, PipeSchedule};
use boost_plan::{Entry, Exit};
use serde::Serialize;

/// Parameters of decoder layer `layer`, whole (unsharded).
pub fn layer_params(m: &ModelConfig, layer: usize) -> u64 {
    let (d, d_ff, d_kv) = (m.d as u64, m.d_ff as u64, m.d_kv() as u64);
    let projs = [(d, d), (d, d_kv), (d, d_kv), (d, d), (d, d_ff), (d, d_ff), (d_ff, d)];
    let norms = 2 * d;
    if !m.arch.is_low_rank() {
        return projs.iter().map(|(i, o)| i * o).sum::<u64>() + norms;
    }
    let r = m.rank as u64;
    let factors: u64 = projs.iter().map(|(i, o)| r * (i + o)).sum();
    factors + norms + lax_extra_params(m, layer) * 7
}

/// LaX gate and LN_r parameters of one projection (0 in block 0 and for other archs): the
/// gate's matmul weights, the dense gate's bias and LN_r's scale and shift.
fn lax_extra_params(m: &ModelConfig, layer: usize) -> u64 {
    if m.arch != Arch::Lax || layer == 0 {
        return 0;
    }
    let r = m.rank as u64;
    let bias = if m.lax.gate == LaxGate::Dense { r } else { 0 };
    lax_gate_matmul_params(m, layer) + bias + 2 * r
}

/// LaX parameters of one projection that are matmul weights (the dense gate, or the Kronecker
/// factors, which a per-GEMM count treats as two small GEMMs).
fn lax_gate_matmul_params(m: &ModelConfig, layer: usize) -> u64 {
    if m.arch != Arch::Lax || layer == 0 {
        return 0;
    }
    let r = m.rank as u64;
    match m.lax.gate {
        LaxGate::Dense => r * r,
        LaxGate::Kron => {
            let (a, b) = m.kron_factors();
            (a * a + b * b) as u64
        }
    }
}

/// Every parameter of the model (vocabulary unpadded).
pub fn total_params(m: &ModelConfig) -> u64 {
    let (d, v) = (m.d as u64, m.vocab as u64);
    let layers: u64 = (0..m.layers).map(|l| layer_params(m, l)).sum();
    let head = if m.tie_embeddings { 0 } else { v * d };
    layers + v * d + head + d
}

/// Parameters that enter a matrix product (N of 6·N): decoder linears, LaX dense gates and the
/// LM head (the tied embedding counts as the head). Not the embedding lookup, norms or biases.
pub fn matmul_params(m: &ModelConfig) -> u64 {
    let (d, v) = (m.d as u64, m.vocab as u64);
    let mut n = v * d;
    for l in 0..m.layers {
        let norms = 2 * d;
        let lax = lax_extra_params(m, l) * 7;
        n += layer_params(m, l) - norms - lax + lax_gate_matmul_params(m, l) * 7;
    }
    n
}

/// Parameters of one layer held by one TP rank.
pub fn layer_params_rank(s: &Setup, layer: usize) -> u64 {
    let m = &s.model;
    let p = s.tp as u64;
    let d = m.d as u64;
    let norms = 2 * d;
    let lax = lax_extra_params(m, layer) * 7;
    let sharded = layer_params(m, layer) - norms - lax;
    let norms = if s.checked_plan().sharded_residual() { norms / p } else { norms };
    sharded / p + norms + lax
}

/// Elements of one rank's embedding table (or untied head): the padded vocabulary × d,
/// sharded over tp.
pub fn table_params_rank(s: &Setup) -> u64 {
    s.padded_vocab() * s.model.d as u64 / s.tp as u64
}

/// Parameters held by one rank of pipeline stage `stage`.
pub fn stage_params_rank(s: &Setup, stage: usize) -> u64 {
    let m = &s.model;
    let d = m.d as u64;
    let lps = s.layers_per_stage();
    let mut n: u64 = (stage * lps..(stage + 1) * lps).map(|l| layer_params_rank(s, l)).sum();
    let first = stage == 0;
    let last = stage + 1 == s.pp;
    if first {
        n += table_params_rank(s);
    }
    if last {
        if !m.tie_embeddings || !first {
            n += table_params_rank(s);
        }
        n += d;
    }
    n
}

/// Elements of the one buffer of `stage` whose data-parallel traffic no computation can hide
/// with overlap: the embedding table, whose gradient is final last (the first stage's table,
/// and a tied copy on the last stage, which waits for the stages' sum) and whose parameters
/// the next forward reads first (ZeRO-1, `gathers`; the first stage only).
pub fn unhidden_dp_elements(s: &Setup, stage: usize, gathers: bool) -> u64 {
    let table = table_params_rank(s);
    let first = stage == 0;
    let tied_copy = !first && stage + 1 == s.pp && s.model.tie_embeddings;
    if first || (tied_copy && !gathers) { table } else { 0 }
}

/// An elementwise kernel of the stack's entry or exit moving `bytes` per token.
fn stack_ew(s: &Setup, label: &str, phase: Phase, bytes: u64) -> CostOp {
    CostOp::Elementwise(Elementwise { label: label.into(), phase, bytes: (bytes * s.tokens()) as f64 })
}

/// A collective of `per_token` elements per token of the micro-batch (all fp32 when `f32`).
fn token_coll(
    s: &Setup,
    label: &str,
    phase: Phase,
    kind: CollKind,
    group: CollGroup,
    per_token: u64,
    f32: bool,
) -> CostOp {
    let elements = per_token * s.tokens();
    CostOp::Collective(Collective {
        label: label.into(),
        phase,
        kind,
        group,
        elements,
        elements_f32: if f32 { elements } else { 0 },
        dtype_bytes: s.dtype.bytes(),
    })
}

/// Stack entry (embedding) on the first stage: forward and backward ops per micro-batch.
fn entry_ops(s: &Setup) -> Vec<CostOp> {
    let (d, p, a) = (s.model.d as u64, s.tp as u64, s.dtype.bytes());
    let mut ops = Vec::new();
    let ew = |phase, bytes: u64| stack_ew(s, "embed", phase, bytes);
    let coll =
        |label: &str, phase, kind, elements: u64| token_coll(s, label, phase, kind, CollGroup::Tp, elements, false);
    match s.checked_plan().entry {
        Entry::HiddenShard => {
            // Hidden-sharded table: each rank looks up its own d/p columns.
            ops.push(ew(Phase::Forward, 2 * d / p * a));
            ops.push(ew(Phase::Backward, 2 * d / p * 4));
        }
        Entry::VocabReduceScatter => {
            // Vocab-parallel lookup, then reduce-scatter to the hidden shard.
            ops.push(ew(Phase::Forward, 2 * d * a));
            if p > 1 {
                ops.push(coll("embed", Phase::Forward, CollKind::ReduceScatter, d));
                ops.push(coll("embed.bwd", Phase::Backward, CollKind::AllGather, d));
            }
            ops.push(ew(Phase::Backward, 2 * d * 4));
        }
        Entry::VocabAllReduce => {
            // Vocab-parallel lookup, all-reduce to the replicated residual.
            ops.push(ew(Phase::Forward, 2 * d * a));
            if p > 1 {
                ops.push(coll("embed", Phase::Forward, CollKind::AllReduce, d));
            }
            ops.push(ew(Phase::Backward, 2 * d * 4));
        }
    }
    ops
}

/// Stack exit on the last stage: gather (BTP), final norm, vocab-parallel LM head and
/// cross-entropy, forward and backward, per micro-batch.
fn exit_ops(s: &Setup) -> Vec<CostOp> {
    let (t, d, p, a) = (s.tokens(), s.model.d as u64, s.tp as u64, s.dtype.bytes());
    let vl = s.padded_vocab() / p;
    let mut ops = Vec::new();
    let ew = |label: &str, phase, bytes: u64| stack_ew(s, label, phase, bytes);
    let coll = |label: &str, phase, kind, elements: u64, f32: bool| {
        token_coll(s, label, phase, kind, CollGroup::Tp, elements, f32)
    };
    let gemm = |phase, role, m: u64, k: u64, n: u64| {
        CostOp::Gemm(Gemm { label: "head".into(), phase, role, m, n, k, batch: 1, dtype_bytes: a, redundant: false })
    };
    let tp = p > 1;
    // Forward.
    if s.checked_plan().exit == Exit::Gather {
        ops.push(coll("head.gather", Phase::Forward, CollKind::AllGather, d, false));
    }
    ops.push(ew("final_norm", Phase::Forward, 3 * d * a + 4));
    ops.push(gemm(Phase::Forward, GemmRole::Forward, t, d, vl));
    ops.push(ew("loss", Phase::Forward, vl * a));
    if tp {
        ops.push(coll("loss.max", Phase::Forward, CollKind::AllReduceMax, 1, true));
    }
    ops.push(ew("loss", Phase::Forward, vl * a));
    if tp {
        ops.push(coll("loss.sumexp", Phase::Forward, CollKind::AllReduce, 2, true));
    }
    // Backward.
    ops.push(ew("loss", Phase::Backward, 2 * vl * a));
    ops.push(gemm(Phase::Backward, GemmRole::BackwardData, t, vl, d));
    ops.push(gemm(Phase::Backward, GemmRole::BackwardWeight, d, t, vl));
    if tp {
        ops.push(coll("head.f.bwd", Phase::Backward, CollKind::AllReduce, d, false));
    }
    ops.push(ew("final_norm", Phase::Backward, 3 * d * a + 4));
    ops
}

/// Pipeline transfers of one micro-batch touching stage `stage`: the residual (T × d, or
/// T × d/p per rank under BTP) forward and its gradient backward.
fn p2p_ops(s: &Setup, stage: usize) -> Vec<CostOp> {
    if s.pp == 1 {
        return Vec::new();
    }
    let w = boost_plan::local(s.model.d, s.checked_plan().sharded_residual(), s.tp) as u64;
    let mk = |label: &str, phase| token_coll(s, label, phase, CollKind::SendRecv, CollGroup::Pp, w, false);
    let mut ops = Vec::new();
    if stage > 0 {
        ops.push(mk("pp.recv_activation", Phase::Forward));
        ops.push(mk("pp.send_gradient", Phase::Backward));
    }
    if stage + 1 < s.pp {
        ops.push(mk("pp.send_activation", Phase::Forward));
        ops.push(mk("pp.recv_gradient", Phase::Backward));
    }
    ops
}

/// The ops one rank of pipeline stage `stage` runs for one micro-batch.
#[derive(Debug, Clone, Serialize)]
pub struct StageOps {
    pub stage: usize,
    pub layers: Vec<LayerOps>,
    /// Embedding (first stage), forward and backward.
    pub entry: Vec<CostOp>,
    /// Final norm, LM head, cross-entropy (last stage), forward and backward.
    pub exit: Vec<CostOp>,
    /// Pipeline transfers.
    pub p2p: Vec<CostOp>,
}

impl StageOps {
    pub fn all(&self) -> impl Iterator<Item = &CostOp> {
        self.entry.iter().chain(self.layers.iter().flat_map(|l| l.all())).chain(&self.exit).chain(&self.p2p)
    }
}

pub fn stage_ops(s: &Setup, stage: usize) -> StageOps {
    let lps = s.layers_per_stage();
    let layers = (stage * lps..(stage + 1) * lps).map(|l| layer_ops(s, l)).collect();
    StageOps {
        stage,
        layers,
        entry: if stage == 0 { entry_ops(s) } else { Vec::new() },
        exit: if stage + 1 == s.pp { exit_ops(s) } else { Vec::new() },
        p2p: p2p_ops(s, stage),
    }
}

/// Gradient element size: gradients and optimizer state are fp32.
const GRAD_BYTES: u64 = 4;

/// Once-per-step ops of one rank of `stage`: data-parallel gradient traffic (all-reduce, or
/// ZeRO-1's reduce-scatter of gradients and all-gather of weights), the tied-embedding
/// gradient all-reduce between first and last stage, the global gradient-norm scalar, and the
/// AdamW update.
pub fn step_ops(s: &Setup, stage: usize) -> Vec<CostOp> {
    let n = stage_params_rank(s, stage);
    let mut ops = Vec::new();
    let coll = |label: &str, kind, group, elements: u64, dtype_bytes: u64, f32: bool| {
        CostOp::Collective(Collective {
            label: label.into(),
            phase: Phase::Backward,
            kind,
            group,
            elements,
            elements_f32: if f32 { elements } else { 0 },
            dtype_bytes,
        })
    };
    if s.dp > 1 {
        if s.zero == 1 {
            ops.push(coll("dp.grads", CollKind::ReduceScatter, CollGroup::Dp, n, GRAD_BYTES, true));
            ops.push(coll("dp.params", CollKind::AllGather, CollGroup::Dp, n, s.dtype.bytes(), false));
        } else {
            ops.push(coll("dp.grads", CollKind::AllReduce, CollGroup::Dp, n, GRAD_BYTES, true));
        }
    }
    if s.model.tie_embeddings && s.pp > 1 && (stage == 0 || stage + 1 == s.pp) {
        let e = table_params_rank(s);
        ops.push(coll("embed.tied_grads", CollKind::AllReduce, CollGroup::Pp, e, GRAD_BYTES, true));
    }
    let norm_group = if s.zero == 1 { CollGroup::World } else { CollGroup::Model };
    let group_size = if s.zero == 1 { s.world() } else { s.tp * s.pp };
    if group_size > 1 {
        ops.push(coll("grad_norm", CollKind::AllReduce, norm_group, 1, 4, true));
    }
    // AdamW: read master weight, grad, m, v; write master, m, v (fp32), plus the bf16 copy.
    let shard = if s.zero == 1 { n.div_ceil(s.dp as u64) } else { n };
    let copy = if s.dtype == Dtype::Bf16 { 2 } else { 0 };
    ops.push(CostOp::Elementwise(Elementwise {
        label: "optimizer".into(),
        phase: Phase::Backward,
        bytes: (shard * (7 * 4 + copy)) as f64,
    }));
    ops
}

/// Memory of one rank (bytes).
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    /// The stage this is for (the fullest).
    pub stage: usize,
    pub weights: f64,
    pub gradients: f64,
    /// AdamW m, v (and fp32 master weights when training in bf16), divided by dp under ZeRO-1.
    pub optimizer: f64,
    /// Saved activations of the micro-batches in flight, plus one layer's recompute working set.
    pub activations: f64,
    /// Logits and their fp32 softmax / gradient on the last stage.
    pub logits: f64,
    pub total: f64,
    /// Micro-batches whose activations are alive at once on this stage.
    pub in_flight: usize,
}

pub fn stage_memory(s: &Setup, stage: usize) -> Memory {
    let n = stage_params_rank(s, stage) as f64;
    let a = s.dtype.bytes() as f64;
    let weights = n * a;
    // tp chunks: each chunk after the first accumulates into gradients of its own.
    let gradients = n * GRAD_BYTES as f64 * s.tp_chunks as f64;
    let master = if s.dtype == Dtype::Bf16 { 4.0 } else { 0.0 };
    let zero = if s.zero == 1 { s.dp as f64 } else { 1.0 };
    let optimizer = n * (8.0 + master) / zero;
    let m = s.accumulation;
    let in_flight = match (s.pp, s.schedule) {
        (1, _) => 1,
        (_, PipeSchedule::Afab) => m,
        (pp, PipeSchedule::OneFOneB) => (pp - stage).min(m),
    };
    let t = s.tokens() as f64;
    let lps = s.layers_per_stage();
    let layers = stage * lps..(stage + 1) * lps;
    let per_mb: f64 =
        layers.clone().map(|l| layer_saved(s, l).iter().map(|x| x.bytes_per_token()).sum::<f64>()).sum::<f64>() * t;
    // Recomputed layers rebuild their activations in two sets of buffers used in turn (a
    // layer's backward reads the one below's while that is rebuilt): the two largest count.
    let mut rebuilt: Vec<f64> = layers.clone().map(|l| layer_transient(s, l)).collect();
    rebuilt.sort_by(|x, y| y.total_cmp(x));
    let transient = rebuilt.iter().take(2).sum::<f64>() * t;
    let last = stage + 1 == s.pp;
    let d = s.model.d as f64;
    let (logits, head_act) = if last {
        let vl = (s.padded_vocab() / s.tp as u64) as f64;
        // Logits in the activation dtype, overwritten by their gradient (autograd: beside an
        // fp32 softmax); the head's input (activation dtype) and the final norm's input (the
        // fp32 residual) kept for backward.
        let per_logit = if s.keeps == crate::setup::Keeps::Autograd { a + 4.0 } else { a };
        (t * vl * per_logit, in_flight as f64 * t * d * (a + RESIDUAL_BYTES as f64))
    } else {
        (0.0, 0.0)
    };
    // Each micro-batch in flight has its own backward working buffers (and, on the last
    // stage, the head input's gradient).
    let head_grad = if last && s.keeps == crate::setup::Keeps::Engine { t * d * a } else { 0.0 };
    let working = in_flight as f64 * (layers.map(|l| layer_working(s, l)).fold(0.0, f64::max) * t + head_grad);
    let activations = in_flight as f64 * per_mb + transient + head_act + working;
    Memory {
        stage,
        weights,
        gradients,
        optimizer,
        activations,
        logits,
        total: weights + gradients + optimizer + activations + logits,
        in_flight,
    }
}

/// The memory of the fullest stage.
pub fn memory(s: &Setup) -> Memory {
    (0..s.pp)
        .map(|st| stage_memory(s, st))
        .max_by(|x, y| x.total.partial_cmp(&y.total).unwrap())
        .expect("at least one stage")
}

/// Model FLOPs per token of one training step (forward + backward, no recompute), whole model:
/// 6·N_matmul plus attention by the set-up's convention.
pub fn model_flops_per_token(s: &Setup) -> f64 {
    let m = &s.model;
    let attn = match s.attention {
        crate::setup::AttnConvention::Full => 12.0,
        crate::setup::AttnConvention::Causal => 6.0,
    } * s.seq as f64
        * m.d as f64
        * m.layers as f64;
    6.0 * matmul_params(m) as f64 + attn
}
