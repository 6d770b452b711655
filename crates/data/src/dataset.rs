//! The dataset directory: its file names, its build record, the document split, and opening one
//! (building: [`crate::build`]; the configured dataset: [`crate::prepare`]).

use crate::loader::{Loader, fisher_yates, keyed_rng};
use crate::shakespeare::CorpusStats;
use crate::shard::Shard;
use crate::tokenizer::Tokenizer;
use crate::tokens::Tokens;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use crate::build::{BuildLimits, DEFAULT_BPE_SAMPLE_BYTES, build, build_into, build_with};
pub use crate::prepare::{prepare, prepare_for_model};

/// File names inside a dataset directory.
pub const TRAIN_BIN: &str = "train.bin";
/// Validation shard.
pub const VAL_BIN: &str = "val.bin";
/// The tokenizer, as a Hugging Face `tokenizer.json`.
pub const TOKENIZER_JSON: &str = "tokenizer.json";
/// Build record; written last, so its presence marks a complete dataset.
pub const META_JSON: &str = "meta.json";

/// Which tokenizer a build uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerChoice {
    /// Train a byte-level BPE on the training documents.
    Bpe,
    /// Load this Hugging Face `tokenizer.json`.
    File(PathBuf),
}

impl TokenizerChoice {
    /// `"bpe"` means [`TokenizerChoice::Bpe`]; anything else is a path to a `tokenizer.json`.
    pub fn parse(s: &str) -> TokenizerChoice {
        if s == "bpe" { TokenizerChoice::Bpe } else { TokenizerChoice::File(PathBuf::from(s)) }
    }
}

/// Settings of [`build`].
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The tokenizer to train or load.
    pub tokenizer: TokenizerChoice,
    /// Vocabulary size of a trained BPE (ignored for a loaded tokenizer).
    pub vocab_size: usize,
    /// Fraction of documents held out for validation (at least one document either side).
    pub val_fraction: f64,
    /// Seed of the document split.
    pub seed: u64,
    /// Names of the inputs, recorded in `meta.json`.
    pub sources: Vec<String>,
    /// Statistics of a built-in corpus, recorded in `meta.json`.
    pub corpus: Option<CorpusStats>,
}

/// The contents of `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Shard format version of `train.bin` and `val.bin`.
    pub format_version: u32,
    /// `"bpe"` for a trained byte-level BPE, else the path the tokenizer was loaded from.
    pub tokenizer: String,
    /// Vocabulary size (one more than the largest id); the model's embedding needs this many rows.
    pub vocab_size: u32,
    /// Id of the end-of-text token that follows every document.
    pub eos_id: u32,
    /// Tokens in `train.bin`.
    pub train_tokens: u64,
    /// Tokens in `val.bin`.
    pub val_tokens: u64,
    /// Documents in the training split.
    pub train_documents: usize,
    /// Documents in the validation split.
    pub val_documents: usize,
    /// Requested fraction of validation documents.
    pub val_fraction: f64,
    /// Seed of the document split.
    pub split_seed: u64,
    /// The inputs the dataset was built from.
    pub sources: Vec<String>,
    /// Entropy of the unigram distribution of the training tokens, in nats: the loss of a model
    /// that predicts token frequencies and ignores context.
    pub unigram_entropy_nats: f64,
    /// The same entropy in bits.
    pub unigram_entropy_bits: f64,
    /// Statistics of a built-in corpus (download, deduplication).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus: Option<CorpusStats>,
}

/// Splits documents `0..n_docs` into (train, validation) index lists, each in ascending order.
///
/// `round(val_fraction · n)` documents, clamped to `1..=n-1`, go to validation: the first ones of
/// a Fisher–Yates shuffle driven by ChaCha8 keyed by `seed ‖ 0 ‖ "BOOST-split"`. Fails with fewer
/// than 2 documents.
pub fn split_documents(n_docs: usize, val_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    if n_docs < 2 {
        bail!(
            "the corpus has {n_docs} document(s); a train/validation split needs at least 2 \
             (each text file is one document, each JSONL line one document)"
        );
    }
    if !(val_fraction > 0.0 && val_fraction < 1.0) {
        bail!("data.val_fraction must lie strictly between 0 and 1, got {val_fraction}");
    }
    let n_val = ((val_fraction * n_docs as f64).round() as usize).clamp(1, n_docs - 1);
    let mut order: Vec<usize> = (0..n_docs).collect();
    fisher_yates(&mut order, &mut keyed_rng(seed, 0, b"BOOST-split\0\0\0\0\0"));
    let mut val = order[..n_val].to_vec();
    let mut train = order[n_val..].to_vec();
    val.sort_unstable();
    train.sort_unstable();
    Ok((train, val))
}

/// Entropy in nats of the token frequencies: `-Σ p ln p`.
pub fn unigram_entropy(tokens: &[u32], vocab: usize) -> f64 {
    if tokens.is_empty() {
        return 0.0;
    }
    let mut counts = vec![0u64; vocab.max(1)];
    for &t in tokens {
        let t = t as usize;
        if t >= counts.len() {
            counts.resize(t + 1, 0);
        }
        counts[t] += 1;
    }
    let n = tokens.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

/// An opened dataset directory.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The directory.
    pub dir: PathBuf,
    /// Training tokens: one shard, or several read end to end.
    pub train: Tokens,
    /// Validation tokens.
    pub val: Tokens,
    /// The tokenizer the shards were made with; `None` for token files that come without one
    /// ([`crate::foreign`]).
    pub tokenizer: Option<Tokenizer>,
    /// The build record (for token files of other tools, what their headers and ids say).
    pub meta: Meta,
}

