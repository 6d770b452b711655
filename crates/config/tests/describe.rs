//! `--print-config`'s descriptions cover exactly the keys the config serialises, and the
//! annotated TOML reads back as the same config.

use boost_config::{Config, KEYS};
use std::collections::BTreeSet;

/// Every leaf key (`table.key`, nested tables joined by dots) of a TOML table.
fn leaves(prefix: &str, t: &toml::Table, out: &mut BTreeSet<String>) {
    for (k, v) in t {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(sub) => leaves(&key, sub, out),
            _ => {
                out.insert(key);
            }
        }
    }
}

fn keys_of(cfg: &Config) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    leaves("", &cfg.to_toml().parse::<toml::Table>().unwrap(), &mut out);
    out
}

/// A config that sets the optional keys too (kv_heads only serialises when set).
fn full_config() -> Config {
    let sets = [
        "model.arch=lax",
        "model.kv_heads=2",
        "parallel.tp=2",
        "parallel.link.tp=\"2,300\"",
        "parallel.link.pp=\"20,25\"",
        "parallel.link.dp=\"20,25\"",
    ]
    .map(String::from);
    Config::load(None, &sets).unwrap()
}

#[test]
fn every_key_has_a_description_and_every_description_a_key() {
    let serialised = keys_of(&full_config());
    let described: BTreeSet<String> = KEYS.iter().map(|(k, _)| k.to_string()).collect();
    let undescribed: Vec<_> = serialised.difference(&described).collect();
    let stale: Vec<_> = described.difference(&serialised).collect();
    assert!(undescribed.is_empty(), "keys without a description in describe.rs: {undescribed:?}");
    assert!(stale.is_empty(), "descriptions of keys the config does not have: {stale:?}");
    assert_eq!(described.len(), KEYS.len(), "a key is described twice");
}

#[test]
fn the_annotated_toml_reads_back_as_the_same_config() {
    for cfg in [Config::load(None, &[]).unwrap(), full_config()] {
        let text = cfg.to_annotated_toml();
        let again = Config::from_toml_str(&text).unwrap();
        assert_eq!(again.to_toml(), cfg.to_toml());
        // Each key line is preceded by its description.
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.iter().position(|l| l.starts_with("grad_clip = ")).unwrap();
        assert_eq!(lines[at - 1], "# clip the global gradient norm to this; 0 = off");
    }
    let text = full_config().to_annotated_toml();
    assert!(text.contains("# (for this model: btp)\nscheme = \"auto\""), "{text}");
}
