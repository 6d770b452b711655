//! Removing checkpoints: the oldest beyond `train.keep_checkpoints`, and the temporaries
//! that interrupted saves and prunes leave behind. Only what boost wrote is removed, file by
//! file: a checkpoint exactly as its manifest lists it, a temporary holding only the files a
//! save writes. Anything else under those names (a folder of yours, a link, a checkpoint with
//! a file added) is kept and named in a warning.

use super::{CheckpointMeta, list, manifest};
use anyhow::Result;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Remove what interrupted saves leave in `root` (`.tmp-step-*`, `.old-step-*`,
/// `.latest.tmp`) when it holds only what a save writes: only safe while this process holds
/// the run directory's lock. Returns (entries, bytes) freed.
pub fn remove_stale(root: &Path) -> (usize, u64) {
    let (mut n, mut bytes) = (0, 0);
    let Ok(rd) = fs::read_dir(root) else {
        return (0, 0);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        let freed = if name == ".latest.tmp" {
            stale_latest(&p)
        } else if name.starts_with(".tmp-") || name.starts_with(".old-") {
            stale_dir(&p, &name)
        } else {
            continue;
        };
        match freed {
            Ok(b) => {
                n += 1;
                bytes += b;
            }
            Err(why) => {
                warn_once(&p, &format!("{why}; it is kept: a run removes only the temporaries its own saves leave"))
            }
        }
    }
    (n, bytes)
}

/// `.latest.tmp`: a plain file naming a step, or the start of one (a kill cut its write short).
fn stale_latest(p: &Path) -> Result<u64, String> {
    let m = fs::symlink_metadata(p).map_err(|e| format!("cannot be read ({e})"))?;
    let text = if m.is_file() && m.len() <= 64 { fs::read_to_string(p).ok() } else { None };
    match text {
        Some(t) if name_started(&t) => {
            fs::remove_file(p).map_err(|e| format!("cannot be removed ({e})"))?;
            Ok(m.len())
        }
        _ => Err("is not the file a save writes (a step's name)".into()),
    }
}

/// A save's temporary folder (`.tmp-step-NNNNNNNN[-PID]`) or a prune's (`.old-step-NNNNNNNN-PID`),
/// holding nothing but plain files with the names a save writes.
fn stale_dir(p: &Path, name: &str) -> Result<u64, String> {
    let rest = name.strip_prefix(".tmp-").or_else(|| name.strip_prefix(".old-")).unwrap_or(name);
    let (step, pid) = (rest.get(..13).unwrap_or(rest), rest.get(13..).unwrap_or(""));
    let pid_ok =
        pid.is_empty() || pid.strip_prefix('-').is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if step_of(step).is_none() || !pid_ok {
        return Err("is not named as a save's temporary folder (.tmp-step-NNNNNNNN-PID)".into());
    }
    let files = plain_files(p)?;
    if let Some(odd) = files.iter().find(|f| !save_writes(f)) {
        return Err(format!("holds {odd}, which no save writes"));
    }
    remove_files(p, &files)
}

/// Whether a save writes a file of this name into a checkpoint's folder.
fn save_writes(name: &str) -> bool {
    const FIXED: [&str; 6] =
        ["model.safetensors", "optim.safetensors", "meta.json", "tokenizer.json", "shards.json", manifest::FILE];
    let rank_file = (name.starts_with("model.pp") || name.starts_with("optim.pp")) && name.ends_with(".safetensors");
    let part = name.starts_with("part.pp") && [".json", ".json.tmp", ".failed"].iter().any(|s| name.ends_with(s));
    FIXED.contains(&name) || rank_file || part
}

/// Whether `t` is `step-NNNNNNNN` or the start of such a name.
fn name_started(t: &str) -> bool {
    let digits = t.strip_prefix("step-").is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()));
    t.len() <= 13 && ("step-".starts_with(t) || digits)
}

/// The step of `step-NNNNNNNN` (eight digits, as saves name them).
fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("step-")?;
    if digits.len() == 8 && digits.bytes().all(|b| b.is_ascii_digit()) { digits.parse().ok() } else { None }
}

/// The names in folder `p` (itself not a link), each a plain file; an error names what is not.
fn plain_files(p: &Path) -> Result<BTreeSet<String>, String> {
    let m = fs::symlink_metadata(p).map_err(|e| format!("cannot be read ({e})"))?;
    if m.file_type().is_symlink() {
        return Err("is a symbolic link (never followed)".into());
    }
    if !m.is_dir() {
        return Err("is not a folder".into());
    }
    let mut names = BTreeSet::new();
    for e in fs::read_dir(p).map_err(|e| format!("cannot be listed ({e})"))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            return Err(format!("holds {name}, which is not a plain file"));
        }
        names.insert(name);
    }
    Ok(names)
}

