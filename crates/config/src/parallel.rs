//! `[parallel]`: the (dp, pp, tp) layout and the tensor-parallel scheme.

use crate::BucketSize;
use crate::{ConfigError, ModelConfig, choices, divisors};
use boost_plan::Axis;
pub use boost_plan::{NormMode, Scheme};
use serde::{Deserialize, Serialize};

/// The `parallel.scheme` key: `auto`, or one of `plan`'s schemes by name (so a new scheme
/// needs nothing here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeChoice {
    /// `megatron` for full-rank models, `btp` for low-rank ones.
    Auto,
    Fixed(Scheme),
}

impl From<Scheme> for SchemeChoice {
    fn from(s: Scheme) -> Self {
        SchemeChoice::Fixed(s)
    }
}

impl Serialize for SchemeChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            SchemeChoice::Auto => "auto",
            SchemeChoice::Fixed(scheme) => scheme.name(),
        })
    }
}

impl<'de> Deserialize<'de> for SchemeChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "auto" {
            return Ok(SchemeChoice::Auto);
        }
        Scheme::ALL.into_iter().find(|s| s.name() == text).map(SchemeChoice::Fixed).ok_or_else(|| {
            let names: Vec<&str> = Scheme::ALL.iter().map(|s| s.name()).collect();
            serde::de::Error::custom(format!("unknown scheme \"{text}\"; use \"auto\" or one of {}", names.join(", ")))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PipeSchedule {
    Afab,
    #[serde(rename = "1f1b")]
    OneFOneB,
}

/// How the collectives of a GPU run with several ranks travel (`parallel.gpu_collectives`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuCollectives {
    /// NCCL when the ranks are mpirun processes and NCCL loads on every one; host otherwise.
    #[default]
    Auto,
    /// NCCL (one GPU per mpirun process); an error where it cannot run.
    Nccl,
    /// Staged through host memory over the CPU communicators (ranks may share a GPU).
    Host,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ParallelConfig {
    pub tp: usize,
    pub pp: usize,
    pub dp: usize,
    pub scheme: SchemeChoice,
    pub norm: NormMode,
    /// Group `[A_q;A_k;A_v]` and `[A_gate;A_up]` into one GEMM and one collective each.
    pub grouping: bool,
    pub schedule: PipeSchedule,
    /// ZeRO stage: 0 or 1.
    pub zero: usize,
    /// Link emulation for in-process runs: latency per collective step (µs) …
    pub link_alpha_us: f64,
    /// … and bandwidth (GB/s); 0 turns emulation off.
    pub link_gbps: f64,
    /// Per group kind, `"ALPHA_US,GBPS"` overriding the two keys above for that kind.
    pub link: GroupLinks,
    /// Overlap communication with computation: data-parallel gradients reduced in buckets
    /// during the backward, ZeRO-1 parameter gathers during the update. False keeps every
    /// collective blocking, in the order of the non-overlapped step (same bits either way).
    pub overlap: bool,
    /// Size of a data-parallel gradient bucket in MB (10⁶ bytes) when overlapping, or `auto`
    /// (an eighth of a stage's gradients, between 1 and 25 MB).
    pub bucket_mb: BucketSize,
    /// Run each micro-batch as this many chunks of whole sequences whose computation
    /// overlaps each other's tensor-parallel collectives (1: one piece, every tp collective
    /// exposed).
    pub tp_chunks: usize,
    /// With `train.device = cuda` and several ranks: NCCL or host-staged collectives.
    pub gpu_collectives: GpuCollectives,
}

/// Emulated links of the tp, pp and dp groups, each `"ALPHA_US,GBPS"` (e.g. `"2,300"` for a
/// fast intra-node link, `"20,25"` for an inter-node one); unset: `link_alpha_us`,
/// `link_gbps`. A bandwidth of 0 turns emulation off for that kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupLinks {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp: Option<String>,
}

/// An emulated link: latency per collective step (µs) and bandwidth (GB/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    pub alpha_us: f64,
    pub gbps: f64,
}

