//! The `boost` commands end to end: data → train → eval → export, resume, and the errors a
//! user sees for bad input (exit code 1, a message naming the key or file; never a panic).

#[path = "../common/mod.rs"]
mod common;
mod plan;

use common::*;

#[test]
fn data_train_resume_eval_export() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    let out = run(boost().arg("train").args(tiny(&data, &run_dir, &[])).arg("--quiet"));
    assert!(out.stderr.is_empty(), "--quiet prints nothing");
    let losses = losses(&run_dir);
    assert_eq!(losses.len(), 4);
    let m: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap().lines().next().unwrap())
            .unwrap();
    for key in ["step", "loss", "lr", "grad_norm", "tokens_per_sec"] {
        assert!(m.get(key).is_some(), "metrics.jsonl has {key}");
    }

    // A second run into the same directory is refused; --resume continues it.
    let again = boost().arg("train").args(tiny(&data, &run_dir, &[])).arg("--quiet").output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
    run(boost().arg("train").args(tiny(&data, &run_dir, &["train.steps=6"])).args(["--quiet", "--resume"]));
    assert_eq!(common::losses(&run_dir).len(), 6);

    let ck = run_dir.join("checkpoints/step-00000006");
    let out = run(boost().args(["eval", "--checkpoint"]).arg(&ck));
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        rep["loss"].as_f64().unwrap() > 0.0
            && (rep["ppl"].as_f64().unwrap() - rep["loss"].as_f64().unwrap().exp()).abs() < 1e-6
    );
    let text = root.path().join("doc0.txt");
    let out = run(boost().args(["eval", "--checkpoint"]).arg(&ck).arg("--text").arg(&text));
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rep["tokens"].as_u64().unwrap() > 10);

    let export = root.path().join("hf");
    run(boost().args(["export", "--checkpoint"]).arg(&ck).arg("--out").arg(&export));
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(export.join(f).is_file(), "export has {f}");
    }
}

#[test]
fn bad_input_names_the_problem() {
    let root = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["train", "--set", "model.heads=5"], "model.heads"),
        (&["train", "--set", "train.stepz=3"], "stepz"),
        (&["train", "--set", "parallel.tp=3", "--set", "model.preset=cola-60m"], "parallel.tp"),
        (&["train", "--set", "model.arch=full", "--set", "train.recompute=lowrank"], "train.recompute"),
        (&["train", "--set", "data.corpus=none", "--set", "data.dir=/nonexistent/x"], "data.dir"),
        (&["eval", "--checkpoint", "/nonexistent/ck"], "/nonexistent/ck"),
        (&["train", "--config", "/nonexistent/c.toml"], "/nonexistent/c.toml"),
        (&["train", "--set", "train.steps=3", "--dump-grads", "5"], "--dump-grads 5"),
        // Refused before the data is read (the data.dir given does not exist).
        (
            &[
                "train",
                "--set",
                "model.arch=lax",
                "--set",
                "parallel.tp=2",
                "--set",
                "parallel.scheme=vanilla",
                "--set",
                "data.corpus=none",
                "--set",
                "data.dir=/nonexistent/x",
            ],
            "config key `parallel.scheme`: vanilla with model.arch = lax at parallel.tp = 2: LaX under vanilla TP",
        ),
        (&["eval", "--checkpoint", "/nonexistent/ck", "--threads", "100000"], "--threads is 100000; at most 1024"),
        (&["train", "--set", "train.threads=2000"], "train.threads"),
        (&["bench", "--no-torch", "--tp", "2", "--link", "20"], "--link \"20\""),
        (&["bench", "--no-torch", "--tp", "2", "--link", "nan,5"], "--link \"nan,5\""),
        (&["bench", "--no-torch", "--tp", "2", "--link", "1e300,1"], "a second a step"),
        (&["train", "--set", "model.init_std=0"], "model.init_std"),
        (&["train", "--set", "data.vocab_size=1000000000"], "data.vocab_size"),
        (&["train", "--set", "parallel.link_gbps=1e-300", "--set", "parallel.link_alpha_us=1"], "parallel.link_gbps"),
        (&["train", "--set", "parallel.link.tp=\"1,1e-300\""], "parallel.link.tp"),
        (
            &["bench", "--no-torch", "--tp", "2", "--recompute", "full:99", "--set", "model.layers=2"],
            "full:99: 99 exceeds the 2 layers",
        ),
    ];
    for (args, want) in cases {
        let out = boost().args(*args).current_dir(root.path()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: error does not name {want}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: panicked: {err}");
    }
    // Every refusal above comes before any work: nothing was written where they ran (no
    // data directory, run directory, lock or checkpoint).
    let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "refused commands wrote {left:?}");
    // Counts that must be positive are refused as the arguments are parsed (a usage error,
    // exit code 2), naming the flag; a sequence or micro-batch of 0 reached a kernel's slice
    // indexing before.
    let usage: &[(&[&str], &str)] = &[
        (&["bench", "--no-torch", "--seq", "0"], "--seq"),
        (&["bench", "--no-torch", "--micro-batch", "0"], "--micro-batch"),
        (&["bench", "--no-torch", "--vocab", "0"], "--vocab"),
        (&["plan", "--search", "--top", "0"], "--top"),
    ];
    for (args, want) in usage {
        let out = boost().args(*args).current_dir(root.path()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(want) && err.contains("must be at least 1"),
            "{args:?}: error does not name {want}: {err}"
        );
    }
}

