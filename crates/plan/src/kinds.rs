//! What a plan is resolved over: the architecture, the scheme and the norm mode. The
//! configuration parses these keys; which scheme fits which architecture, and what `auto`
//! means, is decided here only.

use serde::{Deserialize, Serialize};

/// Which linear layers the decoder blocks use (docs/MODEL.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Dense `y = x·W` everywhere: the baseline.
    Full,
    /// `y = (x·A)·B`, no activation in the bottleneck.
    Svd,
    /// `y = φ(x·A)·B` with φ = SiLU.
    Cola,
    /// Low-rank with latent crossing between consecutive blocks.
    Lax,
}

impl Arch {
    pub const ALL: [Arch; 4] = [Arch::Full, Arch::Svd, Arch::Cola, Arch::Lax];
    pub fn name(self) -> &'static str {
        match self {
            Arch::Full => "full",
            Arch::Svd => "svd",
            Arch::Cola => "cola",
            Arch::Lax => "lax",
        }
    }
    pub fn is_low_rank(self) -> bool {
        self != Arch::Full
    }
}

/// A tensor-parallel scheme, resolved for the architecture (see
/// `ParallelConfig::resolved_scheme` in boost-config, [`default_scheme`] for `auto`); the engine never sees `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Full-rank Megatron TP: column QKV/gate/up, row o/down, replicated residual.
    Megatron,
    /// Each low-rank factor pair as column-A / row-B; attention and MLP replicated.
    Vanilla,
    /// Bottleneck-aware TP: row-parallel A, column-parallel B, hidden-sharded residual.
    Btp,
}

impl Scheme {
    pub const ALL: [Scheme; 3] = [Scheme::Megatron, Scheme::Vanilla, Scheme::Btp];
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Megatron => "megatron",
            Scheme::Vanilla => "vanilla",
            Scheme::Btp => "btp",
        }
    }
}

/// How a hidden-sharded residual is normalised (BTP only; a whole residual ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormMode {
    /// Statistic folded into the following row-parallel GEMM's all-reduce.
    Online,
    /// A separate all-reduce of the statistic, forward and backward.
    Sync,
    /// Each shard normalised by its own statistic: no collective, but a different model
    /// than RMSNorm over d. The BOOST reference code's runs used it, so the cost model
    /// prices it; no plan resolves it, so the engine never trains it.
    Local,
}

impl NormMode {
    pub const ALL: [NormMode; 3] = [NormMode::Online, NormMode::Sync, NormMode::Local];
    pub fn name(self) -> &'static str {
        match self {
            NormMode::Online => "online",
            NormMode::Sync => "sync",
            NormMode::Local => "local",
        }
    }
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown norm \"{s}\"; use online, sync or local"))
    }
}

/// The scheme `parallel.scheme = "auto"` resolves to: BTP for a low-rank model, Megatron for
/// full rank.
pub fn default_scheme(arch: Arch) -> Scheme {
    if arch.is_low_rank() { Scheme::Btp } else { Scheme::Megatron }
}
