//! Finding checkpoints: the complete ones of a run, its newest, and what a user's path
//! names.

use anyhow::{Result, bail};
use std::fs;
use std::path::{Path, PathBuf};

/// Complete checkpoints under `root`, as (step, dir).
pub fn list(root: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(root) else {
        return Ok(out);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(n) = name.strip_prefix("step-").and_then(|s| s.parse::<u64>().ok()) {
            out.push((n, e.path()));
        }
    }
    Ok(out)
}

/// The newest checkpoint of a run directory: the highest step. A step directory exists only
/// once complete (it is renamed into place), so it wins over a `latest` file that a crash
/// left behind, which is reported when it is empty, dangling or older.
pub fn latest(run_dir: &Path) -> Result<PathBuf> {
    newest_in(&run_dir.join("checkpoints"), run_dir)
}

fn newest_in(root: &Path, shown: &Path) -> Result<PathBuf> {
    let mut all = list(root)?;
    all.sort();
    let Some((_, newest)) = all.pop() else {
        bail!(
            "{} holds no checkpoint (looked in {}); pass a checkpoint directory such as <run>/checkpoints/step-00000600, its checkpoints/ directory or its run directory",
            shown.display(),
            root.display()
        );
    };
    let latest = root.join("latest");
    if let Ok(name) = fs::read_to_string(&latest) {
        let name = name.trim();
        let named = newest.file_name().is_some_and(|n| n == name);
        if name.is_empty() {
            eprintln!("warning: {} is empty; taking the highest step, {}", latest.display(), newest.display());
        } else if !named {
            eprintln!(
                "warning: {} names {name}, but the newest complete checkpoint is {} (a run stopped between the two); taking it",
                latest.display(),
                newest.display()
            );
        }
    }
    Ok(newest)
}

/// What a user passes as a checkpoint: a checkpoint directory, a run's `checkpoints/`
/// directory or a run directory (the last two resolve to their newest checkpoint).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    if !path.exists() {
        bail!(
            "{} does not exist; pass a checkpoint directory, a run's checkpoints/ directory or a run directory",
            path.display()
        );
    }
    if path.join("meta.json").is_file() && path.join("model.safetensors").is_file() {
        return Ok(path.to_path_buf());
    }
    if path.join("checkpoints").is_dir() {
        return latest(path);
    }
    if path.join("latest").is_file() || !list(path)?.is_empty() {
        return newest_in(path, path);
    }
    bail!(
        "{} is not a checkpoint (no meta.json), a checkpoints/ directory or a run directory; pass e.g. runs/demo or runs/demo/checkpoints/step-00000600",
        path.display()
    )
}
