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

/// Ctrl-C while `boost data` writes its shards: the half-built folder beside the output and the
/// lock are removed, and the process exits with 130 (128 + SIGINT). Before, the signal killed
/// it and both stayed behind until the next build to the same output.
#[test]
fn ctrl_c_during_a_data_build_leaves_nothing_behind() {
    let root = tempfile::tempdir().unwrap();
    // 24 MB of JSONL: long enough to tokenize that the signal lands while shards are written.
    let words = ["alpha", "beta", "gamma", "delta", "tokens", "model", "rank", "layer", "the", "of"];
    let mut x: u64 = 7;
    let mut text = String::new();
    for _ in 0..40_000 {
        text.push_str("{\"text\": \"");
        for w in 0..120 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(words[(x % words.len() as u64) as usize]);
            text.push_str(if w < 119 { " " } else { "\"}\n" });
        }
    }
    let input = root.path().join("corpus.jsonl");
    std::fs::write(&input, text).unwrap();
    let out = root.path().join("ds");
    let child = boost()
        .args(["data", "--vocab-size", "300", "--input"])
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let building = |p: &Path| {
        std::fs::read_dir(p).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with(".ds.build-"))
    };
    interrupt_when(child, || building(root.path()));
    let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, [std::ffi::OsString::from("corpus.jsonl")], "only the input is left");
}

/// Once `building()` (the child's build folder is on disk), sends the child a SIGINT and checks
/// that it exits 130 saying it removed the unfinished output.
fn interrupt_when(mut child: std::process::Child, building: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !building() {
        assert!(child.try_wait().unwrap().is_none(), "the build ended before it could be interrupted");
        assert!(start.elapsed().as_secs() < 120, "no build folder appeared in 120 s");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: a signal to our own child, which has not been waited for, so its PID is its own.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{e}");
    assert!(e.contains("interrupted by SIGINT") && e.contains("removed the unfinished output"), "{e}");
}

/// `boost train` stops at a step boundary on Ctrl-C, but before its first step it may be
/// downloading and building the demo corpus, which needs the network: there
/// `signals::exit_during` makes a signal end the process at once, removing what was being
/// built, as `boost data` does. This test runs its own binary again as the child, which installs
/// `boost train`'s handlers and, inside `exit_during` as `prepare` calls it, creates a pending
/// build folder as the data build does and waits. A real SIGINT must end it with 130 and no
/// folder left; before, the child slept on and failed.
#[test]
fn ctrl_c_while_train_prepares_its_data_ends_it_at_once() {
    const CHILD: &str = "BOOST_TEST_PREPARE_DIR";
    if let Ok(dir) = std::env::var(CHILD) {
        boost_train::signals::install().unwrap();
        boost_train::signals::exit_during(|| {
            let build = boost_files::temp_dir_in(Path::new(&dir), ".ds.build-").unwrap();
            std::fs::write(build.path().join("shard-0.bin"), b"tokens").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(120));
            drop(build);
        });
        panic!("the signal did not end the data preparation");
    }
    let root = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "ctrl_c_while_train_prepares_its_data_ends_it_at_once", "--nocapture", "--test-threads=1"])
        .env(CHILD, root.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    interrupt_when(child, || std::fs::read_dir(root.path()).unwrap().next().is_some());
    assert!(start.elapsed().as_secs() < 100, "ended by the signal, not after the child's wait");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "the build folder is removed");
}
