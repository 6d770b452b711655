//! A tiny dataset built through `boost data`, and helpers to run the binary.
#![allow(dead_code)]

use std::collections::BTreeMap;
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

/// Key `key` of every line of `run/metrics.jsonl`, in order.
pub fn metric(run: &Path, key: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[key].clone())
        .collect()
}

pub fn losses(run: &Path) -> Vec<f64> {
    metric(run, "loss").iter().map(|v| v.as_f64().unwrap()).collect()
}

/// The tensors `boost train --dump-grads STEP` wrote, sorted by name.
pub fn grads(run: &Path, step: u64) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(run.join(format!("grads/step-{step:08}.safetensors"))).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(name, t)| {
            assert_eq!(t.dtype(), safetensors::Dtype::F32);
            (name, t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Same tensor names, and each tensor within `rtol` norm-wise: ‖a − b‖ ≤ rtol·‖b‖.
pub fn assert_grads_close(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)], rtol: f64) {
    let names = |g: &[(String, Vec<f32>)]| g.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(a), names(b), "the dumps hold different tensors");
    for ((name, x), (_, y)) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len(), "{name}: sizes differ");
        let diff: f64 = x.iter().zip(y).map(|(p, q)| (*p as f64 - *q as f64).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = y.iter().map(|q| (*q as f64).powi(2)).sum::<f64>().sqrt();
        assert!(norm > 0.0, "{name}: the reference gradient is zero");
        assert!(diff <= rtol * norm, "{name}: |a - b| = {diff:e} > {rtol:e} * |b| = {:e}", rtol * norm);
    }
}

/// Every file and folder under `dir` by path relative to it: a folder with `None`, a file with
/// its contents (for checking that a command left a user's files as they were).
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if p.is_dir() {
                out.insert(rel, None);
                stack.push(p);
            } else {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// SHA-256 of every file under `dir`, by relative path (.lock aside: it holds the PID of the
/// last run that opened the directory).
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    use sha2::{Digest, Sha256};
    let hex = |bytes: Vec<u8>| Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect::<String>();
    tree(dir)
        .into_iter()
        .filter(|(p, _)| p.file_name().is_some_and(|n| n != ".lock"))
        .filter_map(|(p, bytes)| Some((p, hex(bytes?))))
        .collect()
}

/// The stderr of a command that must be refused (exit 1).
pub fn fails(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "expected a refusal; stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `boost train` of the tiny model on `data` into `run`, quiet.
pub fn train(data: &Path, run: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = boost();
    c.arg("train").args(tiny(data, run, extra)).arg("--quiet");
    c
}

/// The steps `run/metrics.jsonl` logged, in order.
pub fn steps(run: &Path) -> Vec<u64> {
    metric(run, "step").iter().map(|v| v.as_u64().unwrap()).collect()
}
