//! Resuming, locking and reading checkpoints back: never over or through what a run did not write.

use crate::common::*;
use std::fs;

#[test]
fn resuming_an_older_checkpoint_never_overwrites_newer_ones() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &["train.steps=6", "train.keep_checkpoints=0"]));
    let before = snapshot(&run_dir);
    let old = run_dir.join("checkpoints/step-00000002");
    let e = fails(&train(&data, &run_dir, &["train.steps=6"]).arg("--resume").arg(&old).output().unwrap());
    assert!(e.contains("step-00000004") && e.contains("step-00000006") && e.contains("run.dir"), "{e}");
    assert_eq!(snapshot(&run_dir), before, "nothing in the run directory changed");
    // Branching into another run directory works, and reads the checkpoint where it is.
    let branch = root.path().join("branch");
    run(train(&data, &branch, &["train.steps=6"]).arg("--resume").arg(&old));
    assert_eq!(steps(&branch), [3, 4, 5, 6]);
    assert_eq!(snapshot(&run_dir), before);
}

#[test]
fn a_run_directory_is_locked_and_never_truncated() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    // Another run holds the directory.
    let lock = boost_train::run_dir::RunLock::acquire(&run_dir).unwrap();
    let e = fails(&train(&data, &run_dir, &[]).output().unwrap());
    assert!(e.contains("in use") && e.contains(&std::process::id().to_string()), "names the holder's PID: {e}");
    drop(lock);

    // A run killed before its first checkpoint left metrics: a new run does not truncate them.
    fs::write(run_dir.join("metrics.jsonl"), "{\"step\":1,\"loss\":5.0,\"tokens\":64}\n").unwrap();
    let before = snapshot(&run_dir);
    let e = fails(&train(&data, &run_dir, &[]).output().unwrap());
    assert!(e.contains("metrics.jsonl") && e.contains("run.dir"), "{e}");
    assert_eq!(snapshot(&run_dir), before);
}

/// A new run never replaces a `config.toml` it did not write, nor writes through a symbolic
/// link in its directory (both used to: the link's target took the resolved config, or the
/// lock's PID).
#[test]
fn a_run_never_writes_over_or_through_files_it_did_not_make() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let notes = root.path().join("notes.txt");
    fs::write(&notes, "my notes\n").unwrap();

    let mine = root.path().join("mine");
    fs::create_dir(&mine).unwrap();
    fs::write(mine.join("config.toml"), "# my config\n").unwrap();
    let e = fails(&train(&data, &mine, &[]).output().unwrap());
    assert!(e.contains(&mine.join("config.toml").display().to_string()) && e.contains("never replaces"), "{e}");
    assert_eq!(fs::read_to_string(mine.join("config.toml")).unwrap(), "# my config\n");

    #[cfg(unix)]
    {
        use std::os::unix::fs::symlink;
        let linked = root.path().join("linked");
        fs::create_dir(&linked).unwrap();
        symlink(&notes, linked.join("config.toml")).unwrap();
        let e = fails(&train(&data, &linked, &[]).output().unwrap());
        assert!(e.contains("config.toml"), "{e}");
        let locked = root.path().join("locked");
        fs::create_dir(&locked).unwrap();
        symlink(&notes, locked.join(".lock")).unwrap();
        let e = fails(&train(&data, &locked, &[]).output().unwrap());
        assert!(e.contains(".lock") && e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&notes).unwrap(), "my notes\n", "the link's target is untouched");
    }

    // A run that stopped before its first checkpoint left its own config: the same run again
    // starts over it, and a resumed run replaces its own.
    let again = root.path().join("again");
    run(&mut train(&data, &again, &[]));
    fs::remove_dir_all(again.join("checkpoints")).unwrap();
    fs::remove_file(again.join("metrics.jsonl")).unwrap();
    run(&mut train(&data, &again, &[]));
    run(train(&data, &again, &["train.steps=6"]).arg("--resume"));
    assert!(fs::read_to_string(again.join("config.toml")).unwrap().contains("steps = 6"));
    // Another run's checkpoint resumed into a directory holding only a config of yours: the
    // directory is fresh, but the config is not the run's to replace.
    let e = fails(
        &train(&data, &mine, &["train.steps=8"])
            .arg("--resume")
            .arg(again.join("checkpoints/step-00000006"))
            .output()
            .unwrap(),
    );
    assert!(e.contains("never replaces"), "{e}");
    assert_eq!(fs::read_to_string(mine.join("config.toml")).unwrap(), "# my config\n");

    let e = fails(&boost().args(["train", "--set", "run.dir="]).output().unwrap());
    assert!(e.contains("run.dir") && e.contains("empty"), "{e}");
}

