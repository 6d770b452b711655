//! Parallel training runs follow the single-rank loss curve, and checkpoints load under any
//! layout: a run saved under one (dp, pp, tp, scheme) continues under another with the
//! losses of the uninterrupted run. A failing rank stops the run with an error naming it.
//!
//! Tolerance: fp32, rtol 1e-5 on each step's loss (docs/TESTING.md: sharding reorders fp32 sums,
//! ~1e-6 relative; Adam then amplifies differences only slowly over a few steps).

mod common;

use boost_train::{Summary, TrainOptions, train};
use std::path::Path;

fn run(root: &Path, name: &str, sets: &[&str], resume: Option<&Path>) -> Summary {
    let mut all: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    all.push(format!("run.dir={}", root.join(name).display()));
    all.push("model.heads=4".into());
    let refs: Vec<&str> = all.iter().map(|s| s.as_str()).collect();
    let cfg = common::config(root, &refs);
    train(cfg, TrainOptions { resume: resume.map(|p| p.to_path_buf()), quiet: true, ..Default::default() })
        .unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

fn assert_tracks(what: &str, a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len(), "{what}: step count");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-5 * y.abs(), "{what}: step {} loss {x} vs {y}", i + 1);
    }
}

#[test]
fn tp_runs_track_the_single_rank_loss_curve() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let variants: &[(&str, &[&str])] = &[
        ("cola-btp", &["model.arch=cola"]),
        ("svd-btp-sync-ungrouped", &["model.arch=svd", "parallel.norm=sync", "parallel.grouping=false"]),
        ("cola-vanilla", &["model.arch=cola", "parallel.scheme=vanilla"]),
        ("full-megatron", &["model.arch=full"]),
        ("lax-btp", &["model.arch=lax", "model.layers=3"]),
        ("cola-btp-tied", &["model.arch=cola", "model.tie_embeddings=true"]),
    ];
    for (name, sets) in variants {
        let base = run(root.path(), &format!("{name}-tp1"), sets, None);
        assert!(base.losses[5] < base.losses[0]);
        for tp in [2, 4] {
            let mut s: Vec<&str> = sets.to_vec();
            let tp_set = format!("parallel.tp={tp}");
            s.push(&tp_set);
            let r = run(root.path(), &format!("{name}-tp{tp}"), &s, None);
            assert_tracks(&format!("{name} tp={tp}"), &r.losses, &base.losses);
        }
    }
}

#[test]
fn checkpoints_reshard_across_layouts() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let saved = run(root.path(), "btp2", &["model.arch=cola", "parallel.tp=2"], None);
    let ck = root.path().join("btp2/checkpoints/step-00000003");
    for (name, sets) in [
        ("to-btp4", &["model.arch=cola", "parallel.tp=4"][..]),
        ("to-single", &["model.arch=cola"]),
        ("to-vanilla2", &["model.arch=cola", "parallel.tp=2", "parallel.scheme=vanilla"]),
    ] {
        let r = run(root.path(), name, sets, Some(&ck));
        assert_eq!(r.first_step, 3);
        assert_tracks(&format!("btp tp=2 → {name}"), &r.losses, &saved.losses[3..]);
    }
}

/// (tp, pp, dp) grids with the same global batch (accumulation · dp = 4) train on exactly the
/// same sequences, so their losses track the single rank's, for both schedules and ZeRO-1.
#[test]
fn grids_track_the_single_rank_loss_curve() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    for arch in ["cola", "full"] {
        let a = format!("model.arch={arch}");
        let base = run(root.path(), &format!("{arch}-single"), &[&a, "train.accumulation=4"], None);
        for (tp, pp, dp) in [(1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 1, 2), (2, 2, 2)] {
            for sched in ["1f1b", "afab"] {
                for zero in [0, 1] {
                    if (zero == 1 && dp == 1) || (sched == "afab" && pp == 1) {
                        continue;
                    }
                    let sets = [
                        a.clone(),
                        format!("parallel.tp={tp}"),
                        format!("parallel.pp={pp}"),
                        format!("parallel.dp={dp}"),
                        format!("parallel.zero={zero}"),
                        format!("parallel.schedule={sched}"),
                        format!("train.accumulation={}", 4 / dp),
                    ];
                    let refs: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
                    let name = format!("{arch}-{tp}{pp}{dp}-{sched}-z{zero}");
                    let r = run(root.path(), &name, &refs, None);
                    assert_tracks(&name, &r.losses, &base.losses);
                    let (vb, vr) = (base.val.last().unwrap().1, r.val.last().unwrap().1);
                    assert!((vb - vr).abs() <= 1e-5 * vb, "{name}: validation loss {vr} vs {vb}");
                }
            }
        }
    }
}

