//! `boost reference config|cli` (hidden): the reference pages `docs/CONFIG.md` and
//! `docs/CLI.md`, written as Markdown to stdout from the code itself — every configuration key
//! from [`boost_config::KEYS`] (the lines `boost train --print-config` prints) with its default
//! from the default [`Config`] serialised to TOML, and every command's help from clap.
//! `tests/reference.rs` fails when a committed page differs from what this prints.

use anyhow::Result;
use boost_config::{Config, KEYS, PRESETS, TomlTable};
use clap::{Args, ValueEnum};

/// The command that regenerates each page.
pub const CONFIG_COMMAND: &str = "cargo run --release -- reference config > docs/CONFIG.md";
pub const CLI_COMMAND: &str = "cargo run --release -- reference cli > docs/CLI.md";

#[derive(Args, Debug, Clone)]
pub struct ReferenceArgs {
    /// Which page: `config` (docs/CONFIG.md) or `cli` (docs/CLI.md).
    #[arg(value_enum)]
    pub page: Page,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum Page {
    Config,
    Cli,
}

pub fn run(a: &ReferenceArgs, cli: clap::Command) -> Result<()> {
    match a.page {
        Page::Config => print!("{}", config_md()),
        Page::Cli => print!("{}", cli_md(cli)),
    }
    Ok(())
}

/// The `model.*` keys a preset fills when they are not set.
const FROM_PRESET: &[&str] =
    &["model.d", "model.d_ff", "model.layers", "model.heads", "model.rank", "model.vocab", "model.only_lr_act"];

/// A key's default as it would be written in TOML, or "unset".
fn default_of(defaults: &TomlTable, key: &str) -> String {
    let mut parts = key.split('.').peekable();
    let mut table = defaults;
    while let Some(part) = parts.next() {
        let Some(value) = table.get(part) else { return "unset".into() };
        if parts.peek().is_none() {
            return format!("`{value}`");
        }
        match value.as_table() {
            Some(t) => table = t,
            None => return "unset".into(),
        }
    }
    "unset".into()
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// docs/CONFIG.md.
pub fn config_md() -> String {
    let defaults: TomlTable = Config::default().to_toml().parse().expect("the default config is TOML");
    let mut out = String::new();
    out.push_str("# Configuration reference\n\n");
    out.push_str(&format!("<!-- Generated from the code; do not edit. Regenerate with `{CONFIG_COMMAND}`. -->\n\n"));
    out.push_str(
        "A run's configuration is TOML with the tables below (`boost train --config FILE`); \
         `--set table.key=value` overrides any key on the command line, and \
         `boost train --print-config` prints the fully resolved configuration of a command line \
         with these same descriptions. Every error names the key and the fix.\n\n\
         The defaults are those of `boost train` with no options: the demo model. Keys marked \
         *(preset)* take their value from `model.preset` unless set (the table of presets is at \
         the end). Guide: [training and resuming](guide/training.md).\n",
    );
    let mut table = "";
    for (key, meaning) in KEYS {
        let this = key.split('.').next().unwrap_or_default();
        if this != table {
            table = this;
            out.push_str(&format!("\n## `[{table}]`\n\n| key | default | meaning |\n|---|---|---|\n"));
        }
        let mut default = default_of(&defaults, key);
        if FROM_PRESET.contains(key) {
            default.push_str(" *(preset)*");
        }
        out.push_str(&format!("| `{key}` | {default} | {} |\n", cell(meaning)));
        if *key == "data.format" {
            out.push_str(
                "| `data.mix` | unset | several datasets blended by weight, replacing `data.dir`: \
                 `[{ dir = \"data/web\", weight = 0.7 }, { dir = \"data/code\", weight = 0.3, name = \"code\" }]`; \
                 see [data](guide/data.md) |\n",
            );
        }
    }
    out.push_str(
        "\n## Model presets\n\n`model.preset` names a shape; any of its keys can still be set.\n\n\
         | preset | d | d_ff | layers | heads | rank | vocab | only_lr_act |\n|---|---|---|---|---|---|---|---|\n",
    );
    for p in PRESETS {
        let vocab = if p.vocab == 0 { "0 (the tokenizer's)".to_string() } else { p.vocab.to_string() };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {vocab} | {} |\n",
            p.name, p.d, p.d_ff, p.layers, p.heads, p.rank, p.only_lr_act
        ));
    }
    out
}

/// docs/CLI.md: the top-level help, then every visible subcommand's `--help`, each exactly as
/// the binary prints it (clap's own `--help` output, not a re-rendering).
pub fn cli_md(cli: clap::Command) -> String {
    let mut out = String::new();
    out.push_str("# Command reference\n\n");
    out.push_str(&format!("<!-- Generated from the code; do not edit. Regenerate with `{CLI_COMMAND}`. -->\n\n"));
    out.push_str(
        "Every command's `--help`, as the binary prints it. Run a command with \
         `cargo run --release -- <command>` or, after `cargo build --release`, \
         `target/release/boost <command>`. The [user guide](README.md) shows them in use.\n\n",
    );
    out.push_str("| command | what |\n|---|---|\n");
    let subs: Vec<&clap::Command> =
        cli.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help").collect();
    for s in &subs {
        let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
        out.push_str(&format!("| [`boost {}`](#boost-{}) | {} |\n", s.get_name(), s.get_name(), cell(&about)));
    }
    out.push_str(&format!("\n## `boost`\n\n```text\n{}```\n", help(&cli, &[])));
    for s in subs {
        out.push_str(&format!("\n## `boost {}`\n\n```text\n{}```\n", s.get_name(), help(&cli, &[s.get_name()])));
    }
    out
}

/// What `boost ARGS --help` prints, without trailing spaces.
fn help(cli: &clap::Command, args: &[&str]) -> String {
    let argv = std::iter::once("boost").chain(args.iter().copied()).chain(["--help"]);
    let text = match cli.clone().try_get_matches_from(argv) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.render().to_string(),
        other => panic!("boost {} --help did not print help: {:?}", args.join(" "), other.err()),
    };
    let mut out = String::new();
    for line in text.trim_end().lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
