//! Vanilla low-rank tensor parallelism: each factor pair split Megatron-style along the
//! bottleneck (docs/PARALLELISM.md §2.2), the baseline BOOST improves on.
//!
//! - Residual and interior: replicated (attention and the MLP product run whole on every
//!   rank).
//! - A: column-parallel along r (each rank holds r/p latent columns). Forward: no
//!   collective. Backward: the input's gradient is Partial and is all-reduced once per
//!   group (`attn.qkv.f.bwd`, `attn.o.f.bwd`, `mlp.gate_up.f.bwd`, `mlp.down.f.bwd`).
//! - The latent: sharded r/p, so LaX (whose gate and LN act over all of r) is refused.
//! - B: row-parallel along r. Forward: each projection's Partial output is all-reduced (`attn.q.B`,
//!   `attn.k.B`, …, `mlp.down.B`: seven per layer). Backward: no collective.
//! - Norms: replicated. Entry: vocabulary-parallel lookup, all-reduced. Exit: whole.

use super::{Factors, Linear, Placement, SchemeDecl};
use crate::Scheme;

pub const DECL: SchemeDecl = SchemeDecl {
    scheme: Scheme::Vanilla,
    residual: Placement::Replicated,
    interior: Placement::Replicated,
    factors: Factors::LowRank { a: Linear::COLUMN, b: Linear::ROW_SUMMED },
};
