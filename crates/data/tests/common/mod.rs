//! Helpers shared by the data tests: small inputs and a hash of a directory tree.
#![allow(dead_code)]

use boost_data::{BuildOptions, Document, TokenizerChoice};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// Two short documents.
pub fn docs() -> Vec<Document> {
    vec![
        Document { name: "a".into(), text: "the quick brown fox jumps over the lazy dog\n".repeat(20) },
        Document { name: "b".into(), text: "to be or not to be, that is the question\n".repeat(20) },
    ]
}

pub fn opts() -> BuildOptions {
    BuildOptions {
        tokenizer: TokenizerChoice::Bpe,
        vocab_size: 300,
        val_fraction: 0.5,
        seed: 7,
        sources: vec!["test".into()],
        corpus: None,
    }
}

/// SHA-256 of every file under `dir` (and the names of directories), by relative path.
pub fn hash_tree(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        if p.is_dir() {
            out.insert(rel + "/", String::new());
            walk(root, &p, out);
        } else {
            let h = Sha256::digest(std::fs::read(&p).unwrap());
            out.insert(rel, h.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
}

/// `boost data` arguments for a small trained BPE (vocabulary 300, half the documents held out).
pub fn cli_args(out: &std::path::Path, inputs: Vec<std::path::PathBuf>) -> boost_data::job::DataJob {
    boost_data::job::DataJob {
        corpus: None,
        inputs,
        out: out.to_path_buf(),
        tokenizer: "bpe".into(),
        vocab_size: 300,
        val_fraction: 0.5,
        seed: 1,
        text_field: "text".into(),
        bpe_sample_bytes: boost_data::DEFAULT_BPE_SAMPLE_BYTES,
        shard_tokens: boost_data::DEFAULT_SHARD_TOKENS,
        json: false,
    }
}