/// Parse `"ALPHA_US,GBPS"` for config key `key`.
pub fn parse_link(key: &str, text: &str) -> Result<LinkSpec, ConfigError> {
    let bad = |why: &str| {
        ConfigError::new(
            key,
            format!(
                "is \"{text}\"; {why}: write \"ALPHA_US,GBPS\", e.g. \"20,25\" (latency in µs, bandwidth in GB/s; \"0,0\" turns it off)"
            ),
        )
    };
    let (a, b) = text.split_once(',').ok_or_else(|| bad("it needs two numbers"))?;
    let num = |s: &str| s.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    match (num(a), num(b)) {
        (Some(alpha_us), Some(gbps)) => {
            link_in_range(key, alpha_us, gbps)?;
            Ok(LinkSpec { alpha_us, gbps })
        }
        _ => Err(bad("each must be a number ≥ 0")),
    }
}

/// The slowest link emulation models: a latency of at most a second a step, a bandwidth of 0
/// (off) or at least 1 kB/s. Beyond them a call sleeps for days (and past `Duration`'s range
/// the sleep panicked): a typo, not a network.
const MAX_ALPHA_US: f64 = 1e6;
const MIN_GBPS: f64 = 1e-6;

fn link_in_range(key: &str, alpha_us: f64, gbps: f64) -> Result<(), ConfigError> {
    if alpha_us > MAX_ALPHA_US || (gbps > 0.0 && gbps < MIN_GBPS) {
        return Err(ConfigError::new(
            key,
            format!(
                "latency {alpha_us} µs, bandwidth {gbps} GB/s: link emulation takes latencies up to {MAX_ALPHA_US:e} µs \
                 (a second a step) and bandwidths of 0 (off) or at least {MIN_GBPS:e} GB/s (1 kB/s)"
            ),
        ));
    }
    Ok(())
}

impl Default for ParallelConfig {
    fn default() -> Self {
        Self {
            tp: 1,
            pp: 1,
            dp: 1,
            scheme: SchemeChoice::Auto,
            norm: NormMode::Online,
            grouping: true,
            schedule: PipeSchedule::OneFOneB,
            zero: 0,
            link_alpha_us: 0.0,
            link_gbps: 0.0,
            link: GroupLinks::default(),
            overlap: true,
            bucket_mb: BucketSize::Auto,
            tp_chunks: 1,
            gpu_collectives: GpuCollectives::Auto,
        }
    }
}

impl ParallelConfig {
    /// The scheme after resolving `auto` for the architecture.
    pub fn resolved_scheme(&self, model: &ModelConfig) -> Scheme {
        match self.scheme {
            SchemeChoice::Auto => boost_plan::default_scheme(model.arch),
            SchemeChoice::Fixed(s) => s,
        }
    }

    /// The emulated link of group kind `group` (`tp`, `pp`, `dp`, or `world` for the rest):
    /// its own key if set, else `link_alpha_us`/`link_gbps`; None when emulation is off.
    pub fn link_of(&self, group: &str) -> Option<LinkSpec> {
        let own = match group {
            "tp" => self.link.tp.as_deref(),
            "pp" => self.link.pp.as_deref(),
            "dp" => self.link.dp.as_deref(),
            _ => None,
        };
        let spec = match own {
            // Validated when the config was loaded.
            Some(text) => parse_link(&format!("parallel.link.{group}"), text).ok()?,
            None => LinkSpec { alpha_us: self.link_alpha_us, gbps: self.link_gbps },
        };
        (spec.gbps > 0.0).then_some(spec)
    }

    pub fn world_size(&self) -> usize {
        self.tp * self.pp * self.dp
    }

