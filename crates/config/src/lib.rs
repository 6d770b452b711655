//! The configuration tree of a run. It mirrors the module tree (`[model]`, `[train]`,
//! `[data]`, `[parallel]`, `[run]`), is read from TOML plus `--set key=value` overrides,
//! and is validated once; every error names the key and the fix.
//!
//! User guide: `docs/guide/training.md`; every key with its default: `docs/CONFIG.md`.

#![forbid(unsafe_code)]

mod bucket;
mod data;
mod describe;
mod error;
mod finite;
mod model;
mod overrides;
mod parallel;
mod rope;
mod train;

pub use bucket::BucketSize;
pub use data::{DEMO_DIR, DataConfig, MixEntry, RunConfig};
pub use describe::{KEYS, describe};
pub use error::{ConfigError, choices, divisors};
pub use model::{Arch, LaxConfig, LaxFlavour, LaxGate, ModelConfig, PRESETS, Phi, Preset, preset, preset_names};
pub use overrides::apply_set;
pub use parallel::{
    GpuCollectives, GroupLinks, LinkSpec, NormMode, ParallelConfig, PipeSchedule, Scheme, SchemeChoice, parse_link,
};
pub use rope::{RopeScaling, RopeScalingType};
pub use train::{
    Attention, Device, MAX_THREADS, Recompute, Schedule, TensorBoard, TrainConfig, parse_device, threads_message,
};

use serde::{Deserialize, Serialize};
use std::path::Path;
use toml::Table;

/// A TOML table, for callers that edit a config before typing it.
pub type TomlTable = toml::Table;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    #[serde(default)]
    pub train: TrainConfig,
    #[serde(default)]
    pub data: DataConfig,
    #[serde(default)]
    pub parallel: ParallelConfig,
    #[serde(default)]
    pub run: RunConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self::from_table(Table::new()).expect("the default config is valid")
    }
}

/// `train.accumulation` left unset with a pipeline means `parallel.pp`: the fewest
/// micro-batches that fill it (set explicitly, fewer is allowed: a larger bubble).
fn default_accumulation(table: &mut Table) {
    let pp = table.get("parallel").and_then(|p| p.get("pp")).and_then(|v| v.as_integer());
    let Some(pp) = pp.filter(|&pp| pp > 1) else { return };
    let train = table.entry("train".to_string()).or_insert_with(|| toml::Value::Table(Table::new()));
    if let toml::Value::Table(train) = train {
        train.entry("accumulation".to_string()).or_insert(toml::Value::Integer(pp));
    }
}

/// A config file's text: a regular file of at most 16 MiB (a FIFO or `/dev/zero` would block or
/// never end).
fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    const MAX: u64 = 16 << 20;
    let err = |why: String| ConfigError::new("", format!("cannot read config file {}: {why}", path.display()));
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a regular file (a folder, a FIFO or a device); give a TOML file".into()));
    }
    if meta.len() > MAX {
        return Err(err(format!("{} bytes, more than a config's limit of {MAX}", meta.len())));
    }
    std::fs::read_to_string(path).map_err(|e| err(e.to_string()))
}

impl Config {
    /// Read an optional TOML file, apply `--set` overrides in order, resolve the model preset,
    /// type-check and validate.
    pub fn load(path: Option<&Path>, sets: &[String]) -> Result<Self, ConfigError> {
        let mut table = match path {
            None => Table::new(),
            Some(p) => {
                let text = read_config_file(p)?;
                parse_toml(&text, &p.display().to_string())?
            }
        };
        for s in sets {
            apply_set(&mut table, s)?;
        }
        Self::from_table(table)
    }

    /// Lay the keys of the TOML file `path` over `table` (tables merged key by key): a
    /// resumed run's saved config, then the user's file, then `--set`.
    pub fn overlay_file(table: &mut Table, path: &Path) -> Result<(), ConfigError> {
        let text = read_config_file(path)?;
        fn merge(into: &mut Table, from: Table) {
            for (k, v) in from {
                match (into.get_mut(&k), v) {
                    (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                    (_, v) => {
                        into.insert(k, v);
                    }
                }
            }
        }
        merge(table, parse_toml(&text, &path.display().to_string())?);
        Ok(())
    }

    /// Parse a TOML string (as `load` would a file).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::from_table(parse_toml(text, "the config")?)
    }

    pub fn from_table(mut table: Table) -> Result<Self, ConfigError> {
        let model = table.entry("model".to_string()).or_insert_with(|| toml::Value::Table(Table::new()));
        let toml::Value::Table(model) = model else {
            return Err(ConfigError::new("model", "must be a table ([model])"));
        };
        model::apply_preset(model)?;
        default_accumulation(&mut table);
        let cfg: Config = deserialize_with_path(table)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        // A key's own check names its NaN or infinity where it has one; any other non-finite
        // float is refused by name, also when it trips another key's check first.
        let nonfinite = finite::check(self);
        match self.validate_keys() {
            Err(e) if nonfinite.as_ref().is_err_and(|n| n.key != e.key) => nonfinite,
            checked => checked.and(nonfinite),
        }
    }