/// `parallel.tp_chunks`: each micro-batch in chunks that overlap each other's tp
/// collectives, alone, with accumulation, and beside data parallelism (its gradient buckets
/// and ZeRO-1's parameter gathers), tracks the single rank like the unchunked runs.
#[test]
fn tp_chunks_track_the_single_rank_loss_curve() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let base = run(root.path(), "single", &["model.arch=cola", "train.accumulation=2"], None);
    let grids: [&[&str]; 4] = [
        &["parallel.tp=2", "parallel.tp_chunks=2", "train.accumulation=2"],
        &["parallel.tp=2", "parallel.tp_chunks=4", "train.accumulation=2", "parallel.scheme=vanilla"],
        &["parallel.tp=2", "parallel.tp_chunks=2", "parallel.dp=2"],
        &["parallel.tp=2", "parallel.tp_chunks=2", "parallel.dp=2", "parallel.zero=1"],
    ];
    for (i, sets) in grids.iter().enumerate() {
        let mut all = vec!["model.arch=cola"];
        all.extend_from_slice(sets);
        let name = format!("chunks-{i}");
        let r = run(root.path(), &name, &all, None);
        assert_tracks(&format!("{sets:?}"), &r.losses, &base.losses);
        let (vb, vr) = (base.val.last().unwrap().1, r.val.last().unwrap().1);
        assert!((vb - vr).abs() <= 1e-5 * vb, "{sets:?}: validation loss {vr} vs {vb}");
    }
}

/// With tp chunks, metrics.jsonl's exposed tp time is the time every chunk waited at once,
/// below the chunks' summed time inside tp calls (in flight); without chunks the two are equal.
#[test]
fn tp_chunks_report_exposed_tp_time_below_in_flight() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let split = |name: &str, chunks: &str| -> Vec<(f64, f64)> {
        let sets = ["model.arch=cola", "parallel.tp=2", chunks, "parallel.link.tp=2000,1"];
        run(root.path(), name, &sets, None);
        let text = std::fs::read_to_string(root.path().join(name).join("metrics.jsonl")).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|m| (m["time_split"]["tp_s"].as_f64().unwrap(), m["time_split"]["tp_in_flight_s"].as_f64().unwrap()))
            .collect()
    };
    for (exposed, flight) in split("one", "parallel.tp_chunks=1") {
        assert!((exposed - flight).abs() <= 1e-9 * flight, "blocking: exposed {exposed} in flight {flight}");
    }
    // Two chunks' 2 ms latencies run side by side: at most about half of their sum is exposed.
    for (exposed, flight) in split("two", "parallel.tp_chunks=2") {
        assert!(exposed > 0.0 && exposed <= 0.75 * flight, "chunked: exposed {exposed} in flight {flight}");
    }
}

/// Two data-parallel replicas with ZeRO-1 moments.
const DP2_ZERO: [&str; 4] = ["model.arch=cola", "parallel.dp=2", "parallel.zero=1", "train.accumulation=2"];

/// Checkpoints move between grids: (tp2, pp2) → (tp1, pp1, dp2) with ZeRO-1, and a ZeRO-1
/// run's checkpoint → tp 4.
#[test]
fn checkpoints_reshard_across_grids() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let saved = run(
        root.path(),
        "tp2pp2",
        &["model.arch=cola", "parallel.tp=2", "parallel.pp=2", "train.accumulation=4"],
        None,
    );
    let ck = root.path().join("tp2pp2/checkpoints/step-00000003");
    let r = run(root.path(), "to-dp2", &DP2_ZERO, Some(&ck));
    assert_tracks("(tp2, pp2) → (dp2, ZeRO-1)", &r.losses, &saved.losses[3..]);
    let ck = root.path().join("to-dp2/checkpoints/step-00000006");
    assert!(ck.is_dir());
    let z = run(root.path(), "zero-src", &DP2_ZERO, None);
    let ck = root.path().join("zero-src/checkpoints/step-00000003");
    let r = run(root.path(), "to-tp4", &["model.arch=cola", "parallel.tp=4", "train.accumulation=4"], Some(&ck));
    assert_tracks("(dp2, ZeRO-1) → tp4", &r.losses, &z.losses[3..]);
}

/// A rank that fails makes the run stop, within a bounded time, with an error naming it.
#[test]
fn a_failing_rank_stops_the_run_and_is_named() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    // The second grid's ranks wait in their tp chunks' collectives (threads of their own).
    let grids: [&[&str]; 2] = [
        &["parallel.tp=2", "parallel.pp=2", "train.accumulation=2"],
        &["parallel.tp=2", "parallel.dp=2", "parallel.tp_chunks=2"],
    ];
    for (i, grid) in grids.iter().enumerate() {
        let mut sets: Vec<String> = grid.iter().map(|s| s.to_string()).collect();
        sets.push("model.arch=cola".into());
        sets.push(format!("run.dir={}", root.path().join(format!("fail-{i}")).display()));
        sets.push("model.heads=4".into());
        let refs: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
        let cfg = common::config(root.path(), &refs);
        let t0 = std::time::Instant::now();
        let err = train(cfg, TrainOptions { resume: None, quiet: true, fault: Some((3, 2)), ..Default::default() })
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("rank 3") && msg.contains("injected fault at step 2"), "{grid:?}: {msg}");
        assert!(t0.elapsed().as_secs() < 60, "{grid:?}: the other ranks did not stop promptly");
    }
}
