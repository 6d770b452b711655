//! Ctrl-C (SIGINT) or SIGTERM during a command that builds its output in temporary paths
//! beside it (`boost data`, `boost export`, `boost import`): the temporary paths still pending
//! are removed, then the process exits with 128 + the signal's number, so an interrupted build
//! leaves nothing behind. The renames that put a finished output in place run as a
//! [`critical`] section, which the clean-up waits for: an output is never left half-moved.
//!
//! Only commands whose handlers clean up ([`crate::signals::FirstSignal::CleanUpAndExit`]) stop
//! this way. `boost train` records the signal and stops at a step boundary (a checkpoint), and
//! ends this way only while it prepares its data, before the first step
//! ([`crate::signals::exit_during`]); in library use a registration costs a lock and nothing
//! else.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

/// The temporary paths to remove on an interrupt, by registration number.
static PENDING: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);
/// Held for reading by [`critical`] sections, for writing by the clean-up.
static CRITICAL: RwLock<()> = RwLock::new(());

fn pending() -> MutexGuard<'static, Vec<(u64, PathBuf)>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// What an interrupt does: waits for a critical section in progress, removes the pending paths
/// and exits with 128 + `sig`.
pub fn clean_up_and_exit(sig: i32) -> ! {
    // Both locks stay held until the process exits: nothing registers, creates or renames
    // after the clean-up.
    let _critical = CRITICAL.write().unwrap_or_else(|e| e.into_inner());
    let pending = pending();
    let removed = remove_all(&pending);
    let name = signal_name(sig);
    match removed {
        0 => eprintln!("interrupted by {name}"),
        n => eprintln!("interrupted by {name}; removed the unfinished output ({n} temporary path(s))"),
    }
    std::process::exit(128 + sig);
}

/// The name of the signals these commands stop on (`boost train`'s messages use it too).
pub fn signal_name(sig: i32) -> &'static str {
    use signal_hook::consts::{SIGINT, SIGTERM};
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// Runs `f`, and if `signal()` reports a signal while it runs, ends the process as an
/// interrupt does ([`clean_up_and_exit`]). For a command whose own handler only records the
/// signal: `boost train` stops at a step boundary, but before its first step it may be
/// downloading and building the demo corpus, which a Ctrl-C should end at once. A helper
/// thread polls `signal` every 20 ms until `f` returns or unwinds.
pub fn exit_on_signal_during<R>(signal: fn() -> Option<i32>, f: impl FnOnce() -> R) -> R {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if let Some(sig) = signal() {
                    clean_up_and_exit(sig);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        // Set on return and on unwind, so the scope's join never waits on the poller.
        let _done = SetOnDrop(&done);
        f()
    })
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Removes the paths of `pending` that exist; returns how many it removed.
fn remove_all(pending: &[(u64, PathBuf)]) -> usize {
    pending.iter().filter(|(_, p)| remove(p)).count()
}

fn remove(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).is_ok(),
        Ok(_) => std::fs::remove_file(path).is_ok(),
        Err(_) => false,
    }
}

/// A temporary path that an interrupt removes while this is alive.
#[derive(Debug)]
pub struct Pending(u64);

impl Pending {
    /// Registers `path` and runs `make` (which creates it) under the registry's lock, so the
    /// path is never on disk without being pending. `make` must not register another path
    /// (the lock is not reentrant); when it fails, nothing is registered.
    pub fn create<T, E>(path: &Path, make: impl FnOnce(&Path) -> Result<T, E>) -> Result<(Pending, T), E> {
        let mut pending = pending();
        let made = make(path)?;
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        pending.push((id, path.to_path_buf()));
        Ok((Pending(id), made))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        pending().retain(|(id, _)| *id != self.0);
    }
}

/// A section an interrupt does not cut short (moving a finished output into place): the
/// clean-up waits for it to end.
pub fn critical() -> RwLockReadGuard<'static, ()> {
    CRITICAL.read().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_what_is_pending_and_nothing_released() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("build.tmp");
        let file = d.path().join("part.tmp");
        let kept = d.path().join("done.tmp");
        let (_dir, ()) = Pending::create(&dir, |p| std::fs::create_dir(p)).unwrap();
        std::fs::write(dir.join("shard.bin"), b"tokens").unwrap();
        let (_file, _) = Pending::create(&file, |p| std::fs::File::create(p)).unwrap();
        let (released, _) = Pending::create(&kept, |p| std::fs::File::create(p)).unwrap();
        drop(released);
        // A path whose creation failed is not registered.
        assert!(Pending::create(&d.path().join("no/such/dir"), |p| std::fs::create_dir(p)).is_err());
        let mine: Vec<_> = pending().iter().filter(|(_, p)| p.starts_with(d.path())).cloned().collect();
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert_eq!(remove_all(&mine), 2);
        assert!(!dir.exists() && !file.exists());
        assert!(kept.exists(), "a released path is left alone");
    }
}
