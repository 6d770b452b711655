//! `parallel.overlap`: data-parallel gradient buckets reduced during the backward pass,
//! ZeRO-1 parameter gathers started during the update and pipeline transfers posted ahead
//! move the same bytes as the blocking order, so `boost train` gives bit-identical losses and
//! gradients with overlap on and off, for every layout.

mod common;

use common::*;

#[test]
fn losses_and_gradients_are_bit_identical_with_overlap_on_and_off() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let layouts: [&[&str]; 7] = [
        &["parallel.dp=2", "train.accumulation=2"],
        &["parallel.dp=2", "parallel.zero=1", "train.accumulation=1"],
        // Tied embeddings on the pipeline's end stages: their bucket waits for the stages' sum.
        &["parallel.dp=2", "parallel.pp=2", "train.accumulation=2", "model.tie_embeddings=true"],
        &["parallel.dp=2", "parallel.pp=2", "parallel.schedule=afab", "parallel.zero=1", "train.accumulation=2"],
        &["parallel.dp=2", "parallel.pp=2", "parallel.tp=2", "train.accumulation=2"],
        // tp chunks: the buckets start as every chunk's backward finishes their layers.
        &["parallel.dp=2", "parallel.tp=2", "parallel.tp_chunks=2", "train.accumulation=2"],
        &["parallel.dp=2", "parallel.tp=2", "parallel.tp_chunks=2", "parallel.zero=1", "model.tie_embeddings=true"],
    ];
    for (i, sets) in layouts.iter().enumerate() {
        let runs: Vec<_> = ["true", "false"]
            .iter()
            .map(|on| {
                let dir = root.path().join(format!("run{i}-{on}"));
                let overlap = format!("parallel.overlap={on}");
                // Buckets far smaller than the model, so several start during the backward.
                let extra: Vec<&str> =
                    sets.iter().copied().chain([overlap.as_str(), "parallel.bucket_mb=0.001"]).collect();
                run(boost().arg("train").args(tiny(&data, &dir, &extra)).args(["--quiet", "--dump-grads", "3"]));
                (losses(&dir), grads(&dir, 3))
            })
            .collect();
        let ((loss_on, grads_on), (loss_off, grads_off)) = (&runs[0], &runs[1]);
        time_split_is_exposed_within_in_flight(&root.path().join(format!("run{i}-true")), true);
        time_split_is_exposed_within_in_flight(&root.path().join(format!("run{i}-false")), false);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(loss_on), bits(loss_off), "{sets:?}: losses {loss_on:?} vs {loss_off:?}");
        assert_eq!(grads_on.len(), grads_off.len());
        for ((name, a), (_, b)) in grads_on.iter().zip(grads_off) {
            let same = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{sets:?}: gradient of {name} differs with overlap");
        }
        // The checkpoints hold the same weights and optimizer state, byte for byte: under
        // ZeRO-1 the parameters a checkpoint writes are whole, not still being gathered.
        let (on, off) = (root.path().join(format!("run{i}-true")), root.path().join(format!("run{i}-false")));
        let files = checkpoint_tensors(&on);
        assert!(files.len() >= 2, "{sets:?}: checkpoints {files:?}");
        assert_eq!(files, checkpoint_tensors(&off), "{sets:?}: checkpoint files");
        for f in &files {
            let same = std::fs::read(on.join(f)).unwrap() == std::fs::read(off.join(f)).unwrap();
            assert!(same, "{sets:?}: {} differs with overlap", f.display());
        }
    }
}

/// The tensor files of a run's checkpoints (checkpoints/STEP/*.safetensors), relative to the
/// run directory, sorted.
fn checkpoint_tensors(run: &std::path::Path) -> Vec<std::path::PathBuf> {
    let tensors =
        |p: &std::path::Path| p.components().count() == 2 && p.extension().is_some_and(|e| e == "safetensors");
    common::tree(&run.join("checkpoints"))
        .into_keys()
        .filter(|p| tensors(p))
        .map(|p| std::path::Path::new("checkpoints").join(p))
        .collect()
}

/// A rank that fails while its replicas' gradient buckets and its neighbours' transfers are in
/// flight on the progress threads still stops every rank promptly, with an error naming it.
#[test]
fn a_rank_failing_with_reductions_in_flight_is_named() {
    let sets =
        ["parallel.dp=2", "parallel.pp=2", "train.accumulation=2", "parallel.overlap=true", "parallel.bucket_mb=0.001"];
    fails_naming_the_rank(&sets, 3, 2);
}

/// Under ZeRO-1 a replica that fails between steps, while the parameter gathers of its last
/// update are still in flight into the next forward, stops the other replica with an error
/// naming it.
#[test]
fn a_replica_failing_with_parameter_gathers_in_flight_is_named() {
    let sets = ["parallel.dp=2", "parallel.zero=1", "parallel.overlap=true", "parallel.bucket_mb=0.001"];
    fails_naming_the_rank(&sets, 1, 2);
}

/// `boost train` with `sets`, rank `rank` failing at the start of step `step`: the run exits
/// with 1 within 60 s, and its error names that rank and the fault.
fn fails_naming_the_rank(sets: &[&str], rank: usize, step: u64) {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let dir = root.path().join("fail");
    let t0 = std::time::Instant::now();
    let out = boost()
        .arg("train")
        .args(tiny(&data, &dir, sets))
        .args(["--quiet", "--inject-fault", &format!("{rank}:{step}")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("rank {rank}")) && err.contains(&format!("injected fault at step {step}")), "{err}");
    assert!(t0.elapsed().as_secs() < 60, "the other ranks did not stop promptly");
}

/// Each step's `time_split`: data-parallel calls were in flight; the step waited for at most
/// that long (1 ms for the hand-over from the progress thread), and for exactly that long
/// when every call blocked.
fn time_split_is_exposed_within_in_flight(run: &std::path::Path, overlap: bool) {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = &v["time_split"];
        let (exposed, flight) = (t["dp_s"].as_f64().unwrap(), t["dp_in_flight_s"].as_f64().unwrap());
        assert!(flight > 0.0, "{}: no data-parallel time in flight: {t}", run.display());
        if overlap {
            assert!(exposed <= flight + 1e-3, "{}: exposed {exposed} > in flight {flight}", run.display());
        } else {
            assert_eq!(exposed, flight, "{}: blocking calls are exposed whole", run.display());
        }
    }
}
