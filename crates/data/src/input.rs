//! Reading corpora: plain text files (one document each) and JSONL files (one document a line).

use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// One document of a corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it came from: a file name, or `file:line` for JSONL.
    pub name: String,
    /// The text.
    pub text: String,
}

impl AsRef<str> for Document {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

/// Whether a path is read as JSONL (its name ends in `.jsonl`).
pub fn is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
}

/// Reads documents from files, in the order given. A directory stands for every file under it
/// (recursively, sorted by path, skipping names that start with `.`). `*.jsonl` files hold one
/// JSON object a line with the text in `text_field`; blank lines are skipped. Any other file is
/// one UTF-8 document.
pub fn read_inputs(paths: &[PathBuf], text_field: &str) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    for p in paths {
        let files = expand(p)?;
        if files.is_empty() {
            bail!("{} holds no files", p.display());
        }
        for f in files {
            if is_jsonl(&f) {
                docs.extend(read_jsonl(&f, text_field)?);
            } else {
                docs.push(read_text(&f)?);
            }
        }
    }
    Ok(docs)
}

fn expand(p: &Path) -> Result<Vec<PathBuf>> {
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
        out.extend(expand(&e)?);
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

/// Reads a JSONL file: each non-blank line is an object whose `text_field` is a string.
/// Errors name the file and the 1-based line number.
pub fn read_jsonl(path: &Path, text_field: &str) -> Result<Vec<Document>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    let mut docs = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("{}:{n}: cannot read the line (is it UTF-8?)", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}:{n}: not valid JSON", path.display()))?;
        let Some(obj) = value.as_object() else {
            bail!("{}:{n}: expected a JSON object, found {}", path.display(), kind(&value));
        };
        match obj.get(text_field) {
            Some(serde_json::Value::String(s)) => {
                docs.push(Document { name: format!("{}:{n}", path.display()), text: s.clone() })
            }
            Some(other) => bail!("{}:{n}: field \"{text_field}\" is {}, not a string", path.display(), kind(other)),
            None => bail!("{}:{n}: no field \"{text_field}\" (choose the field with --text-field)", path.display()),
        }
    }
    Ok(docs)
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
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, s: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, s).unwrap();
        p
    }

    #[test]
    fn jsonl_reads_documents_and_skips_blank_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "a.jsonl", "{\"text\":\"one\"}\n\n{\"text\":\"two\",\"x\":1}\n");
        let docs = read_jsonl(&p, "text").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].text, "two");
        assert!(docs[1].name.ends_with("a.jsonl:3"));
        let p = write(d.path(), "b.jsonl", "{\"body\":\"x\"}\n");
        assert_eq!(read_jsonl(&p, "body").unwrap()[0].text, "x");
    }

    #[test]
    fn jsonl_errors_name_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "bad.jsonl", "{\"text\":\"ok\"}\n{\"text\": oops}\n");
        let e = format!("{:#}", read_jsonl(&p, "text").unwrap_err());
        assert!(e.contains("bad.jsonl:2") && e.contains("not valid JSON"), "{e}");

        let p = write(d.path(), "missing.jsonl", "{\"text\":\"ok\"}\n\n{\"body\":\"x\"}\n");
        let e = format!("{:#}", read_jsonl(&p, "text").unwrap_err());
        assert!(e.contains("missing.jsonl:3") && e.contains("no field \"text\""), "{e}");

        let p = write(d.path(), "num.jsonl", "{\"text\":5}\n");
        let e = format!("{:#}", read_jsonl(&p, "text").unwrap_err());
        assert!(e.contains("num.jsonl:1") && e.contains("a number, not a string"), "{e}");

        let p = write(d.path(), "arr.jsonl", "[1,2]\n");
        let e = format!("{:#}", read_jsonl(&p, "text").unwrap_err());
        assert!(e.contains("arr.jsonl:1") && e.contains("expected a JSON object"), "{e}");
    }

    #[test]
    fn inputs_mix_text_and_jsonl_and_directories() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        write(&sub, "b.txt", "bee");
        write(&sub, "a.txt", "ay");
        write(&sub, ".hidden", "no");
        let j = write(d.path(), "c.jsonl", "{\"text\":\"see\"}\n");
        let docs = read_inputs(&[sub, j], "text").unwrap();
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(texts, ["ay", "bee", "see"]);
    }

    #[test]
    fn text_must_be_utf8() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.txt");
        std::fs::write(&p, [b'a', 0xff]).unwrap();
        let e = format!("{:#}", read_text(&p).unwrap_err());
        assert!(e.contains("x.txt is not valid UTF-8") && e.contains("offset 1"), "{e}");
    }
}
