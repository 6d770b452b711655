//! The dataset directory: its file names, its build record, the document split, and opening one
//! (building: [`crate::build`]; the configured dataset: [`crate::prepare`]).

use crate::loader::Loader;
use crate::mixture::{Mixture, TrainStream};
use crate::shakespeare::CorpusStats;
use crate::shard::TokenShard;
use crate::split::Subset;
use crate::tokenizer::Tokenizer;
use crate::tokens::Tokens;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub use crate::build::{
    BuildLimits, Built, DEFAULT_BPE_SAMPLE_BYTES, DEFAULT_SHARD_TOKENS, build, build_from, build_into, build_with,
};
pub use crate::entropy::unigram_entropy;
pub(crate) use crate::entropy::{count_tokens, entropy_of_counts};
pub use crate::prepare::{prepare, prepare_for_model};
pub use crate::split::split_documents;

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
    /// The token files, in stream order within each split, with their SHA-256. Empty in
    /// datasets from before this field: those hold exactly `train.bin` and `val.bin`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardFile>,
}

/// One token file of a dataset, as `meta.json` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardFile {
    /// `"train"` or `"val"`.
    pub split: String,
    /// The file name inside the dataset directory.
    pub file: String,
    /// Tokens in the file.
    pub tokens: u64,
    /// SHA-256 of the whole file (header included), lowercase hex.
    pub sha256: String,
}

impl Meta {
    /// The token files of `split` in stream order, each with the checksum to verify (none for
    /// datasets from before [`Meta::shards`]).
    pub fn files_of(&self, split: Subset) -> Vec<(String, Option<&ShardFile>)> {
        if self.shards.is_empty() {
            let legacy = if split == Subset::Train { TRAIN_BIN } else { VAL_BIN };
            return vec![(legacy.to_string(), None)];
        }
        self.shards.iter().filter(|s| s.split == split.name()).map(|s| (s.file.clone(), Some(s))).collect()
    }

    /// Every file the dataset needs: `meta.json`, `tokenizer.json` and the token files.
    pub fn required_files(&self) -> Vec<String> {
        let mut v = vec![META_JSON.to_string(), TOKENIZER_JSON.to_string()];
        for split in [Subset::Train, Subset::Val] {
            v.extend(self.files_of(split).into_iter().map(|(f, _)| f));
        }
        v
    }
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
    /// With `data.mix`: every dataset of the blend, this one (the first) included; its
    /// tokenizer and vocabulary are shared by all. Empty for a single dataset.
    pub mix: Vec<MixPart>,
}

/// One dataset of a blend (`data.mix`).
#[derive(Debug, Clone)]
pub struct MixPart {
    /// The name its validation loss and checkpoint position go under.
    pub name: String,
    /// Its share of the training sequences (not normalised).
    pub weight: f64,
    /// Its directory.
    pub dir: PathBuf,
    /// Its training tokens.
    pub train: Tokens,
    /// Its validation tokens.
    pub val: Tokens,
}

impl Dataset {
    /// Whether `dir` holds `meta.json`, `tokenizer.json` and every token file `meta.json` lists
    /// (`train.bin` and `val.bin` when it lists none, or cannot be read: opening it then says why).
    pub fn is_complete(dir: &Path) -> bool {
        let files = match read_meta(dir) {
            Ok(m) => m.required_files(),
            Err(_) => [META_JSON, TRAIN_BIN, VAL_BIN, TOKENIZER_JSON].map(String::from).to_vec(),
        };
        files.iter().all(|f| dir.join(f).is_file())
    }

    /// Opens a dataset directory and checks that its parts agree: each token file against the
    /// SHA-256 `meta.json` records for it, the shard headers against `meta.json` and the
    /// tokenizer, and every token id against the vocabulary.
    pub fn open(dir: impl AsRef<Path>) -> Result<Dataset> {
        let dir = dir.as_ref();
        let rebuild = format!("build it with `boost data --input FILE --out {}`", dir.display());
        if !dir.join(META_JSON).is_file() {
            bail!("{} is not a complete dataset: {META_JSON} missing; {rebuild}", dir.display());
        }
        let meta_path = dir.join(META_JSON);
        let meta = read_meta(dir)?;
        let missing: Vec<String> = meta.required_files().into_iter().filter(|f| !dir.join(f).is_file()).collect();
        if !missing.is_empty() {
            // Name where the list came from: a damaged meta.json can name files that never were.
            bail!(
                "{} is not a complete dataset: {} missing (as listed in {}); {rebuild}",
                dir.display(),
                missing.join(", "),
                meta_path.display()
            );
        }
        if meta.format_version != crate::shard::VERSION {
            bail!(
                "{} has format_version {}, but this build reads shard format version {}; rebuild the \
                 dataset with `boost data`",
                meta_path.display(),
                meta.format_version,
                crate::shard::VERSION
            );
        }
        let tokenizer = Tokenizer::from_file(dir.join(TOKENIZER_JSON))?;
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
        let train = open_split(dir, &meta, Subset::Train, meta.train_tokens)?;
        let val = open_split(dir, &meta, Subset::Val, meta.val_tokens)?;
        Ok(Dataset { dir: dir.to_path_buf(), train, val, tokenizer: Some(tokenizer), meta, mix: Vec::new() })
    }

