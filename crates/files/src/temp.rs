//! Temporary files and directories that are renamed into place once complete.
//!
//! They are created with the ordinary permissions (`0666` / `0777` less the umask), unlike
//! `tempfile`'s owner-only ones, so the finished files look like any other output.

use crate::interrupt::Pending;
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The folder `path` is created in: its parent, or `.` for a bare name.
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `{prefix}{pid}-{n}-{nanos}.tmp`: the creating process's id first, so a later run can tell
/// the leftovers of a process that is gone.
fn unique_name(prefix: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{prefix}{}-{}-{nanos:x}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A path removed on drop unless [`TempPath::persist`] moved it into place, and on an
/// interrupt ([`crate::interrupt`]) while it is alive.
#[derive(Debug)]
pub struct TempPath {
    path: PathBuf,
    is_dir: bool,
    armed: bool,
    _pending: Pending,
}

impl TempPath {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temporary file or directory to `dest`.
    pub fn persist(mut self, dest: &Path) -> Result<()> {
        std::fs::rename(&self.path, dest)
            .with_context(|| format!("cannot rename {} to {}", self.path.display(), dest.display()))?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if self.armed {
            let _ = if self.is_dir { std::fs::remove_dir_all(&self.path) } else { std::fs::remove_file(&self.path) };
        }
    }
}

/// Creates a new, empty file in `dir` named `{prefix}…`.
pub fn temp_file_in(dir: &Path, prefix: &str) -> Result<(TempPath, File)> {
    loop {
        let path = dir.join(unique_name(prefix));
        match Pending::create(&path, |p| OpenOptions::new().write(true).create_new(true).open(p)) {
            Ok((_pending, f)) => {
                return Ok((TempPath { path, is_dir: false, armed: true, _pending }, f));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create a temporary file in {}", dir.display()));
            }
        }
    }
}

/// Creates a new, empty directory in `dir` named `{prefix}…`.
pub fn temp_dir_in(dir: &Path, prefix: &str) -> Result<TempPath> {
    loop {
        let path = dir.join(unique_name(prefix));
        match Pending::create(&path, |p| std::fs::create_dir(p)) {
            Ok((_pending, ())) => {
                return Ok(TempPath { path, is_dir: true, armed: true, _pending });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create a temporary directory in {}", dir.display()));
            }
        }
    }
}
