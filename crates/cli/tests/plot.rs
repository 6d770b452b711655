//! `boost plot` end to end: a trained run's figure, and the errors a user sees.

mod common;

use common::*;

#[test]
fn plots_trained_runs_and_names_what_is_wrong() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let (a, b) = (root.path().join("cola"), root.path().join("full"));
    run(boost().arg("train").args(tiny(&data, &a, &[])).arg("--quiet"));
    run(boost().arg("train").args(tiny(&data, &b, &["model.arch=full"])).arg("--quiet"));
    let fig = root.path().join("compare.svg");
    let out = run(boost().arg("plot").arg(&a).arg(&b).arg("--out").arg(&fig));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), fig.display().to_string());
    let svg = std::fs::read_to_string(&fig).unwrap();
    assert!(svg.contains("cola") && svg.contains("full"), "both runs are in the legend");

    // An existing figure is kept; a directory without metrics is named.
    let again = boost().arg("plot").arg(&a).arg("--out").arg(&fig).output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&fig).unwrap(), svg, "the existing figure is unchanged");
    let empty = root.path().join("not-a-run");
    std::fs::create_dir_all(&empty).unwrap();
    let bad = boost().arg("plot").arg(&empty).arg("--out").arg(root.path().join("x.png")).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("not-a-run") && err.contains("no metrics.jsonl"), "{err}");
}

/// `boost train --trace` writes the run's timeline, `boost plot --trace` draws it, and a
/// resumed run keeps a trace.json boost did not write, refusing before any step.
#[test]
fn traces_a_tp2_pp2_run_draws_it_and_keeps_a_foreign_trace() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let dir = root.path().join("grid");
    let grid = ["parallel.tp=2", "parallel.pp=2"];
    run(boost().arg("train").args(tiny(&data, &dir, &grid)).args(["--quiet", "--trace", "3..4"]));
    let trace = dir.join("trace.json");
    let fig = root.path().join("timeline.svg");
    run(boost().args(["plot", "--trace"]).arg(&trace).arg("--out").arg(&fig));
    let svg = std::fs::read_to_string(&fig).unwrap();
    for text in ["rank 3 (dp 0, pp 1, tp 1)", "pp send/recv", "tp comm", "compute"] {
        assert!(svg.contains(text), "the figure names {text}");
    }

    std::fs::write(&trace, "my own notes").unwrap();
    let steps = ["parallel.tp=2", "parallel.pp=2", "train.steps=6"];
    let resumed = boost()
        .arg("train")
        .args(tiny(&data, &dir, &steps))
        .args(["--quiet", "--resume", "--trace", "5"])
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(1));
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(err.contains("trace.json") && err.contains("not a trace boost wrote"), "{err}");
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "my own notes", "kept byte for byte");
    assert_eq!(losses(&dir).len(), 4, "refused before any step");
}
