//! Hardware descriptions (TOML) and the time of each op on them.
//!
//! GEMM time is a roofline with an efficiency curve by shape:
//! `t = max(2MNK / (P·η), bytes / (BW·η_mem)) + overhead`, with
//! `η = η_max · Π_{x ∈ {M, N, K}} x / (x + c_x)`: every dimension smaller than a few times its
//! `c_x` (`gemm_half_dims`, or one `gemm_half_dim` for all three) costs efficiency, a
//! dimension equal to it halves it. `η_max`
//! (`gemm_efficiency`) is the fraction of peak a large square GEMM reaches. Presets with
//! `sm_count` and `gemm_tiles` (the GPUs) count tiles and waves instead ([`crate::gemm_model`]).
//! Attention: `t = max(executed FLOPs / (P·η_attn), bytes / (BW·η_mem))`, η_attn from the
//! preset's `attention_table` by head dimension and sequence ([`crate::attention_model`]) or
//! `attention_efficiency`.
//! Elementwise kernels: `bytes / (BW·η_mem)`.
//! Collectives: an α–β model on the link level the group spans (NVLink-class inside a node,
//! network between nodes): ring all-reduce `2(p−1)α + 2(p−1)/p · n/β`, all-gather and
//! reduce-scatter (n the gathered size) `(p−1)α + (p−1)/p · n/β`, point-to-point `α + n/β`.
//! Ranks are laid out tp fastest, then dp, then pp.

use crate::attention_model;
use crate::gemm_model::{self, TileModel};
use crate::ops::{Attention, CollGroup, CollKind, Collective, CostOp, Elementwise, Gemm};
use crate::setup::{Dtype, Setup};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use crate::spec::{ComputeSpec, LinkSpec, MemorySpec};

/// A cluster: identical devices, `devices_per_node` per node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub name: String,
    pub description: String,
    /// Default numeric format of training on this hardware (`bf16` or `f32`).
    pub dtype: String,
    pub devices_per_node: usize,
    /// Memory per device (bytes).
    pub memory_bytes: f64,
    /// Fraction of `memory_bytes` a run may plan to use.
    pub usable_memory_fraction: f64,
    /// Ranks are threads on one machine sharing its cores and memory bandwidth (the CPU
    /// engine's in-process ranks): each rank gets `compute.shared_rank_efficiency` / world of
    /// compute and bandwidth (1 / world without it).
    pub ranks_share_device: bool,
    pub compute: ComputeSpec,
    pub memory: MemorySpec,
    pub intra_node: LinkSpec,
    pub inter_node: LinkSpec,
    /// Free-form record of how the numbers were measured (written by calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<toml::Table>,
}

/// The embedded presets: (name, TOML text).
pub const PRESETS: &[(&str, &str)] = &[
    ("a100-80gb", include_str!("../presets/a100-80gb.toml")),
    ("h100", include_str!("../presets/h100.toml")),
    ("h200", include_str!("../presets/h200.toml")),
    ("cpu", include_str!("../presets/cpu.toml")),
    ("cpu-mpi", include_str!("../presets/cpu-mpi.toml")),
];

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

impl Hardware {
    pub fn from_toml_str(text: &str) -> Result<Self> {
        let hw: Hardware = toml::from_str(text).context("hardware TOML")?;
        hw.validate()?;
        Ok(hw)
    }

