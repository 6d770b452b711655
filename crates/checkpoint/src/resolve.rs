//! Finding checkpoints: the complete ones of a run, its newest, and what a user's path
//! names.

use anyhow::{Result, bail};
use std::fs;
use std::path::{Path, PathBuf};

/// Step directories under `root`, as (step, dir); the complete ones hold `meta.json`.
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

/// Whether a step directory is complete: it holds its `meta.json`. A step directory exists
/// only once complete (it is renamed into place), but a disk, a copy or a hand can leave an
/// empty one.
fn is_complete(dir: &Path) -> bool {
    dir.join("meta.json").is_file()
}

/// The newest checkpoint of a run directory: the highest complete step. A step directory
/// exists only once complete (it is renamed into place), so it wins over a `latest` file that
/// a crash left behind, which is reported when it is empty, unreadable, dangling or older.
/// Step directories without `meta.json` are skipped, with a warning.
pub fn latest(run_dir: &Path) -> Result<PathBuf> {
    Ok(warn(latest_noted(run_dir)?))
}

/// [`latest`], returning its warnings instead of printing them.
pub fn latest_noted(run_dir: &Path) -> Result<(PathBuf, Vec<String>)> {
    newest_in(&run_dir.join("checkpoints"), run_dir)
}

fn warn((dir, notes): (PathBuf, Vec<String>)) -> PathBuf {
    for n in notes {
        eprintln!("warning: {n}");
    }
    dir
}

fn newest_in(root: &Path, shown: &Path) -> Result<(PathBuf, Vec<String>)> {
    let mut notes = Vec::new();
    let mut all = list(root)?;
    all.sort();
    let (complete, incomplete): (Vec<_>, Vec<_>) = all.into_iter().partition(|(_, d)| is_complete(d));
    let newest_step = complete.last().map(|(s, _)| *s);
    let skipped: Vec<String> = incomplete
        .iter()
        .filter(|(s, _)| newest_step.is_none_or(|n| *s > n))
        .map(|(_, d)| d.display().to_string())
        .collect();
    let Some((_, newest)) = complete.into_iter().next_back() else {
        if !skipped.is_empty() {
            bail!(
                "{} holds no complete checkpoint (looked in {}): {} {} no meta.json (an interrupted copy or a damaged disk); pass a complete checkpoint directory, or restore the missing files",
                shown.display(),
                root.display(),
                skipped.join(", "),
                if skipped.len() == 1 { "has" } else { "have" }
            );
        }
        bail!(
            "{} holds no checkpoint (looked in {}); pass a checkpoint directory such as <run>/checkpoints/step-00000600, its checkpoints/ directory or its run directory",
            shown.display(),
            root.display()
        );
    };
    if !skipped.is_empty() {
        notes.push(format!(
            "{} {} no meta.json (incomplete) and {} skipped; taking the newest complete checkpoint, {}",
            skipped.join(", "),
            if skipped.len() == 1 { "has" } else { "have" },
            if skipped.len() == 1 { "is" } else { "are" },
            newest.display()
        ));
    }
    let latest = root.join("latest");
    match fs::read(&latest) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(name) => {
                let name = name.trim();
                let named = newest.file_name().is_some_and(|n| n == name);
                if name.is_empty() {
                    notes.push(format!("{} is empty; taking the highest step, {}", latest.display(), newest.display()));
                } else if !named {
                    notes.push(format!(
                        "{} names {}, but the newest complete checkpoint is {} (a run stopped between the two); taking it",
                        latest.display(),
                        name.escape_debug(),
                        newest.display()
                    ));
                }
            }
            Err(e) => notes.push(format!(
                "{} is not text ({} bytes that do not name a checkpoint); taking the highest step, {}",
                latest.display(),
                e.as_bytes().len(),
                newest.display()
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => notes.push(format!(
            "{} cannot be read ({e}); taking the highest step, {}",
            latest.display(),
            newest.display()
        )),
    }
    Ok((newest, notes))
}

/// What a user passes as a checkpoint: a checkpoint directory, a run's `checkpoints/`
/// directory or a run directory (the last two resolve to their newest checkpoint).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    Ok(warn(resolve_noted(path)?))
}

/// [`resolve`], returning its warnings instead of printing them.
pub fn resolve_noted(path: &Path) -> Result<(PathBuf, Vec<String>)> {
    if let Err(e) = fs::metadata(path) {
        let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if e.raw_os_error() == Some(libc::ELOOP) {
            bail!(
                "{} cannot be resolved: it is a symbolic link loop, a link that leads back to itself ({e}); point it at a checkpoint directory, or pass the checkpoint directory itself",
                path.display()
            );
        }
        if link {
            let to = fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
            bail!(
                "{} is a symbolic link to {to}, which does not exist; point it at a checkpoint directory, or pass the checkpoint directory itself",
                path.display()
            );
        }
        if e.kind() != std::io::ErrorKind::NotFound {
            bail!(
                "{} cannot be resolved ({e}); pass a checkpoint directory, a run's checkpoints/ directory or a run directory",
                path.display()
            );
        }
        bail!(
            "{} does not exist; pass a checkpoint directory, a run's checkpoints/ directory or a run directory",
            path.display()
        );
    }
    if path.join("meta.json").is_file() && path.join("model.safetensors").is_file() {
        return Ok((path.to_path_buf(), Vec::new()));
    }
    if path.join("checkpoints").is_dir() {
        return latest_noted(path);
    }
    if path.join("latest").is_file() || !list(path)?.is_empty() {
        return newest_in(path, path);
    }
    bail!(
        "{} is not a checkpoint (no meta.json), a checkpoints/ directory or a run directory; pass e.g. runs/demo or runs/demo/checkpoints/step-00000600",
        path.display()
    )
}