/// A resume never mixes two runs in one directory: another run's checkpoint goes only into a
/// directory as fresh as a new run's (it used to add its checkpoints and metrics to the
/// directory's own, and `keep_checkpoints` then pruned the directory's run). A resume with
/// nothing to train, or with another data order, is refused rather than run.
#[test]
fn a_resume_never_mixes_two_runs_or_runs_for_nothing() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    run(&mut train(&data, &a, &[]));
    run(&mut train(&data, &b, &["train.seed=7"]));
    let before = snapshot(&a);
    let other = b.join("checkpoints/step-00000004");
    let e = fails(
        &train(&data, &a, &["train.steps=8", "train.keep_checkpoints=1"]).arg("--resume").arg(&other).output().unwrap(),
    );
    assert!(e.contains("already holds checkpoints") && e.contains("another run's"), "{e}");
    assert_eq!(snapshot(&a), before, "the directory's own run is untouched");

    let e = fails(&train(&data, &a, &["train.steps=2"]).arg("--resume").output().unwrap());
    assert!(e.contains("train.steps = 2") && e.contains("step 4"), "{e}");
    let e = fails(
        &train(&data, &root.path().join("c"), &["train.steps=6", "data.seed=5"])
            .arg("--resume")
            .arg(a.join("checkpoints/step-00000004"))
            .output()
            .unwrap(),
    );
    assert!(e.contains("data.seed"), "{e}");
    assert_eq!(snapshot(&a), before);
}

#[test]
fn metrics_hold_one_line_per_step_after_a_resume_and_stale_temporaries_go() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &["train.keep_checkpoints=0"]));
    // As if killed while saving step 4: its checkpoint never completed, metrics went on.
    let ck = run_dir.join("checkpoints");
    fs::rename(ck.join("step-00000004"), ck.join(".tmp-step-00000004-999")).unwrap();
    fs::write(ck.join("latest"), "step-00000002").unwrap();
    fs::write(ck.join(".latest.tmp"), "step-0000").unwrap();
    let out = run(train(&data, &run_dir, &["train.steps=6"]).arg("--resume"));
    assert!(String::from_utf8_lossy(&out.stderr).is_empty(), "--quiet");
    assert_eq!(steps(&run_dir), [1, 2, 3, 4, 5, 6], "one line per step");
    let side: Vec<String> = fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("metrics.after-step-2"))
        .collect();
    assert_eq!(side.len(), 1, "the replaced lines are kept: {side:?}");
    assert_eq!(fs::read_to_string(run_dir.join(&side[0])).unwrap().lines().count(), 2, "steps 3 and 4");
    let leftovers: Vec<_> =
        fs::read_dir(&ck).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with('.')).collect();
    assert!(leftovers.is_empty(), "stale temporaries removed: {leftovers:?}");
}

#[test]
fn damaged_checkpoints_are_named_and_never_used() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let ck = run_dir.join("checkpoints/step-00000004");
    assert!(ck.join("SHA256SUMS").is_file());
    for file in ["model.safetensors", "optim.safetensors", "meta.json"] {
        let dir = root.path().join(format!("flipped-{file}"));
        fs::create_dir_all(dir.join("checkpoints")).unwrap();
        let copy = dir.join("checkpoints/step-00000004");
        fs::create_dir_all(&copy).unwrap();
        for f in fs::read_dir(&ck).unwrap().flatten() {
            fs::copy(f.path(), copy.join(f.file_name())).unwrap();
        }
        let p = copy.join(file);
        let mut bytes = fs::read(&p).unwrap();
        let at = bytes.len() - 3;
        bytes[at] ^= 0x10;
        fs::write(&p, &bytes).unwrap();
        let e = fails(&boost().args(["eval", "--checkpoint"]).arg(&copy).output().unwrap());
        assert!(e.contains(file) && e.contains("corrupt"), "{e}");
        let out = root.path().join(format!("export-{file}"));
        let e = fails(&boost().args(["export", "--checkpoint"]).arg(&copy).arg("--out").arg(&out).output().unwrap());
        assert!(e.contains(file), "{e}");
        assert!(!out.exists(), "no export from a damaged checkpoint");
        let e = fails(&train(&data, &dir, &["train.steps=6"]).arg("--resume").arg(&copy).output().unwrap());
        assert!(e.contains(file), "{e}");
    }
}

