//! Input at the edges through the binary: what used to be taken silently is refused with a
//! message naming the key, file or value, and the user's files are as they were (checked by
//! hash) — an empty `data.mix`, a `data.dir` a resumed mix ignores, a run directory that is a
//! dataset, an export or a model, a refused run's lock file, a prompt longer than the context,
//! an import larger than the memory, a folder's stray files, and tiny shards.

mod common;

use common::*;
use std::fs;

#[test]
fn an_empty_mix_is_refused_and_builds_nothing() {
    let root = tempfile::tempdir().unwrap();
    let e =
        fails(&boost().args(["train", "--quiet", "--set", "data.mix=[]"]).current_dir(root.path()).output().unwrap());
    assert!(e.contains("data.mix = [] names no dataset"), "{e}");
    assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0, "no demo corpus was fetched or built");
}

#[test]
fn a_resume_of_a_mix_refuses_a_data_dir_it_would_ignore() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let mix = format!("data.mix=[{{ dir = \"{}\", weight = 1.0 }}]", data.display());
    run(&mut train(&data, &run_dir, &[&mix]));
    let before = snapshot(&run_dir);
    let other = root.path().join("elsewhere");
    let e = fails(
        &train(&data, &run_dir, &["train.steps=6"])
            .args(["--resume", "--set"])
            .arg(format!("data.dir={}", other.display()))
            .output()
            .unwrap(),
    );
    assert!(e.contains(&format!("data.dir = {}", other.display())) && e.contains("data.mix"), "{e}");
    assert!(e.contains("would be ignored"), "{e}");
    assert_eq!(snapshot(&run_dir), before);
}

#[test]
fn a_run_directory_is_never_a_dataset_an_export_or_a_model() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let export = root.path().join("export");
    run(boost().args(["export", "--checkpoint"]).arg(&run_dir).arg("--out").arg(&export));
    let hf = root.path().join("hf");
    fs::create_dir_all(&hf).unwrap();
    for f in ["config.json", "model-00001-of-00002.safetensors"] {
        fs::write(hf.join(f), "x").unwrap();
    }
    let ck = run_dir.join("checkpoints/step-00000004");
    for (dir, what) in
        [(&data, "a dataset"), (&export, "a boost export"), (&hf, "a Hugging Face model"), (&ck, "a checkpoint")]
    {
        let before = snapshot(dir);
        let e = fails(&train(&data, dir, &[]).output().unwrap());
        assert!(e.contains(&format!("run.dir = {} is {what}", dir.display())), "{e}");
        assert_eq!(snapshot(dir), before, "{what} is unchanged");
        assert!(!dir.join(".lock").exists(), "no lock file was left in {what}");
    }
}

/// Nor at any depth inside one, or inside another run's checkpoints/, judged by the real path
/// (each of these used to be accepted, with checkpoints/, metrics.jsonl and config.toml
/// written inside).
#[test]
fn a_run_directory_is_never_inside_a_dataset_an_export_a_model_or_checkpoints() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let export = root.path().join("export");
    run(boost().args(["export", "--checkpoint"]).arg(&run_dir).arg("--out").arg(&export));
    let hf = root.path().join("hf");
    fs::create_dir_all(hf.join("deep")).unwrap();
    for f in ["config.json", "model-00001-of-00002.safetensors"] {
        fs::write(hf.join(f), "x").unwrap();
    }
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let cks = run_dir.join("checkpoints");
    let ck = cks.join("step-00000004");
    let cases = [
        (data.join("sub"), &data, "a dataset"),
        (export.join("sub/deeper"), &export, "a boost export"),
        (hf.join("deep/er"), &hf, "a Hugging Face model"),
        (link.join("sub"), &data, "a dataset"),
        (ck.join("r"), &ck, "a checkpoint"),
        (cks.join("mine"), &cks, "a run's checkpoints"),
    ];
    let before: Vec<_> = [&data, &export, &hf, &run_dir].iter().map(|d| snapshot(d)).collect();
    for (dir, outer, what) in &cases {
        let e = fails(&train(&data, dir, &[]).output().unwrap());
        let inside = format!("is inside {}, which is {what}", outer.canonicalize().unwrap().display());
        assert!(e.contains(&format!("run.dir = {}", dir.display())) && e.contains(&inside), "{e}");
        assert!(!dir.exists(), "{} was not created", dir.display());
    }
    let after: Vec<_> = [&data, &export, &hf, &run_dir].iter().map(|d| snapshot(d)).collect();
    assert_eq!(after, before, "nothing changed in any of them");
    // A folder of yours that holds a run is no obstacle.
    run(&mut train(&data, &root.path().join("mine/run2"), &["train.steps=2"]));
}

/// A NaN or an infinity is refused by its key before anything is written (`grad_clip = nan`
/// used to turn clipping off; `weight_decay = inf` passed and the run blamed `train.lr`).
#[test]
fn non_finite_values_are_refused_by_key() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    for (key, v) in [("train.grad_clip", "nan"), ("train.weight_decay", "inf"), ("train.weight_decay", "nan")] {
        let e = fails(&train(&data, &run_dir, &[&format!("{key}={v}")]).output().unwrap());
        assert!(e.contains(&format!("config key `{key}`: is {}", if v == "nan" { "NaN" } else { "inf" })), "{e}");
        assert!(!run_dir.exists(), "nothing was written");
    }
}

