//! Building a dataset directory from a stream of documents, in bounded memory:
//!
//! 1. count the documents (a cheap pass), so the split can be exact;
//! 2. for a trained BPE, a pass that keeps a bounded sample of the training documents
//!    ([`Sampler`]) and trains on it;
//! 3. a pass that tokenizes and writes the shards ([`tokenize`]);
//!
//! then `tokenizer.json` and `meta.json` (with each shard's SHA-256), all in a temporary
//! directory renamed into place at the end.

mod tokenize;

use crate::dataset::{BuildOptions, META_JSON, Meta, TOKENIZER_JSON, TokenizerChoice, entropy_of_counts};
use crate::input::Document;
use crate::output::OutputGuard;
use crate::progress::{ByteProgress, Spinner};
use crate::sample::Sampler;
use crate::shard;
use crate::source::Source;
use crate::split::{Splitter, Subset};
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The default of [`BuildLimits::bpe_sample_bytes`] (and of `boost data --bpe-sample-bytes`).
pub const DEFAULT_BPE_SAMPLE_BYTES: usize = 64 << 20;
/// The default of [`BuildLimits::shard_tokens`] (and of `boost data --shard-tokens`).
pub const DEFAULT_SHARD_TOKENS: u64 = 100_000_000;

/// Bounds on the work and the files of a build, so that it finishes in predictable time and
/// memory on any input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildLimits {
    /// The byte-level BPE is trained on a deterministic sample of at most this many bytes of the
    /// training documents ([`crate::sample`]); 0 means all of them.
    pub bpe_sample_bytes: usize,
    /// Each token file holds at most this many tokens; a split that needs more is written as
    /// `train-000000.bin`, `train-000001.bin`, ….
    pub shard_tokens: u64,
}

impl Default for BuildLimits {
    fn default() -> Self {
        BuildLimits { bpe_sample_bytes: DEFAULT_BPE_SAMPLE_BYTES, shard_tokens: DEFAULT_SHARD_TOKENS }
    }
}

/// What a build did, beyond its `meta.json`.
#[derive(Debug, Clone)]
pub struct Built {
    /// The build record written to `meta.json`.
    pub meta: Meta,
    /// Documents read.
    pub documents: u64,
    /// Bytes of input read per pass (compressed files count as stored).
    pub input_bytes: u64,
    /// Wall time of the build in seconds.
    pub seconds: f64,
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

/// [`build_from`] over documents in memory, returning the build record.
pub fn build_into(docs: &[Document], opts: &BuildOptions, limits: &BuildLimits, guard: &OutputGuard) -> Result<Meta> {
    Ok(build_from(docs, opts, limits, guard)?.meta)
}

/// Builds a dataset into the directory `guard` holds, streaming `src`: splits the documents,
/// trains or loads the tokenizer (a BPE is trained on a sample of the training documents only),
/// tokenizes (every document is followed by the end-of-text token), and writes the token shards,
/// `tokenizer.json` and `meta.json`.
///
/// Everything is written to a temporary directory next to the output first and renamed onto it
/// once complete, so the output is either absent (or as it was) or a complete dataset. Progress
/// goes to stderr.
pub fn build_from<S: Source + ?Sized>(
    src: &S,
    opts: &BuildOptions,
    limits: &BuildLimits,
    guard: &OutputGuard,
) -> Result<Built> {
    let out_dir = guard.out();
    let t0 = Instant::now();
    let n_docs = {
        let _s = Spinner::new("counting documents");
        src.count_documents()?
    };
    let splitter = Splitter::new(n_docs, opts.val_fraction, opts.seed)?;
    let n_val = splitter.val_count();
    eprintln!("data: {n_docs} documents: {} train, {n_val} validation (seed {})", n_docs - n_val, opts.seed);

    let (tokenizer, kind) = match &opts.tokenizer {
        TokenizerChoice::Bpe => (train_bpe(src, n_docs, opts, limits)?, "bpe".to_string()),
        TokenizerChoice::File(p) => (Tokenizer::from_file(p)?, p.display().to_string()),
    };
    let vocab = u32::try_from(tokenizer.vocab_size()).context("vocabulary larger than u32")?;

    let tmp = guard.temp_dir().with_context(|| format!("cannot write the dataset {}", out_dir.display()))?;
    let t = Instant::now();
    let splitter = Splitter::new(n_docs, opts.val_fraction, opts.seed)?;
    let done = tokenize::tokenize(src, splitter, n_docs, &tokenizer, tmp.path(), limits.shard_tokens)
        .with_context(|| format!("cannot build the dataset {} (nothing was changed there)", out_dir.display()))?;
    if done.val_names.len() <= tokenize::VAL_NAMES_SHOWN {
        eprintln!("data: validation documents: {}", done.val_names.join(", "));
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "data: tokenized into {} train and {} validation tokens ({} + {} files) in {secs:.1} s ({:.1} MB/s)",
        done.train_tokens,
        done.val_tokens,
        done.train.len(),
        done.val.len(),
        src.total_bytes() as f64 / 1e6 / secs.max(1e-9)
    );
    let h = entropy_of_counts(&done.counts);
    let meta = Meta {
        format_version: shard::VERSION,
        tokenizer: kind,
        vocab_size: vocab,
        eos_id: tokenizer.eos_id(),
        train_tokens: done.train_tokens,
        val_tokens: done.val_tokens,
        train_documents: done.train_documents as usize,
        val_documents: done.val_documents as usize,
        val_fraction: opts.val_fraction,
        split_seed: opts.seed,
        sources: opts.sources.clone(),
        unigram_entropy_nats: h,
        unigram_entropy_bits: h / std::f64::consts::LN_2,
        corpus: opts.corpus.clone(),
        shards: done.train.into_iter().chain(done.val).collect(),
    };
    let write = || -> Result<()> {
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
    let seconds = t0.elapsed().as_secs_f64();
    eprintln!("data: wrote {} in {seconds:.1} s", out_dir.display());
    Ok(Built { meta, documents: n_docs, input_bytes: src.total_bytes(), seconds })
}

/// Trains the byte-level BPE on a bounded sample of the training documents of `src`.
fn train_bpe<S: Source + ?Sized>(src: &S, n_docs: u64, opts: &BuildOptions, limits: &BuildLimits) -> Result<Tokenizer> {
    let t = Instant::now();
    let mut splitter = Splitter::new(n_docs, opts.val_fraction, opts.seed)?;
    let mut sampler = Sampler::new(limits.bpe_sample_bytes, opts.seed);
    let read = AtomicU64::new(0);
    let mut progress = ByteProgress::new("sampling for the BPE", src.total_bytes());
    let mut index = 0u64;
    src.for_each(&read, &mut |doc| {
        if index == n_docs {
            bail!("the inputs changed while being read: counted {n_docs} documents, then found more");
        }
        if splitter.next_split() == Subset::Train {
            sampler.offer(index, &doc.text);
        }
        index += 1;
        progress.update(read.load(Ordering::Relaxed), || format!("{index} documents"));
        Ok(())
    })?;
    drop(progress);
    let bytes = sampler.offered_bytes();
    let sample = sampler.finish();
    let sampled: usize = sample.iter().map(String::len).sum();
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
    Ok(tok)
}
