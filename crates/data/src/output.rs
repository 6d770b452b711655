//! Owning a dataset output directory while it is built: a lock beside it, a check that it holds
//! nothing that could be lost, and the final rename of the finished build into place.
//!
//! The lock is `.{name}.lock` in the parent directory, holding the builder's PID, locked with
//! `flock` (released by the kernel if the builder dies) and removed when the build ends. The build
//! goes into a temporary directory `.{name}.build-…` beside the output and is renamed onto it
//! only when complete; `rename` replaces an empty directory but never a non-empty one, so an
//! existing dataset (or any other file) is never replaced.

use anyhow::{Context, Result, bail};
use boost_files::Staged;
use boost_files::interrupt::Pending;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// A held output directory: locked, and checked to be missing or empty (apart from `carry`).
#[derive(Debug)]
pub struct OutputGuard {
    out: PathBuf,
    parent: PathBuf,
    base: String,
    carry: Vec<String>,
    lock_path: PathBuf,
    _lock: File,
    /// The lock file, removed on an interrupt while the build runs.
    pending_lock: Option<Pending>,
}

/// What an output directory holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputState {
    /// No such path.
    Missing,
    /// A directory holding nothing, or only files named in `carry`.
    Empty,
    /// Something else: a file, or a directory with these entries (sorted).
    Occupied(Vec<String>),
}

/// Inspects `out` without changing anything. Entries named in `carry` do not count.
pub fn output_state(out: &Path, carry: &[&str]) -> Result<OutputState> {
    let meta = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OutputState::Missing),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", out.display())),
    };
    if !meta.is_dir() {
        return Ok(OutputState::Occupied(vec![]));
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))? {
        let name = entry.with_context(|| format!("cannot list {}", out.display()))?.file_name();
        let name = name.to_string_lossy().into_owned();
        if !carry.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names.sort();
    Ok(if names.is_empty() { OutputState::Empty } else { OutputState::Occupied(names) })
}

/// Up to `max` names joined with ", ", then "and N more".
pub(crate) fn list_names(names: &[String], max: usize) -> String {
    let shown = names.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > max { format!("{shown} and {} more", names.len() - max) } else { shown }
}

impl OutputGuard {
    /// Locks `out` for this process and checks that it is missing or empty (entries named in
    /// `carry`, such as a downloaded corpus, are allowed and moved into the new dataset). Fails
    /// naming the PID of another builder holding the lock, or naming the directory and what it
    /// holds. Leftover temporary builds of `out` (from a crash) are removed.
    pub fn acquire(out: &Path, carry: &[&str]) -> Result<OutputGuard> {
        let parent = boost_files::parent_dir(out);
        let Some(base) = out.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            bail!("{} names no directory; give --out a directory name such as data/mine", out.display());
        };
        std::fs::create_dir_all(&parent).with_context(|| format!("cannot create {}", parent.display()))?;
        let lock_path = parent.join(format!(".{base}.lock"));
        let (pending_lock, lock) = Pending::create(&lock_path, |p| lock(p, out))?;
        let guard = OutputGuard {
            out: out.to_path_buf(),
            parent,
            base,
            carry: carry.iter().map(|s| s.to_string()).collect(),
            lock_path,
            _lock: lock,
            pending_lock: Some(pending_lock),
        };
        if let OutputState::Occupied(names) = output_state(out, carry)? {
            if names.is_empty() {
                bail!("{} exists and is not a directory; choose another --out", out.display());
            }
            bail!(
                "{} is not empty (it holds {}); a dataset is only written into a new or empty directory, \
                 so nothing was changed: choose another --out, or delete {} first",
                out.display(),
                list_names(&names, 6),
                out.display()
            );
        }
        guard.remove_stale_builds();
        Ok(guard)
    }

    /// The output directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// A new temporary directory beside the output to build into (`.{name}.build-…`).
    pub(crate) fn temp_dir(&self) -> Result<Staged> {
        Staged::new(&self.out, "build")
    }

    /// Moves the finished build into place: the carried entries of the output go into `tmp`
    /// first, then `tmp` is renamed onto the (now missing or empty) output.
    pub(crate) fn commit(&self, tmp: Staged) -> Result<()> {
        tmp.finish_into_empty(&self.carry)
    }

    /// Removes `.{name}.build-*.tmp` directories beside the output: only a holder of the lock
    /// creates them, so any found now were left by a build that died.
    fn remove_stale_builds(&self) {
        let prefix = format!(".{}.build-", self.base);
        let Ok(entries) = std::fs::read_dir(&self.parent) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name.ends_with(".tmp") {
                eprintln!("data: removing {} left by an interrupted build", e.path().display());
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

impl Drop for OutputGuard {
    fn drop(&mut self) {
        // No longer the interrupt's to remove: once removed here, the path may be another
        // build's lock file.
        self.pending_lock.take();
        // Removed while still locked; a waiter that opened the old file sees it is gone and retries.
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Opens, locks and stamps the lock file, retrying if the file was replaced between opening and
/// locking it.
fn lock(path: &Path, out: &Path) -> Result<File> {
    loop {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot create the lock file {} for {}", path.display(), out.display()))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = f.read_to_string(&mut pid);
                let pid = pid.trim();
                let pid = if pid.is_empty() { "unknown".to_string() } else { pid.to_string() };
                bail!(
                    "{} is being built by another process (PID {pid}, lock file {}); wait for it to \
                     finish, or choose another output directory",
                    out.display(),
                    path.display()
                );
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        if !same_file(&f, path) {
            continue;
        }
        f.set_len(0)
            .and_then(|_| f.rewind())
            .and_then(|_| writeln!(f, "{}", std::process::id()))
            .with_context(|| format!("cannot write the lock file {} for {}", path.display(), out.display()))?;
        return Ok(f);
    }
}

#[cfg(unix)]
fn same_file(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_guard_names_the_pid_and_the_lock_goes_away() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("ds");
        let g = OutputGuard::acquire(&out, &[]).unwrap();
        let e = format!("{:#}", OutputGuard::acquire(&out, &[]).unwrap_err());
        assert!(e.contains(&format!("PID {}", std::process::id())) && e.contains("ds"), "{e}");
        drop(g);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        OutputGuard::acquire(&out, &[]).unwrap();
    }

    #[test]
    fn state_ignores_carried_names() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(output_state(&d.path().join("x"), &[]).unwrap(), OutputState::Missing);
        assert_eq!(output_state(d.path(), &[]).unwrap(), OutputState::Empty);
        std::fs::write(d.path().join("a.tar.gz"), "x").unwrap();
        assert_eq!(output_state(d.path(), &["a.tar.gz"]).unwrap(), OutputState::Empty);
        assert_eq!(output_state(d.path(), &[]).unwrap(), OutputState::Occupied(vec!["a.tar.gz".into()]));
    }
}
