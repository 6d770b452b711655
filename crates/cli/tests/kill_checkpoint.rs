//! `kill -9` at any moment, checkpoint writes included, never leaves a `latest` that does not
//! load; the next start removes the temporaries, and metrics.jsonl keeps one line per step.
//! Single rank and an in-process tp2·pp2 grid.

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

fn kill_loop(extra: &[&str]) {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let sets = |steps: usize| {
        let mut v = vec!["train.checkpoint_every=1".to_string(), "train.keep_checkpoints=2".into()];
        v.push(format!("train.steps={steps}"));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let args = |steps: usize| {
        let s = sets(steps);
        let refs: Vec<&str> = s.iter().map(|x| x.as_str()).collect();
        tiny(&data, &run_dir, &refs)
    };
    run(boost().arg("train").args(args(2)).arg("--quiet"));
    // At least 14 kills, and more (up to 40) until some landed in the middle of a checkpoint
    // write: the case the test is about, asserted below rather than hoped for.
    let mut killed_with_temporaries = 0;
    let mut kills = 0u64;
    while kills < 14 || (killed_with_temporaries == 0 && kills < 40) {
        let i = kills;
        kills += 1;
        let mut child = boost().arg("train").args(args(100_000)).args(["--quiet", "--resume"]).spawn().unwrap();
        // Delays spread over process start, the first steps and their checkpoint writes.
        std::thread::sleep(Duration::from_millis(20 + (i * 37) % 160));
        child.kill().unwrap();
        child.wait().unwrap();
        let ck = run_dir.join("checkpoints");
        if fs::read_dir(&ck).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp")) {
            killed_with_temporaries += 1;
        }
        // `latest` (or the newest step) always loads.
        let out = boost().args(["eval", "--checkpoint"]).arg(&run_dir).output().unwrap();
        assert!(out.status.success(), "after kill {i}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(killed_with_temporaries > 0, "none of {kills} kills landed while a checkpoint was being written");
    let newest = newest_step(&run_dir);
    let target = newest as usize + 3;
    run(boost().arg("train").args(args(target)).args(["--quiet", "--resume"]));
    let names: Vec<String> = fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with('.')), "no temporaries survive the next start: {names:?}");
    let steps: Vec<u64> = fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=target as u64).collect::<Vec<_>>(), "one metrics line per step");
    eprintln!(
        "{killed_with_temporaries} of {kills} kills left a checkpoint half-written; newest step before the last run {newest}"
    );
}

fn newest_step(run_dir: &Path) -> u64 {
    fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_prefix("step-")?.parse().ok())
        .max()
        .unwrap()
}

#[test]
fn kills_never_damage_latest_single_rank() {
    let t = Instant::now();
    kill_loop(&[]);
    eprintln!("single rank: {:.1} s", t.elapsed().as_secs_f64());
}

#[test]
fn kills_never_damage_latest_tp2_pp2() {
    let t = Instant::now();
    kill_loop(&["parallel.tp=2", "parallel.pp=2"]);
    eprintln!("tp2·pp2: {:.1} s", t.elapsed().as_secs_f64());
}
