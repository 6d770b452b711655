//! Datasets in the token formats other tools write, read in place with no re-tokenization:
//! llm.c `.bin` shards ([`crate::llmc`]) and Megatron/nanotron indexed datasets
//! ([`crate::megatron`]). `data.format` names the layout of `data.dir`, or `auto` detects it.
//!
//! Files whose names contain `train` are the training split, those containing `val` the
//! validation split, each read end to end in file-name order as one stream ([`Tokens`]). With no
//! `tokenizer.json` in the directory nothing records the vocabulary, so `model.vocab` must give
//! it; every id is checked against it when the dataset is opened.

use crate::dataset::{Dataset, META_JSON, Meta, TOKENIZER_JSON};
use crate::shard::TokenShard;
use crate::tokenizer::Tokenizer;
use crate::tokens::Tokens;
use crate::{llmc, megatron};
use anyhow::{Result, bail};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// A dataset layout other than `boost data`'s own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// llm.c `.bin` shards.
    Llmc,
    /// Megatron/nanotron `.bin` + `.idx` pairs.
    Megatron,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Llmc => "llmc",
            Format::Megatron => "megatron",
        }
    }
}

/// Sorted files of `dir` whose extension is `ext`.
fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The foreign format `data.dir` is read as, or `None` for `boost data`'s layout: the one
/// `data.format` names, or with `auto` the one its files show (a `meta.json` means BOOST, an
/// `.idx` Megatron, a `.bin` with llm.c's magic llm.c).
pub fn resolve(format: &str, dir: &Path) -> Result<Option<Format>> {
    Ok(match format {
        "boost" => None,
        "llmc" => Some(Format::Llmc),
        "megatron" => Some(Format::Megatron),
        "auto" if dir.join(META_JSON).is_file() => None,
        "auto" if !files_with(dir, "idx").is_empty() => Some(Format::Megatron),
        "auto" if files_with(dir, "bin").iter().any(|p| llmc::looks_like(p)) => Some(Format::Llmc),
        "auto" => None,
        other => bail!("data.format = \"{other}\" is not a format; use auto, boost, llmc or megatron"),
    })
}

/// Splits the data files of `dir` into (train, val) by name.
fn split_names(dir: &Path, files: Vec<PathBuf>, fmt: Format) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for f in files {
        let name = f.file_name().unwrap_or_default().to_string_lossy().to_lowercase();
        match (name.contains("train"), name.contains("val")) {
            (true, false) => train.push(f),
            (false, true) => val.push(f),
            _ => bail!(
                "{} is read as data.format = \"{}\" but its name says neither train nor val (or both); \
                 name training files *train* and validation files *val*, or move it out of data.dir",
                f.display(),
                fmt.name()
            ),
        }
    }
    if train.is_empty() || val.is_empty() {
        let missing = if train.is_empty() { "training (*train*)" } else { "validation (*val*)" };
        bail!(
            "data.dir = {} is read as data.format = \"{}\" but holds no {missing} files; a run needs both \
             splits",
            dir.display(),
            fmt.name()
        );
    }
    Ok((train, val))
}

/// Where an id at or above the vocabulary is: its shard, byte offset and value.
#[derive(Clone)]
struct Outside {
    id: u32,
    path: PathBuf,
    offset: usize,
}

/// Counts of each id below `vocab` over some shards, and the first id at or above it (in shard
/// order) and the largest (its first place): naming only the first made a user raise
/// `model.vocab` once per bad id.
type Histogram = (Vec<u64>, Option<(Outside, Outside)>);

/// The [`Histogram`] of one shard.
fn histogram(shard: &TokenShard, vocab: u32) -> Histogram {
    let mut counts = vec![0u64; vocab as usize];
    let mut bad: Option<(Outside, Outside)> = None;
    let mut buf = vec![0u32; 1 << 16];
    let mut start = 0;
    while start < shard.len() {
        let n = buf.len().min(shard.len() - start);
        shard.read(start, &mut buf[..n]);
        for (k, &t) in buf[..n].iter().enumerate() {
            match counts.get_mut(t as usize) {
                Some(c) => *c += 1,
                None => {
                    let at = || Outside {
                        id: t,
                        path: shard.path().to_path_buf(),
                        offset: shard.body_offset() + (start + k) * shard.width() as usize,
                    };
                    match &mut bad {
                        None => bad = Some((at(), at())),
                        Some((_, top)) if t > top.id => *top = at(),
                        Some(_) => {}
                    }
                }
            }
        }
        start += n;
    }
    (counts, bad)
}

/// Two histograms of consecutive shards as one (the earlier's first, the larger's largest).
fn merge(mut a: Histogram, b: Histogram) -> Histogram {
    a.0.iter_mut().zip(&b.0).for_each(|(x, y)| *x += y);
    a.1 = match (a.1, b.1) {
        (Some((first, top)), Some((_, other))) => Some((first, if other.id > top.id { other } else { top })),
        (x, y) => x.or(y),
    };
    a
}

