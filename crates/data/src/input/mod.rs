//! Reading corpora: plain text files (one document each), JSONL files (one document a line,
//! optionally gzip- or zstd-compressed) and Parquet files (one document a row, the text in a
//! string column).
//!
//! [`Inputs`] streams the documents of many files one at a time, so a corpus of any size is read
//! in bounded memory; [`read_inputs`] collects them for small corpora and tests.

mod jsonl;
mod parquet_file;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One document of a corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it came from: a file name, `file:line` for JSONL, `file:row N` for Parquet.
    pub name: String,
    /// The text.
    pub text: String,
}

impl AsRef<str> for Document {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

/// How a file is read, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `*.jsonl`, `*.jsonl.gz`, `*.jsonl.zst` or `*.jsonl.zstd`: one JSON object a line.
    Jsonl(Compression),
    /// `*.parquet`: one document a row.
    Parquet,
    /// Anything else: the whole file is one UTF-8 document.
    Text,
}

/// The compression of a JSONL file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain text.
    None,
    /// gzip (one or more members, as `cat a.gz b.gz` makes).
    Gzip,
    /// Zstandard (one or more frames).
    Zstd,
}

impl FileKind {
    /// The kind a path is read as.
    pub fn of(path: &Path) -> FileKind {
        let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
        if name.ends_with(".jsonl") {
            FileKind::Jsonl(Compression::None)
        } else if name.ends_with(".jsonl.gz") {
            FileKind::Jsonl(Compression::Gzip)
        } else if name.ends_with(".jsonl.zst") || name.ends_with(".jsonl.zstd") {
            FileKind::Jsonl(Compression::Zstd)
        } else if name.ends_with(".parquet") {
            FileKind::Parquet
        } else {
            FileKind::Text
        }
    }
}

/// Whether a path is read as JSONL (its name ends in `.jsonl`, `.jsonl.gz`, `.jsonl.zst` or
/// `.jsonl.zstd`).
pub fn is_jsonl(path: &Path) -> bool {
    matches!(FileKind::of(path), FileKind::Jsonl(_))
}

/// Whether a path is read as Parquet (its name ends in `.parquet`).
pub fn is_parquet(path: &Path) -> bool {
    FileKind::of(path) == FileKind::Parquet
}

/// The files of a corpus, in reading order, with their sizes: each input path, a directory
/// standing for every corpus file under it (recursively, sorted by path, skipping names that
/// start with `.`; a corpus file is JSONL, Parquet or text by [`TEXT_EXTENSIONS`], and the
/// others, such as a `tokenizer.json` lying beside the text, are skipped and listed).
#[derive(Debug, Clone)]
pub struct Inputs {
    files: Vec<(PathBuf, u64)>,
    skipped: Vec<PathBuf>,
    text_field: String,
}

impl Inputs {
    /// Lists the files of `paths`; `text_field` is the JSONL field or Parquet column holding the
    /// text. Fails naming a path that cannot be read, a directory without files, or a file that
    /// two inputs name (the same canonical path, e.g. one given twice, or also inside a given
    /// directory): its documents would be read twice, into both splits.
    pub fn open(paths: &[PathBuf], text_field: &str) -> Result<Inputs> {
        let (mut files, mut skipped) = (Vec::new(), Vec::new());
        let mut seen: std::collections::HashMap<PathBuf, (&Path, PathBuf)> = std::collections::HashMap::new();
        for p in paths {
            let before = skipped.len();
            let found = expand(p, &mut skipped)?;
            if found.is_empty() && skipped.len() > before {
                bail!(
                    "{} holds no text, JSONL or Parquet files (text files end in .{}); it holds {}",
                    p.display(),
                    TEXT_EXTENSIONS.join(", ."),
                    crate::output::list_names(
                        &skipped[before..].iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
                        5
                    )
                );
            }
            if found.is_empty() {
                bail!("{} holds no files", p.display());
            }
            for f in found {
                let meta = std::fs::metadata(&f).with_context(|| format!("cannot read the input {}", f.display()))?;
                // A FIFO, a device (/dev/zero) or a socket would block or never end.
                if !meta.is_file() {
                    bail!(
                        "the input {} is not a regular file (a FIFO, a device or a socket, which could block or never end); boost data reads only regular files",
                        f.display()
                    );
                }
                let len = meta.len();
                let canon =
                    std::fs::canonicalize(&f).with_context(|| format!("cannot read the input {}", f.display()))?;
                if let Some((first, first_file)) = seen.get(&canon) {
                    let how = |given: &Path, file: &Path| {
                        if given == file {
                            format!("as {}", given.display())
                        } else {
                            format!("as {} in {}", file.display(), given.display())
                        }
                    };
                    bail!(
                        "the input file {} is given twice ({}, and {}): its documents would be read twice and \
                         could land in both the training and the validation split; give each file once",
                        canon.display(),
                        how(first, first_file),
                        how(p, &f)
                    );
                }
                seen.insert(canon, (p.as_path(), f.clone()));
                files.push((f, len));
            }
        }
        Ok(Inputs { files, skipped, text_field: text_field.to_string() })
    }

