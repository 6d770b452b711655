//! `[model]`: the architecture and its shape.

use crate::{ConfigError, choices};
pub use boost_plan::Arch;
use serde::{Deserialize, Serialize};
use toml::Table;

/// The bottleneck activation of LaX (`svd` = identity, `cola` = SiLU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaxFlavour {
    Svd,
    Cola,
}

/// The r×r latent-crossing gate of LaX.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaxGate {
    /// A dense r×r linear with bias.
    Dense,
    /// A Kronecker product of an a×a and a b×b matrix (r = a·b), no bias.
    Kron,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaxConfig {
    #[serde(default = "LaxConfig::default_flavour")]
    pub flavour: LaxFlavour,
    #[serde(default = "LaxConfig::default_gate")]
    pub gate: LaxGate,
    /// First Kronecker factor size a (r = a·b); 0 picks the divisor of r closest to √r.
    #[serde(default)]
    pub kron_a: usize,
    /// LayerNorm epsilon over the latent.
    #[serde(default = "LaxConfig::default_ln_eps")]
    pub ln_eps: f64,
}

impl LaxConfig {
    fn default_flavour() -> LaxFlavour {
        LaxFlavour::Cola
    }
    fn default_gate() -> LaxGate {
        LaxGate::Dense
    }
    fn default_ln_eps() -> f64 {
        1e-6
    }
}

impl Default for LaxConfig {
    fn default() -> Self {
        Self { flavour: Self::default_flavour(), gate: Self::default_gate(), kron_a: 0, ln_eps: Self::default_ln_eps() }
    }
}

/// The activation φ inside a low-rank bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phi {
    Identity,
    Silu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The preset the shape came from (keys set explicitly override it).
    pub preset: String,
    pub arch: Arch,
    /// Hidden size d.
    pub d: usize,
    /// MLP size d_ff.
    pub d_ff: usize,
    pub layers: usize,
    pub heads: usize,
    /// Key/value heads (GQA); defaults to `heads`.
    #[serde(default)]
    pub kv_heads: Option<usize>,
    /// Bottleneck rank r of every low-rank linear.
    pub rank: usize,
    /// Vocabulary size; 0 takes the size of the data's tokenizer.
    pub vocab: usize,
    /// CoLA: no outer SiLU in the MLP (the bottleneck's φ is the only non-linearity).
    pub only_lr_act: bool,
    #[serde(default)]
    pub tie_embeddings: bool,
    #[serde(default = "ModelConfig::default_rope_theta")]
    pub rope_theta: f64,
    /// RoPE's frequency scaling (Llama 3.1's `llama3`), none by default.
    #[serde(default)]
    pub rope_scaling: crate::RopeScaling,
    #[serde(default = "ModelConfig::default_norm_eps")]
    pub norm_eps: f64,
    /// Standard deviation of N(0, σ) for embeddings, LM head and full-rank linears.
    #[serde(default = "ModelConfig::default_init_std")]
    pub init_std: f64,
    #[serde(default)]
    pub lax: LaxConfig,
}

/// A named shape from docs/MODEL.md §1 (and the small demo model).
pub struct Preset {
    pub name: &'static str,
    pub d: usize,
    pub d_ff: usize,
    pub layers: usize,
    pub heads: usize,
    pub rank: usize,
    pub vocab: usize,
    pub only_lr_act: bool,
}