    pub fn preset(name: &str) -> Result<Self> {
        let name = match name {
            "a100" | "a100-80g" => "a100-80gb",
            n => n,
        };
        match PRESETS.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => Self::from_toml_str(text).with_context(|| format!("preset {name}")),
            None => {
                bail!("unknown cluster \"{name}\"; presets: {}, or a path to a TOML file", preset_names().join(", "))
            }
        }
    }

    /// A preset name, or a path to a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self> {
        let p = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || p.is_file() {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Self::from_toml_str(&text).with_context(|| format!("in {}", p.display()))
        } else {
            Self::preset(name_or_path)
        }
    }

    pub fn validate(&self) -> Result<()> {
        let c = &self.compute;
        let pos = [
            ("compute.peak_flops", c.peak_flops),
            ("compute.gemm_efficiency", c.gemm_efficiency),
            ("compute.attention_efficiency", c.attention_efficiency),
            ("memory.bandwidth", self.memory.bandwidth),
            ("memory.efficiency", self.memory.efficiency),
            ("memory_bytes", self.memory_bytes),
            ("usable_memory_fraction", self.usable_memory_fraction),
            ("intra_node.bandwidth", self.intra_node.bandwidth),
            ("inter_node.bandwidth", self.inter_node.bandwidth),
        ];
        for (k, v) in pos {
            if !(v > 0.0 && v.is_finite()) {
                bail!("hardware key `{k}` must be a positive number, got {v}");
            }
        }
        // Fractions of a whole: more than all of it predicts more than the hardware does.
        let fractions = [
            ("compute.gemm_efficiency", c.gemm_efficiency),
            ("compute.attention_efficiency", c.attention_efficiency),
            ("memory.efficiency", self.memory.efficiency),
            ("usable_memory_fraction", self.usable_memory_fraction),
        ];
        for (k, v) in fractions {
            if v > 1.0 {
                bail!("hardware key `{k}` is a fraction of the peak or the memory, at most 1, got {v}");
            }
        }
        let non_negative = [
            ("compute.gemm_half_dim", c.gemm_half_dim),
            ("compute.kernel_overhead_s", c.kernel_overhead_s),
            ("intra_node.alpha_s", self.intra_node.alpha_s),
            ("inter_node.alpha_s", self.inter_node.alpha_s),
        ];
        for (k, v) in non_negative {
            if !(v >= 0.0 && v.is_finite()) {
                bail!("hardware key `{k}` must be a number ≥ 0, got {v}");
            }
        }
        for (i, h) in c.gemm_half_dims.iter().flatten().enumerate() {
            if !(*h >= 0.0 && h.is_finite()) {
                bail!("hardware key `compute.gemm_half_dims` must hold numbers ≥ 0, got {h} at index {i}");
            }
        }
        if let Some(e) = c.shared_rank_efficiency {
            // Two ranks at once reach at most twice one rank's rate; a figure past it is no
            // measurement of sharing.
            if !(e > 0.0 && e <= 2.0) {
                bail!("hardware key `compute.shared_rank_efficiency` must be in (0, 2], got {e}");
            }
        }
        if self.devices_per_node == 0 {
            bail!("devices_per_node must be at least 1");
        }
        gemm_model::validate(c)?;
        attention_model::validate(&c.attention_table)?;
        Dtype::parse(&self.dtype)?;
        Ok(())
    }

    pub fn default_dtype(&self) -> Dtype {
        Dtype::parse(&self.dtype).unwrap_or(Dtype::Bf16)
    }

    pub fn usable_memory(&self) -> f64 {
        self.memory_bytes * self.usable_memory_fraction
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("hardware serialises")
    }
}

/// The curve's factor for a GEMM of dimensions `[M, N, K]` with half dimensions
/// `[c_M, c_N, c_K]`: `Π x/(x + c_x)` (the calibration fits it, the timer reads it).
pub fn shape_factor(c: [f64; 3], dims: [u64; 3]) -> f64 {
    dims.iter().zip(c).map(|(&x, c)| x as f64 / (x as f64 + c)).product()
}

/// Times ops of one set-up on one hardware.
pub struct Timer<'a> {
    pub hw: &'a Hardware,
    pub setup: &'a Setup,
    /// Compute and bandwidth share of one rank.
    share: f64,
    /// Peak FLOP/s of one rank in the set-up's dtype: the preset's peak is for its own dtype;
    /// f32 on a bf16 GPU preset runs at half of it (TF32 Tensor Cores).
    peak: f64,
    /// GEMM time by tile and wave quantization, on presets with `sm_count` and `gemm_tiles`.
    tiles: Option<TileModel>,
}

impl<'a> Timer<'a> {
    pub fn new(hw: &'a Hardware, setup: &'a Setup) -> Self {
        let world = setup.world();
        let share = match (hw.ranks_share_device, world) {
            (true, w) if w > 1 => hw.compute.shared_rank_efficiency.unwrap_or(1.0) / w as f64,
            _ => 1.0,
        };
        let mut peak = hw.compute.peak_flops;
        if hw.default_dtype() == Dtype::Bf16 && setup.dtype == Dtype::F32 {
            // Without bf16 Tensor Cores a GPU runs f32 GEMMs on TF32 at half the bf16 rate.
            peak *= 0.5;
        }
        let peak = peak * share;
        let bandwidth = hw.memory.bandwidth * hw.memory.efficiency * share;
        let tiles = TileModel::new(&hw.compute, peak, bandwidth);
        Timer { hw, setup, share, peak, tiles }
    }

    pub fn peak_flops(&self) -> f64 {
        self.peak
    }

    fn bandwidth(&self) -> f64 {
        self.hw.memory.bandwidth * self.hw.memory.efficiency * self.share
    }

    /// The tile model, on presets that have one.
    pub fn tile_model(&self) -> Option<&TileModel> {
        self.tiles.as_ref()
    }

    /// Fraction of peak the GEMM's compute reaches: η(M, N, K) of the efficiency curve, or
    /// under the tile model its FLOPs over peak × the compute time of its best plan.
    pub fn gemm_efficiency(&self, g: &Gemm) -> f64 {
        if let Some(t) = &self.tiles {
            let p = t.plan(g);
            return g.flops() / (self.peak * (p.compute_s + p.reduce_s));
        }
        let c = &self.hw.compute;
        c.gemm_efficiency * shape_factor(c.gemm_half_dims.unwrap_or([c.gemm_half_dim; 3]), [g.m, g.n, g.k])
    }

    pub fn gemm(&self, g: &Gemm) -> f64 {
        if let Some(t) = &self.tiles {
            return t.plan(g).time_s() + self.hw.compute.kernel_overhead_s;
        }
        let tc = g.flops() / (self.peak * self.gemm_efficiency(g));
        let tm = g.bytes() / self.bandwidth();
        tc.max(tm) + self.hw.compute.kernel_overhead_s
    }

