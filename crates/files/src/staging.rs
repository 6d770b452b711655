//! An output folder built beside its final path and renamed into place (`boost data`, `boost
//! export`, `boost import`), so a crash, a kill or Ctrl-C never leaves it half-written. The
//! folder being built is `.{name}.{what}-{pid}-….tmp` next to the output: an interrupt removes
//! it ([`crate::interrupt`]), a failure removes it, and a later run to the same output removes
//! those of processes that are gone (a `kill -9`; [`recover`]). Replacing an output moves the
//! old one aside to `….old` first; if a `kill -9` lands between that and the new folder's
//! rename, the next run to the same output puts the old one back ([`recover`]). An output that
//! must not be replaced goes only onto a missing or empty folder ([`Staged::finish_into_empty`]).

use crate::interrupt;
use crate::temp::{self as atomic, TempPath};
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The folder being built for `out`: removed on drop, or on an interrupt, until
/// [`Staged::finish`] moves it into place.
pub struct Staged {
    tmp: TempPath,
    out: PathBuf,
}

impl Staged {
    /// Creates the temporary folder beside `out` (and `out`'s parent if missing). Call
    /// [`recover`] first: it clears what earlier runs to `out` left.
    pub fn new(out: &Path, what: &str) -> Result<Staged> {
        let parent = atomic::parent_dir(out);
        fs::create_dir_all(&parent).with_context(|| format!("cannot create {}", parent.display()))?;
        Ok(Staged { tmp: atomic::temp_dir_in(&parent, &prefix(out, what))?, out: out.to_path_buf() })
    }

    /// The folder to write into.
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Puts the finished folder at the output, replacing an existing one (which the caller
    /// checked may be replaced) only once the new one is complete.
    pub fn finish(self) -> Result<()> {
        // An interrupt waits until the old folder is replaced, never leaving the output missing.
        let _critical = interrupt::critical();
        let out = &self.out;
        if !out.exists() {
            return self.tmp.persist(out);
        }
        let old = self.aside();
        fs::rename(out, &old).with_context(|| format!("cannot move {} aside", out.display()))?;
        if let Err(e) = self.tmp.persist(out) {
            // Put the old folder back.
            let _ = fs::rename(&old, out);
            return Err(e);
        }
        fs::remove_dir_all(&old).ok();
        Ok(())
    }

    /// Puts the finished folder at the output only if that is missing or an empty folder:
    /// `rename` replaces an empty directory but never a non-empty one, so whatever the output
    /// came to hold during the build is left as it is and the build is discarded. The entries
    /// named in `carry` (files the output held that the new one keeps, such as a downloaded
    /// corpus) move into the new folder first, and back if the rename fails.
    pub fn finish_into_empty(self, carry: &[String]) -> Result<()> {
        // An interrupt waits until the carried entries and the build are in place.
        let _critical = interrupt::critical();
        let mut moved = Vec::new();
        for name in carry {
            let src = self.out.join(name);
            if src.exists() {
                fs::rename(&src, self.path().join(name))
                    .with_context(|| format!("cannot move {} into the new output", src.display()))?;
                moved.push(name);
            }
        }
        let result = self.path().to_path_buf();
        if let Err(e) = self.tmp.persist(&self.out) {
            // Put the carried files back before the temporary directory is removed.
            for name in moved {
                let _ = fs::rename(result.join(name), self.out.join(name));
            }
            return Err(e.context(format!(
                "{} changed during the build and was left as it is; the build was discarded",
                self.out.display()
            )));
        }
        Ok(())
    }

    /// Where `finish` moves an existing output before renaming the new one in (`….old`).
    fn aside(&self) -> PathBuf {
        self.tmp.path().with_extension("old")
    }
}

/// Clears what earlier runs to `out` that are gone left beside it, in one listing of its
/// folder: removes the folders they were building (`.{name}.{what}-PID….tmp`), and puts back an
/// old output that a killed [`Staged::finish`] had moved aside: when `out` is missing and such
/// a process left `.{name}.{what}-PID….old`, that folder is renamed back to `out`. Call it
/// before checking `out`, so the check sees what the user had, and before [`Staged::new`].
/// Returns the folder restored. A `.old` folder left beside an `out` that exists (the kill came
/// after the new output was in place) is not deleted: it is named in a warning.
pub fn recover(out: &Path, what: &str) -> Result<Option<PathBuf>> {
    let (building, mut left) = dead_folders(&atomic::parent_dir(out), &prefix(out, what));
    for p in building {
        fs::remove_dir_all(p).ok();
    }
    // Newest last: the most recent replacement is the one whose output went missing.
    left.sort_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).ok());
    let mut restored = None;
    if !out.exists()
        && let Some(old) = left.pop()
    {
        fs::rename(&old, out).with_context(|| {
            format!("cannot put back {} (an earlier run's output) at {}", old.display(), out.display())
        })?;
        eprintln!("restored {} from {}: an earlier {what} was killed while replacing it", out.display(), old.display());
        restored = Some(old);
    }
    for old in left {
        eprintln!(
            "warning: {} holds the output an earlier {what} replaced at {} (it was killed before removing it); delete it if it is not needed",
            old.display(),
            out.display()
        );
    }
    Ok(restored)
}