/// The shapes the framework knows by name. `demo` is the default: a small CoLA model
/// that trains in minutes on two CPU cores.
pub const PRESETS: &[Preset] = &[
    Preset { name: "demo", d: 256, d_ff: 688, layers: 4, heads: 4, rank: 64, vocab: 0, only_lr_act: false },
    Preset { name: "cola-60m", d: 512, d_ff: 1376, layers: 8, heads: 8, rank: 128, vocab: 32000, only_lr_act: false },
    Preset {
        name: "cola-130m",
        d: 768,
        d_ff: 2048,
        layers: 12,
        heads: 12,
        rank: 256,
        vocab: 32000,
        only_lr_act: false,
    },
    Preset {
        name: "cola-350m",
        d: 1024,
        d_ff: 2736,
        layers: 24,
        heads: 16,
        rank: 256,
        vocab: 32000,
        only_lr_act: true,
    },
    Preset { name: "1b", d: 2048, d_ff: 5472, layers: 24, heads: 32, rank: 512, vocab: 32000, only_lr_act: true },
    Preset { name: "3b", d: 3072, d_ff: 8192, layers: 28, heads: 24, rank: 768, vocab: 32000, only_lr_act: true },
    Preset { name: "7b", d: 4096, d_ff: 11008, layers: 32, heads: 32, rank: 1024, vocab: 32000, only_lr_act: true },
    Preset { name: "13b", d: 5120, d_ff: 13824, layers: 40, heads: 40, rank: 1280, vocab: 32000, only_lr_act: true },
    Preset { name: "30b", d: 8192, d_ff: 22016, layers: 36, heads: 64, rank: 2048, vocab: 32000, only_lr_act: true },
];

pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// Fill the `[model]` table with the preset's values for every key the user did not set.
/// The largest `model.d`, `d_ff`, `heads` and `rank` accepted.
pub const MAX_WIDTH: usize = 1 << 20;
/// The largest `model.layers` accepted.
pub const MAX_LAYERS: usize = 1 << 16;

pub(crate) fn apply_preset(model: &mut Table) -> Result<(), ConfigError> {
    let name = match model.get("preset") {
        None => "demo".to_string(),
        Some(v) => v
            .as_str()
            .ok_or_else(|| ConfigError::new("model.preset", "must be a string, e.g. \"cola-60m\""))?
            .to_string(),
    };
    let p = preset(&name).ok_or_else(|| {
        ConfigError::new(
            "model.preset",
            format!("unknown preset \"{name}\"; choose one of {}", choices(&preset_names())),
        )
    })?;
    let defaults: [(&str, toml::Value); 9] = [
        ("preset", name.clone().into()),
        ("arch", "cola".into()),
        ("d", (p.d as i64).into()),
        ("d_ff", (p.d_ff as i64).into()),
        ("layers", (p.layers as i64).into()),
        ("heads", (p.heads as i64).into()),
        ("rank", (p.rank as i64).into()),
        ("vocab", (p.vocab as i64).into()),
        ("only_lr_act", p.only_lr_act.into()),
    ];
    for (k, v) in defaults {
        model.entry(k.to_string()).or_insert(v);
    }
    Ok(())
}

impl ModelConfig {
    fn default_rope_theta() -> f64 {
        10000.0
    }
    fn default_norm_eps() -> f64 {
        1e-6
    }
    fn default_init_std() -> f64 {
        0.02
    }

