use super::*;
use std::os::unix::fs::symlink;

/// A checkpoint as a save leaves it: its files, then `SHA256SUMS` over them.
fn checkpoint(root: &Path, step: u64) -> PathBuf {
    let dir = root.join(format!("step-{step:08}"));
    fs::create_dir_all(&dir).unwrap();
    let meta = CheckpointMeta {
        format: 1,
        step,
        tokens: 0,
        data_position: 0,
        data_seed: 0,
        data_mix: vec![],
        loss: None,
        config: String::new(),
    };
    fs::write(dir.join("meta.json"), serde_json::to_string(&meta).unwrap()).unwrap();
    fs::write(dir.join("model.safetensors"), vec![7u8; 100]).unwrap();
    manifest::write(&dir).unwrap();
    dir
}

fn mine(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("notes.txt"), "my notes").unwrap();
}

#[test]
fn prune_removes_only_checkpoints_boost_wrote_exactly_as_written() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("checkpoints");
    let outside = d.path().join("outside");
    for s in [2, 6, 8, 10] {
        checkpoint(&root, s);
    }
    // A checkpoint with a run of yours inside it, one without a manifest, a folder of yours
    // named like a step, a link to a folder of yours that holds a checkpoint, and a
    // checkpoint whose manifest lists a file it no longer holds: all older than the kept ones.
    let nested = checkpoint(&root, 4).join("r");
    mine(&nested);
    let bare = checkpoint(&root, 1);
    fs::remove_file(bare.join(manifest::FILE)).unwrap();
    mine(&root.join("step-00000003"));
    let target = checkpoint(&outside, 5);
    symlink(&target, root.join("step-00000005")).unwrap();
    let short = checkpoint(&root, 7);
    fs::remove_file(short.join("model.safetensors")).unwrap();

    prune(&root, 2).unwrap();
    let left: Vec<String> = {
        let mut v: Vec<String> =
            fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    let want = [
        "step-00000001",
        "step-00000003",
        "step-00000004",
        "step-00000005",
        "step-00000007",
        "step-00000008",
        "step-00000010",
    ];
    assert_eq!(left, want, "steps 2 and 6 (boost's, beyond the newest two) removed, nothing else");
    assert_eq!(fs::read_to_string(nested.join("notes.txt")).unwrap(), "my notes");
    assert!(root.join("step-00000004/model.safetensors").is_file(), "the folder holding yours is whole");
    assert_eq!(fs::read_to_string(root.join("step-00000003/notes.txt")).unwrap(), "my notes");
    assert!(
        target.join("model.safetensors").is_file() && target.join(manifest::FILE).is_file(),
        "a link is never followed"
    );
    assert!(bare.join("model.safetensors").is_file() && short.join("meta.json").is_file());
    assert_eq!(own_checkpoint(&root.join("step-00000004"), 4).unwrap_err(), "holds r, which is not a plain file");
    assert!(own_checkpoint(&root.join("step-00000005"), 5).unwrap_err().contains("symbolic link"));
    assert!(own_checkpoint(&short, 7).unwrap_err().contains("lacks model.safetensors"));
    assert!(own_checkpoint(&bare, 1).unwrap_err().contains("has no SHA256SUMS"));
    let added = checkpoint(&root, 12);
    fs::write(added.join("extra.txt"), "").unwrap();
    assert!(own_checkpoint(&added, 12).unwrap_err().contains("holds extra.txt, which its SHA256SUMS does not list"));
    // A meta.json edited since (its sum no longer matches), or of another step, is not boost's as written.
    fs::write(root.join("step-00000008/meta.json"), "{}").unwrap();
    assert!(own_checkpoint(&root.join("step-00000008"), 8).unwrap_err().contains("meta.json"));
    assert!(own_checkpoint(&root.join("step-00000010"), 9).unwrap_err().contains("step 9"));
}

#[test]
fn stale_temporaries_are_removed_only_when_a_save_made_them() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("checkpoints");
    let outside = d.path().join("outside");
    mine(&outside);
    // What saves and prunes leave: a save's folder (with and without a PID), a prune's half
    // removed one, a sharded save's with a rank's sidecar, and `latest`'s temporary.
    let single = checkpoint(&root, 4);
    fs::rename(&single, root.join(".tmp-step-00000004-123")).unwrap();
    let old = checkpoint(&root, 2);
    fs::remove_file(old.join("meta.json")).unwrap();
    fs::rename(&old, root.join(".old-step-00000002-99")).unwrap();
    fs::create_dir_all(root.join(".tmp-step-00000006")).unwrap();
    fs::write(root.join(".tmp-step-00000006/part.pp00.tp00.dp00.json.tmp"), "{").unwrap();
    fs::write(root.join(".tmp-step-00000006/model.pp00.tp01.safetensors"), "x").unwrap();
    fs::write(root.join(".latest.tmp"), "step-00000004").unwrap();
    // Yours, under names like those: kept.
    mine(&root.join(".tmp-notes"));
    mine(&root.join(".tmp-step-00000008"));
    symlink(&outside, root.join(".old-step-00000009-1")).unwrap();
    fs::create_dir_all(root.join(".tmp-step-00000010/sub")).unwrap();
    fs::write(root.join(".tmp-step-00000010/meta.json"), "{}").unwrap();
    fs::write(root.join(".tmp-step-00000012-x"), "").unwrap();

    let (n, bytes) = remove_stale(&root);
    assert_eq!(n, 4);
    assert!(bytes > 100, "{bytes}");
    let mut left: Vec<String> =
        fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(
        left,
        [".old-step-00000009-1", ".tmp-notes", ".tmp-step-00000008", ".tmp-step-00000010", ".tmp-step-00000012-x"]
    );
    assert_eq!(fs::read_to_string(outside.join("notes.txt")).unwrap(), "my notes", "a link's target is untouched");
    assert_eq!(fs::read_to_string(root.join(".tmp-step-00000008/notes.txt")).unwrap(), "my notes");
    assert!(root.join(".tmp-step-00000010/sub").is_dir() && root.join(".tmp-step-00000010/meta.json").is_file());

    // `latest`'s temporary only when it is a plain file naming a step.
    fs::write(root.join(".latest.tmp"), "my text").unwrap();
    assert_eq!(remove_stale(&root).0, 0);
    assert!(root.join(".latest.tmp").is_file());
    fs::write(root.join(".latest.tmp"), "step-000").unwrap();
    assert_eq!(remove_stale(&root).0, 1, "a name cut short by a kill");
}