    pub fn validate(&self, model: &ModelConfig) -> Result<(), ConfigError> {
        for (key, v) in [("tp", self.tp), ("pp", self.pp), ("dp", self.dp)] {
            if v == 0 {
                return Err(ConfigError::new(format!("parallel.{key}"), "is 0; it must be at least 1"));
            }
        }
        for (key, v, example) in [("link_alpha_us", self.link_alpha_us, "5"), ("link_gbps", self.link_gbps, "25")] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError::new(
                    format!("parallel.{key}"),
                    format!("is {v}; link emulation needs a number ≥ 0, e.g. {example} (0 turns it off)"),
                ));
            }
        }
        link_in_range("parallel.link_alpha_us, parallel.link_gbps", self.link_alpha_us, self.link_gbps)?;
        for (group, text) in [("tp", &self.link.tp), ("pp", &self.link.pp), ("dp", &self.link.dp)] {
            if let Some(t) = text {
                parse_link(&format!("parallel.link.{group}"), t)?;
            }
        }
        if let BucketSize::Mb(mb) = self.bucket_mb
            && !(mb.is_finite() && mb > 0.0)
        {
            return Err(ConfigError::new(
                "parallel.bucket_mb",
                format!("is {mb}; a gradient bucket needs a size in MB > 0, e.g. 25, or \"auto\""),
            ));
        }
        if self.tp_chunks == 0 {
            return Err(ConfigError::new("parallel.tp_chunks", "is 0; it must be at least 1 (1 = no chunks)"));
        }
        if self.tp_chunks > 1 && self.tp == 1 {
            return Err(ConfigError::new(
                "parallel.tp_chunks",
                format!(
                    "is {}, but parallel.tp = 1 has no tensor-parallel collectives to overlap; set parallel.tp_chunks = 1 or parallel.tp > 1",
                    self.tp_chunks
                ),
            ));
        }
        if self.tp_chunks > 1 && self.pp > 1 {
            return Err(ConfigError::new(
                "parallel.tp_chunks",
                format!(
                    "is {}, but parallel.pp = {}: chunks run a whole model (a pipeline already overlaps its stages' micro-batches); set parallel.tp_chunks = 1 or parallel.pp = 1",
                    self.tp_chunks, self.pp
                ),
            ));
        }
        if self.zero > 1 {
            return Err(ConfigError::new(
                "parallel.zero",
                format!("is {}; only ZeRO stages 0 and 1 exist here", self.zero),
            ));
        }
        // Which scheme runs which architecture, and what it splits, is the plan's to say.
        let scheme = self.resolved_scheme(model);
        let plan =
            boost_plan::Plan::new(scheme, model.arch, self.norm, model.tie_embeddings, self.tp).map_err(|e| {
                let (arch, tp) = (model.arch.name(), self.tp);
                ConfigError::new(
                    "parallel.scheme",
                    format!("{} with model.arch = {arch} at parallel.tp = {tp}: {e}", scheme.name()),
                )
            })?;
        let tp = self.tp;
        for axis in plan.split_axes() {
            let (key, n) = match axis {
                Axis::Heads => ("model.heads", model.heads),
                Axis::KvHeads => ("model.kv_heads", model.kv_heads()),
                Axis::FeedForward => ("model.d_ff", model.d_ff),
                Axis::Hidden => ("model.d", model.d),
                Axis::Rank => ("model.rank", model.rank),
            };
            if !n.is_multiple_of(tp) {
                return Err(ConfigError::new(
                    "parallel.tp",
                    format!(
                        "{key} = {n} is not divisible by parallel.tp = {tp}; choose tp in {} (or change {key})",
                        choices(&divisors(n))
                    ),
                ));
            }
        }
        if !model.layers.is_multiple_of(self.pp) {
            return Err(ConfigError::new(
                "parallel.pp",
                format!(
                    "model.layers = {} cannot be split evenly into parallel.pp = {} stages; choose pp in {}",
                    model.layers,
                    self.pp,
                    choices(&divisors(model.layers))
                ),
            ));
        }
        Ok(())
    }
}
