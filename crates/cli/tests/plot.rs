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