#[test]
fn a_resume_that_changes_the_model_or_tokenizer_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let before = snapshot(&run_dir);
    for (set, key) in [
        ("model.layers=3", "model.layers"),
        ("model.arch=svd", "model.arch"),
        ("model.tie_embeddings=true", "model.tie_embeddings"),
    ] {
        let e = fails(&train(&data, &run_dir, &["train.steps=6", set]).arg("--resume").output().unwrap());
        assert!(e.contains(key) && e.contains("checkpoint"), "{set}: {e}");
    }
    // --config is applied over the checkpoint's config, so its model change is refused too.
    let file = root.path().join("more.toml");
    fs::write(&file, "[model]\nkv_heads = 2\n[train]\nsteps = 6\n").unwrap();
    let e = fails(&train(&data, &run_dir, &[]).arg("--resume").arg("--config").arg(&file).output().unwrap());
    assert!(e.contains("model.kv_heads"), "{e}");

    // Another tokenizer: a BPE trained on other text.
    let other = root.path().join("other-data");
    let words = ["zebra", "quartz", "jumps", "vex", "glyph", "fjord", "nymph", "blitz"];
    let mut cmd = boost();
    cmd.arg("data");
    for d in 0..4 {
        let text = root.path().join(format!("other{d}.txt"));
        let body: String = (0..1500).map(|i| format!("{} ", words[(i * 7 + i / 3 + d) % words.len()])).collect();
        fs::write(&text, body).unwrap();
        cmd.arg("--input").arg(&text);
    }
    run(cmd.arg("--out").arg(&other).args(["--vocab-size", "300", "--val-fraction", "0.25"]));
    let e = fails(
        &train(&data, &run_dir, &["train.steps=6"])
            .args(["--resume", "--set"])
            .arg(format!("data.dir={}", other.display()))
            .output()
            .unwrap(),
    );
    assert!(e.contains("tokenizer") && e.contains("other-data"), "{e}");
    // Scoring it with `eval --data` is refused alike.
    let e = fails(&boost().args(["eval", "--checkpoint"]).arg(&run_dir).arg("--data").arg(&other).output().unwrap());
    assert!(e.contains("tokenizer") && e.contains("other-data"), "{e}");
    assert_eq!(snapshot(&run_dir), before);
    // Unchanged, it resumes.
    run(train(&data, &run_dir, &["train.steps=6"]).arg("--resume"));
}

/// Pruning (`train.keep_checkpoints`) removes only checkpoints boost wrote, exactly as their
/// manifest lists them: a run of yours inside an old checkpoint's folder survives, named in a
/// warning (the whole folder used to be deleted by its name, silently).
#[test]
fn pruning_removes_only_checkpoints_boost_wrote() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let r = root.path().join("R");
    run(&mut train(&data, &r, &["train.steps=6", "train.keep_checkpoints=0"]));
    // A run of yours moved inside one of R's checkpoints (a run started there is refused).
    let elsewhere = root.path().join("elsewhere");
    run(&mut train(&data, &elsewhere, &[]));
    let nested = r.join("checkpoints/step-00000004/r");
    fs::rename(&elsewhere, &nested).unwrap();
    let before = snapshot(&nested);
    assert!(before.len() > 5, "{before:?}");
    let sets = ["train.steps=10", "train.checkpoint_every=2", "train.keep_checkpoints=2"];
    let out = run(train(&data, &r, &sets).arg("--resume"));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(snapshot(&nested), before, "the nested run is whole");
    assert!(e.contains("step-00000004 holds r,") && e.contains("it is kept"), "{e}");
    let mut left: Vec<String> =
        fs::read_dir(r.join("checkpoints")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    left.sort();
    assert_eq!(left, ["latest", "step-00000004", "step-00000008", "step-00000010"], "boost's own beyond two went");
}

/// A file its manifest does not list is not used and is named (it used to pass silently): the
/// checkpoint evaluates as before, from its listed files.
#[test]
fn a_file_the_manifest_does_not_list_is_named_and_not_used() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let r = root.path().join("run");
    run(&mut train(&data, &r, &[]));
    let ck = r.join("checkpoints/step-00000004");
    let eval = || run(boost().args(["eval", "--checkpoint"]).arg(&ck));
    let clean = eval();
    assert!(!String::from_utf8_lossy(&clean.stderr).contains("not listed"));
    fs::write(ck.join("optim.extra.safetensors"), "not a checkpoint file").unwrap();
    let before = snapshot(&r);
    let out = eval();
    let e = String::from_utf8_lossy(&out.stderr);
    let named = format!("warning: {} is not listed in SHA256SUMS", ck.join("optim.extra.safetensors").display());
    assert!(e.contains(&named) && e.contains("cannot be verified and is not used"), "{e}");
    assert_eq!(out.stdout, clean.stdout, "the same result from the listed files");
    assert_eq!(snapshot(&r), before);
}