    /// Fraction of peak the attention kernel reaches at this call's head dimension and
    /// sequence: the preset's table, or `attention_efficiency`.
    pub fn attention_efficiency(&self, a: &Attention) -> f64 {
        let c = &self.hw.compute;
        attention_model::efficiency(&c.attention_table, a.head_dim, a.seq).unwrap_or(c.attention_efficiency)
    }

    pub fn attention(&self, a: &Attention) -> f64 {
        let tc = a.executed_flops() / (self.peak * self.attention_efficiency(a));
        let tm = a.bytes() / self.bandwidth();
        tc.max(tm) + self.hw.compute.kernel_overhead_s
    }

    pub fn elementwise(&self, e: &Elementwise) -> f64 {
        e.bytes / self.bandwidth() + self.hw.compute.kernel_overhead_s
    }

    /// Size of a group and whether it stays inside one node.
    pub fn group_span(&self, g: CollGroup) -> (usize, bool) {
        let s = self.setup;
        let n = self.hw.devices_per_node;
        let (tp, dp, pp) = (s.tp, s.dp, s.pp);
        match g {
            CollGroup::Tp => (tp, tp <= n),
            CollGroup::Dp => (dp, tp * dp <= n),
            CollGroup::Pp => (if pp > 1 { 2 } else { 1 }, tp * dp * pp <= n),
            CollGroup::Model => (tp * pp, s.world() <= n),
            CollGroup::World => (s.world(), s.world() <= n),
        }
    }

    pub fn collective(&self, c: &Collective) -> f64 {
        let (p, intra) = self.group_span(c.group);
        if p <= 1 {
            return 0.0;
        }
        let link = if intra { &self.hw.intra_node } else { &self.hw.inter_node };
        let (alpha, beta) = (link.alpha_s, link.bandwidth);
        let n = c.bytes() as f64;
        let pf = p as f64;
        match c.kind {
            CollKind::AllReduce | CollKind::AllReduceMax => 2.0 * (pf - 1.0) * alpha + 2.0 * (pf - 1.0) / pf * n / beta,
            CollKind::AllGather | CollKind::ReduceScatter => (pf - 1.0) * alpha + (pf - 1.0) / pf * n / beta,
            CollKind::SendRecv => alpha + n / beta,
        }
    }

    pub fn op(&self, op: &CostOp) -> f64 {
        match op {
            CostOp::Gemm(g) => self.gemm(g),
            CostOp::Attention(a) => self.attention(a),
            CostOp::Elementwise(e) => self.elementwise(e),
            CostOp::Collective(c) => self.collective(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster file with one line changed, as a user might have written it.
    fn with(key: &str, value: &str) -> Result<Hardware> {
        let text = PRESETS[0].1;
        let line =
            text.lines().find(|l| l.trim_start().starts_with(&format!("{key} ="))).expect("the key is in the preset");
        Hardware::from_toml_str(&text.replacen(line, &format!("{key} = {value}"), 1))
    }

    #[test]
    fn physically_impossible_cluster_values_are_refused_by_key() {
        // A negative latency predicted a negative step time (−72.8 s), a memory fraction of 2
        // twice the device's memory.
        for (key, value, named) in [
            ("alpha_s", "-1.0", "intra_node.alpha_s"),
            ("usable_memory_fraction", "2.0", "usable_memory_fraction"),
            ("gemm_efficiency", "1.5", "compute.gemm_efficiency"),
            ("kernel_overhead_s", "-1e-6", "compute.kernel_overhead_s"),
        ] {
            let e = with(key, value).unwrap_err().to_string();
            assert!(e.contains(named), "{key} = {value}: {e}");
        }
        assert!(with("usable_memory_fraction", "1.0").is_ok());
        assert!(with("alpha_s", "0.0").is_ok());
    }

    #[test]
    fn bad_tile_model_keys_are_refused_by_key() {
        for (key, value, named) in [
            ("sm_count", "0", "compute.sm_count"),
            ("gemm_tiles", "[[0, 128]]", "compute.gemm_tiles[0]"),
            ("gemm_tiles", "[]", "compute.sm_count"),
            ("gemm_k_half_dim", "-1.0", "compute.gemm_k_half_dim"),
            ("gemm_max_split_k", "0", "compute.gemm_max_split_k"),
        ] {
            let e = with(key, value).unwrap_err().to_string();
            assert!(e.contains(named), "{key} = {value}: {e}");
        }
        let text = PRESETS[0].1;
        let line = text.lines().find(|l| l.starts_with("sm_count =")).unwrap();
        let e = Hardware::from_toml_str(&text.replacen(line, "", 1)).unwrap_err().to_string();
        assert!(e.contains("compute.gemm_tiles") && e.contains("compute.sm_count"), "{e}");
        assert!(with("gemm_max_split_k", "1").is_ok());
    }
}
