//! Removing checkpoints: the oldest beyond `train.keep_checkpoints`, and the temporaries
//! that interrupted saves and prunes leave behind.

use super::list;
use anyhow::Result;
use std::fs;
use std::path::Path;

/// Remove what interrupted saves leave in `root` (`.tmp-*`, `.old-*`, `.latest.tmp`): only
/// safe while this process holds the run directory's lock. Returns (entries, bytes) freed.
pub fn remove_stale(root: &Path) -> (usize, u64) {
    let (mut n, mut bytes) = (0, 0);
    let Ok(rd) = fs::read_dir(root) else {
        return (0, 0);
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") || name.starts_with(".old-") || name == ".latest.tmp" {
            let p = e.path();
            bytes += size_of(&p);
            let gone = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            if gone.is_ok() {
                n += 1;
            }
        }
    }
    (n, bytes)
}

fn size_of(p: &Path) -> u64 {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::read_dir(p).map(|rd| rd.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// Keep the newest `keep` checkpoints under `root` (every one when `keep` is 0).
pub(super) fn prune(root: &Path, keep: usize) -> Result<()> {
    if keep == 0 {
        return Ok(());
    }
    let mut steps = list(root)?;
    steps.sort();
    while steps.len() > keep {
        let (step, dir) = steps.remove(0);
        // Renamed out of the step namespace first, so a kill mid-delete leaves a temporary
        // (removed at the next start), never a half-deleted step directory.
        let doomed = root.join(format!(".old-step-{step:08}-{}", std::process::id()));
        if fs::rename(&dir, &doomed).is_ok() {
            fs::remove_dir_all(&doomed).ok();
        }
    }
    Ok(())
}
