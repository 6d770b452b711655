//! `SHA256SUMS`: the checksum manifest of a checkpoint or export directory, in the format of
//! `sha256sum` (`<hex>  <file>` per line), so `sha256sum -c SHA256SUMS` verifies it by hand
//! too. It is written last, inside the temporary directory, before the rename; opening a
//! directory checks every file it lists (size and hash), so a flipped bit is caught before a
//! model trains or scores on it.

use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::Path;

pub const FILE: &str = "SHA256SUMS";

/// The SHA-256 of a file, read in blocks (no second copy of a large file in memory).
pub use boost_files::checksum::sha256_file;

/// Write `dir/SHA256SUMS` over every regular file of `dir` (sorted by name), synced.
pub fn write(dir: &Path) -> Result<()> {
    write_known(dir, &std::collections::BTreeMap::new())
}

/// [`write()`], taking the sums of the files in `known` as given (files hashed as they were
/// written and read back) instead of reading them again.
pub fn write_known(dir: &Path, known: &std::collections::BTreeMap<String, String>) -> Result<()> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != FILE)
        .collect();
    names.sort();
    let mut text = String::new();
    for n in &names {
        let sum = match known.get(n) {
            Some(s) => s.clone(),
            None => sha256_file(&dir.join(n))?,
        };
        text.push_str(&format!("{sum}  {n}\n"));
    }
    let path = dir.join(FILE);
    let mut f = fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().with_context(|| format!("cannot sync {}", path.display()))?;
    Ok(())
}

/// What [`verify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// Every listed file matched.
    Ok,
    /// No manifest (a directory written before manifests existed): nothing could be checked.
    Unverifiable,
}

/// Check every file `dir/SHA256SUMS` lists. A mismatch, a missing listed file or a garbled
/// manifest is an error naming the file.
pub fn verify(dir: &Path) -> Result<Verified> {
    Ok(match verify_listed(dir)? {
        Some(_) => Verified::Ok,
        None => Verified::Unverifiable,
    })
}

/// [`verify`], returning the names of the files `dir/SHA256SUMS` lists (each one checked), or
/// `None` when there is no manifest. A reader must open only listed files: an unlisted one
/// is unverified.
pub fn verify_listed(dir: &Path) -> Result<Option<BTreeSet<String>>> {
    let path = dir.join(FILE);
    let Some(lines) = entries(dir)? else {
        return Ok(None);
    };
    let mut listed = BTreeSet::new();
    for (sum, name) in lines {
        let file = dir.join(&name);
        if !file.is_file() {
            bail!("{} is missing (listed in {})", file.display(), path.display());
        }
        if sha256_file(&file)? != sum.to_ascii_lowercase() {
            bail!("{} is corrupt or truncated: it does not match its checksum in {}", file.display(), path.display());
        }
        listed.insert(name);
    }
    Ok(Some(listed))
}

/// The (sum, file) lines of `dir/SHA256SUMS`, nothing hashed; `None` when there is none. A
/// garbled line is an error naming it.
pub fn entries(dir: &Path) -> Result<Option<Vec<(String, String)>>> {
    let path = dir.join(FILE);
    if !path.exists() {
        return Ok(None);
    }
    let text = fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{} is unreadable ({e})", path.display()))?;
    if text.trim().is_empty() {
        bail!("{} is empty", path.display());
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((sum, name)) = line.split_once("  ") else {
            bail!("{}:{}: not a `<sha256>  <file>` line", path.display(), i + 1);
        };
        if sum.len() != 64 || !sum.bytes().all(|b| b.is_ascii_hexdigit()) || name.contains('/') || name.is_empty() {
            bail!("{}:{}: not a `<sha256>  <file>` line", path.display(), i + 1);
        }
        out.push((sum.to_string(), name.to_string()));
    }
    Ok(Some(out))
}
