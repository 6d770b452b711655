//! Training data for BOOST: token shards, tokenizers, corpora, and the loader.
//!
//! # Dataset directory
//!
//! `boost data` (module [`job`]) and [`prepare`] produce a directory holding
//!
//! - `train.bin`, `val.bin`: token shards (format below); a split larger than
//!   [`BuildLimits::shard_tokens`] is `train-000000.bin`, `train-000001.bin`, … instead;
//! - `tokenizer.json`: the Hugging Face tokenizer the shards were made with;
//! - `meta.json`: the build record ([`Meta`]): token and document counts, vocabulary size,
//!   end-of-text id, tokenizer kind, sources, split seed, and the unigram entropy of the training
//!   tokens in nats and bits (the loss of a context-free model: the loss to beat), and every token
//!   file with its SHA-256, checked when the dataset is opened.
//!
//! A build streams its inputs ([`Inputs`], [`Source`]) in bounded memory: a counting pass, a
//! sampling pass for a trained BPE, and a tokenizing pass (see the `build` module).
//!
//! The documents are split train/validation at document level, deterministically from the seed
//! and exactly, one document at a time ([`Splitter`]). Each document's tokens are followed by the end-of-text token
//! `<|endoftext|>`, so the shards are the documents joined with it as separator (plus one at the
//! end). A trained tokenizer is a byte-level BPE ([`Tokenizer::train_bpe`]) learned on the
//! training documents only.
//!
//! A build never replaces anything: the output must not exist or be empty, is locked while
//! building ([`OutputGuard`]: a lock file with the PID beside it), and is written into a
//! temporary directory beside it that is renamed into place when complete. [`prepare`] builds the
//! demo corpus only into a missing or empty `data.dir`. A trained BPE learns from a bounded,
//! deterministic sample ([`sample::sample_documents`], [`BuildLimits`]) with pre-tokens cut to
//! [`tokenizer::MAX_WORD_BYTES`], so its training time is bounded on any text.
//!
//! # Token shard format, version 1
//!
//! A shard is a 32-byte header followed by the tokens; all integers are little-endian.
//!
//! | offset | size | field                                                      |
//! |-------:|-----:|------------------------------------------------------------|
//! |      0 |    8 | magic `b"BOOSTTOK"`                                         |
//! |      8 |    4 | `u32` version = 1                                           |
//! |     12 |    4 | `u32` token width in bytes: 2 (`u16` ids) or 4 (`u32` ids)  |
//! |     16 |    8 | `u64` token count N                                         |
//! |     24 |    4 | `u32` vocabulary size V (every id is below V)               |
//! |     28 |    4 | `u32` reserved = 0                                          |
//! |     32 |  N·W | the tokens, each W bytes                                    |
//!
//! The width is 2 whenever `V <= 65536`, else 4. The file length is exactly `32 + N·W`; a reader
//! rejects anything else (a truncated or padded file), a wrong magic or version, and a width
//! other than 2 or 4. Writers write a temporary file in the same directory and rename it into
//! place, so a shard is never seen half written. [`TokenShard`] reads shards through a memory map.
//!
//! # Token files of other tools
//!
//! [`foreign`] reads llm.c `.bin` shards ([`llmc`]) and Megatron/nanotron `.bin` + `.idx`
//! indexed datasets ([`megatron`]) in place, as `data.format` says (or detects): `*train*` files
//! are the training stream, `*val*` the validation one, each several files read end to end
//! ([`Tokens`]). Their vocabulary comes from `model.vocab` ([`prepare_for_model`]).
//!
//! # Loader
//!
//! [`Loader`] cuts a token stream (one shard or several, [`Tokens`]) into windows of `S + 1` tokens overlapping by one and serves an
//! infinite, seeded, epoch-wise shuffled stream of them by position, so a checkpoint needs only
//! the number of sequences consumed; see the [`loader`] module.
//!
//! User guide: `docs/guide/data.md`.

mod build;
pub mod dataset;
mod entropy;
pub mod foreign;
pub mod input;
pub mod job;
pub mod llmc;
pub mod loader;
pub mod megatron;
pub mod mixture;
pub mod output;
mod prepare;
mod progress;
pub mod sample;
pub mod shakespeare;
pub mod shard;
mod shard_writer;
pub mod source;
pub mod split;
pub mod tokenizer;
pub mod tokens;

pub use dataset::{
    BuildLimits, BuildOptions, Built, DEFAULT_BPE_SAMPLE_BYTES, DEFAULT_SHARD_TOKENS, Dataset, Meta, MixPart,
    ShardFile, TokenizerChoice, ValSet, build, build_from, build_into, build_with, prepare, prepare_for_model,
    split_documents, unigram_entropy,
};
pub use foreign::Format;
pub use input::{Document, Inputs, read_inputs};
pub use loader::{Loader, epoch_permutation};
pub use mixture::{Mixture, TrainStream};
pub use output::OutputGuard;
pub use shard::{TokenShard, write_shard};
pub use source::Source;
pub use split::{Splitter, Subset};
pub use tokenizer::{EOS, Tokenizer};
pub use tokens::Tokens;
