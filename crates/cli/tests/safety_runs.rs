//! Fault injection through the binary: nothing a user has is lost or silently changed. Each
//! case hashes the user's files before and after, and checks that the message names the
//! thing (path, key, PID, step).

mod common;

use common::*;
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

#[test]
fn a_nan_never_reaches_a_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let out =
        train(&data, &run_dir, &["train.lr=1e6", "train.warmup_steps=0", "train.steps=8", "train.checkpoint_every=1"])
            .output()
            .unwrap();
    let e = fails(&out);
    assert!(e.contains("step") && (e.contains("NaN") || e.contains("inf")), "{e}");
    // Whatever `latest` names holds weights that score finite.
    if run_dir.join("checkpoints/latest").exists() {
        run(boost().args(["eval", "--checkpoint"]).arg(&run_dir));
    }
    assert!(!run_dir.join("checkpoints/latest").exists(), "the first update already ruined the weights");
    // With train.skip_nonfinite the steps with NaN gradients are skipped and flagged; here the
    // weights stay ruined, so the final checkpoint is still refused.
    let skip = root.path().join("skip");
    let out =
        train(&data, &skip, &["train.lr=1e6", "train.warmup_steps=0", "train.steps=6", "train.skip_nonfinite=true"])
            .output()
            .unwrap();
    let e = fails(&out);
    assert!(e.contains("not written"), "{e}");
    let text = fs::read_to_string(skip.join("metrics.jsonl")).unwrap();
    // Step 2 is skipped; its checkpoint (checkpoint_every = 2) is then refused.
    assert!(text.lines().nth(1).is_some_and(|l| l.contains("\"skipped\"")), "step 2 skipped:\n{text}");
    assert!(!skip.join("checkpoints/latest").exists());
}

#[test]
fn sigterm_stops_with_a_checkpoint_that_resumes() {
    sigterm_case(&[]);
}

/// In-process tp2·pp2: four ranks must agree on the step they stop after.
#[test]
fn sigterm_stops_every_rank_of_a_grid_at_the_same_step() {
    sigterm_case(&["parallel.tp=2", "parallel.pp=2"]);
}

fn sigterm_case(layout: &[&str]) {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let mut sets = vec!["train.steps=100000", "train.checkpoint_every=0", "train.eval_every=0"];
    sets.extend_from_slice(layout);
    let child = train(&data, &run_dir, &sets).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let metrics = run_dir.join("metrics.jsonl");
    let t0 = std::time::Instant::now();
    while fs::read_to_string(&metrics).map(|t| t.lines().count()).unwrap_or(0) < 3 {
        assert!(t0.elapsed().as_secs() < 60, "the run started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("SIGTERM") && err.contains("--resume"), "{err}");
    let n = steps(&run_dir).len() as u64;
    let ck = run_dir.join(format!("checkpoints/step-{n:08}"));
    assert!(ck.is_dir(), "a checkpoint of the last step {n}: {err}");
    let names: Vec<String> = fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(".tmp")), "{names:?}");
    let target = format!("train.steps={}", n + 2);
    let mut sets = vec![target.as_str()];
    sets.extend_from_slice(layout);
    run(train(&data, &run_dir, &sets).arg("--resume"));
    assert_eq!(steps(&run_dir), (1..=n + 2).collect::<Vec<_>>());
}

#[test]
fn bad_input_is_refused_without_a_panic() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    // --micro-batch 0 used to panic in the kernels.
    let out = boost().args(["eval", "--micro-batch", "0", "--checkpoint"]).arg(&run_dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--micro-batch"));
    // A micro-batch past the validation split's windows takes them all in one pass (its
    // buffers were sized by the flag: 10⁸ sequences aborted on a 51 GB allocation, 10¹² here).
    let loss = |mb: Option<&str>| {
        let mut cmd = boost();
        cmd.args(["eval", "--checkpoint"]).arg(&run_dir);
        if let Some(mb) = mb {
            cmd.args(["--micro-batch", mb]);
        }
        let rep: serde_json::Value = serde_json::from_slice(&run(&mut cmd).stdout).unwrap();
        rep["loss"].as_f64().unwrap()
    };
    let (whole, usual) = (loss(Some("1000000000000")), loss(None));
    // The same windows in other batches: equal to f32 summation order.
    assert!((whole - usual).abs() <= 1e-5 * usual, "{whole} against {usual}");
    // A run directory or its checkpoints/ resolves to the newest checkpoint; an empty
    // `latest` is reported and the highest step taken.
    fs::write(run_dir.join("checkpoints/latest"), "").unwrap();
    let out = run(boost().args(["eval", "--checkpoint"]).arg(run_dir.join("checkpoints")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("latest is empty"));
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep["step"], 4);
    let e = fails(&boost().args(["eval", "--checkpoint"]).arg(&data).output().unwrap());
    assert!(e.contains("not a checkpoint"), "{e}");
    // A dataset smaller than one global batch is reported with the numbers.
    let e = fails(&train(&data, &root.path().join("big"), &["train.micro_batch=4096"]).output().unwrap());
    assert!(e.contains("global batch") && e.contains("train.micro_batch"), "{e}");
}

/// A run that cannot fit is refused before it allocates or touches anything (a 7b model on a
/// 24 GB machine was killed by the kernel, with no message). The set-up needs terabytes, so
/// no machine running the tests has them available.
#[test]
fn a_run_larger_than_the_memory_is_refused_before_it_starts() {
    let root = tempfile::tempdir().unwrap();
    let run_dir = root.path().join("huge");
    let out = boost()
        .args(["train", "--quiet", "--set", "model.preset=30b", "--set", "train.micro_batch=4096", "--set"])
        .arg(format!("run.dir={}", run_dir.display()))
        .output()
        .unwrap();
    let e = fails(&out);
    assert!(e.contains("GiB available") && e.contains("train.micro_batch") && e.contains("train.check_memory"), "{e}");
    assert!(!run_dir.exists(), "nothing was created");
}

#[test]
fn divergence_is_warned_about_and_flagged() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let out = boost()
        .arg("train")
        .args(tiny(
            &data,
            &run_dir,
            &["train.lr=30", "train.warmup_steps=0", "train.steps=12", "train.checkpoint_every=0"],
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let text = fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let flagged = text.lines().filter(|l| l.contains("\"diverging\"")).count();
    assert!(flagged > 0, "some step is flagged diverging:\n{text}\n{err}");
    assert_eq!(err.matches("is diverging").count(), 1, "warned once: {err}");
}

#[test]
fn warnings_for_settings_that_waste_work() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let threads = format!("train.threads={}", std::thread::available_parallelism().unwrap().get() + 1);
    let out =
        boost().arg("train").args(tiny(&data, &run_dir, &["train.eval_batches=1000", &threads])).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("train.eval_batches") && err.contains("train.threads"), "{err}");
}

#[test]
fn a_full_disk_during_a_checkpoint_names_the_path_and_frees_the_space() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("small");
    fs::create_dir_all(&run_dir).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=160k", "tmpfs"])
        .arg(&run_dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a small tmpfs here (needs root)");
        return;
    }
    let out = boost().arg("train").args(tiny(&data, &run_dir, &["train.steps=2"])).arg("--quiet").output().unwrap();
    let left: Vec<String> = fs::read_dir(run_dir.join("checkpoints"))
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    std::process::Command::new("umount").arg(&run_dir).status().unwrap();
    let e = fails(&out);
    assert!(e.contains(&run_dir.display().to_string()) && e.contains("cannot write"), "names the path: {e}");
    assert!(left.iter().all(|n| !n.starts_with(".tmp")), "the partial checkpoint was removed: {left:?}");
}
