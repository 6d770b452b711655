//! The operations the model emits: GEMMs, attention, elementwise kernels and collectives,
//! each with the label of the module that issues it and the pass it belongs to.

use serde::Serialize;

/// Which pass an operation belongs to. `Recompute` is forward work redone during backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Forward,
    Backward,
    Recompute,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "fwd",
            Phase::Backward => "bwd",
            Phase::Recompute => "recompute",
        }
    }
}

/// The kind of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CollKind {
    /// Sum all-reduce.
    AllReduce,
    /// Max all-reduce (the cross-entropy's per-token maximum).
    AllReduceMax,
    AllGather,
    ReduceScatter,
    /// A point-to-point transfer between pipeline stages (one send, one matching receive).
    SendRecv,
}

impl CollKind {
    pub fn name(self) -> &'static str {
        match self {
            CollKind::AllReduce => "all-reduce",
            CollKind::AllReduceMax => "all-reduce-max",
            CollKind::AllGather => "all-gather",
            CollKind::ReduceScatter => "reduce-scatter",
            CollKind::SendRecv => "send-recv",
        }
    }
}

/// The process group a collective runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CollGroup {
    /// The tensor-parallel group (size tp).
    Tp,
    /// Neighbouring pipeline stages (a pair).
    Pp,
    /// The data-parallel group (size dp).
    Dp,
    /// Every rank holding a different part of the model (size tp·pp).
    Model,
    /// All ranks.
    World,
}

/// Role of a GEMM in training: forward `Y = X·W`, backward data `dX = dY·Wᵀ`,
/// backward weight `dW = Xᵀ·dY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmRole {
    Forward,
    BackwardData,
    BackwardWeight,
}

/// A GEMM `(m×k)·(k×n)` on one rank, repeated `batch` times in one launch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gemm {
    pub label: String,
    pub phase: Phase,
    pub role: GemmRole,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
    /// Bytes per element of the operands.
    pub dtype_bytes: u64,
    /// The same GEMM runs on every TP rank on the same data (LaX gates on a replicated latent).
    pub redundant: bool,
}

impl Gemm {
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }
    /// Operand traffic assuming each operand crosses memory once.
    pub fn bytes(&self) -> f64 {
        let (m, n, k) = (self.m as f64, self.n as f64, self.k as f64);
        (m * k + k * n + m * n) * self.dtype_bytes as f64 * self.batch as f64
    }
    /// Arithmetic intensity 2MNK / (bytes·(MK + KN + MN)) in FLOP per byte.
    pub fn intensity(&self) -> f64 {
        self.flops() / self.bytes()
    }
    pub fn shape(&self) -> String {
        let b = if self.batch > 1 { format!("{}×", self.batch) } else { String::new() };
        format!("{b}({}×{})·({}×{})", self.m, self.k, self.k, self.n)
    }
}

/// Causal attention over the local heads of one micro-batch (flash-style: no S² matrix kept).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Attention {
    pub label: String,
    pub phase: Phase,
    pub batch: u64,
    pub seq: u64,
    /// Query heads on this rank.
    pub heads: u64,
    /// Key/value heads on this rank.
    pub kv_heads: u64,
    pub head_dim: u64,
    pub dtype_bytes: u64,
}

impl Attention {
    /// Score and value products over the full S² matrix: 4·b·s²·h·d_h forward; backward 2×.
    pub fn model_flops_full(&self) -> f64 {
        let f = 4.0 * self.batch as f64 * (self.seq as f64).powi(2) * (self.heads * self.head_dim) as f64;
        match self.phase {
            Phase::Backward => 2.0 * f,
            _ => f,
        }
    }
    /// FLOPs a causal flash kernel executes: half of the S² products; its backward recomputes
    /// the scores, so it runs 2.5× the forward (the FlashAttention-2 paper's count).
    pub fn executed_flops(&self) -> f64 {
        let f = 0.5 * 4.0 * self.batch as f64 * (self.seq as f64).powi(2) * (self.heads * self.head_dim) as f64;
        match self.phase {
            Phase::Backward => 2.5 * f,
            _ => f,
        }
    }
    /// q, k, v in and o out (forward); backward also reads o, dO and writes dq, dk, dv.
    pub fn bytes(&self) -> f64 {
        let t = (self.batch * self.seq) as f64;
        let q = (self.heads * self.head_dim) as f64;
        let kv = (self.kv_heads * self.head_dim) as f64;
        let fwd = t * (2.0 * q + 2.0 * kv);
        let e = match self.phase {
            Phase::Backward => 2.0 * fwd + t * q,
            _ => fwd,
        };
        e * self.dtype_bytes as f64
    }
}

/// A memory-bound kernel (norm, RoPE, activation, residual add, optimizer update …),
/// costed by the bytes it moves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Elementwise {
    pub label: String,
    pub phase: Phase,
    pub bytes: f64,
}

/// A collective issued by one rank. `elements` is the payload as docs/PARALLELISM.md §2.4 counts it:
/// the buffer of an all-reduce, the gathered (full) size of an all-gather, the input (full)
/// size of a reduce-scatter, the message of a send. `elements_f32` of them are fp32
/// statistics; the rest have `dtype_bytes` each.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Collective {
    pub label: String,
    pub phase: Phase,
    pub kind: CollKind,
    pub group: CollGroup,
    pub elements: u64,
    pub elements_f32: u64,
    pub dtype_bytes: u64,
}

impl Collective {
    pub fn bytes(&self) -> u64 {
        (self.elements - self.elements_f32) * self.dtype_bytes + 4 * self.elements_f32
    }
}

/// One modelled operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CostOp {
    Gemm(Gemm),
    Attention(Attention),
    Elementwise(Elementwise),
    Collective(Collective),
}

impl CostOp {
    pub fn label(&self) -> &str {
        match self {
            CostOp::Gemm(g) => &g.label,
            CostOp::Attention(a) => &a.label,
            CostOp::Elementwise(e) => &e.label,
            CostOp::Collective(c) => &c.label,
        }
    }
    pub fn phase(&self) -> Phase {
        match self {
            CostOp::Gemm(g) => g.phase,
            CostOp::Attention(a) => a.phase,
            CostOp::Elementwise(e) => e.phase,
            CostOp::Collective(c) => c.phase,
        }
    }
    pub fn as_collective(&self) -> Option<&Collective> {
        match self {
            CostOp::Collective(c) => Some(c),
            _ => None,
        }
    }
    pub fn as_gemm(&self) -> Option<&Gemm> {
        match self {
            CostOp::Gemm(g) => Some(g),
            _ => None,
        }
    }
}
