//! `data.mix`: two datasets blended by weight train the same under any data-parallel layout,
//! resume exactly (the checkpoint records each dataset's position), report a validation loss
//! per dataset, and refuse a resume under another blend, naming the key.

mod common;

use boost_checkpoint::Checkpoint;
use boost_train::{TrainOptions, train};
use std::path::Path;

/// The common dataset at `root/data` and a second one at `root/code`, tokenized alike.
fn build_two(root: &Path) {
    common::build_dataset(&root.join("data"));
    common::build_code_dataset(root);
}

fn mix(root: &Path, weights: (f64, f64)) -> String {
    format!(
        "data.mix=[{{ dir = \"{}\", weight = {} }}, {{ dir = \"{}\", weight = {}, name = \"code\" }}]",
        root.join("data").display(),
        weights.0,
        root.join("code").display(),
        weights.1
    )
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_mix_resumes_exactly_and_reports_each_dataset() {
    let root = tempfile::tempdir().unwrap();
    build_two(root.path());
    let m = mix(root.path(), (0.7, 0.3));
    let quiet = TrainOptions { resume: None, quiet: true, ..Default::default() };
    let full = train(common::config(root.path(), &[&m]), quiet.clone()).unwrap();
    assert_eq!(full.losses.len(), 6);

    // Each dataset's position is recorded: 3 steps of 4 sequences, 12 in all, 0.7 / 0.3.
    let ck_dir = root.path().join("run/checkpoints/step-00000003");
    let ck = Checkpoint::open(&ck_dir).unwrap();
    let pos: Vec<(&str, u64)> = ck.meta.data_mix.iter().map(|p| (p.name.as_str(), p.position)).collect();
    assert_eq!(pos, [("data", 8), ("code", 4)]);

    // Validation per dataset in metrics.jsonl; val_loss is their 0.7/0.3 mean.
    let metrics = std::fs::read_to_string(root.path().join("run/metrics.jsonl")).unwrap();
    let evals: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("val_losses").is_some())
        .collect();
    assert_eq!(evals.len(), 2, "{metrics}");
    for e in &evals {
        let (d, c) = (e["val_losses"]["data"].as_f64().unwrap(), e["val_losses"]["code"].as_f64().unwrap());
        let want = (0.7 * d + 0.3 * c) / (0.7 + 0.3);
        assert!((e["val_loss"].as_f64().unwrap() - want).abs() <= 1e-12 * want, "{e}");
        assert_ne!(d, c);
    }

    // Resuming continues bit for bit.
    let run2 = format!("run.dir={}", root.path().join("run2").display());
    let resumed = train(
        common::config(root.path(), &[&m, &run2]),
        TrainOptions { resume: Some(ck_dir.clone()), quiet: true, ..Default::default() },
    )
    .unwrap();
    assert_eq!(bits(&resumed.losses), bits(&full.losses[3..]));

    // Another blend is refused, naming the key and both values.
    let run3 = format!("run.dir={}", root.path().join("run3").display());
    let other = mix(root.path(), (0.5, 0.5));
    let e = train(
        common::config(root.path(), &[&other, &run3]),
        TrainOptions { resume: Some(ck_dir), quiet: true, ..Default::default() },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("data.mix") && e.contains("data=0.7") && e.contains("data=0.5"), "{e}");
}

#[test]
fn a_mix_trains_alike_on_one_and_two_data_parallel_ranks() {
    let root = tempfile::tempdir().unwrap();
    build_two(root.path());
    let m = mix(root.path(), (2.0, 1.0));
    let quiet = TrainOptions { resume: None, quiet: true, ..Default::default() };
    let one = train(common::config(root.path(), &[&m, "train.accumulation=2"]), quiet.clone()).unwrap();
    let run2 = format!("run.dir={}", root.path().join("run2").display());
    let two = train(common::config(root.path(), &[&m, &run2, "parallel.dp=2"]), quiet).unwrap();
    // The same 8 sequences per step in both layouts; only the order of the gradient sum
    // differs (fp32 rounding), so the losses agree to 1e-5 relative (docs/TESTING.md).
    for (a, b) in one.losses.iter().zip(&two.losses) {
        assert!((a - b).abs() <= 1e-5 * a.abs(), "{:?} vs {:?}", one.losses, two.losses);
    }
    // And differ from training on the first dataset alone: the blend is in the batches.
    let run3 = format!("run.dir={}", root.path().join("run3").display());
    let alone = train(
        common::config(root.path(), &[&run3, "train.accumulation=2"]),
        TrainOptions { quiet: true, ..Default::default() },
    )
    .unwrap();
    assert_ne!(bits(&alone.losses), bits(&one.losses));
}
