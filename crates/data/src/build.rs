//! Building a dataset directory: split, tokenize, write shards, rename into place.

use crate::dataset::{BuildOptions, META_JSON, Meta, TOKENIZER_JSON, TRAIN_BIN, TokenizerChoice, VAL_BIN};
use crate::dataset::{split_documents, unigram_entropy};
use crate::input::Document;
use crate::output::OutputGuard;
use crate::progress::Spinner;
use crate::sample::sample_documents;
use crate::shard::{self, write_shard};
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use std::path::Path;
use std::time::Instant;

/// The default of [`BuildLimits::bpe_sample_bytes`] (and of `boost data --bpe-sample-bytes`).
pub const DEFAULT_BPE_SAMPLE_BYTES: usize = 64 << 20;

/// Bounds on the work of a build, so that it finishes in predictable time on any input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildLimits {
    /// The byte-level BPE is trained on a deterministic sample of at most this many bytes of the
    /// training documents ([`sample_documents`]); 0 means all of them.
    pub bpe_sample_bytes: usize,
}

impl Default for BuildLimits {
    fn default() -> Self {
        BuildLimits { bpe_sample_bytes: DEFAULT_BPE_SAMPLE_BYTES }
    }
}

/// Builds a dataset in `out_dir` from `docs` with the default [`BuildLimits`]; see [`build_with`].
pub fn build(docs: &[Document], opts: &BuildOptions, out_dir: &Path) -> Result<Meta> {
    build_with(docs, opts, &BuildLimits::default(), out_dir)
}

/// Builds a dataset in `out_dir`, which must not exist or be empty: an existing dataset or any
/// other file there is never replaced (the error names the directory and what it holds). The
/// output is locked while building; a second build of the same directory fails naming the PID.
pub fn build_with(docs: &[Document], opts: &BuildOptions, limits: &BuildLimits, out_dir: &Path) -> Result<Meta> {
    let guard = OutputGuard::acquire(out_dir, &[])?;
    build_into(docs, opts, limits, &guard)
}

/// Builds a dataset into the directory `guard` holds: splits the documents, trains or loads the
/// tokenizer (a BPE is trained on a sample of the training documents only), tokenizes (every
/// document is followed by the end-of-text token), and writes `train.bin`, `val.bin`,
/// `tokenizer.json` and `meta.json`.
///
/// Everything is written to a temporary directory next to the output first and renamed onto it
/// once complete, so the output is either absent (or as it was) or a complete dataset. Progress
/// goes to stderr.
pub fn build_into(docs: &[Document], opts: &BuildOptions, limits: &BuildLimits, guard: &OutputGuard) -> Result<Meta> {
    let out_dir = guard.out();
    let t0 = Instant::now();
    let (train_idx, val_idx) = split_documents(docs.len(), opts.val_fraction, opts.seed)?;
    let train_docs: Vec<&str> = train_idx.iter().map(|&i| docs[i].text.as_str()).collect();
    let val_docs: Vec<&str> = val_idx.iter().map(|&i| docs[i].text.as_str()).collect();
    eprintln!(
        "data: {} documents: {} train, {} validation (seed {})",
        docs.len(),
        train_docs.len(),
        val_docs.len(),
        opts.seed
    );
    if val_idx.len() <= 10 {
        let names: Vec<&str> = val_idx.iter().map(|&i| docs[i].name.as_str()).collect();
        eprintln!("data: validation documents: {}", names.join(", "));
    }

    let (tokenizer, kind) = match &opts.tokenizer {
        TokenizerChoice::Bpe => {
            let t = Instant::now();
            let bytes: usize = train_docs.iter().map(|d| d.len()).sum();
            let sample = sample_documents(&train_docs, limits.bpe_sample_bytes, opts.seed);
            let sampled: usize = sample.iter().map(|d| d.len()).sum();
            if sampled < bytes {
                eprintln!(
                    "data: training a byte-level BPE of {} entries on a sample of {sampled} of {bytes} bytes \
                     (--bpe-sample-bytes {})",
                    opts.vocab_size, limits.bpe_sample_bytes
                );
            } else {
                eprintln!("data: training a byte-level BPE of {} entries on {bytes} bytes", opts.vocab_size);
            }
            let spinner = Spinner::new("training the byte-level BPE");
            let tok = Tokenizer::train_bpe(&sample, opts.vocab_size)?;
            drop(spinner);
            eprintln!("data: trained the BPE in {:.1} s (vocabulary {})", t.elapsed().as_secs_f64(), tok.vocab_size());
            (tok, "bpe".to_string())
        }
        TokenizerChoice::File(p) => (Tokenizer::from_file(p)?, p.display().to_string()),
    };
    let vocab = u32::try_from(tokenizer.vocab_size()).context("vocabulary larger than u32")?;

    let t = Instant::now();
    let spinner = Spinner::new("tokenizing");
    let train = tokenizer.encode_docs(&train_docs)?;
    let val = tokenizer.encode_docs(&val_docs)?;
    drop(spinner);
    eprintln!(
        "data: tokenized into {} train and {} validation tokens in {:.1} s",
        train.len(),
        val.len(),
        t.elapsed().as_secs_f64()
    );
    let h = unigram_entropy(&train, vocab as usize);
    let meta = Meta {
        format_version: shard::VERSION,
        tokenizer: kind,
        vocab_size: vocab,
        eos_id: tokenizer.eos_id(),
        train_tokens: train.len() as u64,
        val_tokens: val.len() as u64,
        train_documents: train_docs.len(),
        val_documents: val_docs.len(),
        val_fraction: opts.val_fraction,
        split_seed: opts.seed,
        sources: opts.sources.clone(),
        unigram_entropy_nats: h,
        unigram_entropy_bits: h / std::f64::consts::LN_2,
        corpus: opts.corpus.clone(),
    };

    let tmp = guard.temp_dir().with_context(|| format!("cannot write the dataset {}", out_dir.display()))?;
    let write = || -> Result<()> {
        write_shard(&tmp.path().join(TRAIN_BIN), &train, vocab)?;
        write_shard(&tmp.path().join(VAL_BIN), &val, vocab)?;
        tokenizer.save(tmp.path().join(TOKENIZER_JSON))?;
        let json = serde_json::to_string_pretty(&meta)? + "\n";
        let meta_path = tmp.path().join(META_JSON);
        std::fs::write(&meta_path, json).with_context(|| format!("cannot write {}", meta_path.display()))
    };
    write().with_context(|| {
        format!(
            "cannot write the dataset {} (nothing was changed there; the partial build was removed)",
            out_dir.display()
        )
    })?;
    guard.commit(tmp)?;
    eprintln!("data: wrote {} in {:.1} s", out_dir.display(), t0.elapsed().as_secs_f64());
    Ok(meta)
}
