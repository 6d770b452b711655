//! Streaming builds: compressed JSONL read like plain, splits written as many shards that read
//! back as the same token stream, each shard checked against the SHA-256 in `meta.json`, and
//! datasets from before the shard list still open.

mod common;

use boost_data::{BuildLimits, BuildOptions, Dataset, Inputs, OutputGuard, TokenizerChoice, build_from, read_inputs};
use std::io::Write;
use std::path::{Path, PathBuf};

/// 300 JSONL documents of varied length.
fn jsonl_lines() -> String {
    (0..300)
        .map(|i| {
            let text =
                format!("document {i}: the {} fox jumps over {} dogs.\n", ["quick", "slow", "red"][i % 3], i * 7)
                    .repeat(1 + i % 5);
            serde_json::json!({ "id": i, "text": text }).to_string() + "\n"
        })
        .collect()
}

fn write_corpus(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let lines = jsonl_lines();
    let plain = dir.join("c.jsonl");
    std::fs::write(&plain, &lines).unwrap();
    // Two gzip members and two zstd frames: concatenated files, as `cat` makes them.
    let (a, b) = lines.split_at(lines.len() / 2 + lines[lines.len() / 2..].find('\n').unwrap() + 1);
    let gz = dir.join("c.jsonl.gz");
    let mut f = std::fs::File::create(&gz).unwrap();
    for part in [a, b] {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(part.as_bytes()).unwrap();
        f.write_all(&e.finish().unwrap()).unwrap();
    }
    let zst = dir.join("c.jsonl.zst");
    let mut f = std::fs::File::create(&zst).unwrap();
    for part in [a, b] {
        f.write_all(&zstd::encode_all(part.as_bytes(), 3).unwrap()).unwrap();
    }
    (plain, gz, zst)
}

fn opts(tokenizer: TokenizerChoice) -> BuildOptions {
    BuildOptions { tokenizer, val_fraction: 0.1, seed: 11, ..common::opts() }
}

fn build(inputs: &[PathBuf], out: &Path, tokenizer: TokenizerChoice, shard_tokens: u64) -> Dataset {
    let src = Inputs::open(inputs, "text").unwrap();
    let guard = OutputGuard::acquire(out, &[]).unwrap();
    let limits = BuildLimits { shard_tokens, ..BuildLimits::default() };
    build_from(&src, &opts(tokenizer), &limits, &guard).unwrap();
    drop(guard);
    Dataset::open(out).unwrap()
}

#[test]
fn compressed_jsonl_reads_the_same_documents() {
    let d = tempfile::tempdir().unwrap();
    let (plain, gz, zst) = write_corpus(d.path());
    let want = read_inputs(std::slice::from_ref(&plain), "text").unwrap();
    assert_eq!(want.len(), 300);
    for f in [gz, zst] {
        let got = read_inputs(std::slice::from_ref(&f), "text").unwrap();
        let texts = |v: &[boost_data::Document]| v.iter().map(|d| d.text.clone()).collect::<Vec<_>>();
        assert_eq!(texts(&got), texts(&want), "{}", f.display());
        assert!(got[299].name.ends_with(":300"), "{}", got[299].name);
        assert_eq!(Inputs::open(&[f], "text").unwrap().count_documents().unwrap(), 300);
    }
}

#[test]
fn a_truncated_compressed_file_is_named() {
    let d = tempfile::tempdir().unwrap();
    let (_, gz, zst) = write_corpus(d.path());
    for f in [gz, zst] {
        let bytes = std::fs::read(&f).unwrap();
        std::fs::write(&f, &bytes[..bytes.len() * 3 / 4]).unwrap();
        let e = format!("{:#}", read_inputs(std::slice::from_ref(&f), "text").unwrap_err());
        assert!(e.contains(&f.display().to_string()) && e.contains("truncated or corrupt"), "{e}");
    }
}

