//! Where a path a user names lies, before it exists, and what a folder already holds: for the
//! refusals that keep an output out of a folder that is only read (an import's `--hf`, an
//! exported checkpoint) or that holds something boost must not write into.

use std::fs;
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

/// The file every export writes (covered by its `SHA256SUMS`): what marks a folder as one
/// `export --force` may replace.
pub const EXPORT_MARKER: &str = "boost_export.json";

/// The folders no command ever replaces or fills with its own files, whatever they hold: the
/// root, the home directory and the current directory (each resolved). Returns which one
/// `real` (a resolved path) is.
pub fn protected(real: &Path) -> Option<&'static str> {
    let same = |p: Option<PathBuf>| p.and_then(|p| p.canonicalize().ok()).is_some_and(|p| p == real);
    if real.parent().is_none() {
        Some("the root directory")
    } else if same(std::env::var_os("HOME").map(PathBuf::from)) {
        Some("your home directory")
    } else if same(std::env::current_dir().ok()) {
        Some("the current directory")
    } else {
        None
    }
}

/// What a folder holds, judged from the names at its top.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    Run,
    Checkpoint,
    Dataset,
    Export,
    HfModel,
    TokenFiles,
    Checkpoints,
    /// Anything else: files boost did not write (with, maybe, one of the above a level down).
    Other,
}

/// What kind of folder `dir` is, and that in words for an error ("a run directory
/// (checkpoints, metrics.jsonl)"); `None` for a missing or empty folder.
pub fn holds(dir: &Path) -> Option<(Holds, String)> {
    holds_in(dir, true)
}

/// [`holds`] judged from `dir`'s own names alone, never looking into its subfolders (for
/// every ancestor of a path, up to `/`).
pub fn holds_here(dir: &Path) -> Option<(Holds, String)> {
    holds_in(dir, false)
}

fn holds_in(dir: &Path, look_down: bool) -> Option<(Holds, String)> {
    let mut names: Vec<String> =
        fs::read_dir(dir).ok()?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    let has = |n: &str| names.iter().any(|x| x == n);
    let found = |want: &[&str]| -> Vec<String> { want.iter().filter(|n| has(n)).map(|n| n.to_string()).collect() };
    let kind = |k: Holds, what: &str, marks: Vec<String>| Some((k, format!("{what} ({})", marks.join(", "))));
    let run = found(&["checkpoints", "metrics.jsonl", ".lock"]);
    if !run.is_empty() {
        return kind(Holds::Run, "a run directory", run);
    }
    if has("meta.json") && (has("model.safetensors") || has("shards.json")) {
        return kind(Holds::Checkpoint, "a checkpoint", found(&["meta.json", "model.safetensors", "shards.json"]));
    }
    if has("meta.json") && (has("train.bin") || has("val.bin")) {
        return kind(Holds::Dataset, "a dataset", found(&["meta.json", "train.bin", "val.bin"]));
    }
    if has(EXPORT_MARKER) {
        return kind(Holds::Export, "a boost export", found(&[EXPORT_MARKER, "model.safetensors"]));
    }
    let weights: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with(".safetensors") || n.as_str() == "model.safetensors.index.json" || n.ends_with(".gguf"))
        .cloned()
        .collect();
    if has("config.json") && !weights.is_empty() {
        return kind(Holds::HfModel, "a Hugging Face model", [vec!["config.json".to_string()], weights].concat());
    }
    let tokens: Vec<String> = names.iter().filter(|n| n.ends_with(".bin") || n.ends_with(".idx")).cloned().collect();
    if !tokens.is_empty() {
        return kind(Holds::TokenFiles, "token files", tokens);
    }
    let steps: Vec<String> = names.iter().filter(|n| n.starts_with("step-")).cloned().collect();
    if !steps.is_empty() {
        return kind(Holds::Checkpoints, "checkpoints", steps);
    }
    // A folder of yours may hold a run, a checkpoint or a dataset one level down.
    let nested: Vec<String> = names
        .iter()
        .filter(|n| look_down && dir.join(n).is_dir())
        .filter_map(|n| match holds(&dir.join(n))? {
            (Holds::Other, _) => None,
            (_, what) => Some(format!("{n}/: {what}")),
        })
        .collect();
    if !nested.is_empty() {
        return Some((Holds::Other, format!("files boost did not write and {}", nested.join("; "))));
    }
    const LISTED: usize = 4;
    let more = names.len().saturating_sub(LISTED);
    let shown = names.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    let what = if more > 0 { format!("{shown} and {more} more") } else { shown };
    Some((Holds::Other, format!("files boost did not write ({what})")))
}

/// [`holds`] in words alone.
pub fn describe(dir: &Path) -> Option<String> {
    holds(dir).map(|(_, what)| what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_named_by_what_they_hold() {
        let d = tempfile::tempdir().unwrap();
        let at = |name: &str, files: &[&str]| {
            let dir = d.path().join(name);
            fs::create_dir_all(&dir).unwrap();
            for f in files {
                fs::write(dir.join(f), "x").unwrap();
            }
            describe(&dir).unwrap_or_default()
        };
        assert_eq!(at("empty", &[]), "");
        assert!(at("run", &["metrics.jsonl", "config.toml"]).starts_with("a run directory (metrics.jsonl)"));
        assert!(at("ck", &["meta.json", "model.safetensors"]).starts_with("a checkpoint"));
        assert!(at("ds", &["meta.json", "train.bin", "tokenizer.json"]).starts_with("a dataset"));
        let hf = at("hf", &["config.json", "model-00001-of-00002.safetensors", "model.safetensors.index.json"]);
        assert!(hf.starts_with("a Hugging Face model") && hf.contains("model-00001-of-00002.safetensors"), "{hf}");
        assert!(at("llmc", &["fineweb_train_000001.bin"]).starts_with("token files"));
        assert!(at("copies", &["step-00000002"]).starts_with("checkpoints (step-00000002)"));
        fs::create_dir_all(d.path().join("par/run/checkpoints")).unwrap();
        let par = at("par", &["notes.txt"]);
        assert_eq!(par, "files boost did not write and run/: a run directory (checkpoints)");
        let notes = at("notes", &["a.txt", "b.txt", "c.txt", "d.txt", "e.txt"]);
        assert_eq!(notes, "files boost did not write (a.txt, b.txt, c.txt, d.txt and 1 more)");
    }

    #[test]
    fn the_root_home_and_current_directories_are_protected() {
        assert_eq!(protected(Path::new("/")), Some("the root directory"));
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert!(protected(&cwd).is_some());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(protected(&d.path().canonicalize().unwrap()), None);
    }
}