    fn validate_keys(&self) -> Result<(), ConfigError> {
        self.model.validate()?;
        self.train.validate()?;
        self.data.validate()?;
        if self.run.dir.trim().is_empty() {
            return Err(ConfigError::new("run.dir", "is empty; name the run's directory, e.g. runs/demo"));
        }
        self.parallel.validate(&self.model)?;
        // Fewer micro-batches than stages is allowed: the schedule just has a larger bubble.
        if self.train.sample_every > 0 && (self.parallel.tp > 1 || self.parallel.pp > 1) {
            return Err(ConfigError::new(
                "train.sample_every",
                format!(
                    "samples are drawn from one rank's whole model, but parallel.tp = {} and parallel.pp = {} split it; set train.sample_every = 0, or sample a checkpoint with `boost generate`",
                    self.parallel.tp, self.parallel.pp
                ),
            ));
        }
        let chunks = self.parallel.tp_chunks;
        if chunks > 1 && !self.train.micro_batch.is_multiple_of(chunks) {
            return Err(ConfigError::new(
                "parallel.tp_chunks",
                format!(
                    "is {chunks}, but train.micro_batch = {} sequences do not split into {chunks} equal chunks; choose a divisor of train.micro_batch",
                    self.train.micro_batch
                ),
            ));
        }
        if chunks > 1 && self.train.device != "cpu" {
            return Err(ConfigError::new(
                "parallel.tp_chunks",
                format!(
                    "is {chunks}, but train.device = \"{}\": chunks overlap on the CPU engine only; set parallel.tp_chunks = 1 or train.device = \"cpu\"",
                    self.train.device
                ),
            ));
        }
        let per_stage = self.model.layers / self.parallel.pp.max(1);
        if self.train.recompute_layers > per_stage {
            return Err(ConfigError::new(
                "train.recompute_layers",
                format!(
                    "{} exceeds the {per_stage} layers of a pipeline stage (model.layers = {}, parallel.pp = {}); use 1..={per_stage}, or 0 for every layer",
                    self.train.recompute_layers, self.model.layers, self.parallel.pp
                ),
            ));
        }
        if self.train.recompute == Recompute::Lowrank && !self.model.arch.is_low_rank() {
            return Err(ConfigError::new(
                "train.recompute",
                "\"lowrank\" keeps the latents of low-rank layers, but model.arch = full has none; use \"full\" or \"none\"",
            ));
        }
        Ok(())
    }

    /// The resolved configuration as TOML (written into the run directory).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }
}

/// Parses TOML text; a syntax error names `origin`, the line and column (1-based) and the
/// offending line.
fn parse_toml(text: &str, origin: &str) -> Result<Table, ConfigError> {
    text.parse::<Table>().map_err(|e| {
        let message = e.message().trim();
        let Some(span) = e.span() else {
            return ConfigError::new("", format!("{origin} is not valid TOML: {message}"));
        };
        let (line, col, src) = line_col(text, span.start);
        ConfigError::new(
            "",
            format!("{origin}:{line}:{col}: not valid TOML: {message}\n  {line} | {src}\n  fix the TOML syntax there"),
        )
    })
}

/// 1-based line and column (in characters) of byte `offset` in `text`, and that line.
fn line_col(text: &str, offset: usize) -> (usize, usize, &str) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[..start].matches('\n').count() + 1;
    let col = text[start..offset].chars().count() + 1;
    (line, col, text[start..end].trim_end_matches('\r'))
}