#[test]
fn many_shards_hold_the_same_stream_as_one() {
    let d = tempfile::tempdir().unwrap();
    let (plain, gz, _) = write_corpus(d.path());
    let one = build(std::slice::from_ref(&plain), &d.path().join("one"), TokenizerChoice::Bpe, u64::MAX);
    let tok = d.path().join("one/tokenizer.json");
    let many = build(&[gz], &d.path().join("many"), TokenizerChoice::File(tok.clone()), 1000);
    let m = &many.meta;
    // A lone shard per split keeps the plain names; a split over 1000 tokens is cut into files
    // of exactly 1000 (the last one shorter).
    let files: Vec<&str> = one.meta.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(files, ["train.bin", "val.bin"]);
    let train: Vec<_> = m.shards.iter().filter(|s| s.split == "train").collect();
    assert_eq!(train.len() as u64, m.train_tokens.div_ceil(1000));
    assert!(train.len() >= 3, "{} train tokens", m.train_tokens);
    for (k, s) in train.iter().enumerate() {
        assert_eq!(s.file, format!("train-{k:06}.bin"));
        let want = if k + 1 < train.len() { 1000 } else { m.train_tokens - 1000 * k as u64 };
        assert_eq!(s.tokens, want, "{}", s.file);
    }
    // The same tokens in the same order: training does not depend on the shard size.
    assert_eq!(many.train.to_vec(), one.train.to_vec());
    assert_eq!(many.val.to_vec(), one.val.to_vec());
    assert_eq!((m.train_documents, m.val_documents), (270, 30));
    assert_eq!(m.unigram_entropy_nats, one.meta.unigram_entropy_nats);
    let (a, b) = (many.train_loader(16, 3).unwrap(), one.train_loader(16, 3).unwrap());
    let (mut x1, mut y1, mut x2, mut y2) = (vec![0; 64], vec![0; 64], vec![0; 64], vec![0; 64]);
    a.fill(5, 4, &mut x1, &mut y1);
    b.fill(5, 4, &mut x2, &mut y2);
    assert_eq!((x1, y1), (x2, y2));
}

#[test]
fn a_changed_shard_is_refused_naming_it_and_meta_json() {
    let d = tempfile::tempdir().unwrap();
    let (plain, _, _) = write_corpus(d.path());
    let out = d.path().join("ds");
    let ds = build(&[plain], &out, TokenizerChoice::Bpe, 1000);
    // Swap two different tokens of the second training shard: ids, header and length stay valid.
    let path = out.join("train-000001.bin");
    let mut bytes = std::fs::read(&path).unwrap();
    let body = 32;
    let j = (body + 2..bytes.len()).step_by(2).find(|&j| bytes[j..j + 2] != bytes[body..body + 2]).unwrap();
    let (first, other) = (bytes[body..body + 2].to_vec(), bytes[j..j + 2].to_vec());
    bytes[body..body + 2].copy_from_slice(&other);
    bytes[j..j + 2].copy_from_slice(&first);
    std::fs::write(&path, &bytes).unwrap();
    boost_data::TokenShard::open(&path).unwrap().check_ids().unwrap();
    let e = format!("{:#}", Dataset::open(&out).unwrap_err());
    assert!(e.contains("train-000001.bin") && e.contains("meta.json") && e.contains("SHA-256"), "{e}");
    // A missing shard is named too.
    std::fs::remove_file(&path).unwrap();
    assert!(!Dataset::is_complete(&out));
    let e = format!("{:#}", Dataset::open(&out).unwrap_err());
    assert!(e.contains("train-000001.bin") && e.contains("missing"), "{e}");
    drop(ds);
}

#[test]
fn a_dataset_without_a_shard_list_still_opens() {
    let d = tempfile::tempdir().unwrap();
    let (plain, _, _) = write_corpus(d.path());
    let out = d.path().join("ds");
    let ds = build(&[plain], &out, TokenizerChoice::Bpe, u64::MAX);
    let meta_path = out.join("meta.json");
    let mut meta: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).unwrap();
    meta.as_object_mut().unwrap().remove("shards").unwrap();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let old = Dataset::open(&out).unwrap();
    assert!(old.meta.shards.is_empty());
    assert_eq!(old.train.to_vec(), ds.train.to_vec());
    assert_eq!(old.val.to_vec(), ds.val.to_vec());
}