    /// The files of the given folders that are not corpus files, so were not read.
    pub fn skipped(&self) -> &[PathBuf] {
        &self.skipped
    }

    /// The files in reading order.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }

    /// The total size of the files in bytes (compressed files count as stored).
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|&(_, n)| n).sum()
    }

    /// Counts the documents without decoding them: the non-blank lines of JSONL files, the
    /// rows of Parquet files (checking the text column), one per other file.
    pub fn count_documents(&self) -> Result<u64> {
        use rayon::prelude::*;
        let counts: Vec<u64> = self
            .files
            .par_iter()
            .map(|(f, _)| match FileKind::of(f) {
                FileKind::Jsonl(c) => jsonl::count(f, c),
                FileKind::Parquet => parquet_file::count(f, &self.text_field),
                FileKind::Text => Ok(1),
            })
            .collect::<Result<_>>()?;
        Ok(counts.iter().sum())
    }

    /// Calls `visit` with every document in order, holding one at a time (one line, one row,
    /// or one text file). `read` grows by the bytes of the files consumed so far, for progress.
    /// Stops at the first error, which names the file and the line or row.
    pub fn for_each(&self, read: &AtomicU64, visit: &mut dyn FnMut(Document) -> Result<()>) -> Result<()> {
        for (f, len) in &self.files {
            match FileKind::of(f) {
                FileKind::Jsonl(c) => jsonl::for_each(f, c, &self.text_field, read, visit)?,
                FileKind::Parquet => parquet_file::for_each(f, &self.text_field, *len, read, visit)?,
                FileKind::Text => {
                    let doc = read_text(f)?;
                    read.fetch_add(*len, Ordering::Relaxed);
                    visit(doc)?;
                }
            }
        }
        Ok(())
    }
}

/// Reads documents from files, in the order given, into memory (see [`Inputs`] for the rules
/// and for streaming). `*.jsonl` files (plain, `.gz` or `.zst`) hold one JSON object a line with
/// the text in `text_field`; blank lines are skipped. `*.parquet` files hold one document a
/// row, in the string column `text_field`. Any other file is one UTF-8 document.
pub fn read_inputs(paths: &[PathBuf], text_field: &str) -> Result<Vec<Document>> {
    let inputs = Inputs::open(paths, text_field)?;
    collect(|read, visit| inputs.for_each(read, visit))
}

fn collect(
    run: impl FnOnce(&AtomicU64, &mut dyn FnMut(Document) -> Result<()>) -> Result<()>,
) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    run(&AtomicU64::new(0), &mut |d| {
        docs.push(d);
        Ok(())
    })?;
    Ok(docs)
}

/// The extensions of plain-text files a folder's listing takes (with JSONL and Parquet).
pub const TEXT_EXTENSIONS: [&str; 5] = ["txt", "text", "md", "markdown", "rst"];

/// Whether a file found in a folder is a corpus file: JSONL, Parquet, or a text file by its
/// extension. A file named on its own is read whatever its name.
fn is_corpus_file(path: &Path) -> bool {
    FileKind::of(path) != FileKind::Text
        || path
            .extension()
            .is_some_and(|e| TEXT_EXTENSIONS.contains(&e.to_string_lossy().to_ascii_lowercase().as_str()))
}

/// The files `p` stands for; files of a folder that are not corpus files go to `skipped`.
fn expand(p: &Path, skipped: &mut Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(p).with_context(|| format!("cannot read the input {}", p.display()))?;
    if !meta.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
        .with_context(|| format!("cannot list {}", p.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", p.display()))?;
    entries.retain(|e| !e.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')));
    entries.sort();
    let mut out = Vec::new();
    for e in entries {
        if e.is_dir() {
            out.extend(expand(&e, skipped)?);
        } else if is_corpus_file(&e) {
            out.push(e);
        } else {
            skipped.push(e);
        }
    }
    Ok(out)
}

/// Reads a whole file as one document.
pub fn read_text(path: &Path) -> Result<Document> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not valid UTF-8 (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    Ok(Document { name: path.display().to_string(), text })
}

/// Reads a JSONL file (plain, or compressed as its name says): each non-blank line is an object
/// whose `text_field` is a string. Errors name the file and the 1-based line number.
pub fn read_jsonl(path: &Path, text_field: &str) -> Result<Vec<Document>> {
    let FileKind::Jsonl(c) = FileKind::of(path) else {
        return collect(|read, visit| jsonl::for_each(path, Compression::None, text_field, read, visit));
    };
    collect(|read, visit| jsonl::for_each(path, c, text_field, read, visit))
}

/// Reads a Parquet file (the layout of Hugging Face datasets): every row is a document, its text
/// the UTF-8 string column `text_field` (only that column is decoded). Errors name the file,
/// and the column or the 0-based row.
pub fn read_parquet(path: &Path, text_field: &str) -> Result<Vec<Document>> {
    collect(|read, visit| parquet_file::for_each(path, text_field, 0, read, visit))
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