/// A FIFO or a device given as a file is refused at once, naming it (`--config /dev/zero` and
/// `eval --text /dev/zero` read forever; `data --input DIR` blocked on a FIFO named *.txt).
#[test]
fn only_regular_files_are_read_as_inputs() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &["train.steps=2"]));
    let e = fails(&boost().args(["train", "--config", "/dev/zero"]).output().unwrap());
    assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
    let e =
        fails(&boost().args(["eval", "--checkpoint"]).arg(&run_dir).args(["--text", "/dev/zero"]).output().unwrap());
    assert!(e.contains("/dev/zero is not a regular file"), "{e}");
    let texts = root.path().join("texts");
    fs::create_dir(&texts).unwrap();
    fs::write(texts.join("a.txt"), "the king speaks ".repeat(50)).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(texts.join("pipe.txt")).status().unwrap().success());
    let out = root.path().join("built");
    let e = fails(&boost().args(["data", "--input"]).arg(&texts).arg("--out").arg(&out).output().unwrap());
    assert!(e.contains("pipe.txt is not a regular file"), "{e}");
    assert!(!out.exists(), "nothing was built");
}

#[test]
fn a_refused_run_leaves_no_lock_file_behind() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let mine = root.path().join("mine");
    fs::create_dir(&mine).unwrap();
    fs::write(mine.join("config.toml"), "# my config\n").unwrap();
    let e = fails(&train(&data, &mine, &[]).output().unwrap());
    assert!(e.contains("config.toml"), "{e}");
    let names: Vec<String> =
        fs::read_dir(&mine).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["config.toml"], "the refused run took its .lock away");
}

#[test]
fn a_prompt_longer_than_the_context_prints_nothing() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let prompt = "the king speaks of love and war ".repeat(20);
    let out = boost().args(["generate", "--checkpoint"]).arg(&run_dir).args(["--prompt", &prompt]).output().unwrap();
    let e = fails(&out);
    assert!(e.contains("context (train.seq_len) is 16"), "{e}");
    assert!(out.stdout.is_empty(), "stdout: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn an_import_larger_than_the_memory_is_refused_before_it_allocates() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &["model.arch=full"]));
    let hf = root.path().join("hf");
    run(boost().args(["export", "--checkpoint"]).arg(&run_dir).arg("--out").arg(&hf));
    let before = snapshot(&hf);
    let out = root.path().join("imported");
    let cmd = |available: &str| {
        let mut c = boost();
        c.args(["import", "--hf"]).arg(&hf).arg("--out").arg(&out).env("BOOST_MEMORY_AVAILABLE", available);
        c.output().unwrap()
    };
    let e = fails(&cmd("100000"));
    assert!(e.contains("importing this model needs") && e.contains("GiB available"), "{e}");
    assert!(!out.exists());
    assert_eq!(snapshot(&hf), before);
    run(&mut {
        let mut c = boost();
        c.args(["import", "--hf"]).arg(&hf).arg("--out").arg(&out).env("BOOST_MEMORY_AVAILABLE", "100000000000");
        c
    });
}

#[test]
fn data_skips_a_folders_stray_files_and_refuses_tiny_shards() {
    let root = tempfile::tempdir().unwrap();
    let corpus = root.path().join("corpus");
    fs::create_dir(&corpus).unwrap();
    for d in 0..4 {
        let text: String = (0..400).map(|i| format!("word{} ", (i * 7 + d) % 50)).collect();
        fs::write(corpus.join(format!("doc{d}.txt")), text).unwrap();
    }
    let data = dataset(root.path());
    fs::copy(data.join("tokenizer.json"), corpus.join("tokenizer.json")).unwrap();
    let out = run(boost().arg("data").arg("--input").arg(&corpus).arg("--out").arg(root.path().join("ds")).args([
        "--vocab-size",
        "300",
        "--val-fraction",
        "0.25",
    ]));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("skipped 1 file(s)") && e.contains("tokenizer.json"), "{e}");
    let meta: serde_json::Value = serde_json::from_slice(&fs::read(root.path().join("ds/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["train_documents"].as_u64().unwrap() + meta["val_documents"].as_u64().unwrap(), 4);

    let tiny_out = root.path().join("tiny");
    let out = boost()
        .arg("data")
        .arg("--input")
        .arg(&corpus)
        .arg("--out")
        .arg(&tiny_out)
        .args(["--shard-tokens", "1"])
        .output();
    let out = out.unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--shard-tokens") && e.contains("65536"), "{e}");
    assert!(!root.path().join("tiny").exists());
}

#[test]
fn the_default_bucket_size_is_chosen_from_the_model_and_logged() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let mut c = boost();
    c.arg("train").args(tiny(&data, &run_dir, &["parallel.dp=2", "train.steps=2"]));
    let out = run(&mut c);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("bucket(s) of 1.0 MB (parallel.bucket_mb = \"auto\")"), "{e}");
}

#[test]
fn plot_names_a_wrong_typed_line_and_skips_one_cut_short() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    run(&mut train(&data, &run_dir, &[]));
    let metrics = run_dir.join("metrics.jsonl");
    let good = fs::read_to_string(&metrics).unwrap();
    let plot = |out: &str| boost().arg("plot").arg(&run_dir).arg("--out").arg(root.path().join(out)).output().unwrap();
    // A kill while the last line was written: the run still plots, with a warning.
    fs::write(&metrics, format!("{good}{{\"step\":7,\"loss\":\n")).unwrap();
    let out = plot("cut.png");
    assert!(out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cut short"));
    // A loss that is a string is an error naming the line, and no figure is drawn.
    let typed = good.replacen("\"loss\":", "\"loss\":\"x\",\"was\":", 1);
    fs::write(&metrics, typed).unwrap();
    let e = fails(&plot("typed.png"));
    assert!(e.contains("metrics.jsonl:1") && e.contains("`loss`"), "{e}");
    assert!(!root.path().join("typed.png").exists());
}
