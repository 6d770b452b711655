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