/// The names' prefix of the folders built for `out`: `.{name}.{what}-`.
fn prefix(out: &Path, what: &str) -> String {
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| what.into());
    format!(".{name}.{what}-")
}

/// The entries of `parent` named `{prefix}PID….tmp` ([`atomic::temp_dir_in`]'s names) and
/// `{prefix}PID….old` whose process is gone, in that order.
fn dead_folders(parent: &Path, prefix: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut tmp, mut old) = (Vec::new(), Vec::new());
    let Ok(entries) = fs::read_dir(parent) else { return (tmp, old) };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let dead = |suffix: &str| owner(&name, prefix, suffix).is_some_and(|p| p > 0 && !alive(p));
        if dead(".tmp") {
            tmp.push(e.path());
        } else if dead(".old") {
            old.push(e.path());
        }
    }
    (tmp, old)
}

/// The PID in a `{prefix}PID…{suffix}` name (the PID is read before the first `-`).
fn owner(file: &str, prefix: &str, suffix: &str) -> Option<i32> {
    file.strip_prefix(prefix)?.strip_suffix(suffix)?.split('-').next()?.parse().ok()
}

/// Whether process `pid` exists (signal 0 checks without sending; EPERM: it exists).
fn alive(pid: i32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: kill with signal 0 sends nothing.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_beside_and_moves_into_place() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("model");
        let s = Staged::new(&out, "export").unwrap();
        assert!(s.path().starts_with(d.path()) && s.path() != out);
        fs::write(s.path().join("config.json"), "{}").unwrap();
        assert!(!out.exists(), "nothing at the output before it is finished");
        s.finish().unwrap();
        assert_eq!(fs::read_to_string(out.join("config.json")).unwrap(), "{}");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1, "only the output is left");

        // An unfinished one leaves nothing; a finished one replaces the old folder whole.
        let s = Staged::new(&out, "export").unwrap();
        fs::write(s.path().join("half"), "").unwrap();
        drop(s);
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
        assert!(out.join("config.json").exists() && !out.join("half").exists());
        let s = Staged::new(&out, "export").unwrap();
        fs::write(s.path().join("new.json"), "").unwrap();
        s.finish().unwrap();
        assert!(out.join("new.json").exists() && !out.join("config.json").exists());
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn removes_what_dead_processes_left() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("model");
        // PID 2^22 + 1 is above Linux's pid_max limit, so no process has it.
        let dead = d.path().join(format!(".model.export-{}.tmp", (1 << 22) + 1));
        let dead_unique = d.path().join(format!(".model.export-{}-0-1f.tmp", (1 << 22) + 1));
        let other = d.path().join(".other.export-1.tmp");
        for p in [&dead, &dead_unique, &other] {
            fs::create_dir(p).unwrap();
        }
        recover(&out, "export").unwrap();
        let s = Staged::new(&out, "export").unwrap();
        let own = s.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(own.starts_with(&format!(".model.export-{}-", std::process::id())), "this process's own folder: {own}");
        assert!(!dead_unique.exists(), "a dead process's folder is removed");
        assert!(!dead.exists(), "a dead process's folder is removed");
        assert!(other.exists(), "another output's is not");
    }

    #[test]
    fn puts_back_what_a_kill_between_the_renames_moved_aside() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("model");
        // The state a `kill -9` between `finish`'s two renames leaves: the old output moved
        // aside by a process that is gone (PID above Linux's pid_max), nothing at `out`.
        let dead = (1 << 22) + 1;
        let old = d.path().join(format!(".model.export-{dead}-0-1f.old"));
        fs::create_dir(&old).unwrap();
        fs::write(old.join("model.safetensors"), "the user's weights").unwrap();
        // Another output's and a live process's (this one's) are never touched.
        let other = d.path().join(format!(".other.export-{dead}-0-1f.old"));
        let live = d.path().join(format!(".model.export-{}-0-1f.old", std::process::id()));
        for p in [&other, &live] {
            fs::create_dir(p).unwrap();
        }
        assert_eq!(recover(&out, "export").unwrap().as_deref(), Some(old.as_path()));
        assert_eq!(fs::read_to_string(out.join("model.safetensors")).unwrap(), "the user's weights");
        assert!(!old.exists() && other.exists() && live.exists());

        // With the output in place (the kill came after the new one's rename), a folder moved
        // aside is left where it is, whole: only a warning names it.
        fs::create_dir(&old).unwrap();
        fs::write(old.join("model.safetensors"), "replaced").unwrap();
        assert_eq!(recover(&out, "export").unwrap(), None);
        assert_eq!(fs::read_to_string(old.join("model.safetensors")).unwrap(), "replaced");
        assert_eq!(fs::read_to_string(out.join("model.safetensors")).unwrap(), "the user's weights");
        // `finish` names its folder moved aside as `recover` expects.
        let s = Staged::new(&out, "export").unwrap();
        let aside = s.aside().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(owner(&aside, &prefix(&out, "export"), ".old"), Some(std::process::id() as i32), "{aside}");
    }
}
