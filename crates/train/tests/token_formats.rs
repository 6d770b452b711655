//! Training straight from llm.c and Megatron token files (the NumPy-written fixtures in
//! tests/fixtures/token_formats): the run trains and resumes bit-exactly with no tokenizer,
//! and a missing vocabulary or a dataset smaller than one global batch is refused by key.

mod common;

use boost_checkpoint::Checkpoint;
use boost_train::{TrainOptions, train};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/token_formats").join(name)
}

fn quiet() -> TrainOptions {
    TrainOptions { resume: None, quiet: true, ..Default::default() }
}

#[test]
fn llmc_shards_train_and_resume_exactly() {
    let root = tempfile::tempdir().unwrap();
    let data = format!("data.dir={}", fixture("llmc").display());
    let full = train(common::config(root.path(), &[&data, "model.vocab=50257"]), quiet()).unwrap();
    assert_eq!(full.losses.len(), 6);
    assert!(full.losses.iter().all(|l| l.is_finite()), "{:?}", full.losses);
    // Random ids over 50257 tokens: the first loss is near ln 50257 = 10.8 (an untrained model
    // is close to uniform; 1.0 of slack covers the initialisation's spread).
    assert!((full.losses[0] - 50257f64.ln()).abs() < 1.0, "{:?}", full.losses);
    let ck = root.path().join("run/checkpoints/step-00000003");
    assert!(Checkpoint::open(&ck).unwrap().tokenizer_path().is_none(), "no tokenizer to copy");
    let run2 = format!("run.dir={}", root.path().join("run2").display());
    let cfg = common::config(root.path(), &[&data, "model.vocab=50257", &run2]);
    let resumed = train(cfg, TrainOptions { resume: Some(ck), quiet: true, ..Default::default() }).unwrap();
    let a: Vec<u64> = full.losses[3..].iter().map(|x| x.to_bits()).collect();
    let b: Vec<u64> = resumed.losses.iter().map(|x| x.to_bits()).collect();
    assert_eq!(a, b, "resumed {:?} vs {:?}", resumed.losses, &full.losses[3..]);
}

#[test]
fn megatron_files_train() {
    let root = tempfile::tempdir().unwrap();
    let data = format!("data.dir={}", fixture("megatron").display());
    let r = train(common::config(root.path(), &[&data, "model.vocab=32000", "data.format=megatron"]), quiet()).unwrap();
    assert_eq!(r.losses.len(), 6);
    assert!(r.losses.iter().all(|l| l.is_finite()), "{:?}", r.losses);
}

#[test]
fn missing_vocab_and_too_little_data_are_refused_by_key() {
    let root = tempfile::tempdir().unwrap();
    let data = format!("data.dir={}", fixture("llmc").display());
    let e = format!("{:#}", train(common::config(root.path(), &[&data]), quiet()).unwrap_err());
    assert!(e.contains("model.vocab"), "{e}");
    // 528 training tokens make 32 windows of 16; one global batch of 64 does not fit.
    let e = format!(
        "{:#}",
        train(common::config(root.path(), &[&data, "model.vocab=50257", "train.micro_batch=64"]), quiet()).unwrap_err()
    );
    assert!(e.contains("fewer than one global batch") && e.contains("train.micro_batch"), "{e}");
}
