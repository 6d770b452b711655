//! A build never replaces what is already in its output directory, is locked while it runs, and
//! the demo corpus is never built into a directory holding other files.

mod common;

use boost_data::{Dataset, OutputGuard, build, job, prepare};
use common::{cli_args, docs, hash_tree, opts};

#[test]
fn an_existing_dataset_is_never_replaced() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("ds");
    build(&docs(), &opts(), &out).unwrap();
    let before = hash_tree(d.path());
    let mut o = opts();
    o.vocab_size = 280;
    let e = format!("{:#}", build(&docs(), &o, &out).unwrap_err());
    assert!(e.contains(&out.display().to_string()) && e.contains("meta.json") && e.contains("another --out"), "{e}");
    assert_eq!(hash_tree(d.path()), before);

    // Through `boost data`, the refusal comes before the inputs are read.
    let input = d.path().join("in.txt");
    std::fs::write(&input, "some text").unwrap();
    let before = hash_tree(d.path());
    let e = format!("{:#}", job::run(&cli_args(&out, vec![input])).unwrap_err());
    assert!(e.contains(&out.display().to_string()) && e.contains("not empty"), "{e}");
    assert_eq!(hash_tree(d.path()), before);
}

#[test]
fn a_directory_of_user_files_is_never_written() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("mine");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "my notes").unwrap();
    let before = hash_tree(d.path());
    let e = format!("{:#}", job::run(&cli_args(&out, vec![d.path().join("missing.txt")])).unwrap_err());
    assert!(e.contains(&out.display().to_string()) && e.contains("notes.txt") && e.contains("delete"), "{e}");
    assert_eq!(hash_tree(d.path()), before);
    // An empty directory is fine, and so is one that does not exist.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    build(&docs(), &opts(), &empty).unwrap();
    Dataset::open(&empty).unwrap();
}

#[test]
fn a_second_builder_fails_naming_the_pid() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("ds");
    let held = OutputGuard::acquire(&out, &[]).unwrap();
    let input = d.path().join("in.txt");
    std::fs::write(&input, "some text").unwrap();
    let e = format!("{:#}", job::run(&cli_args(&out, vec![input])).unwrap_err());
    assert!(e.contains(&format!("PID {}", std::process::id())) && e.contains(&out.display().to_string()), "{e}");
    assert!(!out.exists());
    drop(held);
    build(&docs(), &opts(), &out).unwrap();
    // Only the dataset is left: no lock file, no temporary directory.
    let names: Vec<String> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn an_interrupted_build_leaves_no_dataset_and_is_cleaned_up() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("ds");
    // What a build killed before its rename leaves: a temporary directory beside the output.
    let stale = d.path().join(".ds.build-123-0-0.tmp");
    std::fs::create_dir(&stale).unwrap();
    std::fs::write(stale.join("train.bin"), "half").unwrap();
    assert!(!Dataset::is_complete(&out));
    build(&docs(), &opts(), &out).unwrap();
    assert!(!stale.exists());
    Dataset::open(&out).unwrap();
}

fn shakespeare_cfg(dir: &std::path::Path) -> boost_config::DataConfig {
    boost_config::DataConfig { dir: dir.display().to_string(), corpus: "shakespeare".into(), ..Default::default() }
}

#[test]
fn the_demo_corpus_never_overwrites_an_incomplete_directory() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("custom");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("train.bin"), "my own tokens").unwrap();
    std::fs::write(dir.join("notes.txt"), "my notes").unwrap();
    let before = hash_tree(d.path());
    let e = format!("{:#}", prepare(&shakespeare_cfg(&dir)).unwrap_err());
    for want in ["data.dir", &dir.display().to_string(), "meta.json", "val.bin", "tokenizer.json", "notes.txt"] {
        assert!(e.contains(want), "{want} not in: {e}");
    }
    assert!(e.contains("new directory") && e.contains("boost data --input"), "{e}");
    assert_eq!(hash_tree(d.path()), before);

    // A file where the directory should be is refused as well.
    let file = d.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let e = format!("{:#}", prepare(&shakespeare_cfg(&file)).unwrap_err());
    assert!(e.contains("not a directory") && e.contains("data.dir"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn the_demo_corpus_setting_uses_a_complete_dataset_as_is() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("ds");
    let meta = build(&docs(), &opts(), &dir).unwrap();
    let before = hash_tree(d.path());
    let ds = prepare(&shakespeare_cfg(&dir)).unwrap();
    assert_eq!(ds.meta, meta);
    assert_eq!(hash_tree(d.path()), before);
}