/// `--dump-grads` writes a step's whole gradients; a (tp, pp) grid and a ZeRO-1 data-parallel
/// run dump the single rank's, within the fp32 bound of docs/TESTING.md (only summation order
/// differs: norm-wise 1e-5). The first step: later ones also see Adam amplify rounding
/// differences of the weights (its first update is about lr·sign(g)).
#[test]
fn dumped_gradients_agree_across_layouts() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let layouts: [&[&str]; 4] = [
        &["train.accumulation=2"],
        &["parallel.tp=2", "parallel.pp=2", "train.accumulation=2"],
        &["parallel.dp=2", "parallel.zero=1", "train.accumulation=1"],
        // One micro-batch of the same eight sequences through two stages (a larger bubble).
        &["parallel.pp=2", "train.accumulation=1", "train.micro_batch=8"],
    ];
    let dumps: Vec<_> = layouts
        .iter()
        .enumerate()
        .map(|(i, sets)| {
            let dir = root.path().join(format!("run{i}"));
            run(boost().arg("train").args(tiny(&data, &dir, sets)).args(["--quiet", "--dump-grads", "1"]));
            grads(&dir, 1)
        })
        .collect();
    assert!(dumps[0].iter().any(|(n, _)| n == "model.embed_tokens.weight"), "the dump names canonical tensors");
    for d in &dumps[1..] {
        assert_grads_close(d, &dumps[0], 1e-5);
    }
    let zero = boost().arg("train").args(["--dump-grads", "0"]).output().unwrap();
    assert!(!zero.status.success() && String::from_utf8_lossy(&zero.stderr).contains("--dump-grads"));
}

#[test]
fn a_resume_that_changes_the_global_batch_says_so() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    run(boost().arg("train").args(tiny(&data, &a, &["train.checkpoint_every=2"])).arg("--quiet"));
    let ck = a.join("checkpoints/step-00000002");
    // The same batch: no note.
    let same = run(boost().arg("train").args(tiny(&data, &b, &["train.steps=6"])).arg("--resume").arg(&ck));
    assert!(!String::from_utf8_lossy(&same.stderr).contains("global batch"), "no change, no note");
    // Twice the micro-batches per step: named with both sizes and the keys.
    let c = root.path().join("c");
    let more = run(boost()
        .arg("train")
        .args(tiny(&data, &c, &["train.steps=6", "train.accumulation=2", "train.seq_len=8"]))
        .arg("--resume")
        .arg(&ck));
    let err = String::from_utf8_lossy(&more.stderr);
    assert!(err.contains("global batch changes from 4 sequences") && err.contains("to 8"), "{err}");
    assert!(err.contains("train.accumulation") && err.contains("train.seq_len changes from 16"), "{err}");
}

