//! What a run owns in its directory, and how it is kept safe: an exclusive lock for the life
//! of the run, the refusals that keep one run from writing over another's results, the
//! removal of what crashed saves left behind, and `metrics.jsonl` trimmed to the step a
//! resumed run continues from (the lines after it kept in a side file).

use anyhow::{Context, Result, bail};
use boost_checkpoint as checkpoint;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

pub mod config_edits;

/// The lock file inside a run directory; it holds the PID of the run that owns it.
pub const LOCK: &str = ".lock";

/// An exclusive lock on a run directory, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    /// The lock file, when [`RunLock::acquire`] created it.
    made: Option<PathBuf>,
}

impl RunLock {
    /// Lock `run_dir` (created if needed) or fail naming the PID of the run that holds it.
    pub fn acquire(run_dir: &Path) -> Result<Self> {
        fs::create_dir_all(run_dir).with_context(|| format!("cannot create run.dir {}", run_dir.display()))?;
        let path = run_dir.join(LOCK);
        let made_file = fs::symlink_metadata(&path).is_err().then(|| path.clone());
        // Not truncated before the lock is ours: the file names the current owner. Never
        // through a symbolic link, whose target this would write the PID into.
        let mut file = no_follow(OpenOptions::new().create(true).truncate(false).read(true).write(true))
            .open(&path)
            .with_context(|| match fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    format!("{} is a symbolic link, which a run never writes through; remove it", path.display())
                }
                _ => format!("cannot open {}", path.display()),
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                file.read_to_string(&mut pid).ok();
                bail!(
                    "run.dir = {} is in use by another `boost train` (pid {}); wait for it to finish, or choose another directory with `--set run.dir=<dir>`",
                    run_dir.display(),
                    pid.trim()
                );
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()));
            }
        }
        file.set_len(0).and_then(|()| file.rewind()).with_context(|| format!("cannot write {}", path.display()))?;
        write!(file, "{}", std::process::id()).with_context(|| format!("cannot write {}", path.display()))?;
        file.sync_all().ok();
        Ok(Self { _file: file, made: made_file })
    }

    /// Gives the lock up after the run was refused: removes the lock file if this lock made
    /// it, so a refused run leaves no `.lock` in a folder of the user's.
    pub fn abandon(self) {
        if let Some(f) = &self.made {
            fs::remove_file(f).ok();
        }
    }
}

/// A run directory is a run's own folder, or a new or empty one, or one of the user's: never
/// a dataset, a checkpoint, an export, a Hugging Face model or a folder of token files, which
/// `checkpoints/`, `metrics.jsonl` and `config.toml` would be mixed into; nor inside one of
/// those (but token files) or another run's `checkpoints/`, at any depth, judged by the real
/// path (links resolved, a missing path by its nearest existing ancestor).
pub fn check_not_foreign(run_dir: &Path) -> Result<()> {
    use boost_checkpoint::paths::{self, Holds};
    match paths::holds(run_dir) {
        Some((Holds::Run | Holds::Other, _)) | None => {}
        Some((_, what)) => bail!(
            "run.dir = {} is {what}; a run writes checkpoints/, metrics.jsonl and config.toml into its run directory, \
             which would be mixed into it: choose a new directory with `--set run.dir=<dir>`",
            run_dir.display()
        ),
    }
    let Some(real) = paths::resolved(run_dir) else { return Ok(()) };
    for outer in real.ancestors().skip(1) {
        let what = match paths::holds_here(outer) {
            Some((Holds::Checkpoint | Holds::Dataset | Holds::Export | Holds::HfModel, what)) => what,
            Some((Holds::Checkpoints, what)) if holds_steps(outer) => format!("a run's {what}"),
            _ => continue,
        };
        let really = if std::path::absolute(run_dir).is_ok_and(|a| a == real) {
            String::new()
        } else {
            format!(" (really {})", real.display())
        };
        bail!(
            "run.dir = {}{really} is inside {}, which is {what}; a run writes checkpoints/, metrics.jsonl and \
             config.toml into its run directory, which would be mixed into it: choose a directory outside it with \
             `--set run.dir=<dir>`",
            run_dir.display(),
            outer.display()
        );
    }
    Ok(())
}

/// Whether `dir` is a run's `checkpoints/`: it names `latest` or a `step-NNNNNNNN`.
fn holds_steps(dir: &Path) -> bool {
    dir.join("latest").exists()
        || checkpoint::list(dir)
            .is_ok_and(|l| l.iter().any(|(_, p)| p.file_name().is_some_and(|n| n.len() == "step-00000000".len())))
}

/// Whether checkpoint `ck_dir` is one of `run_dir`'s own (in its `checkpoints/`).
pub fn holds(run_dir: &Path, ck_dir: &Path) -> bool {
    matches!(
        (ck_dir.parent().map(Path::canonicalize), run_dir.join("checkpoints").canonicalize()),
        (Some(Ok(a)), Ok(b)) if a == b
    )
}

/// `options` opening a path itself, not the target of a symbolic link there (Unix).
fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW)
    }
    #[cfg(not(unix))]
    options
}