/// Deserialize a TOML table, reporting errors with the dotted path of the offending key.
fn deserialize_with_path<T: serde::de::DeserializeOwned>(table: Table) -> Result<T, ConfigError> {
    let value = toml::Value::Table(table);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string().trim().to_string();
        ConfigError::new(if key == "." { String::new() } else { key }, msg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(sets: &[&str]) -> Result<Config, ConfigError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Config::load(None, &sets)
    }

    #[test]
    fn default_is_the_demo_cola_model() {
        let c = Config::default();
        assert_eq!(c.model.preset, "demo");
        assert_eq!(c.model.arch, Arch::Cola);
        assert_eq!(c.parallel.resolved_scheme(&c.model), Scheme::Btp);
    }

    #[test]
    fn presets_fill_unset_keys_and_sets_override() {
        let c = load(&["model.preset=cola-60m", "model.arch=full", "model.rank=64"]).unwrap();
        assert_eq!((c.model.d, c.model.d_ff, c.model.layers, c.model.heads), (512, 1376, 8, 8));
        assert_eq!(c.model.rank, 64);
        assert_eq!(c.model.arch, Arch::Full);
        assert_eq!(c.parallel.resolved_scheme(&c.model), Scheme::Megatron);
        for p in PRESETS {
            let m = ModelConfig::preset(p.name).unwrap();
            m.validate().unwrap();
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = load(&["train.stepz=3"]).unwrap_err();
        assert!(e.to_string().contains("stepz"), "{e}");
        let e = load(&["model.preset=cola-61m"]).unwrap_err();
        assert_eq!(e.key, "model.preset");
        assert!(e.message.contains("cola-60m"), "{e}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let e = load(&["train.steps=many"]).unwrap_err();
        assert_eq!(e.key, "train.steps", "{e}");
        let e = load(&["model.arch=dense"]).unwrap_err();
        assert_eq!(e.key, "model.arch", "{e}");
    }

    #[test]
    fn divisibility_errors_list_valid_choices() {
        let e = load(&["model.preset=cola-130m", "parallel.tp=8"]).unwrap_err();
        assert_eq!(e.key, "parallel.tp");
        assert!(e.message.contains("model.heads = 12"), "{e}");
        assert!(e.message.contains("{1, 2, 3, 4, 6, 12}"), "{e}");
        let e = load(&["parallel.scheme=megatron"]).unwrap_err();
        assert_eq!(e.key, "parallel.scheme");
        let e = load(&["model.heads=3"]).unwrap_err();
        assert_eq!(e.key, "model.heads");
        let e = load(&["parallel.scheme=vanilla", "parallel.tp=4", "model.rank=66"]).unwrap_err();
        assert!(e.message.contains("model.rank"), "{e}");
    }

    #[test]
    fn tp_must_divide_exactly_the_axes_the_plan_splits() {
        // BTP shards heads and features (and the hidden size); vanilla only the rank.
        let e = load(&["model.kv_heads=2", "parallel.tp=4"]).unwrap_err();
        assert!(e.message.contains("model.kv_heads = 2"), "{e}");
        load(&["model.kv_heads=2", "parallel.tp=4", "parallel.scheme=vanilla"]).unwrap();
        // LaX's crossing needs the whole latent: vanilla is refused under TP, not on one rank.
        let e = load(&["model.arch=lax", "parallel.scheme=vanilla", "parallel.tp=2"]).unwrap_err();
        assert_eq!(e.key, "parallel.scheme");
        assert!(e.message.contains("LaX"), "{e}");
        load(&["model.arch=lax", "parallel.scheme=vanilla"]).unwrap();
    }

    #[test]
    fn lowrank_recompute_needs_a_low_rank_model() {
        let e = load(&["model.arch=full", "train.recompute=lowrank"]).unwrap_err();
        assert_eq!(e.key, "train.recompute");
        load(&["model.arch=full", "train.recompute=full"]).unwrap();
        load(&["model.arch=svd", "train.recompute=lowrank"]).unwrap();
        // A pipeline without train.accumulation gets the fewest micro-batches that fill it.
        assert_eq!(load(&["model.layers=4", "parallel.pp=2"]).unwrap().train.accumulation, 2);
        assert_eq!(load(&["model.layers=4", "parallel.pp=2", "train.accumulation=3"]).unwrap().train.accumulation, 3);
        assert_eq!(load(&[]).unwrap().train.accumulation, 1);
        // Fewer micro-batches than stages: accepted (a larger bubble).
        assert_eq!(load(&["model.layers=4", "parallel.pp=2", "train.accumulation=1"]).unwrap().train.accumulation, 1);
        load(&["train.recompute=full", "train.recompute_layers=1"]).unwrap();
        let e =
            load(&["model.layers=4", "parallel.pp=2", "train.accumulation=2", "train.recompute_layers=3"]).unwrap_err();
        assert_eq!(e.key, "train.recompute_layers");
    }

    #[test]
    fn round_trips_through_toml() {
        let c = load(&["model.arch=lax", "model.lax.gate=kron", "train.schedule=wsd"]).unwrap();
        let again = Config::from_toml_str(&c.to_toml()).unwrap();
        assert_eq!(c, again);
        assert_eq!(c.model.kron_factors(), (8, 8));
    }

    #[test]
    fn outer_silu_follows_only_lr_act() {
        let mut m = ModelConfig::preset("cola-350m").unwrap();
        assert!(!m.outer_silu());
        m.arch = Arch::Svd;
        assert!(m.outer_silu());
        m.arch = Arch::Full;
        assert!(m.outer_silu());
    }
}
