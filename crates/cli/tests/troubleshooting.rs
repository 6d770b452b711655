//! The troubleshooting guide quotes the messages the tool prints: for each failure made here,
//! some row of docs/guide/troubleshooting.md matches the message (its text, with `…` standing
//! for the parts that vary, found in order).

mod common;

use common::*;
use std::path::Path;

/// The first cell of every table row: the quoted message (in `…` or ``…``).
fn documented() -> Vec<String> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide/troubleshooting.md"))
            .unwrap();
    page.lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" | ").next())
        .map(|c| c.trim_matches('`').to_string())
        .filter(|c| !c.is_empty() && c != "message" && !c.starts_with("---"))
        .collect()
}

/// Whether `message` matches `pattern`: its pieces between `…` appear in order.
fn matches(pattern: &str, message: &str) -> bool {
    let mut rest = message;
    for piece in pattern.split('…').map(str::trim).filter(|p| !p.is_empty()) {
        match rest.find(piece) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    true
}

fn assert_documented(what: &str, stderr: &[u8]) {
    let message = String::from_utf8_lossy(stderr);
    let rows = documented();
    assert!(rows.len() > 20, "the guide's tables were not read: {rows:?}");
    assert!(rows.iter().any(|r| matches(r, &message)), "{what}: no row of troubleshooting.md matches:\n{message}");
}

#[test]
fn data_failures_print_what_the_guide_quotes() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    // One document: no train/validation split.
    std::fs::write(dir.join("one.txt"), "hello world").unwrap();
    let out =
        boost().args(["data", "--input"]).arg(dir.join("one.txt")).arg("--out").arg(dir.join("d1")).output().unwrap();
    assert!(!out.status.success());
    assert_documented("one document", &out.stderr);
    // A dataset smaller than one batch, then a shard changed after it was written.
    let data = dataset(dir);
    let train = |run: &str, extra: &[&str]| {
        boost()
            .arg("train")
            .args(["--set", &format!("data.dir={}", data.display()), "--set", "data.corpus=none"])
            .args(["--set", &format!("run.dir={}", dir.join(run).display()), "--set", "train.steps=1"])
            .args(extra.iter().flat_map(|s| ["--set", s]))
            .output()
            .unwrap()
    };
    let out = train("r1", &["train.seq_len=512", "train.micro_batch=64"]);
    assert!(!out.status.success());
    assert_documented("a dataset smaller than a batch", &out.stderr);
    let shard = data.join("train.bin");
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let out = train("r2", &["train.seq_len=16", "train.micro_batch=1"]);
    assert!(!out.status.success());
    assert_documented("a changed shard", &out.stderr);
}