#[test]
fn bench_names_the_cpu_and_the_simd_paths_it_ran() {
    let quick = ["--model", "demo", "--arch", "cola", "--seq", "32", "--micro-batch", "2", "--rounds", "1"];
    let out = run(boost().arg("bench").args(quick).args(["--warmup", "0", "--no-torch", "--json"]));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (cpu, simd) = (r["cpu"].as_str().unwrap(), r["simd"].as_str().unwrap());
    assert!(
        !cpu.is_empty()
            && simd.starts_with("GEMM ")
            && simd.contains(", element-wise ")
            && simd.contains(", attention "),
        "{cpu}; {simd}"
    );
    // MFU is taken against the GEMM peak measured beside the model's steps: four peaks, their
    // upper median, and the MFU that follows from it.
    let a = &r["results"][0];
    let mut peaks: Vec<f64> = a["gemm_peaks_gflops"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(peaks.len(), 4, "{a}");
    assert!(peaks.iter().all(|p| *p > 0.0), "{peaks:?}");
    peaks.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let peak = a["gemm_peak_gflops"].as_f64().unwrap();
    assert_eq!(peak, peaks[2]);
    let want = a["model_flops_per_token"].as_f64().unwrap() * a["tokens_per_sec"].as_f64().unwrap() / (peak * 1e9);
    assert!((a["mfu"].as_f64().unwrap() - want).abs() <= 1e-12 * want.max(1.0), "{a}");
    // The table starts with the same line.
    let out = run(boost().arg("bench").args(quick).args(["--warmup", "0", "--no-torch"]));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with(&format!("{cpu}; {simd}\n")), "{table}");
}