/// Fails naming the first id at or above `vocab`, and the largest, with the `model.vocab` that
/// holds them all.
fn check_ids(bad: Option<(Outside, Outside)>, vocab: u32, key: &str) -> Result<()> {
    let Some((first, top)) = bad else { return Ok(()) };
    let largest = if top.id == first.id {
        String::new()
    } else {
        format!("; the largest id is {} ({} at byte offset {})", top.id, top.path.display(), top.offset)
    };
    bail!(
        "{} holds token id {} at byte offset {}, not below the vocabulary size {vocab} of {key}{largest}; \
         set model.vocab to at least {}",
        first.path.display(),
        first.id,
        first.offset,
        top.id as u64 + 1
    )
}

fn entropy(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 / n as f64).map(|p| -p * p.ln()).sum()
}

/// Opens `dir` as `fmt`; `model_vocab` is `model.vocab` (0: take it from a `tokenizer.json`
/// in `dir`, else fail).
pub fn open(dir: &Path, fmt: Format, model_vocab: usize) -> Result<Dataset> {
    if !dir.is_dir() {
        bail!("data.dir = {} is not a directory (data.format = \"{}\")", dir.display(), fmt.name());
    }
    let tok_path = dir.join(TOKENIZER_JSON);
    let tokenizer = if tok_path.is_file() { Some(Tokenizer::from_file(&tok_path)?) } else { None };
    let (vocab, key) = match (model_vocab, &tokenizer) {
        (v, _) if v > 0 => (v, "model.vocab".to_string()),
        (_, Some(t)) => (t.vocab_size(), tok_path.display().to_string()),
        (_, None) => bail!(
            "data.dir = {} holds {} token files and no tokenizer.json, so nothing says the vocabulary size: \
             set model.vocab (e.g. --set model.vocab=50257 for GPT-2 tokens)",
            dir.display(),
            fmt.name()
        ),
    };
    let vocab = u32::try_from(vocab).map_err(|_| anyhow::anyhow!("model.vocab = {vocab} is too large"))?;
    let (train_files, val_files, documents) = match fmt {
        Format::Llmc => {
            let (t, v) = split_names(dir, files_with(dir, "bin"), fmt)?;
            let open = |fs: &[PathBuf]| fs.iter().map(|f| llmc::open(f)).collect::<Result<Vec<_>>>();
            (open(&t)?, open(&v)?, None)
        }
        Format::Megatron => {
            let idx = files_with(dir, "idx");
            let (t, v) = split_names(dir, idx, fmt)?;
            let open =
                |fs: &[PathBuf]| fs.iter().map(|f| megatron::open(&f.with_extension(""))).collect::<Result<Vec<_>>>();
            let (t, v) = (open(&t)?, open(&v)?);
            let docs = |x: &[megatron::Indexed]| x.iter().map(|i| i.documents as usize).sum::<usize>();
            let d = (docs(&t), docs(&v));
            (t.into_iter().map(|i| i.tokens).collect(), v.into_iter().map(|i| i.tokens).collect(), Some(d))
        }
    };
    let with_vocab = |v: Vec<TokenShard>| v.into_iter().map(|s| s.with_vocab(vocab)).collect::<Vec<_>>();
    let (train_files, val_files) = (with_vocab(train_files), with_vocab(val_files));
    // Every id is checked (in parallel over files); the training counts give the entropy.
    let hist = |fs: &[TokenShard]| -> Histogram {
        fs.par_iter().map(|s| histogram(s, vocab)).reduce(|| (vec![0u64; vocab as usize], None), merge)
    };
    let ((train_counts, train_bad), (val_counts, val_bad)) = rayon::join(|| hist(&train_files), || hist(&val_files));
    check_ids(merge((Vec::new(), train_bad), (Vec::new(), val_bad)).1, vocab, &key)?;
    let eos_id = match (&tokenizer, fmt) {
        (Some(t), _) => t.eos_id(),
        (None, Format::Llmc) if llmc::GPT2_EOT < vocab => llmc::GPT2_EOT,
        (None, _) => 0,
    };
    // llm.c puts the end-of-text token before each document; Megatron's index counts them.
    let (train_documents, val_documents) = documents.unwrap_or_else(|| {
        let at = |c: &[u64]| c.get(eos_id as usize).copied().unwrap_or(0) as usize;
        (at(&train_counts), at(&val_counts))
    });
    let h = entropy(&train_counts);
    let names = |fs: &[TokenShard]| fs.iter().map(|s| s.path().display().to_string()).collect::<Vec<_>>();
    let mut sources = names(&train_files);
    sources.extend(names(&val_files));
    let (train, val) = (Tokens::new(train_files), Tokens::new(val_files));
    let meta = Meta {
        format_version: crate::shard::VERSION,
        tokenizer: match &tokenizer {
            Some(_) => tok_path.display().to_string(),
            None => "none".into(),
        },
        vocab_size: tokenizer.as_ref().map_or(vocab, |t| t.vocab_size() as u32),
        eos_id,
        train_tokens: train.len() as u64,
        val_tokens: val.len() as u64,
        train_documents,
        val_documents,
        val_fraction: val_documents as f64 / (train_documents + val_documents).max(1) as f64,
        split_seed: 0,
        sources,
        unigram_entropy_nats: h,
        unigram_entropy_bits: h / std::f64::consts::LN_2,
        corpus: None,
        shards: Vec::new(),
    };
    Ok(Dataset { dir: dir.to_path_buf(), train, val, tokenizer, meta, mix: Vec::new() })
}
