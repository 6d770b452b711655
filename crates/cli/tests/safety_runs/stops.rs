//! Runs that stop: a NaN, a signal, bad input, too little memory or disk, a diverging loss.

use crate::common::*;
use std::fs;

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

/// A second signal exits at once and says the checkpoint being written was abandoned (it used
/// to exit 130 silently); that checkpoint never takes a step's name.
#[test]
fn a_second_signal_says_the_checkpoint_was_abandoned() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let sets = ["train.steps=100000", "train.checkpoint_every=0", "train.eval_every=0"];
    let child = train(&data, &run_dir, &sets)
        .env("BOOST_CHECKPOINT_WRITE_DELAY_MS", "600000")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while fs::read_to_string(run_dir.join("metrics.jsonl")).map(|t| t.lines().count()).unwrap_or(0) < 2 {
        assert!(t0.elapsed().as_secs() < 60, "the run started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let writing = || {
        fs::read_dir(run_dir.join("checkpoints"))
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".tmp-step-")))
            .unwrap_or(false)
    };
    while !writing() {
        assert!(t0.elapsed().as_secs() < 60, "the final checkpoint's write started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("second signal") && err.contains("abandoned") && err.contains("--resume"), "{err}");
    let steps: Vec<_> = fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .collect();
    assert!(steps.is_empty(), "the abandoned checkpoint took no step's name: {steps:?}");
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

/// Fewer steps than the warm-up, and a vocabulary far above the tokenizer's (cola-60m's 32000
/// on a 4,096-token dataset), passed without a word.
#[test]
fn a_warm_up_longer_than_the_run_and_an_oversized_vocabulary_are_warned_about() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let sets = ["train.warmup_steps=10", "model.vocab=1000"];
    let out = boost().arg("train").args(tiny(&data, &run_dir, &sets)).output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("train.steps = 4 is below train.warmup_steps = 10"), "{err}");
    assert!(err.contains("model.vocab = 1000 but the tokenizer") && err.contains("has 300 tokens"), "{err}");
    let quiet = boost().arg("train").args(tiny(&data, &root.path().join("r2"), &[])).output().unwrap();
    let err = String::from_utf8_lossy(&quiet.stderr);
    assert!(!err.contains("warmup_steps") && !err.contains("model.vocab"), "no warning otherwise: {err}");
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
