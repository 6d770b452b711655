//! `boost data` refuses what it cannot honour before reading anything: a vocabulary too large to
//! train (it used to abort on a 70 GB allocation), a --vocab-size that a given tokenizer.json
//! contradicts (it used to be ignored), and an input file given twice (its documents used to
//! land in both the training and the validation split).

mod common;

use boost_data::tokenizer::MAX_VOCAB_SIZE;
use boost_data::{Inputs, Tokenizer, job, read_inputs};
use common::cli_args;
use std::path::{Path, PathBuf};

fn corpus(dir: &Path) -> PathBuf {
    let f = dir.join("docs.jsonl");
    let lines: String =
        (0..40).map(|i| format!("{{\"text\": \"document {i}: some words, and a few more words {i}\"}}\n")).collect();
    std::fs::write(&f, lines).unwrap();
    f
}

#[test]
fn a_vocabulary_too_large_is_refused_before_anything_is_read() {
    let d = tempfile::tempdir().unwrap();
    let input = corpus(d.path());
    for v in [1_000_000_000usize, 4_294_967_295, MAX_VOCAB_SIZE + 1] {
        let out = d.path().join(format!("v{v}"));
        let e = format!("{:#}", job::run(&cli_args(&out, vec![input.clone()]).with_vocab(v)).unwrap_err());
        assert!(e.contains(&format!("--vocab-size {v}")) && e.contains(&MAX_VOCAB_SIZE.to_string()), "{e}");
        assert!(!out.exists());
    }
    // The library refuses it too (data.vocab_size reaches it for the demo corpus).
    let e = format!("{:#}", Tokenizer::train_bpe(&["some text"], 1_000_000_000).unwrap_err());
    assert!(e.contains("1000000000") && e.contains(&MAX_VOCAB_SIZE.to_string()), "{e}");
    // The cap itself trains, and learns what the text allows.
    let out = d.path().join("cap");
    job::run(&cli_args(&out, vec![input]).with_vocab(MAX_VOCAB_SIZE)).unwrap();
    let ds = boost_data::Dataset::open(&out).unwrap();
    assert!(ds.meta.vocab_size > 257 && (ds.meta.vocab_size as usize) < 2000, "{}", ds.meta.vocab_size);
}

trait WithVocab {
    fn with_vocab(self, v: usize) -> Self;
}

impl WithVocab for job::DataJob {
    fn with_vocab(mut self, v: usize) -> Self {
        self.vocab_size = v;
        self
    }
}

#[test]
fn a_vocab_size_that_a_given_tokenizer_contradicts_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let input = corpus(d.path());
    let tok_path = d.path().join("tokenizer.json");
    Tokenizer::train_bpe(&["some words, and a few more words", "document"], 280).unwrap().save(&tok_path).unwrap();
    let given = |v: usize, out: &str| job::DataJob {
        tokenizer: tok_path.display().to_string(),
        ..cli_args(&d.path().join(out), vec![input.clone()]).with_vocab(v)
    };
    let e = format!("{:#}", job::run(&given(300, "a")).unwrap_err());
    assert!(e.contains("--vocab-size 300") && e.contains("280") && e.contains(&tok_path.display().to_string()), "{e}");
    assert!(!d.path().join("a").exists());
    // Its own size, or none given (the default), is fine.
    job::run(&given(280, "b")).unwrap();
    job::run(&given(job::DEFAULT_VOCAB_SIZE, "c")).unwrap();
    assert_eq!(boost_data::Dataset::open(d.path().join("c")).unwrap().meta.vocab_size, 280);
}

#[test]
fn an_input_given_twice_is_refused_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("corpus");
    std::fs::create_dir(&sub).unwrap();
    let input = corpus(&sub);
    std::fs::write(sub.join("other.txt"), "another document").unwrap();
    let canon = std::fs::canonicalize(&input).unwrap().display().to_string();
    let link = d.path().join("link.jsonl");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    let dotted = sub.join(".").join("docs.jsonl");
    for twice in [
        vec![input.clone(), input.clone()],
        vec![sub.clone(), input.clone()],
        vec![input.clone(), sub.clone()],
        vec![input.clone(), link.clone()],
        vec![dotted.clone(), input.clone()],
    ] {
        let out = d.path().join("out");
        let e = format!("{:#}", job::run(&cli_args(&out, twice.clone())).unwrap_err());
        assert!(e.contains(&canon) && e.contains("twice"), "{twice:?}: {e}");
        assert!(!out.exists(), "{twice:?}");
        let e = format!("{:#}", read_inputs(&twice, "text").unwrap_err());
        assert!(e.contains(&canon), "{e}");
    }
    // Different files are fine, and so is a directory with the files under it given once.
    assert_eq!(Inputs::open(std::slice::from_ref(&sub), "text").unwrap().files().count(), 2);
    let two = Inputs::open(&[input, sub.join("other.txt")], "text").unwrap();
    assert_eq!(two.count_documents().unwrap(), 41);
}

#[test]
fn a_folder_gives_only_its_text_jsonl_and_parquet_files() {
    let d = tempfile::tempdir().unwrap();
    let sub = d.path().join("corpus");
    std::fs::create_dir(&sub).unwrap();
    let docs = corpus(&sub);
    std::fs::write(sub.join("notes.md"), "a document in markdown").unwrap();
    // A tokenizer (and other files) lying beside the text are not documents.
    let tok = Tokenizer::train_bpe(&["some text to learn a few merges from"], 280).unwrap();
    tok.save(sub.join("tokenizer.json")).unwrap();
    std::fs::write(sub.join("run.log"), "not a document").unwrap();
    let inputs = Inputs::open(std::slice::from_ref(&sub), "text").unwrap();
    let files: Vec<PathBuf> = inputs.files().map(Path::to_path_buf).collect();
    assert_eq!(files, [docs, sub.join("notes.md")]);
    assert_eq!(inputs.skipped(), [sub.join("run.log"), sub.join("tokenizer.json")]);
    assert_eq!(inputs.count_documents().unwrap(), 41);
    // Named on its own, a file is read whatever its name.
    assert_eq!(Inputs::open(&[sub.join("run.log")], "text").unwrap().count_documents().unwrap(), 1);
    // A folder holding no corpus file at all says what it holds.
    let other = d.path().join("other");
    std::fs::create_dir(&other).unwrap();
    tok.save(other.join("tokenizer.json")).unwrap();
    let e = format!("{:#}", Inputs::open(std::slice::from_ref(&other), "text").unwrap_err());
    assert!(e.contains("holds no text, JSONL or Parquet files") && e.contains("tokenizer.json"), "{e}");
}