    /// The model of a named preset with every other key at its default.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let mut t = Table::new();
        t.insert("preset".into(), name.into());
        apply_preset(&mut t)?;
        let cfg: ModelConfig =
            t.try_into().map_err(|e: toml::de::Error| ConfigError::new("model", e.message().to_string()))?;
        Ok(cfg)
    }

    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }
    pub fn head_dim(&self) -> usize {
        self.d / self.heads
    }
    /// Width of the k and v projections (h_kv · d_h).
    pub fn d_kv(&self) -> usize {
        self.kv_heads() * self.head_dim()
    }
    /// The bottleneck activation φ (meaningless for full-rank).
    pub fn phi(&self) -> Phi {
        match self.arch {
            Arch::Full | Arch::Svd => Phi::Identity,
            Arch::Cola => Phi::Silu,
            Arch::Lax => match self.lax.flavour {
                LaxFlavour::Svd => Phi::Identity,
                LaxFlavour::Cola => Phi::Silu,
            },
        }
    }
    /// Whether the MLP applies SiLU to its gate branch (`down(SiLU(gate) ⊙ up)`).
    /// CoLA with `only_lr_act` drops it, since φ already is a SiLU.
    pub fn outer_silu(&self) -> bool {
        !(self.phi() == Phi::Silu && self.only_lr_act)
    }
    /// The Kronecker factor sizes (a, b) with a·b = r.
    pub fn kron_factors(&self) -> (usize, usize) {
        let r = self.rank;
        let a = if self.lax.kron_a > 0 {
            self.lax.kron_a
        } else {
            let s = (r as f64).sqrt();
            (1..=r)
                .filter(|a| r.is_multiple_of(*a))
                .min_by(|x, y| ((*x as f64) - s).abs().partial_cmp(&((*y as f64) - s).abs()).unwrap())
                .unwrap_or(1)
        };
        (a, r / a.max(1))
    }

    /// Checks that do not depend on the data or the layout.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Shapes beyond these are typos, and would make the checks below loop for ages.
        for (key, v, max) in [
            ("d", self.d, MAX_WIDTH),
            ("d_ff", self.d_ff, MAX_WIDTH),
            ("layers", self.layers, MAX_LAYERS),
            ("heads", self.heads, MAX_WIDTH),
            ("rank", self.rank, MAX_WIDTH),
        ] {
            if v > max {
                return Err(ConfigError::new(
                    format!("model.{key}"),
                    format!("{v} is larger than any model this trains (at most {max}); check the value"),
                ));
            }
        }
        let pos = |key: &str, v: usize| {
            if v == 0 { Err(ConfigError::new(format!("model.{key}"), "is 0; it must be at least 1")) } else { Ok(()) }
        };
        pos("d", self.d)?;
        pos("d_ff", self.d_ff)?;
        pos("layers", self.layers)?;
        pos("heads", self.heads)?;
        if self.arch.is_low_rank() {
            let max = self.d.min(self.d_ff);
            if self.rank == 0 || self.rank > max {
                return Err(ConfigError::new(
                    "model.rank",
                    format!(
                        "{} is outside 1..={max}: a bottleneck is narrower than the layers it factors \
                         (model.d = {}, model.d_ff = {}); choose rank in 1..={max}",
                        self.rank, self.d, self.d_ff
                    ),
                ));
            }
        }
        if !self.d.is_multiple_of(self.heads) {
            let valid: Vec<usize> = crate::divisors(self.d);
            return Err(ConfigError::new(
                "model.heads",
                format!(
                    "model.d = {} is not divisible by model.heads = {}; choose heads in {}",
                    self.d,
                    self.heads,
                    choices(&valid)
                ),
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(ConfigError::new(
                "model.heads",
                format!(
                    "the head dimension d/heads = {} must be even for RoPE; change model.heads or model.d",
                    self.head_dim()
                ),
            ));
        }
        let kv = self.kv_heads();
        if kv == 0 {
            return Err(ConfigError::new(
                "model.kv_heads",
                format!(
                    "0 leaves attention without keys and values; choose kv_heads in {} (fewer than model.heads = {} \
                     shares each key/value head among queries), or leave it unset for one per head",
                    choices(&crate::divisors(self.heads)),
                    self.heads
                ),
            ));
        }
        if !self.heads.is_multiple_of(kv) {
            return Err(ConfigError::new(
                "model.kv_heads",
                format!(
                    "model.heads = {} must be a multiple of model.kv_heads = {kv}; choose kv_heads in {}",
                    self.heads,
                    choices(&crate::divisors(self.heads))
                ),
            ));
        }
        if self.arch == Arch::Lax && self.lax.gate == LaxGate::Kron {
            let (a, b) = self.kron_factors();
            if a.checked_mul(b) != Some(self.rank) || a == 0 {
                return Err(ConfigError::new(
                    "model.lax.kron_a",
                    format!(
                        "{} does not divide model.rank = {}; choose kron_a in {}",
                        self.lax.kron_a,
                        self.rank,
                        choices(&crate::divisors(self.rank))
                    ),
                ));
            }
        }
        let positive = |key: &str, v: f64, example: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::new(key, format!("is {v}; it must be a positive number, e.g. {example}")))
            }
        };
        positive("model.norm_eps", self.norm_eps, "1e-6")?;
        positive("model.rope_theta", self.rope_theta, "10000")?;
        self.rope_scaling.validate()?;
        // A standard deviation: 0 makes every weight 0 (no gradient ever flows: the run trains
        // nothing), a negative one is the positive one's model with flipped signs.
        positive("model.init_std", self.init_std, "0.02")?;
        positive("model.lax.ln_eps", self.lax.ln_eps, "1e-6")?;
        Ok(())
    }
}
