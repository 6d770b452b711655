//! The generated reference pages are up to date: docs/CONFIG.md is exactly what
//! `boost reference config` prints (every configuration key, its default and meaning) and
//! docs/CLI.md what `boost reference cli` prints (every command's help). A change to a key,
//! a default or a help text fails here until the page is regenerated.

mod common;

use common::{boost, run};
use std::path::Path;

fn check(page: &str, file: &str) {
    let generated = String::from_utf8(run(boost().args(["reference", page])).stdout).expect("UTF-8");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(file);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if generated == committed {
        return;
    }
    let line = generated
        .lines()
        .zip(committed.lines())
        .position(|(a, b)| a != b)
        .map_or_else(|| generated.lines().count().min(committed.lines().count()) + 1, |i| i + 1);
    let show = |text: &str| text.lines().nth(line - 1).unwrap_or("(end of file)").to_string();
    panic!(
        "{file} is out of date (first difference at line {line}):\n  generated: {}\n  committed: {}\n\
         regenerate it with\n    cargo run --release -- reference {page} > {file}",
        show(&generated),
        show(&committed)
    );
}

#[test]
fn config_reference_is_up_to_date() {
    check("config", "docs/CONFIG.md");
}

#[test]
fn cli_reference_is_up_to_date() {
    check("cli", "docs/CLI.md");
}

#[test]
fn config_reference_names_every_key() {
    let out = String::from_utf8(run(boost().args(["reference", "config"])).stdout).unwrap();
    for (key, _) in boost_config::KEYS {
        assert!(out.contains(&format!("| `{key}` |")), "{key} missing from docs/CONFIG.md");
    }
}

/// docs/CLI.md shows each command's help as the binary prints it: every section of the
/// generated page is exactly what `boost CMD --help` writes (trailing spaces aside).
#[test]
fn cli_reference_is_what_help_prints() {
    let page = String::from_utf8(run(boost().args(["reference", "cli"])).stdout).unwrap();
    let mut sections = 0;
    for part in page.split("\n## `boost").skip(1) {
        let name = part[..part.find('`').unwrap()].trim();
        let shown = part.split("```text\n").nth(1).unwrap().split("```").next().unwrap();
        let mut cmd = boost();
        cmd.args(name.split_whitespace()).arg("--help");
        let printed = String::from_utf8(run(&mut cmd).stdout).unwrap();
        let printed: String = printed.trim_end().lines().map(|l| format!("{}\n", l.trim_end())).collect();
        assert_eq!(shown, printed, "boost {name} --help differs from docs/CLI.md's section");
        sections += 1;
    }
    assert!(sections >= 10, "only {sections} sections in the page");
}