    /// The shuffled, infinite training stream of `seq_len`-token sequences.
    pub fn train_loader(&self, seq_len: usize, seed: u64) -> Result<Loader> {
        Loader::new(self.train.clone(), seq_len, seed)
    }

    /// The validation windows of `seq_len` tokens (read them with [`Loader::fill_val`]).
    pub fn val_loader(&self, seq_len: usize) -> Result<Loader> {
        Loader::new(self.val.clone(), seq_len, 0)
    }

    /// The training stream: this dataset's loader, or with `data.mix` the blend of every
    /// dataset's loader (dataset `k` shuffled with `seed + k`), see [`Mixture`].
    pub fn train_stream(&self, seq_len: usize, seed: u64) -> Result<TrainStream> {
        if self.mix.is_empty() {
            return Ok(TrainStream::One(self.train_loader(seq_len, seed)?));
        }
        let parts = self
            .mix
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let l = Loader::new(p.train.clone(), seq_len, seed.wrapping_add(k as u64))
                    .with_context(|| format!("data.mix dataset \"{}\" ({})", p.name, p.dir.display()))?;
                Ok((p.name.clone(), l, p.weight))
            })
            .collect::<Result<_>>()?;
        Ok(TrainStream::Mix(Mixture::new(parts)?))
    }

    /// The validation sets, each named: `val` for a single dataset, every dataset's name with
    /// `data.mix`; with their weights (1 for a single dataset).
    pub fn val_sets(&self, seq_len: usize) -> Result<Vec<ValSet>> {
        if self.mix.is_empty() {
            return Ok(vec![ValSet { name: "val".into(), weight: 1.0, loader: self.val_loader(seq_len)? }]);
        }
        self.mix
            .iter()
            .map(|p| {
                let loader = Loader::new(p.val.clone(), seq_len, 0)
                    .with_context(|| format!("data.mix dataset \"{}\" ({})", p.name, p.dir.display()))?;
                Ok(ValSet { name: p.name.clone(), weight: p.weight, loader })
            })
            .collect()
    }
}

/// A named validation set.
#[derive(Debug)]
pub struct ValSet {
    /// `val`, or the dataset's name in `data.mix`.
    pub name: String,
    /// Its weight in the blend (1 for a single dataset).
    pub weight: f64,
    /// Its windows.
    pub loader: Loader,
}

/// Reads and parses `dir/meta.json`.
fn read_meta(dir: &Path) -> Result<Meta> {
    let meta_path = dir.join(META_JSON);
    let text = std::fs::read_to_string(&meta_path).with_context(|| format!("cannot read {}", meta_path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a valid meta.json", meta_path.display()))
}

/// Opens the token files of one split and checks each (in parallel): its checksum, its header
/// against `meta.json`, and its ids against the vocabulary; their total must be `want` tokens.
fn open_split(dir: &Path, meta: &Meta, split: Subset, want: u64) -> Result<Tokens> {
    use rayon::prelude::*;
    let meta_path = dir.join(META_JSON);
    let files = meta.files_of(split);
    let shards: Vec<TokenShard> = files
        .par_iter()
        .map(|(file, entry)| {
            let path = dir.join(file);
            if let Some(e) = entry {
                let got = boost_files::checksum::sha256_file(&path)?;
                if got != e.sha256 {
                    bail!(
                        "{} has SHA-256 {got}, but {} records {} for it: the file changed after `boost data` \
                         wrote it; restore it, or rebuild the dataset with `boost data`",
                        path.display(),
                        meta_path.display(),
                        e.sha256
                    );
                }
            }
            let sh = TokenShard::open(&path)?;
            let tokens_ok = entry.is_none_or(|e| e.tokens == sh.len() as u64);
            if sh.vocab() != meta.vocab_size || !tokens_ok {
                bail!(
                    "{} ({} tokens, vocabulary {}) disagrees with {} (vocabulary {}); rebuild the dataset \
                     with `boost data`",
                    path.display(),
                    sh.len(),
                    sh.vocab(),
                    meta_path.display(),
                    meta.vocab_size
                );
            }
            sh.check_ids()?;
            Ok(sh)
        })
        .collect::<Result<_>>()?;
    let tokens = Tokens::new(shards);
    if tokens.len() as u64 != want {
        bail!(
            "the {} files of {} hold {} tokens but {} records {want}; rebuild the dataset with `boost data`",
            split.name(),
            dir.display(),
            tokens.len(),
            meta_path.display()
        );
    }
    Ok(tokens)
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
}