/// `boost bench --device cuda` in a build without the CUDA backend: refused before any work,
/// naming the features that have it; a device that is none is refused as such.
#[cfg(not(any(feature = "cuda", feature = "emulate")))]
#[test]
fn bench_on_a_device_this_build_lacks_names_the_feature() {
    for (args, want) in [
        (&["--device", "cuda"][..], "--features cuda"),
        (&["--device", "cuda:1", "--cuda-graphs"], "--features emulate"),
        (&["--device", "gpu"], "--device gpu: \"gpu\" is not a device"),
        (&["--cuda-graphs"], "add --device cuda"),
    ] {
        let out = boost().arg("bench").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Options that belong to one mode of `boost bench` are refused without it, naming the mode,
/// instead of being silently ignored; a chunk count of 0 is refused.
#[test]
fn bench_refuses_options_of_a_mode_it_does_not_run() {
    let cases: [(&[&str], &str); 6] = [
        (&["--tp-chunks", "2"], "--tp <N>"),
        (&["--link", "a100"], "--tp <N>"),
        (&["--all-variants"], "--tp <N>"),
        (&["--zero"], "--grid <DP,PP,TP>"),
        (&["--accumulation", "2"], "--grid <DP,PP,TP>"),
        (&["--tp", "2", "--tp-chunks", "0"], "--tp-chunks 0"),
    ];
    for (args, names) in cases {
        let out = boost().arg("bench").args(["--no-torch", "--rounds", "1"]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(names), "{args:?}: {err}");
    }
}

/// A stand-in for Python that speaks `torch_peer.py --serve`'s protocol (ready, then one
/// `{"step_time_s": …}` per `step` line, then the summary) and takes `secs` a step, or dies
/// with a Python-like error at its `die_at`-th step. A `profile` line gets `profiled` (a split
/// of a profiled step, or the error the peer reports when its profiler fails), a `gemm_peak`
/// line a peak of 200 GFLOP/s. Its arguments are written one a line to `args-<die_at>` beside
/// it.
fn fake_peer(dir: &std::path::Path, secs: &str, die_at: Option<usize>, profiled: &str) -> std::path::PathBuf {
    let die = die_at.map_or(String::new(), |n| {
        format!("  if [ $n -eq {n} ]; then echo 'RuntimeError: out of memory' >&2; exit 1; fi\n")
    });
    let args = dir.join(format!("args-{}", die_at.unwrap_or(0)));
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > '{}'\necho 'warming up'\necho '{{\"ready\": true}}'\nn=0\nwhile read line; do\n  if [ \"$line\" = profile ]; then echo '{profiled}'; continue; fi\n  if [ \"$line\" = gemm_peak ]; then echo '{{\"gemm_peak_gflops\": 200}}'; continue; fi\n  n=$((n + 1))\n{die}  echo '{{\"step_time_s\": {secs}}}'\ndone\necho '{{\"step_time_s\": {secs}, \"tokens_per_sec\": 1.0}}'\n",
        args.display()
    );
    let path = dir.join(format!("python-{}", die_at.unwrap_or(0)));
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

#[test]
fn bench_alternates_its_steps_with_the_peer_and_gives_the_median_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let quick = ["--model", "demo", "--arch", "cola", "--seq", "32", "--micro-batch", "2", "--warmup", "0", "--json"];
    let py = fake_peer(dir.path(), "0.25", None, SPLIT);
    let out = run(boost().arg("bench").args(quick).args(["--rounds", "5", "--python"]).arg(&py));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &r["results"][0];
    let f = |k: &str| -> Vec<f64> { a[k].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect() };
    let (ours, ratios) = (f("step_times_s"), f("torch_step_ratios"));
    // One peer step beside each of ours, and each ratio is that pair's.
    assert_eq!((ours.len(), ratios.len()), (5, 5), "{a}");
    // (To a few ulps: serde_json's float parsing is not always correctly rounded.)
    for (t, q) in ours.iter().zip(&ratios) {
        assert!((q - 0.25 / t).abs() <= 4.0 * f64::EPSILON * q, "{q} against 0.25 / {t}: {a}");
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(|x, y| x.partial_cmp(y).unwrap());
    assert_eq!(a["torch_ratio"].as_f64().unwrap(), sorted[2], "{a}");
    assert_eq!(a["torch"]["tokens_per_sec"].as_f64(), Some(1.0), "{a}");
    // The peer's GEMM peak is taken beside each of ours (four), and its MFU against it is
    // the same model FLOPs at its tokens/s.
    assert_eq!(f("torch_gemm_peaks_gflops"), [200.0; 4], "{a}");
    assert_eq!(a["torch_gemm_peak_gflops"].as_f64(), Some(200.0), "{a}");
    let want = a["model_flops_per_token"].as_f64().unwrap() * 1.0 / 200e9;
    assert!((a["torch_mfu"].as_f64().unwrap() - want).abs() <= 1e-12 * want, "{a}");
    // The peer clips its gradients' global norm as our steps do (the same work a step).
    let args = std::fs::read_to_string(dir.path().join("args-0")).unwrap();
    assert!(args.contains("\n--clip\n1\n"), "the peer's arguments: {args}");
    // After the timed steps, three pairs split each side's step by kind of work: ours from
    // the kernel timers (their parts within the step's time), the peer's profiled ones.
    let splits = a["torch_split"].as_array().unwrap();
    assert_eq!(splits.len(), 3, "{a}");
    for p in splits {
        let (o, t) = (&p["ours"], &p["torch"]);
        assert_eq!(
            (t["gemm_s"].as_f64(), t["other_s"].as_f64(), t["step_s"].as_f64()),
            (Some(0.125), Some(0.075), Some(0.3))
        );
        let part = |k: &str| o[k].as_f64().unwrap();
        assert!(part("gemm_s") > 0.0 && part("attention_s") > 0.0 && part("other_s") > 0.0, "{p}");
        assert!(part("gemm_s") + part("attention_s") + part("other_s") <= part("step_s"), "{p}");
    }
    let text = ["--model", "demo", "--arch", "cola", "--seq", "32", "--micro-batch", "2", "--warmup", "0"];
    let out = run(boost().arg("bench").args(text).args(["--rounds", "2", "--python"]).arg(&py));
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table.lines().find(|l| l.starts_with("| cola | 3 |")).unwrap_or_else(|| panic!("no split row: {table}"));
    for theirs in [" · 125 (", " · 50 (", " · 75 (", " · 300 ("] {
        assert!(row.contains(theirs), "{theirs} in {row}");
    }
    assert!(table.contains("PyTorch's GEMM peak (torch.mm on the same squares and threads, beside its steps): cola 200 GFLOP/s, its MFU "), "{table}");
    // The note on a peer's slow BLAS appears exactly when its peak is under 75 % of ours (the
    // fake's 200 GFLOP/s against this machine's), naming the share.
    let ours = table.lines().find(|l| l.starts_with("| cola | ")).and_then(|l| l.split(" GFLOP/s)").next());
    let ours: f64 =
        ours.and_then(|l| l.rsplit('(').next()).and_then(|x| x.parse().ok()).expect("our peak in the table");
    // (The table rounds our peak to a unit, hence the slack of one per cent.)
    let share = 100.0 * 200.0 / ours;
    match table.split("note: PyTorch's GEMM peak is cola ").nth(1) {
        Some(rest) => {
            let named: f64 = rest.split('%').next().and_then(|x| x.parse().ok()).expect("a share in the note");
            assert!(named < 75.0 && (named - share).abs() <= 1.0, "{named}% named, {share:.1}% expected: {table}");
        }
        None => assert!(share >= 74.0, "no note at {share:.1}%: {table}"),
    }

    // A peer that dies mid-run is named with its error; our side still finishes, and the
    // ratio covers only the pairs that ran.
    let py = fake_peer(dir.path(), "0.25", Some(3), SPLIT);
    let out = run(boost().arg("bench").args(quick).args(["--rounds", "4", "--python"]).arg(&py));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PyTorch peer stopped") && err.contains("RuntimeError: out of memory"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &r["results"][0];
    assert_eq!(a["step_times_s"].as_array().unwrap().len(), 4, "{a}");
    assert_eq!(a["torch_step_ratios"].as_array().unwrap().len(), 2, "{a}");
    assert_eq!(a["torch_split"].as_array().unwrap().len(), 0, "{a}");

    // A peer whose profiler fails costs the split, not the run: its timed steps and summary
    // stand, and the error is named.
    let py = fake_peer(dir.path(), "0.25", None, r#"{"error": "ModuleNotFoundError: No module named torch.profiler"}"#);
    let out = run(boost().arg("bench").args(quick).args(["--rounds", "3", "--python"]).arg(&py));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gave no split") && err.contains("No module named"), "{err}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &r["results"][0];
    assert_eq!(a["torch_step_ratios"].as_array().unwrap().len(), 3, "{a}");
    assert_eq!(a["torch"]["tokens_per_sec"].as_f64(), Some(1.0), "{a}");
    assert_eq!(a["torch_split"].as_array().unwrap().len(), 0, "{a}");
}

/// What the fake peer answers to `profile`: a profiled step's split.
const SPLIT: &str = r#"{"split": {"gemm_s": 0.125, "attention_s": 0.05, "other_s": 0.075, "step_s": 0.3}}"#;

/// `eval --data` refuses data built with another tokenizer than the checkpoint's; token files
/// without a tokenizer (llm.c shards) it scores, saying that their ids are taken as the
/// checkpoint's tokenizer's, which it cannot check.
#[test]
fn eval_on_other_data_refuses_another_tokenizer_and_warns_without_one() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let run_dir = root.path().join("run");
    // A vocabulary that holds the fixture's GPT-2 ids.
    run(boost().arg("train").args(tiny(&data, &run_dir, &["model.vocab=50257", "train.steps=2"])).arg("--quiet"));
    let llmc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/token_formats/llmc");
    let ck = run_dir.join("checkpoints/step-00000002");
    let out = run(boost().args(["eval", "--checkpoint"]).arg(&ck).arg("--data").arg(&llmc));
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(rep["loss"].as_f64().unwrap().is_finite());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning") && err.contains("has no tokenizer.json"), "{err}");
    // Its own data, which has the same tokenizer, gives no warning.
    let own = run(boost().args(["eval", "--checkpoint"]).arg(&ck).arg("--data").arg(&data));
    assert!(!String::from_utf8_lossy(&own.stderr).contains("warning"), "{}", String::from_utf8_lossy(&own.stderr));
    // Data with a tokenizer of its own (another vocabulary size) is refused.
    let other = root.path().join("other");
    let mut cmd = boost();
    cmd.arg("data");
    for d in ["doc0.txt", "doc1.txt"] {
        cmd.arg("--input").arg(root.path().join(d));
    }
    run(cmd.arg("--out").arg(&other).args(["--vocab-size", "280", "--val-fraction", "0.5"]));
    let refused = boost().args(["eval", "--checkpoint"]).arg(&ck).arg("--data").arg(&other).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("differs from the checkpoint's"), "{err}");
}
