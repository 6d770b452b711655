//! Where a path a user names lies, before it exists: for the refusals that keep an output
//! out of a folder that is only read (an import's `--hf`, an exported checkpoint).

use std::path::{Component, Path, PathBuf};

/// Where `path` is or would be created: its nearest existing ancestor canonicalized, the rest
/// appended (with `..` taken lexically; nothing below that ancestor exists to be a link).
pub fn resolved(path: &Path) -> Option<PathBuf> {
    let path = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let parts: Vec<Component> = path.components().collect();
    (1..=parts.len()).rev().find_map(|k| {
        let mut out = parts[..k].iter().collect::<PathBuf>().canonicalize().ok()?;
        for part in &parts[k..] {
            match part {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        Some(out)
    })
}

/// Whether `path` (existing or not) is `dir` or lies inside it, links resolved.
pub fn inside(path: &Path, dir: &Path) -> bool {
    matches!((dir.canonicalize(), resolved(path)), (Ok(dir), Some(p)) if p.starts_with(&dir))
}
