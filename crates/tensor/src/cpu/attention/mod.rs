//! Causal softmax attention with GQA, without the S × S probability matrix. q, k and v are
//! three row-major blocks of one buffer.
//!
//! Work units are (sequence, head, query block) in the forward and (sequence, kv head, key
//! chunk) in the backward, so that one long sequence with few heads (a micro-batch of one, a
//! tensor-parallel rank's share of the heads) still keeps every thread busy; a short sequence
//! with enough (sequence, kv head) units runs them whole in the forward too, and both passes
//! then copy a unit's kᵀ (and vᵀ) in the unit, where its products read them from the caches. Rows are
//! processed in blocks of [`block_rows`] queries that only touch keys up to the block's end,
//! which skips most of the masked upper triangle. A block's scores live in a per-thread tile
//! of at most [`KEY_CHUNK`] keys (the forward's online softmax goes over longer rows a chunk
//! at a time); the forward keeps each row's log-sum-exp, and the backward recomputes the
//! block's probabilities from it (FlashAttention's recompute), so the memory kept per layer is
//! O(S·h) rather than O(h·S²). Every sum runs in an order fixed by the shape, never by the
//! thread count. A block's products are [`tile`]'s (hand-written for f32 on AVX-512, the
//! `gemm` crate's otherwise).

mod backward;
mod buffers;
mod forward;
mod tile;

pub use backward::{attention_bwd, attention_bwd_scratch_len};
pub use forward::attention_fwd;

use crate::backend::AttnShape;

/// Query rows per block: 64, or 128 past 512 positions. Longer blocks pack each key tile for
/// more rows (the products' K is only d_h) but compute more of the masked triangle, which a
/// short sequence's few blocks feel. On an AVX-512 Xeon, 2 threads, 128 rows took 0.81–0.88×
/// the forward and 0.82–0.89× the backward time of 64 at seq 1024 to 4096, and 0.95–0.99× at
/// 256 and 512 (medians of 6–8 alternated pairs); 256 rows lost at 256 (1.2×).
pub(super) fn block_rows(s: usize) -> usize {
    if s > 512 { MAX_BLOCK_ROWS } else { 64 }
}

/// Keys per chunk: the forward's online softmax takes a block's keys a chunk at a time, and
/// the backward's work units are (sequence, kv head, key chunk), so that a long sequence with
/// few kv heads (a micro-batch of one, a tensor-parallel rank's heads) still keeps many
/// threads busy. A multiple of every [`block_rows`], so each query block lies in one chunk's
/// rows or after them. Sequences of at most this length are one chunk.
pub(super) const KEY_CHUNK: usize = 512;

/// The longest query block (the forward keeps a block's running maxima and sums in arrays of
/// this size).
pub(super) const MAX_BLOCK_ROWS: usize = 128;

/// Offsets and row strides of the q, k, v blocks; head h's columns start at h·d_h.
pub(super) struct QkvLayout {
    pub(super) s: usize,
    pub(super) dh: usize,
    pub(super) q: (usize, usize),
    pub(super) k: (usize, usize),
    pub(super) v: (usize, usize),
    pub(super) group: usize,
}

impl QkvLayout {
    pub(super) fn new(sh: &AttnShape) -> Self {
        let t = sh.tokens();
        let (qw, kw) = (sh.q_width(), sh.kv_width());
        Self {
            s: sh.seq,
            dh: sh.head_dim,
            q: (0, qw),
            k: (t * qw, kw),
            v: (t * (qw + kw), kw),
            group: sh.heads / sh.kv_heads,
        }
    }
}

pub(super) fn check<T>(qkv: &[T], sh: &AttnShape) {
    assert_eq!(sh.heads % sh.kv_heads, 0, "attention: {} heads over {} kv heads", sh.heads, sh.kv_heads);
    assert!(qkv.len() >= sh.qkv_len(), "attention: q, k, v need {} elements, buffer has {}", sh.qkv_len(), qkv.len());
}
