//! `boost data` on a full or read-only file system fails naming the output path and leaves
//! nothing behind. Needs root to mount a tmpfs; otherwise the tests print "skipped" and pass.

mod common;

use boost_data::{BuildOptions, Document, TokenizerChoice, build};
use std::path::Path;
use std::process::Command;

/// A tmpfs mounted on a new temporary directory, unmounted on drop.
struct Mount(tempfile::TempDir);

impl Mount {
    fn new(options: &str) -> Option<Mount> {
        let d = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(d.path())
            .output()
            .is_ok_and(|o| o.status.success());
        if ok { Some(Mount(d)) } else { None }
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn remount(&self, options: &str) -> bool {
        Command::new("mount").args(["-o", options]).arg(self.path()).output().is_ok_and(|o| o.status.success())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).output();
    }
}

fn big_docs() -> Vec<Document> {
    (0..8)
        .map(|i| Document { name: format!("d{i}"), text: format!("line {i} of some text here\n").repeat(4000) })
        .collect()
}

fn opts() -> BuildOptions {
    BuildOptions { tokenizer: TokenizerChoice::Bpe, ..common::opts() }
}

#[test]
fn a_full_disk_is_named_and_leaves_nothing() {
    let Some(m) = Mount::new("size=64k") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    let out = m.path().join("ds");
    let e = format!("{:#}", build(&big_docs(), &opts(), &out).unwrap_err());
    assert!(e.contains(&out.display().to_string()) && e.contains("No space left"), "{e}");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(m.path()).unwrap().count(), 0, "the partial build and the lock are removed");
}

#[test]
fn a_read_only_disk_is_named_and_an_existing_dataset_is_kept() {
    let Some(m) = Mount::new("size=4m") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    let existing = m.path().join("old");
    build(&common::docs(), &common::opts(), &existing).unwrap();
    if !m.remount("remount,ro") {
        eprintln!("skipped: cannot remount the tmpfs read-only");
        return;
    }
    let before = common::hash_tree(m.path());
    let out = m.path().join("ds");
    let e = format!("{:#}", build(&big_docs(), &opts(), &out).unwrap_err());
    assert!(e.contains(&out.display().to_string()) && e.contains("Read-only file system"), "{e}");
    assert_eq!(common::hash_tree(m.path()), before);
}