/// Remove `files` from folder `p`, then the folder, which fails (and is kept) if anything else
/// appeared in it meanwhile. Returns the bytes freed.
fn remove_files(p: &Path, files: &BTreeSet<String>) -> Result<u64, String> {
    let mut bytes = 0;
    for f in files {
        let path = p.join(f);
        let len = fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
        fs::remove_file(&path).map_err(|e| format!("cannot remove {f} ({e})"))?;
        bytes += len;
    }
    fs::remove_dir(p).map_err(|e| format!("cannot be removed ({e})"))?;
    Ok(bytes)
}

/// The files of `dir` when it is a checkpoint boost wrote, as written: a folder (not a link)
/// whose `SHA256SUMS` lists exactly the plain files it holds, with a `meta.json` that matches
/// its sum and records `step`. The reason otherwise.
pub(crate) fn own_checkpoint(dir: &Path, step: u64) -> Result<BTreeSet<String>, String> {
    let files = plain_files(dir)?;
    let sums = match manifest::entries(dir) {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(format!("has no {}, so what it holds cannot be told from what boost wrote", manifest::FILE));
        }
        Err(e) => return Err(format!("{e:#}")),
    };
    let listed: BTreeSet<String> = sums.iter().map(|(_, n)| n.clone()).collect();
    if let Some(extra) = files.iter().find(|f| *f != manifest::FILE && !listed.contains(*f)) {
        return Err(format!("holds {extra}, which its {} does not list", manifest::FILE));
    }
    if let Some(gone) = listed.iter().find(|f| !files.contains(*f)) {
        return Err(format!("lacks {gone}, which its {} lists", manifest::FILE));
    }
    let meta_sum = sums.iter().find(|(_, n)| n == "meta.json").map(|(s, _)| s.to_ascii_lowercase());
    let meta_path = dir.join("meta.json");
    if meta_sum.is_none() || manifest::sha256_file(&meta_path).ok() != meta_sum {
        return Err(format!("has no meta.json matching its {}", manifest::FILE));
    }
    let meta: Option<CheckpointMeta> = fs::read_to_string(&meta_path).ok().and_then(|t| serde_json::from_str(&t).ok());
    match meta {
        Some(m) if m.step == step => Ok(files),
        _ => Err(format!("has a meta.json that does not record step {step}")),
    }
}

/// Keep the newest `keep` checkpoints under `root` (every one when `keep` is 0). Only the
/// checkpoints boost wrote count and are removed; another folder named like one is kept.
pub(super) fn prune(root: &Path, keep: usize) -> Result<()> {
    if keep == 0 {
        return Ok(());
    }
    let mut steps = list(root)?;
    steps.sort();
    let mut own = Vec::new();
    for (step, dir) in steps {
        match own_checkpoint(&dir, step) {
            Ok(files) => own.push((step, dir, files)),
            Err(why) => warn_once(
                &dir,
                &format!(
                    "{why}; it is kept: train.keep_checkpoints removes only checkpoints boost wrote, exactly as written"
                ),
            ),
        }
    }
    let excess = own.len().saturating_sub(keep);
    for (step, dir, files) in own.into_iter().take(excess) {
        // Renamed out of the step namespace first, so a kill mid-delete leaves a temporary
        // (removed at the next start), never a half-deleted step directory.
        let doomed = root.join(format!(".old-step-{step:08}-{}", std::process::id()));
        if fs::rename(&dir, &doomed).is_ok()
            && let Err(why) = remove_files(&doomed, &files)
        {
            // Something appeared in it meanwhile: back under its name, with what is left.
            let back = fs::rename(&doomed, &dir).is_ok();
            let at = if back { &dir } else { &doomed };
            warn_once(at, &format!("was being removed by train.keep_checkpoints but {why}; what is left is kept"));
        }
    }
    Ok(())
}

/// Print `warning: <path> <why>` once per path in this process (a prune runs at every save, a
/// checkpoint may be opened twice).
pub(crate) fn warn_once(path: &Path, why: &str) {
    static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let first = WARNED.lock().map(|mut w| w.insert(path.to_path_buf())).unwrap_or(true);
    if first {
        eprintln!("warning: {} {why}", path.display());
    }
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod tests;
