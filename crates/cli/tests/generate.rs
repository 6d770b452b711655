//! `boost generate` end to end: a tiny trained checkpoint continues a prompt; greedy decoding
//! and a fixed seed are deterministic; bad input is refused naming the option.

mod common;

use common::{boost, dataset, run, tiny};
use std::path::Path;

fn generate(ck: &Path, extra: &[&str]) -> std::process::Output {
    boost().arg("generate").arg("--checkpoint").arg(ck).args(["--prompt", "the king"]).args(extra).output().unwrap()
}

fn text(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn generation_is_deterministic_and_bad_input_is_named() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let dir = root.path().join("run");
    run(boost().arg("train").args(tiny(&data, &dir, &[])).arg("--quiet"));

    let greedy = text(&generate(&dir, &["--temperature", "0", "--max-tokens", "8"]));
    assert!(greedy.starts_with("the king") && greedy.len() > "the king\n".len(), "{greedy:?}");
    assert_eq!(greedy, text(&generate(&dir, &["--temperature", "0", "--max-tokens", "8"])));
    // Without the cache (the whole sequence through the model per token): the same text.
    assert_eq!(greedy, text(&generate(&dir, &["--temperature", "0", "--max-tokens", "8", "--no-cache"])));
    let seeded = |seed: &str| text(&generate(&dir, &["--temperature", "1.5", "--seed", seed, "--max-tokens", "12"]));
    assert_eq!(seeded("3"), seeded("3"), "the same seed gives the same text");
    let err = generate(&dir, &["--max-tokens", "40"]);
    let log = String::from_utf8_lossy(&err.stderr);
    assert!(err.status.success() && log.contains("new in"), "{log}");

    // The context is train.seq_len = 16 tokens: 40 new tokens cannot all fit, and the run
    // still ends cleanly, saying why it stopped (the context, or the end-of-text token).
    assert!(log.contains("stopped: the context") || log.contains("stopped: end of text"), "{log}");
    let long = "the king speaks of love and war ".repeat(4);
    for (args, want) in [
        (vec!["--prompt", "x", "--top-p", "0"], "--top-p"),
        (vec!["--prompt", "x", "--top-p", "1.5"], "--top-p"),
        (vec!["--prompt", "x", "--temperature=-1"], "--temperature"),
        (vec!["--prompt", long.as_str()], "train.seq_len"),
        (vec!["--prompt", ""], "--prompt"),
    ] {
        let out = boost().arg("generate").arg("--checkpoint").arg(&dir).args(&args).output().unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(want) && !e.contains("panicked"), "{args:?}: {e}");
    }
}

/// `train.sample_every` logs a sample of the model's text on its steps, and is refused where
/// the model is split across ranks.
#[test]
fn training_prints_samples() {
    let root = tempfile::tempdir().unwrap();
    let data = dataset(root.path());
    let out = run(boost().arg("train").args(tiny(&data, &root.path().join("run"), &["train.sample_every=2"])));
    let log = String::from_utf8_lossy(&out.stderr);
    let samples: Vec<&str> = log.lines().filter(|l| l.contains(": sample: ")).collect();
    assert_eq!(samples.len(), 2, "steps 2 and 4: {log}");
    assert!(samples[0].contains("step 2: sample: ") && samples[1].contains("step 4: sample: "), "{log}");
    let split = tiny(&data, &root.path().join("split"), &["train.sample_every=2", "parallel.tp=2"]);
    let out = boost().arg("train").args(split).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("train.sample_every"), "{e}");
}
