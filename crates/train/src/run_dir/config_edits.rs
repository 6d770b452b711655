//! A resumed run uses its checkpoint's config (then `--config`, then `--set`) and writes what
//! it uses to the run directory's `config.toml`. An edit made to that file by hand would be
//! ignored and then overwritten without a word, so it is refused, naming the keys. The file
//! carries a stamp of what boost wrote, so an edit is told from a config a later start wrote
//! (one killed before its first checkpoint, with another `train.steps`).

use anyhow::{Result, bail};
use boost_config::{Config, TomlTable};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

const STAMP: &str = "# fingerprint of the lines below: ";

/// The text of `config.toml` for the resolved config `toml`: a header saying how the file is
/// used, and a fingerprint of `toml` by which a later resume tells an edit.
pub fn stamped(toml: &str) -> String {
    format!(
        "# The resolved config of this run, written by `boost train` at each start. `train --resume`\n\
         # reads the checkpoint's config, not this file: to apply an edit, add `--config` with this file.\n\
         {STAMP}{:016x}\n{toml}",
        fingerprint(toml)
    )
}

/// FNV-1a, 64 bits: stable across builds (the std hasher is not), enough to notice an edit.
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// Whether `text` is a stamped file as boost wrote it (one without the stamp was written by
/// `boost import` or an earlier version, or edited).
fn as_written(text: &str) -> bool {
    let Some(at) = text.find(STAMP) else { return false };
    let Some((hex, body)) = text[at + STAMP.len()..].split_once('\n') else { return false };
    u64::from_str_radix(hex, 16).ok() == Some(fingerprint(body))
}

/// Refuse a resume into `run_dir` whose `config.toml` was edited (its stamp does not match, or
/// it has none) to values this run does not use, naming each key that differs from both the
/// checkpoint's config (`saved`) and this run's (`used`). `ck_dir` is named in the message.
pub fn check_edits(run_dir: &Path, ck_dir: &Path, saved: &str, used: &str) -> Result<()> {
    let path = run_dir.join("config.toml");
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(());
    };
    if as_written(&text) {
        return Ok(());
    }
    let file = match flat(&text) {
        Ok(f) => f,
        Err(e) => bail!(
            "{} is not a config this run can read ({e:#}); a resume would replace it with the config it uses: fix it, or move it away",
            path.display()
        ),
    };
    let (saved, used) = (flat(saved)?, flat(used)?);
    // run.dir is where the run was written: a moved run continues where it is.
    let edited: Vec<String> = file
        .iter()
        .filter(|(k, v)| *k != "run.dir" && used.get(*k) != Some(*v) && saved.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k} = {v} (this run's: {})", used.get(k).map_or("unset", |s| s.as_str())))
        .collect();
    if edited.is_empty() {
        return Ok(());
    }
    bail!(
        "{} was edited since the run wrote it: {}; --resume uses the checkpoint's config ({}), then --config and --set, and would overwrite those edits. To apply them: --config {}; to drop them: move the file away",
        path.display(),
        edited.join(", "),
        ck_dir.display(),
        path.display()
    )
}

/// Every key of a config (defaults filled in) by its dotted name, with its TOML value.
fn flat(text: &str) -> Result<BTreeMap<String, String>> {
    let table: TomlTable = Config::from_toml_str(text)?.to_toml().parse()?;
    let mut out = BTreeMap::new();
    fn walk(prefix: &str, t: &TomlTable, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match v.as_table() {
                Some(sub) => walk(&key, sub, out),
                None => {
                    out.insert(key, v.to_string());
                }
            }
        }
    }
    walk("", &table, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_the_resume_would_drop_is_named() {
        let d = tempfile::tempdir().unwrap();
        let saved = Config::from_toml_str("[model]\narch = \"cola\"\n[train]\nsteps = 600\n").unwrap().to_toml();
        let used = saved.replace("steps = 600", "steps = 1200");
        let ck = d.path().join("checkpoints/step-00000600");
        let file = d.path().join("config.toml");
        assert!(check_edits(d.path(), &ck, &saved, &used).is_ok(), "no config.toml: nothing to lose");
        // As a start killed before its first checkpoint wrote it (other steps): not an edit.
        fs::write(&file, stamped(&used.replace("steps = 1200", "steps = 900"))).unwrap();
        assert!(check_edits(d.path(), &ck, &saved, &used).is_ok(), "as boost wrote it");
        let lr = saved.lines().find(|l| l.starts_with("lr = ")).unwrap().to_string();
        fs::write(&file, stamped(&saved).replace(&lr, "lr = 0.5")).unwrap();
        let e = check_edits(d.path(), &ck, &saved, &used).unwrap_err().to_string();
        assert!(e.contains("train.lr = 0.5 (this run's: ") && e.contains("--config"), "{e}");
        assert!(!e.contains("train.steps"), "steps is not an edit: {e}");
        assert!(check_edits(d.path(), &ck, &saved, &used.replace(&lr, "lr = 0.5")).is_ok(), "applied: kept");
        // Without the stamp (an import's, an earlier version's): an edit differs from both.
        fs::write(&file, &saved).unwrap();
        assert!(check_edits(d.path(), &ck, &saved, &used).is_ok());
        fs::write(&file, saved.replace(&lr, "lr = 0.5")).unwrap();
        assert!(check_edits(d.path(), &ck, &saved, &used).unwrap_err().to_string().contains("train.lr = 0.5"));
        fs::write(&file, "[train\n").unwrap();
        let e = check_edits(d.path(), &ck, &saved, &used).unwrap_err().to_string();
        assert!(e.contains("config.toml is not a config"), "{e}");
    }
}
