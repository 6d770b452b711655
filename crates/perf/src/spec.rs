//! The parts of a hardware description (TOML): a device's compute and memory, and a link
//! level's latency and bandwidth ([`crate::hardware::Hardware`] holds them).

use crate::attention_model::AttentionPoint;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeSpec {
    /// Peak dense throughput of the device in the default dtype (FLOP/s).
    pub peak_flops: f64,
    /// η_max: the fraction of peak a large GEMM reaches.
    pub gemm_efficiency: f64,
    /// c in the per-dimension factor x / (x + c).
    pub gemm_half_dim: f64,
    /// [c_M, c_N, c_K]: a c of each dimension's own (a calibration fits them); `gemm_half_dim`
    /// for all three when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_half_dims: Option<[f64; 3]>,
    /// Fraction of peak the attention kernel reaches on executed FLOPs.
    pub attention_efficiency: f64,
    /// Fixed cost per kernel (launch, tail).
    pub kernel_overhead_s: f64,
    /// Streaming multiprocessors. With `gemm_tiles`, GEMM time follows tile and wave
    /// quantization (`gemm_model`) instead of the x/(x + c) curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// Output tile shapes [rows, columns] the GEMM library picks from, per call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gemm_tiles: Vec<[u64; 2]>,
    /// c_k in the tile model's k factor k / (k + c_k); `gemm_half_dim` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_k_half_dim: Option<f64>,
    /// Most slices of K the tile model may split a GEMM into (split-K); 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_max_split_k: Option<u32>,
    /// Attention efficiency by head dimension and sequence length; `attention_efficiency`
    /// for every shape when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attention_table: Vec<AttentionPoint>,
    /// With `ranks_share_device`: the ranks' summed rate over one rank's alone, as a fraction
    /// (contention for the cores, caches and memory); each rank gets this over world of the
    /// device. 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_rank_efficiency: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Device memory bandwidth (bytes/s).
    pub bandwidth: f64,
    /// Fraction of it that streaming kernels reach.
    pub efficiency: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Latency per ring step (s).
    pub alpha_s: f64,
    /// Bandwidth per direction per device (bytes/s).
    pub bandwidth: f64,
}
