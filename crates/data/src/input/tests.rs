//! Tests of reading corpora.

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

/// A FIFO named like a text file, or a device named as an input, is refused at once naming it
/// (`data --input DIR` blocked forever on a FIFO; /dev/zero never ended).
#[test]
fn only_regular_files_are_read() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "a.txt", "some text");
    let fifo = d.path().join("pipe.txt");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = format!("{:#}", Inputs::open(&[d.path().to_path_buf()], "text").err().unwrap());
    assert!(e.contains(&format!("the input {} is not a regular file", fifo.display())), "{e}");
    let e = format!("{:#}", Inputs::open(&[PathBuf::from("/dev/zero")], "text").err().unwrap());
    assert!(e.contains("the input /dev/zero is not a regular file"), "{e}");
    std::fs::remove_file(&fifo).unwrap();
    assert_eq!(Inputs::open(&[d.path().to_path_buf()], "text").unwrap().files().count(), 1);
}
