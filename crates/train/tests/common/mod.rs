//! A tiny dataset and config for training tests (no network).
#![allow(dead_code)]

use boost_config::Config;
use boost_data::{BuildOptions, Document, TokenizerChoice};
use std::path::Path;

/// Deterministic pseudo-text: sentences over a small word list, in several documents.
pub fn documents() -> Vec<Document> {
    let words = [
        "the", "king", "queen", "speaks", "of", "love", "and", "war", "to", "his", "her", "friend", "night", "day",
        "sword", "crown",
    ];
    let mut x: u64 = 12345;
    (0..6)
        .map(|d| {
            let mut text = String::new();
            for _ in 0..400 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                text.push_str(words[(x % words.len() as u64) as usize]);
                text.push(if x.is_multiple_of(11) { '\n' } else { ' ' });
            }
            Document { name: format!("doc{d}.txt"), text }
        })
        .collect()
}

pub fn build_dataset(dir: &Path) {
    let opts = BuildOptions {
        tokenizer: TokenizerChoice::Bpe,
        vocab_size: 300,
        val_fraction: 0.2,
        seed: 7,
        sources: vec!["generated".into()],
        corpus: None,
    };
    boost_data::build(&documents(), &opts, dir).unwrap();
}

/// A tiny CoLA model on the tiny dataset.
/// A second dataset at `root/code` (generated code), tokenized with `root/data`'s tokenizer,
/// for a `data.mix` beside [`build_dataset`]'s.
pub fn build_code_dataset(root: &Path) {
    let docs: Vec<Document> = (0..5)
        .map(|d| Document { name: format!("code{d}"), text: format!("fn f{d}(x) {{ return x + {d}; }}\n").repeat(40) })
        .collect();
    let opts = BuildOptions {
        tokenizer: TokenizerChoice::File(root.join("data/tokenizer.json")),
        vocab_size: 300,
        val_fraction: 0.2,
        seed: 7,
        sources: vec!["generated code".into()],
        corpus: None,
    };
    boost_data::build(&docs, &opts, &root.join("code")).unwrap();
}

pub fn config(root: &Path, extra: &[&str]) -> Config {
    let mut sets: Vec<String> = [
        "model.d=32",
        "model.d_ff=64",
        "model.layers=2",
        "model.heads=2",
        "model.rank=8",
        "train.seq_len=16",
        "train.micro_batch=4",
        "train.steps=6",
        "train.warmup_steps=2",
        "train.lr=1e-2",
        "train.eval_every=3",
        "train.eval_batches=2",
        "train.checkpoint_every=3",
        "train.keep_checkpoints=0",
        "data.corpus=none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    sets.push(format!("data.dir={}", root.join("data").display()));
    sets.push(format!("run.dir={}", root.join("run").display()));
    sets.extend(extra.iter().map(|s| s.to_string()));
    Config::load(None, &sets).unwrap()
}

/// The small model of the parity tests, `layers` deep (vocabulary 61, no data), then `sets`.
pub fn small_model(layers: usize, sets: &[&str]) -> Vec<String> {
    ["model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("model.layers={layers}")])
        .chain(sets.iter().map(|s| s.to_string()))
        .collect()
}
