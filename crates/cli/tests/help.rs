//! `boost` behaves like its peers at the terminal: no subcommand prints help and trains
//! nothing; every subcommand has help.

mod common;

use common::boost;

#[test]
fn no_subcommand_prints_help_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = boost().current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage exit code");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage: boost") && err.contains("train"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no run or data directory was created");
}

#[test]
fn every_subcommand_has_help() {
    for cmd in ["train", "eval", "export", "data", "plan", "bench"] {
        let out = boost().args([cmd, "--help"]).output().unwrap();
        assert!(out.status.success(), "{cmd} --help");
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: boost"), "{cmd} --help prints usage");
    }
}

#[test]
fn data_help_shows_examples_and_names_parquet() {
    let out = boost().args(["data", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Examples:") && help.contains(".parquet --text-field"), "{help}");
    let top = String::from_utf8_lossy(&boost().arg("--help").output().unwrap().stdout).to_string();
    assert!(top.lines().any(|l| l.trim_start().starts_with("data") && l.contains("Parquet")), "{top}");
}

const COMMANDS: [&str; 8] = ["train", "eval", "export", "generate", "data", "plan", "bench", "plot"];

/// Each option of `boost CMD -h` with its help text: clap puts the help on the option's
/// line, or on the next line when the options are too wide.
fn options(cmd: &str) -> Vec<(String, String)> {
    let out = boost().args([cmd, "-h"]).output().unwrap();
    assert!(out.status.success(), "{cmd} -h");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut opts = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with('-') {
            continue;
        }
        let (flag, help) = match line.split_once("  ") {
            Some((f, h)) => (f.to_string(), h.trim().to_string()),
            None => {
                let next = lines.get(i + 1).copied().unwrap_or("");
                let help = if next.starts_with('-') { "" } else { next };
                (line.to_string(), help.to_string())
            }
        };
        opts.push((flag, help));
    }
    opts
}

#[test]
fn every_option_has_help_text() {
    for cmd in COMMANDS {
        let opts = options(cmd);
        assert!(opts.len() > 1, "{cmd}: options found");
        for (flag, help) in opts {
            // Only `[default: …]` or `[possible values: …]` is not help.
            assert!(!help.is_empty() && !help.starts_with('['), "boost {cmd}: option without help text: {flag}");
        }
    }
}

#[test]
fn threads_and_json_mean_the_same_everywhere() {
    let mut seen = (0, 0);
    for cmd in COMMANDS {
        for (flag, help) in options(cmd) {
            if flag.starts_with("--threads") {
                seen.0 += 1;
                assert!(flag == "--threads <N>" && help.contains("0: one per core"), "boost {cmd}: {flag} {help}");
            }
            if flag.starts_with("--json") {
                seen.1 += 1;
                assert_eq!(flag, "--json", "boost {cmd}: --json is a flag");
                assert!(help.contains("JSON"), "boost {cmd}: {help}");
            }
        }
    }
    assert_eq!(seen, (5, 3), "--threads on train, eval, generate, plan, bench; --json on plan, bench, data");
}

#[test]
fn print_config_prints_the_resolved_toml_and_trains_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = boost()
        .current_dir(dir.path())
        .args(["train", "--print-config", "--set", "model.arch=full", "--threads", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("# architecture: full, svd, cola, lax\narch = \"full\""), "{text}");
    assert!(text.contains("threads = 3"), "--threads is applied: {text}");
    assert!(text.contains("# (for this model: megatron)"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no run or data directory was created");
}