impl Dataset {
    /// Whether `dir` holds `meta.json`, both shards and `tokenizer.json`.
    pub fn is_complete(dir: &Path) -> bool {
        [META_JSON, TRAIN_BIN, VAL_BIN, TOKENIZER_JSON].iter().all(|f| dir.join(f).is_file())
    }

    /// Opens a dataset directory and checks that its parts agree: the shard headers against
    /// `meta.json` and the tokenizer, and every token id against the vocabulary.
    pub fn open(dir: impl AsRef<Path>) -> Result<Dataset> {
        let dir = dir.as_ref();
        let missing: Vec<&str> =
            [META_JSON, TRAIN_BIN, VAL_BIN, TOKENIZER_JSON].into_iter().filter(|f| !dir.join(f).is_file()).collect();
        if !missing.is_empty() {
            bail!(
                "{} is not a complete dataset: {} missing; build it with `boost data --input FILE --out {}`",
                dir.display(),
                missing.join(", "),
                dir.display()
            );
        }
        let meta_path = dir.join(META_JSON);
        let text =
            std::fs::read_to_string(&meta_path).with_context(|| format!("cannot read {}", meta_path.display()))?;
        let meta: Meta =
            serde_json::from_str(&text).with_context(|| format!("{} is not a valid meta.json", meta_path.display()))?;
        if meta.format_version != crate::shard::VERSION {
            bail!(
                "{} has format_version {}, but this build reads shard format version {}; rebuild the \
                 dataset with `boost data`",
                meta_path.display(),
                meta.format_version,
                crate::shard::VERSION
            );
        }
        let train = Shard::open(dir.join(TRAIN_BIN))?;
        let val = Shard::open(dir.join(VAL_BIN))?;
        let tokenizer = Tokenizer::from_file(dir.join(TOKENIZER_JSON))?;
        for (sh, want) in [(&train, meta.train_tokens), (&val, meta.val_tokens)] {
            if sh.vocab() != meta.vocab_size || sh.len() as u64 != want {
                bail!(
                    "{} ({} tokens, vocabulary {}) disagrees with {} ({want} tokens, vocabulary {}); \
                     rebuild the dataset with `boost data`",
                    sh.path().display(),
                    sh.len(),
                    sh.vocab(),
                    meta_path.display(),
                    meta.vocab_size
                );
            }
        }
        if tokenizer.vocab_size() as u32 != meta.vocab_size || tokenizer.eos_id() != meta.eos_id {
            bail!(
                "{} (vocabulary {}, end-of-text id {}) disagrees with {} (vocabulary {}, end-of-text id {}); \
                 rebuild the dataset with `boost data`",
                dir.join(TOKENIZER_JSON).display(),
                tokenizer.vocab_size(),
                tokenizer.eos_id(),
                meta_path.display(),
                meta.vocab_size,
                meta.eos_id
            );
        }
        let (a, b) = rayon::join(|| train.check_ids(), || val.check_ids());
        a?;
        b?;
        Ok(Dataset { dir: dir.to_path_buf(), train: train.into(), val: val.into(), tokenizer: Some(tokenizer), meta })
    }

    /// The shuffled, infinite training stream of `seq_len`-token sequences.
    pub fn train_loader(&self, seq_len: usize, seed: u64) -> Result<Loader> {
        Loader::new(self.train.clone(), seq_len, seed)
    }

    /// The validation windows of `seq_len` tokens (read them with [`Loader::fill_val`]).
    pub fn val_loader(&self, seq_len: usize) -> Result<Loader> {
        Loader::new(self.val.clone(), seq_len, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_deterministic_and_covers_everything() {
        let (t1, v1) = split_documents(100, 0.05, 1234).unwrap();
        let (t2, v2) = split_documents(100, 0.05, 1234).unwrap();
        assert_eq!((&t1, &v1), (&t2, &v2));
        assert_eq!(v1.len(), 5);
        assert_eq!(t1.len(), 95);
        let mut all: Vec<usize> = t1.iter().chain(&v1).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        let (_, v3) = split_documents(100, 0.05, 1235).unwrap();
        assert_ne!(v1, v3);
        // at least one document either side
        let (t, v) = split_documents(2, 0.01, 1).unwrap();
        assert_eq!((t.len(), v.len()), (1, 1));
        let (t, v) = split_documents(3, 0.99, 1).unwrap();
        assert_eq!((t.len(), v.len()), (1, 2));
        let e = split_documents(1, 0.5, 1).unwrap_err().to_string();
        assert!(e.contains("at least 2"), "{e}");
    }

    #[test]
    fn entropy_of_uniform_and_constant() {
        assert_eq!(unigram_entropy(&[3, 3, 3], 4), 0.0);
        let h = unigram_entropy(&[0, 1, 2, 3], 4);
        assert!((h - 4f64.ln()).abs() < 1e-12);
    }
}
