//! A tiny dataset built through `boost data`, and helpers to run the binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn boost() -> Command {
    Command::new(env!("CARGO_BIN_EXE_boost"))
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("runs");
    if !out.status.success() {
        panic!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    out
}

/// Six small generated documents turned into shards with a trained BPE of 300.
pub fn dataset(root: &Path) -> PathBuf {
    let words = ["the", "king", "queen", "speaks", "of", "love", "and", "war", "to", "his", "her", "friend", "night"];
    let mut x: u64 = 99;
    let mut cmd = boost();
    cmd.arg("data");
    for d in 0..6 {
        let mut text = String::new();
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(words[(x % words.len() as u64) as usize]);
            text.push(' ');
        }
        let p = root.join(format!("doc{d}.txt"));
        std::fs::write(&p, text).unwrap();
        cmd.arg("--input").arg(p);
    }
    let out = root.join("data");
    run(cmd.arg("--out").arg(&out).args(["--vocab-size", "300", "--val-fraction", "0.2"]));
    out
}

/// `--set` arguments of a tiny model on `data`, run directory `run`.
pub fn tiny(data: &Path, run: &Path, extra: &[&str]) -> Vec<String> {
    let mut sets: Vec<String> = [
        "model.d=32",
        "model.d_ff=64",
        "model.layers=2",
        "model.heads=4",
        "model.rank=8",
        "train.seq_len=16",
        "train.micro_batch=4",
        "train.steps=4",
        "train.warmup_steps=1",
        "train.eval_every=2",
        "train.eval_batches=2",
        "train.checkpoint_every=2",
        "data.corpus=none",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    sets.push(format!("data.dir={}", data.display()));
    sets.push(format!("run.dir={}", run.display()));
    sets.into_iter().flat_map(|s| ["--set".to_string(), s]).collect()
}

pub fn losses(run: &Path) -> Vec<f64> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].as_f64().unwrap())
        .collect()
}
