//! Building a small dataset from text files and opening it again.

use boost_data::{BuildOptions, Dataset, Document, Tokenizer, TokenizerChoice, build, job, prepare, read_inputs};
use std::path::{Path, PathBuf};

const A: &str = "The quick brown fox jumps over the lazy dog.\nThe dog sleeps; the fox runs away.\n\n\
Foxes and dogs are old friends in stories, and the stories are old.\n";
const B: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n\
The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles.\n";

fn write_inputs(dir: &Path) -> Vec<PathBuf> {
    let a = dir.join("a.txt");
    let b = dir.join("b.txt");
    std::fs::write(&a, A.repeat(3)).unwrap();
    std::fs::write(&b, B.repeat(3)).unwrap();
    vec![a, b]
}

fn opts(vocab: usize) -> BuildOptions {
    BuildOptions {
        tokenizer: TokenizerChoice::Bpe,
        vocab_size: vocab,
        val_fraction: 0.5,
        seed: 7,
        sources: vec!["a.txt".into(), "b.txt".into()],
        corpus: None,
    }
}

#[test]
fn build_from_text_files_and_reopen_with_prepare() {
    let d = tempfile::tempdir().unwrap();
    let inputs = write_inputs(d.path());
    let docs = read_inputs(&inputs, "text").unwrap();
    assert_eq!(docs.len(), 2);
    let out = d.path().join("ds");
    let meta = build(&docs, &opts(300), &out).unwrap();
    assert_eq!(meta.train_documents, 1);
    assert_eq!(meta.val_documents, 1);
    assert_eq!(meta.vocab_size, 300);
    assert_eq!(meta.eos_id, 0);
    assert!(meta.unigram_entropy_nats > 1.0 && meta.unigram_entropy_nats < 300f64.ln());
    assert!((meta.unigram_entropy_bits * std::f64::consts::LN_2 - meta.unigram_entropy_nats).abs() < 1e-9);
    // Nothing but the dataset is left next to it.
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 3, "{names:?}");

    let cfg = boost_config::DataConfig {
        dir: out.display().to_string(),
        corpus: "none".into(),
        tokenizer: "bpe".into(),
        vocab_size: 300,
        val_fraction: 0.5,
        seed: 7,
        format: "auto".into(),
        mix: Vec::new(),
    };
    let ds = prepare(&cfg).unwrap();
    assert_eq!(ds.meta, meta);
    assert_eq!(ds.train.len() as u64, meta.train_tokens);
    assert_eq!(ds.val.len() as u64, meta.val_tokens);
    assert_eq!(ds.train.width(), 2);
    assert_eq!(ds.tokenizer.as_ref().unwrap().vocab_size(), 300);

    // Each split is its document followed by the end-of-text id, and decodes back exactly.
    let train = ds.train.to_vec();
    let val = ds.val.to_vec();
    assert_eq!(*train.last().unwrap(), ds.tokenizer.as_ref().unwrap().eos_id());
    assert_eq!(train.iter().filter(|&&t| t == 0).count(), 1);
    let texts = [
        ds.tokenizer.as_ref().unwrap().decode(&train[..train.len() - 1]),
        ds.tokenizer.as_ref().unwrap().decode(&val[..val.len() - 1]),
    ];
    let mut texts = texts.to_vec();
    texts.sort();
    let mut want = vec![A.repeat(3), B.repeat(3)];
    want.sort();
    assert_eq!(texts, want);
    // A BPE compresses.
    assert!(train.len() + val.len() < (A.len() + B.len()) * 3 * 2 / 3);

    // Loaders over the opened dataset.
    let l = ds.train_loader(8, 1).unwrap();
    let (mut x, mut y) = (vec![0; 16], vec![0; 16]);
    l.fill(0, 2, &mut x, &mut y);
    assert_eq!(x[1..8], y[0..7]);
    let v = ds.val_loader(8).unwrap();
    v.fill_val(0, 1, &mut x[..8], &mut y[..8]);
    assert_eq!(x[..8], val[..8]);

    // Building again needs the old dataset removed first: an existing one is never replaced.
    std::fs::remove_dir_all(&out).unwrap();
    let meta2 = build(&docs, &opts(280), &out).unwrap();
    assert_eq!(meta2.vocab_size, 280);
    let ds2 = Dataset::open(&out).unwrap();
    assert_eq!(ds2.meta.vocab_size, 280);
    assert_eq!(ds2.train.vocab(), 280);
}

#[test]
fn build_is_deterministic() {
    let d = tempfile::tempdir().unwrap();
    let docs = read_inputs(&write_inputs(d.path()), "text").unwrap();
    build(&docs, &opts(320), &d.path().join("one")).unwrap();
    build(&docs, &opts(320), &d.path().join("two")).unwrap();
    for f in ["train.bin", "val.bin", "tokenizer.json", "meta.json"] {
        let a = std::fs::read(d.path().join("one").join(f)).unwrap();
        let b = std::fs::read(d.path().join("two").join(f)).unwrap();
        assert!(a == b, "{f} differs between two identical builds");
    }
}

#[test]
fn failed_build_leaves_nothing_and_prepare_names_the_key() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("ds");
    let one = vec![Document { name: "x".into(), text: "only one".into() }];
    let e = build(&one, &opts(300), &out).unwrap_err().to_string();
    assert!(e.contains("at least 2"), "{e}");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);

    let cfg = boost_config::DataConfig { dir: out.display().to_string(), corpus: "none".into(), ..Default::default() };
    let e = prepare(&cfg).unwrap_err().to_string();
    assert!(e.contains("data.dir") && e.contains("boost data --input"), "{e}");
}

#[test]
fn loaded_tokenizer_and_cli() {
    let d = tempfile::tempdir().unwrap();
    let inputs = write_inputs(d.path());
    // A JSONL input with a custom field next to a text file.
    let j = d.path().join("c.jsonl");
    std::fs::write(&j, "{\"body\": \"first json document\"}\n{\"body\": \"second one\"}\n").unwrap();
    let args = job::DataJob {
        corpus: None,
        inputs: vec![inputs[0].clone(), j.clone()],
        out: d.path().join("cli"),
        tokenizer: "bpe".into(),
        vocab_size: 300,
        val_fraction: 0.3,
        // Holds out a JSON line, so the BPE learns all 300 entries from a.txt.
        seed: 5,
        text_field: "body".into(),
        bpe_sample_bytes: boost_data::DEFAULT_BPE_SAMPLE_BYTES,
        shard_tokens: boost_data::DEFAULT_SHARD_TOKENS,
        json: false,
    };
    job::run(&args).unwrap();
    let ds = Dataset::open(d.path().join("cli")).unwrap();
    assert_eq!(ds.meta.train_documents + ds.meta.val_documents, 3);
    assert_eq!(ds.meta.val_documents, 1);

    // Reuse the saved tokenizer.json for another build.
    let tok_path = d.path().join("cli").join("tokenizer.json");
    let args2 = job::DataJob {
        inputs: inputs.clone(),
        out: d.path().join("reuse"),
        tokenizer: tok_path.display().to_string(),
        text_field: "text".into(),
        ..args
    };
    job::run(&args2).unwrap();
    let ds2 = Dataset::open(d.path().join("reuse")).unwrap();
    assert_eq!(ds2.meta.tokenizer, tok_path.display().to_string());
    assert_eq!(ds2.meta.vocab_size, 300);
    let t = Tokenizer::from_file(&tok_path).unwrap();
    assert_eq!(t.encode("the fox"), ds.tokenizer.as_ref().unwrap().encode("the fox"));
}
