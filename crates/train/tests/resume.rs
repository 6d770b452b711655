//! Resuming from a checkpoint continues bit-for-bit: the same per-step losses as the
//! uninterrupted run (weights, AdamW moments, step count and data position are restored,
//! and every reduction has a fixed order).

mod common;

use boost_checkpoint::Checkpoint;
use boost_train::{TrainOptions, train};

#[test]
fn resume_is_bit_exact_and_fresh_runs_do_not_overwrite() {
    let root = tempfile::tempdir().unwrap();
    common::build_dataset(&root.path().join("data"));
    let quiet = TrainOptions { resume: None, quiet: true, ..Default::default() };

    let full = train(common::config(root.path(), &["train.accumulation=2"]), quiet.clone()).unwrap();
    assert_eq!(full.losses.len(), 6);
    assert!(full.losses[5] < full.losses[0], "the loss falls: {:?}", full.losses);

    // Resume from step 3 into a fresh run directory.
    let ck = root.path().join("run/checkpoints/step-00000003");
    let cfg = common::config(
        root.path(),
        &["train.accumulation=2", &format!("run.dir={}", root.path().join("run2").display())],
    );
    let resumed = train(cfg, TrainOptions { resume: Some(ck), quiet: true, ..Default::default() }).unwrap();
    assert_eq!(resumed.first_step, 3);
    let a: Vec<u64> = full.losses[3..].iter().map(|x| x.to_bits()).collect();
    let b: Vec<u64> = resumed.losses.iter().map(|x| x.to_bits()).collect();
    assert_eq!(a, b, "resumed losses {:?} differ from {:?}", resumed.losses, &full.losses[3..]);
    assert_eq!(full.val.last().unwrap().1.to_bits(), resumed.val.last().unwrap().1.to_bits());

    // A fresh run into a directory with checkpoints is refused, and the checkpoint survives.
    let err = train(common::config(root.path(), &[]), quiet).unwrap_err().to_string();
    assert!(err.contains("--resume"), "{err}");
    Checkpoint::open(&root.path().join("run/checkpoints/step-00000006")).unwrap();
}
