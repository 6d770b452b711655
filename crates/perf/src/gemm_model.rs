//! GEMM time on a GPU by tile and wave quantization (docs/COST_MODEL.md §6).
//!
//! A GEMM library splits the m×n output into tiles of Tm×Tn, one thread block each, and runs
//! them in waves of one tile per SM. With `s` slices of K (split-K), a call of `batch` GEMMs has
//! `tiles = ⌈m/Tm⌉·⌈n/Tn⌉·s·batch` tiles in `waves = ⌈tiles / SMs⌉` waves, and
//!
//! ```text
//! compute = waves · 2·Tm·Tn·k_s / (P_SM · η_SM · f(k_s)),   k_s = ⌈k/s⌉,   f(k) = k/(k + c_k)
//! reduce  = 2·s·m·n·4·batch / (BW·η_mem)            (s > 1: fp32 partials written and read)
//! memory  = bytes / (BW·η_mem)
//! time    = min over (tile, s) of max(compute, memory) + reduce
//! ```
//!
//! `P_SM` is the device peak over its SMs. A partial tile costs a whole one, and a partial
//! wave a whole wave. `η_SM` is set so that the model reproduces `gemm_efficiency` (η_max, the
//! fraction of peak measured on an 8192³ GEMM) on that shape: the tile quantization and k factor
//! of the measured GEMM are already inside the measured number.

use crate::ops::{Gemm, GemmRole, Phase};
use crate::spec::ComputeSpec;

/// The square GEMM whose measured rate `gemm_efficiency` is (8192³ bf16 on the lent GPUs).
pub const REFERENCE_DIM: u64 = 8192;

/// Bytes of one fp32 partial sum of a split-K reduction.
const PARTIAL_BYTES: f64 = 4.0;

/// How the tile model runs one GEMM call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmPlan {
    /// Output tile (rows, columns).
    pub tile: [u64; 2],
    /// K slices (1: no split-K).
    pub split_k: u64,
    pub tiles: u64,
    pub waves: u64,
    /// Waves of tiles at the SMs' rate (s).
    pub compute_s: f64,
    /// Operand traffic at the streaming bandwidth (s).
    pub memory_s: f64,
    /// Split-K reduction traffic (s).
    pub reduce_s: f64,
}

impl GemmPlan {
    /// Time of the call without the launch overhead.
    pub fn time_s(&self) -> f64 {
        self.compute_s.max(self.memory_s) + self.reduce_s
    }
}

/// The GPU tile model of one hardware preset: present when the preset has `sm_count` and
/// `gemm_tiles`.
#[derive(Debug, Clone, PartialEq)]
pub struct TileModel {
    sms: u64,
    tiles: Vec<[u64; 2]>,
    max_split_k: u64,
    c_k: f64,
    /// P_SM · η_SM: FLOP/s of one SM on a tile with long k.
    sm_rate: f64,
    /// Streaming bandwidth of the device (bytes/s, efficiency included).
    bandwidth: f64,
}

impl TileModel {
    /// `peak` is the device peak in the set-up's dtype (FLOP/s), `bandwidth` the streaming
    /// bandwidth with its efficiency (bytes/s).
    pub fn new(c: &ComputeSpec, peak: f64, bandwidth: f64) -> Option<Self> {
        let sms = u64::from(c.sm_count?);
        if c.gemm_tiles.is_empty() {
            return None;
        }
        let mut m = TileModel {
            sms,
            tiles: c.gemm_tiles.clone(),
            max_split_k: u64::from(c.gemm_max_split_k.unwrap_or(1)),
            c_k: c.gemm_k_half_dim.unwrap_or(c.gemm_half_dim),
            sm_rate: peak / sms as f64,
            bandwidth,
        };
        // η_SM: the model at η_SM = 1 reaches `e` of peak on the reference GEMM; the measured
        // fraction there is η_max, so each SM runs at η_max / e of its peak.
        let r = REFERENCE_DIM;
        let reference = Gemm {
            label: String::new(),
            phase: Phase::Forward,
            role: GemmRole::Forward,
            m: r,
            n: r,
            k: r,
            batch: 1,
            dtype_bytes: 2,
            redundant: false,
        };
        let e = reference.flops() / (peak * m.compute_only(&reference));
        m.sm_rate *= c.gemm_efficiency / e;
        Some(m)
    }

