//! Reading corpora: plain text files (one document each), JSONL files (one document a line)
//! and Parquet files (one document a row, the text in a string column).

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

/// Whether a path is read as Parquet (its name ends in `.parquet`).
pub fn is_parquet(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// Reads documents from files, in the order given. A directory stands for every file under it
/// (recursively, sorted by path, skipping names that start with `.`). `*.jsonl` files hold one
/// JSON object a line with the text in `text_field`; blank lines are skipped. `*.parquet` files
/// hold one document a row, in the string column `text_field`. Any other file is one UTF-8
/// document.
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
            } else if is_parquet(&f) {
                docs.extend(read_parquet(&f, text_field)?);
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

/// Reads a Parquet file (the layout of Hugging Face datasets): every row is a document, its text
/// the UTF-8 string column `text_field` (only that column is decoded). Errors name the file,
/// and the column or the 0-based row.
pub fn read_parquet(path: &Path, text_field: &str) -> Result<Vec<Document>> {
    use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    use parquet::schema::types::Type;
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader = SerializedFileReader::new(file)
        .with_context(|| format!("{} is not a readable Parquet file", path.display()))?;
    let root = reader.metadata().file_metadata().schema_descr().root_schema();
    let fields = root.get_fields();
    let Some(column) = fields.iter().find(|f| f.name() == text_field) else {
        let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
        bail!(
            "{}: no column \"{text_field}\" (columns: {}; choose one with --text-field)",
            path.display(),
            names.join(", ")
        );
    };
    let is_string = column.is_primitive()
        && column.get_physical_type() == Physical::BYTE_ARRAY
        && (matches!(column.get_basic_info().logical_type_ref(), Some(LogicalType::String))
            || column.get_basic_info().converted_type() == ConvertedType::UTF8);
    if !is_string {
        bail!(
            "{}: column \"{text_field}\" is not a UTF-8 string column (choose one with --text-field)",
            path.display()
        );
    }
    let projection = Type::group_type_builder(root.name()).with_fields(vec![column.clone()]).build()?;
    let rows = reader.get_row_iter(Some(projection)).with_context(|| format!("cannot read {}", path.display()))?;
    let mut docs = Vec::with_capacity(reader.metadata().file_metadata().num_rows().max(0) as usize);
    for (i, row) in rows.enumerate() {
        let row = row.with_context(|| format!("{}: row {i}: cannot decode", path.display()))?;
        let text = match row.get_column_iter().next().map(|(_, f)| f) {
            Some(Field::Str(s)) => s.clone(),
            Some(Field::Null) | None => bail!("{}: row {i}: \"{text_field}\" is null", path.display()),
            Some(other) => bail!("{}: row {i}: \"{text_field}\" is {other:?}, not a string", path.display()),
        };
        docs.push(Document { name: format!("{}:row {i}", path.display()), text });
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

    /// A Parquet file (zstd-compressed, two row groups) with an optional UTF-8 column `text`,
    /// an INT32 column `id`, and a binary (non-UTF-8) column `raw`.
    fn write_parquet(path: &Path, texts: &[Option<&str>]) {
        use parquet::basic::{Compression, ZstdLevel};
        use parquet::data_type::{ByteArray, ByteArrayType, Int32Type};
        use parquet::file::properties::WriterProperties;
        use parquet::file::writer::SerializedFileWriter;
        use parquet::schema::parser::parse_message_type;
        use std::sync::Arc;
        let schema = parse_message_type(
            "message schema { OPTIONAL BYTE_ARRAY text (UTF8); REQUIRED INT32 id; REQUIRED BYTE_ARRAY raw; }",
        )
        .unwrap();
        let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).build();
        let mut w =
            SerializedFileWriter::new(std::fs::File::create(path).unwrap(), Arc::new(schema), Arc::new(props)).unwrap();
        for (g, part) in texts.chunks(texts.len().div_ceil(2).max(1)).enumerate() {
            let mut rg = w.next_row_group().unwrap();
            let mut k = 0;
            while let Some(mut col) = rg.next_column().unwrap() {
                match k {
                    0 => {
                        let vals: Vec<ByteArray> = part.iter().flatten().map(|t| ByteArray::from(*t)).collect();
                        let defs: Vec<i16> = part.iter().map(|t| t.is_some() as i16).collect();
                        col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs), None).unwrap();
                    }
                    1 => {
                        let ids: Vec<i32> = (0..part.len() as i32).map(|i| i + 100 * g as i32).collect();
                        col.typed::<Int32Type>().write_batch(&ids, None, None).unwrap();
                    }
                    _ => {
                        let raw: Vec<ByteArray> = part.iter().map(|_| ByteArray::from(vec![0xffu8, 0x00])).collect();
                        col.typed::<ByteArrayType>().write_batch(&raw, None, None).unwrap();
                    }
                }
                col.close().unwrap();
                k += 1;
            }
            rg.close().unwrap();
        }
        w.close().unwrap();
    }

    #[test]
    fn parquet_rows_are_documents() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("train-00000.parquet");
        write_parquet(&p, &[Some("first row"), Some("zweite Zeile ü"), Some("third")]);
        let docs = read_parquet(&p, "text").unwrap();
        let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(texts, ["first row", "zweite Zeile ü", "third"]);
        assert!(docs[2].name.ends_with("train-00000.parquet:row 2"), "{}", docs[2].name);
        // Through read_inputs too, by extension, next to a text file.
        std::fs::write(d.path().join("notes.txt"), "plain").unwrap();
        let all = read_inputs(&[d.path().to_path_buf()], "text").unwrap();
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn parquet_errors_name_file_column_and_row() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.parquet");
        write_parquet(&p, &[Some("ok"), None]);
        let err = |field: &str| format!("{:#}", read_parquet(&p, field).unwrap_err());
        let e = err("body");
        assert!(e.contains("x.parquet") && e.contains("no column \"body\"") && e.contains("text, id, raw"), "{e}");
        for not_text in ["id", "raw"] {
            let e = err(not_text);
            assert!(e.contains("not a UTF-8 string column"), "{e}");
        }
        let e = err("text");
        assert!(e.contains("x.parquet: row 1") && e.contains("null"), "{e}");
        let bad = d.path().join("bad.parquet");
        std::fs::write(&bad, "not parquet at all").unwrap();
        let e = format!("{:#}", read_parquet(&bad, "text").unwrap_err());
        assert!(e.contains("bad.parquet is not a readable Parquet file"), "{e}");
    }

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
