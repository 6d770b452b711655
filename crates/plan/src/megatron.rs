//! Megatron tensor parallelism for full-rank models (docs/PARALLELISM.md §2.1).
//!
//! - Residual: replicated. Interior (attention heads, SwiGLU features): sharded.
//! - q/k/v and gate/up: column-parallel (each rank holds d_out/p output columns). Forward: no
//!   collective. Backward: their input's gradient is Partial and is all-reduced once per
//!   group (`attn.qkv.f.bwd`, `mlp.gate_up.f.bwd`).
//! - o and down: row-parallel (d_in/p input rows). Forward: the Partial output is all-reduced
//!   (`attn.o.B`, `mlp.down.B`). Backward: no collective.
//! - Norms: replicated. Entry: vocabulary-parallel lookup, all-reduced. Exit: whole.

use super::{Factors, Linear, Placement, SchemeDecl};
use crate::Scheme;

pub const DECL: SchemeDecl = SchemeDecl {
    scheme: Scheme::Megatron,
    residual: Placement::Replicated,
    interior: Placement::Sharded,
    factors: Factors::Dense { into_block: Linear::COLUMN, out_of_block: Linear::ROW_SUMMED },
};
