//! Which `--out` an export may write. A new or empty folder always; a non-empty one only with
//! `--force`, and only when it is an earlier boost export exactly as boost wrote it: its
//! [`MARKER`] present and its `SHA256SUMS` listing every file of the folder, each matching.
//! Anything else (a run, a checkpoint, a dataset, a Hugging Face model, your notes, a folder
//! with one file added or edited) is refused with or without `--force`, as `save_pretrained`
//! never deletes what it did not write. Every judgement is on the real path (links resolved).

use anyhow::{Context, Result, bail};
use boost_checkpoint::manifest;
use boost_checkpoint::paths;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

pub use boost_checkpoint::paths::EXPORT_MARKER as MARKER;

/// The marker's contents: the export's format, and where it came from.
pub fn marker(ckpt_dir: &Path, step: u64) -> String {
    let v = serde_json::json!({
        "format": 1,
        "written_by": format!("boost {}", env!("CARGO_PKG_VERSION")),
        "checkpoint": ckpt_dir.canonicalize().unwrap_or_else(|_| ckpt_dir.to_path_buf()).display().to_string(),
        "step": step,
    });
    serde_json::to_string_pretty(&v).expect("a JSON value") + "\n"
}

/// Checks `out` for an export of checkpoint `ckpt_dir` and returns the real path to write
/// (links resolved), which is where the export goes.
pub fn check(ckpt_dir: &Path, out: &Path, force: bool) -> Result<PathBuf> {
    let real = paths::resolved(out).with_context(|| format!("cannot resolve --out {}", out.display()))?;
    let shown =
        if real == out { out.display().to_string() } else { format!("{} (= {})", out.display(), real.display()) };
    if let Some(what) = paths::protected(&real) {
        bail!("--out {shown} is {what}, which an export never writes into (even with --force); name a new folder");
    }
    let ck = ckpt_dir.canonicalize().with_context(|| format!("cannot resolve {}", ckpt_dir.display()))?;
    if ck.starts_with(&real) {
        bail!(
            "--out {shown} is the checkpoint being exported or holds it ({}); an export only reads it, even with --force: \
             choose a new directory",
            ck.display()
        );
    }
    if real.starts_with(&ck) {
        bail!(
            "--out {shown} is inside the checkpoint being exported, which an export only reads; choose a directory outside {}",
            ck.display()
        );
    }
    let meta = match fs::symlink_metadata(&real) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(real),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect --out {shown}")),
    };
    if !meta.is_dir() {
        bail!("--out {shown} is a file (or a link to nothing); name a directory for the export");
    }
    let Some(holds) = paths::describe(&real) else { return Ok(real) };
    match earlier_export(&real) {
        Ok(()) if force => Ok(real),
        Ok(()) => {
            bail!("--out {shown} holds an earlier boost export; pass --force to replace it, or choose a new directory")
        }
        Err(Changed(why)) if real.join(MARKER).exists() => bail!(
            "--out {shown} is an earlier boost export, but {why}; --force replaces an export only as boost wrote it, so \
             nothing you added or edited there is lost: move that away, or choose a new directory"
        ),
        Err(_) => bail!(
            "--out {shown} is not empty and is not an earlier boost export: it holds {holds}. An export never deletes what it \
             did not write, even with --force (which replaces only a folder holding {MARKER} and a SHA256SUMS listing exactly \
             its files); choose a new directory"
        ),
    }
}

/// Why a folder is not an export as boost wrote it.
struct Changed(String);

/// Whether `dir` is an export exactly as boost wrote it: [`MARKER`] and `SHA256SUMS` present,
/// nothing but regular files, every one listed, every listed one matching its sum.
fn earlier_export(dir: &Path) -> std::result::Result<(), Changed> {
    let mut files = BTreeSet::new();
    for e in fs::read_dir(dir).map_err(|e| Changed(format!("it cannot be listed ({e})")))? {
        let e = e.map_err(|e| Changed(format!("it cannot be listed ({e})")))?;
        let name = e.file_name().to_string_lossy().into_owned();
        match e.file_type() {
            Ok(t) if t.is_file() => {}
            _ => return Err(Changed(format!("{name} is not a plain file (an export holds only files)"))),
        }
        files.insert(name);
    }
    if !files.contains(MARKER) {
        return Err(Changed(format!("it holds no {MARKER}")));
    }
    let listed = match manifest::verify_listed(dir) {
        Ok(Some(l)) => l,
        Ok(None) => return Err(Changed(format!("it holds no {}", manifest::FILE))),
        Err(e) => return Err(Changed(format!("{e:#}"))),
    };
    files.remove(manifest::FILE);
    if let Some(added) = files.difference(&listed).next() {
        return Err(Changed(format!("{added} was added after the export (it is not in {})", manifest::FILE)));
    }
    Ok(())
}