    fn k_factor(&self, k: u64) -> f64 {
        k as f64 / (k as f64 + self.c_k)
    }

    /// One candidate: tile `t`, `s` slices of K.
    pub fn plan_with(&self, g: &Gemm, t: [u64; 2], s: u64) -> GemmPlan {
        let (m, n, k, batch) = (g.m.max(1), g.n.max(1), g.k.max(1), g.batch.max(1));
        let tiles = m.div_ceil(t[0]) * n.div_ceil(t[1]) * s * batch;
        let waves = tiles.div_ceil(self.sms);
        let k_s = k.div_ceil(s);
        let tile_flops = 2.0 * (t[0] * t[1]) as f64 * k_s as f64;
        let compute_s = waves as f64 * tile_flops / (self.sm_rate * self.k_factor(k_s));
        let reduce_s =
            if s > 1 { 2.0 * s as f64 * (m * n * batch) as f64 * PARTIAL_BYTES / self.bandwidth } else { 0.0 };
        GemmPlan { tile: t, split_k: s, tiles, waves, compute_s, memory_s: g.bytes() / self.bandwidth, reduce_s }
    }

    /// The fastest of the tiles and K splits, as a library's heuristic would pick it.
    pub fn plan(&self, g: &Gemm) -> GemmPlan {
        let mut best: Option<GemmPlan> = None;
        for &t in &self.tiles {
            for s in 1..=self.max_split_k.min(g.k.max(1)) {
                let p = self.plan_with(g, t, s);
                if best.is_none_or(|b| p.time_s() < b.time_s()) {
                    best = Some(p);
                }
            }
        }
        best.expect("at least one tile (validated)")
    }

    /// Compute time of the fastest candidate, without the memory roofline (for η_SM).
    fn compute_only(&self, g: &Gemm) -> f64 {
        let mut best = f64::INFINITY;
        for &t in &self.tiles {
            for s in 1..=self.max_split_k.min(g.k.max(1)) {
                let p = self.plan_with(g, t, s);
                best = best.min(p.compute_s + p.reduce_s);
            }
        }
        best
    }

    pub fn sm_count(&self) -> u64 {
        self.sms
    }

    /// FLOP/s of one SM on a tile with long k (P_SM · η_SM).
    pub fn sm_rate(&self) -> f64 {
        self.sm_rate
    }
}

/// The tile model's keys: `sm_count` and `gemm_tiles` come together; every count is at least 1.
pub fn validate(c: &ComputeSpec) -> anyhow::Result<()> {
    use anyhow::bail;
    match (c.sm_count, c.gemm_tiles.is_empty()) {
        (Some(0), _) => bail!("hardware key `compute.sm_count` must be at least 1, got 0"),
        (Some(_), true) => {
            bail!("hardware key `compute.sm_count` needs `compute.gemm_tiles` (the tile shapes) beside it")
        }
        (None, false) => bail!("hardware key `compute.gemm_tiles` needs `compute.sm_count` (the SMs) beside it"),
        _ => {}
    }
    for (i, t) in c.gemm_tiles.iter().enumerate() {
        if t[0] == 0 || t[1] == 0 {
            bail!("hardware key `compute.gemm_tiles[{i}]` must be two sizes of at least 1, got {t:?}");
        }
    }
    if let Some(v) = c.gemm_k_half_dim
        && !(v >= 0.0 && v.is_finite())
    {
        bail!("hardware key `compute.gemm_k_half_dim` must be a number ≥ 0, got {v}");
    }
    if c.gemm_max_split_k == Some(0) {
        bail!("hardware key `compute.gemm_max_split_k` must be at least 1, got 0");
    }
    Ok(())
}
