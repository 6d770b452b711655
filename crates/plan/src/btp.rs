//! Bottleneck-aware tensor parallelism (BTP, docs/PARALLELISM.md §2.3): the collectives sit on the
//! bottleneck, where the tensors are r wide instead of d.
//!
//! - Residual: hidden-sharded (each rank holds d/p columns). Interior: sharded heads and
//!   SwiGLU features.
//! - A: row-parallel (d_in/p input rows). Forward: the Partial latent `t × c·r` is all-reduced,
//!   once per group when grouped (`attn.qkv.A`, `attn.o.A`, `mlp.gate_up.A`, `mlp.down.A`) or
//!   once per projection (`attn.q.A`, …). With the online norm the RMSNorm statistic rides in
//!   front of the first such all-reduce after a norm; with the sync norm it has its own
//!   (`attn.norm.stat`, `mlp.norm.stat`, and `.bwd`). Backward: no collective.
//! - The latent: replicated, so LaX's crossing runs locally.
//! - B: column-parallel (d_out/p output columns). Forward: no collective. Backward: the
//!   latent's gradient is Partial and is all-reduced (`attn.qkv.B.bwd`, …).
//! - Entry: untied, each rank looks up its own d/p columns; tied, the vocabulary-parallel
//!   lookups are reduce-scattered (`embed`). Exit: the shards are all-gathered (`head.gather`).

use super::{Factors, Linear, Placement, SchemeDecl};
use crate::Scheme;

pub const DECL: SchemeDecl = SchemeDecl {
    scheme: Scheme::Btp,
    residual: Placement::Sharded,
    interior: Placement::Sharded,
    factors: Factors::LowRank { a: Linear::ROW_SUMMED, b: Linear::COLUMN },
};
