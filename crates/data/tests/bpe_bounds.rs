//! Training the byte-level BPE finishes quickly on text without whitespace (one enormous
//! pre-token), and the tokenizer still round-trips it.

mod common;

use boost_data::{BuildLimits, Dataset, Document, Tokenizer, build_with};
use std::time::{Duration, Instant};

fn train_and_round_trip(text: &str) {
    let t = Instant::now();
    let tok = Tokenizer::train_bpe(&[text, "a second, ordinary document"], 512).unwrap();
    let trained = t.elapsed();
    let ids = tok.encode(text);
    assert_eq!(tok.decode(&ids), text);
    assert!(ids.len() < text.len() / 4, "{} ids for {} bytes: the merges did not compress", ids.len(), text.len());
    let total = t.elapsed();
    eprintln!("trained in {trained:?}, trained and encoded in {total:?}");
    assert!(total < Duration::from_secs(30), "{total:?}");
}

#[test]
fn one_megabyte_of_ab_trains_in_seconds() {
    train_and_round_trip(&"ab".repeat(500_000));
}

#[test]
fn three_hundred_kilobytes_of_equals_signs_train_in_seconds() {
    train_and_round_trip(&"=".repeat(300_000));
}

#[test]
fn the_bpe_sample_bounds_what_training_reads() {
    let d = tempfile::tempdir().unwrap();
    let docs: Vec<Document> = (0..40)
        .map(|i| Document { name: format!("d{i}"), text: format!("word{i} text number {i}\n").repeat(200) })
        .collect();
    let limits = BuildLimits { bpe_sample_bytes: 4096, ..BuildLimits::default() };
    let a = build_with(&docs, &common::opts(), &limits, &d.path().join("a")).unwrap();
    let b = build_with(&docs, &common::opts(), &limits, &d.path().join("b")).unwrap();
    // Deterministic, and every document is still tokenized.
    assert_eq!(a, b);
    assert_eq!(
        std::fs::read(d.path().join("a/tokenizer.json")).unwrap(),
        std::fs::read(d.path().join("b/tokenizer.json")).unwrap()
    );
    assert_eq!(a.train_documents + a.val_documents, 40);
    let ds = Dataset::open(d.path().join("a")).unwrap();
    let text = ds.tokenizer.as_ref().unwrap().decode(&ds.train.to_vec());
    assert!(text.contains("word39") || ds.tokenizer.as_ref().unwrap().decode(&ds.val.to_vec()).contains("word39"));
    // A smaller sample learns different merges than the whole corpus.
    let all = build_with(
        &docs,
        &common::opts(),
        &BuildLimits { bpe_sample_bytes: 0, ..BuildLimits::default() },
        &d.path().join("all"),
    )
    .unwrap();
    assert_ne!(
        std::fs::read(d.path().join("a/tokenizer.json")).unwrap(),
        std::fs::read(d.path().join("all/tokenizer.json")).unwrap()
    );
    assert_eq!(all.train_documents, a.train_documents);
}