/// Write the run's resolved config to `run_dir/config.toml`: beside it, then renamed over it,
/// so a symbolic link there is replaced rather than written through. A fresh run refuses a
/// `config.toml` it did not write (one with other contents), and so does a resume of another
/// run's checkpoint into it; a run resumed in its own directory replaces its own.
pub fn write_config(run_dir: &Path, toml: &str, own_run: bool) -> Result<()> {
    let path = run_dir.join("config.toml");
    let text = config_edits::stamped(toml);
    if !own_run && fs::symlink_metadata(&path).is_ok() && fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
        bail!(
            "{} exists with other contents than this run's config (a file of yours, or an earlier run's that left no checkpoint or metrics); a new run never replaces it: move it away, or start elsewhere with `--set run.dir=<new dir>` (a config file can be given with --config FILE from any other path)",
            path.display()
        );
    }
    let tmp = run_dir.join(".config.toml.tmp");
    fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))
}

/// A new run (no `--resume`) never writes into a directory that holds another run's
/// checkpoints or metrics.
pub fn check_fresh(run_dir: &Path) -> Result<()> {
    if !checkpoint::list(&run_dir.join("checkpoints"))?.is_empty() {
        bail!(
            "run.dir = {} already holds checkpoints; continue it with `boost train --resume`, or start elsewhere with `--set run.dir=<new dir>`",
            run_dir.display()
        );
    }
    let metrics = run_dir.join("metrics.jsonl");
    if fs::metadata(&metrics).map(|m| m.len() > 0).unwrap_or(false) {
        bail!(
            "{} holds the metrics of an earlier run (which left no checkpoint to resume); start elsewhere with `--set run.dir=<new dir>`, or delete that directory first",
            metrics.display()
        );
    }
    Ok(())
}

/// A resume into `run_dir` continues the run that directory holds, or starts one there: a
/// checkpoint from elsewhere (`ck_dir` outside `run_dir/checkpoints`) goes only into a
/// directory as fresh as a new run's ([`check_fresh`]), or two runs' checkpoints and metrics
/// would mix (and pruning would delete the other run's). Resuming at `step` must not write
/// over checkpoints newer than it either: branch into another run directory instead.
pub fn check_resume(run_dir: &Path, ck_dir: &Path, step: u64) -> Result<()> {
    if !holds(run_dir, ck_dir) {
        return check_fresh(run_dir).map_err(|e| {
            anyhow::anyhow!(
                "{e}; the checkpoint being resumed, {}, is another run's, and a resume never mixes two runs in one directory",
                ck_dir.display()
            )
        });
    }
    let mut newer: Vec<(u64, PathBuf)> =
        checkpoint::list(&run_dir.join("checkpoints"))?.into_iter().filter(|(s, _)| *s > step).collect();
    if newer.is_empty() {
        return Ok(());
    }
    newer.sort();
    let names: Vec<String> = newer.iter().map(|(_, d)| d.display().to_string()).collect();
    bail!(
        "resuming at step {step} would overwrite newer checkpoints of run.dir = {}: {}; to branch from step {step}, resume into another run directory (`--set run.dir=<new dir>`; the checkpoint is read where it is), or resume from the newest",
        run_dir.display(),
        names.join(", ")
    )
}

/// Remove what interrupted checkpoint saves left in `run_dir/checkpoints` (call with the
/// lock held). Returns a line to log, if anything was removed.
pub fn clean_stale(run_dir: &Path) -> Option<String> {
    let root = run_dir.join("checkpoints");
    let (n, bytes) = checkpoint::remove_stale(&root);
    (n > 0).then(|| {
        format!(
            "removed {n} unfinished checkpoint temporaries from {} ({:.1} MB freed)",
            root.display(),
            bytes as f64 / 1e6
        )
    })
}

/// Keep the lines of `run_dir/metrics.jsonl` up to `step`; move the others (steps a resumed
/// run will log again, or a line cut short by a kill) into a side file that never replaces
/// another. Returns the side file, if one was written.
pub fn trim_metrics(run_dir: &Path, step: u64) -> Result<Option<PathBuf>> {
    let path = run_dir.join("metrics.jsonl");
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(None);
    };
    let (mut keep, mut moved) = (String::new(), String::new());
    for line in text.split_inclusive('\n') {
        let s = serde_json::from_str::<serde_json::Value>(line.trim())
            .ok()
            .and_then(|v| v.get("step").and_then(|s| s.as_u64()))
            .filter(|_| line.ends_with('\n'));
        match s {
            Some(s) if s <= step => keep.push_str(line),
            _ if line.trim().is_empty() => {}
            _ => {
                moved.push_str(line);
                if !line.ends_with('\n') {
                    moved.push('\n');
                }
            }
        }
    }
    if moved.is_empty() {
        return Ok(None);
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let side = (0..)
        .map(|k| {
            run_dir.join(format!(
                "metrics.after-step-{step}.{stamp}{}.jsonl",
                if k == 0 { String::new() } else { format!("-{k}") }
            ))
        })
        .find(|p| !p.exists())
        .expect("an unused name");
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&side)
        .with_context(|| format!("cannot create {}", side.display()))?;
    f.write_all(moved.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", side.display()))?;
    let tmp = run_dir.join(".metrics.jsonl.tmp");
    fs::write(&tmp, keep.as_bytes()).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, &path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(Some(side))
}
