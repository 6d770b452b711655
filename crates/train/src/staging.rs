//! An output folder built beside its final path and renamed into place (`boost export`,
//! `boost import`), so a crash, a kill or Ctrl-C never leaves it half-written. The folder being
//! built is `.{name}.{what}-{pid}-….tmp` next to the output: an interrupt removes it
//! (`boost_data::interrupt`), a failure removes it, and a later run to the same output removes
//! those of processes that are gone (a `kill -9`).

use anyhow::{Context, Result};
use boost_data::atomic::{self, TempPath};
use boost_data::interrupt;
use std::fs;
use std::path::{Path, PathBuf};

/// The folder being built for `out`: removed on drop, or on an interrupt, until
/// [`Staged::finish`] moves it into place.
pub struct Staged {
    tmp: TempPath,
    out: PathBuf,
}

impl Staged {
    /// Creates the temporary folder beside `out` (and `out`'s parent if missing).
    pub fn new(out: &Path, what: &str) -> Result<Staged> {
        let parent = atomic::parent_dir(out);
        fs::create_dir_all(&parent).with_context(|| format!("cannot create {}", parent.display()))?;
        let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| what.into());
        let prefix = format!(".{name}.{what}-");
        remove_stale(&parent, &prefix);
        Ok(Staged { tmp: atomic::temp_dir_in(&parent, &prefix)?, out: out.to_path_buf() })
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
        let old = self.tmp.path().with_extension("old");
        fs::rename(out, &old).with_context(|| format!("cannot move {} aside", out.display()))?;
        if let Err(e) = self.tmp.persist(out) {
            // Put the old folder back.
            let _ = fs::rename(&old, out);
            return Err(e);
        }
        fs::remove_dir_all(&old).ok();
        Ok(())
    }
}

/// Removes the `{prefix}PID….tmp` folders ([`atomic::temp_dir_in`]'s names) of processes that
/// are gone.
fn remove_stale(parent: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let pid = file
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| p > 0 && !alive(p)) {
            fs::remove_dir_all(e.path()).ok();
        }
    }
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
        let s = Staged::new(&out, "export").unwrap();
        let own = s.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(own.starts_with(&format!(".model.export-{}-", std::process::id())), "this process's own folder: {own}");
        assert!(!dead_unique.exists(), "a dead process's folder is removed");
        assert!(!dead.exists(), "a dead process's folder is removed");
        assert!(other.exists(), "another output's is not");
    }
}
