//! `boost data` and `boost train` never overwrite a user's dataset or directory, lock their
//! output, and report bad config files with the file, line and column.

mod common;

use common::{boost, dataset, tree};
use std::collections::BTreeMap;
use std::path::Path;

/// The contents of every file under `dir`, by relative path (folders end in `/`).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let name = |p: &Path, folder: bool| p.display().to_string() + if folder { "/" } else { "" };
    tree(dir).into_iter().map(|(p, bytes)| (name(&p, bytes.is_none()), bytes.unwrap_or_default())).collect()
}

fn fails(cmd: &mut std::process::Command) -> String {
    let o = cmd.output().unwrap();
    assert!(!o.status.success(), "succeeded: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn data_refuses_an_existing_dataset() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let before = snapshot(root.path());
    let input = root.path().join("doc0.txt");
    let e = fails(boost().args(["data", "--vocab-size", "280", "--input"]).arg(&input).arg("--out").arg(&data));
    assert!(e.contains(&data.display().to_string()) && e.contains("not empty") && e.contains("another --out"), "{e}");
    assert_eq!(snapshot(root.path()), before);
}

#[test]
fn train_never_builds_the_demo_corpus_over_a_custom_directory() {
    let root = tempfile::tempdir().unwrap();
    let custom = root.path().join("custom");
    std::fs::create_dir(&custom).unwrap();
    std::fs::write(custom.join("train.bin"), "my tokens").unwrap();
    std::fs::write(custom.join("tokenizer.json"), "{\"my\": \"tokenizer\"}").unwrap();
    let before = snapshot(root.path());
    let e = fails(
        boost()
            .args(["train", "--quiet", "--set"])
            .arg(format!("data.dir={}", custom.display()))
            .arg("--set")
            .arg(format!("run.dir={}", root.path().join("run").display())),
    );
    assert!(e.contains("data.dir") && e.contains("meta.json") && e.contains("val.bin"), "{e}");
    assert!(!e.contains("downloading"), "{e}");
    let after = snapshot(root.path());
    for (k, v) in &before {
        assert_eq!(after.get(k), Some(v), "{k} changed");
    }
}

/// A `data.dir` that does not exist is more likely a mistyped path than a wish to train on
/// Shakespeare: with the default `data.corpus = "auto"` the demo corpus is built only into
/// its own folder, and anywhere else nothing is created or downloaded.
#[test]
fn a_missing_custom_data_dir_is_an_error_not_the_demo_corpus() {
    let root = tempfile::tempdir().unwrap();
    let typo = root.path().join("my-corpsu");
    let e = fails(
        boost()
            .args(["train", "--quiet", "--set"])
            .arg(format!("data.dir={}", typo.display()))
            .arg("--set")
            .arg(format!("run.dir={}", root.path().join("run").display())),
    );
    assert!(e.contains(&format!("data.dir = \"{}\"", typo.display())) && e.contains("data.corpus"), "{e}");
    assert!(!e.contains("downloading"), "{e}");
    assert!(!typo.exists(), "{} was created", typo.display());
}

#[test]
fn a_bad_config_file_names_its_line_and_column() {
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("run.toml");
    std::fs::write(&cfg, "[train]\nsteps = 10\nlr = 3e-3 x\n").unwrap();
    let e = fails(boost().args(["train", "--quiet", "--config"]).arg(&cfg));
    assert!(e.contains(&format!("{}:3:", cfg.display())), "{e}");
    let e = fails(boost().args(["train", "--quiet", "--set", "parallel.link_alpha_us=-5"]));
    assert!(e.contains("parallel.link_alpha_us") && e.contains("-5"), "{e}");
}
