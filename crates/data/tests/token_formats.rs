//! llm.c and Megatron token files, written by NumPy (tests/fixtures/write_token_formats.py),
//! read in place: exact tokens, the loader over many files, and every kind of damage refused
//! with the file and the byte offset named.

use boost_data::{Format, Loader, Tokens, foreign, llmc, megatron, prepare_for_model};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/token_formats")
}

fn expected(key: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in expected.json"))
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn cfg(dir: &Path, format: &str) -> boost_config::DataConfig {
    boost_config::DataConfig {
        dir: dir.display().to_string(),
        corpus: "none".into(),
        format: format.into(),
        ..Default::default()
    }
}

fn concat(keys: &[&str]) -> Vec<u32> {
    keys.iter().flat_map(|k| expected(k)).collect()
}

#[test]
fn llmc_shards_read_exactly_in_name_order() {
    let dir = fixtures().join("llmc");
    assert_eq!(foreign::resolve("auto", &dir).unwrap(), Some(Format::Llmc));
    let ds = prepare_for_model(&cfg(&dir, "auto"), 50257).unwrap();
    assert_eq!(ds.train.parts().len(), 2);
    assert_eq!(ds.train.to_vec(), concat(&["llmc/tiny_train_000001.bin", "llmc/tiny_train_000002.bin"]));
    assert_eq!(ds.val.to_vec(), expected("llmc/tiny_val_000000.bin"));
    assert!(ds.tokenizer.is_none());
    assert_eq!(ds.meta.vocab_size, 50257);
    assert_eq!(ds.meta.eos_id, 50256);
    // The NumPy writer put one end-of-text before each of its 12 + 9 and 6 documents.
    assert_eq!((ds.meta.train_documents, ds.meta.val_documents), (21, 6));
    assert_eq!(ds.meta.train_tokens, 283 + 245);
    // The same through the explicit key.
    let again = prepare_for_model(&cfg(&dir, "llmc"), 50257).unwrap();
    assert_eq!(again.train.to_vec(), ds.train.to_vec());
}

#[test]
fn llmc_version_2_holds_u32_ids() {
    let dir = fixtures().join("llmc_v2");
    let ds = prepare_for_model(&cfg(&dir, "auto"), 128256).unwrap();
    assert_eq!(ds.train.to_vec(), expected("llmc_v2/l3_train.bin"));
    assert_eq!(ds.val.to_vec(), expected("llmc_v2/l3_val.bin"));
    assert!(ds.train.to_vec().iter().any(|&t| t > 65535), "the fixture should need 4-byte ids");
}

#[test]
fn megatron_uint16_and_int32_read_exactly() {
    let dir = fixtures().join("megatron");
    assert_eq!(foreign::resolve("auto", &dir).unwrap(), Some(Format::Megatron));
    let ds = prepare_for_model(&cfg(&dir, "auto"), 32000).unwrap();
    assert_eq!(ds.train.to_vec(), expected("megatron/corpus_train_text_document.bin"));
    assert_eq!(ds.val.to_vec(), expected("megatron/corpus_val_text_document.bin"));
    assert_eq!((ds.meta.train_documents, ds.meta.val_documents), (15, 5));
    let dir = fixtures().join("megatron_i32");
    let ds = prepare_for_model(&cfg(&dir, "megatron"), 100000).unwrap();
    assert_eq!(ds.train.to_vec(), expected("megatron_i32/big_train.bin"));
    assert_eq!(ds.val.to_vec(), expected("megatron_i32/big_val.bin"));
}

#[test]
fn no_vocabulary_or_too_small_a_one_is_refused_by_key() {
    let dir = fixtures().join("llmc");
    let e = format!("{:#}", prepare_for_model(&cfg(&dir, "auto"), 0).unwrap_err());
    assert!(e.contains("set model.vocab") && e.contains("no tokenizer.json"), "{e}");
    // 50256 is in the data, so 50000 is too small: the first id at or above it is named.
    let e = format!("{:#}", prepare_for_model(&cfg(&dir, "auto"), 50000).unwrap_err());
    let first = expected("llmc/tiny_train_000001.bin").iter().position(|&t| t >= 50000).unwrap();
    assert!(
        e.contains("tiny_train_000001.bin")
            && e.contains(&format!("at byte offset {}", 1024 + 2 * first))
            && e.contains("model.vocab"),
        "{e}"
    );
    // A format the directory does not hold is refused naming the key.
    let e = format!("{:#}", prepare_for_model(&cfg(&dir, "megatron"), 50257).unwrap_err());
    assert!(e.contains("data.format") && e.contains("megatron"), "{e}");
}

/// Every out-of-range id is scanned: the first and the largest are named, and the fix holds the
/// largest (only the first was named, so a user raised model.vocab once per bad id).
#[test]
fn the_largest_id_out_of_range_sets_the_vocabulary_to_ask_for() {
    let d = tempfile::tempdir().unwrap();
    let shard = |name: &str, ids: &[u16]| {
        let mut bytes = vec![0u8; 1024];
        for (w, v) in [20240520i32, 1, ids.len() as i32].iter().enumerate() {
            bytes[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
        }
        bytes.extend(ids.iter().flat_map(|t| t.to_le_bytes()));
        std::fs::write(d.path().join(name), bytes).unwrap();
    };
    shard("x_train_000001.bin", &[5, 700, 9, 650]);
    shard("x_val_000000.bin", &[3, 900, 800]);
    let e = format!("{:#}", prepare_for_model(&cfg(d.path(), "llmc"), 500).unwrap_err());
    assert!(e.contains("x_train_000001.bin holds token id 700 at byte offset 1026"), "{e}");
    assert!(e.contains("the largest id is 900 (") && e.contains("x_val_000000.bin at byte offset 1026"), "{e}");
    assert!(e.contains("set model.vocab to at least 901"), "{e}");
    prepare_for_model(&cfg(d.path(), "llmc"), 901).unwrap();
}

/// Copies fixture directory `name` to a temporary directory.
fn copy(name: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixtures().join(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, d.path().join(p.file_name().unwrap())).unwrap();
    }
    d
}

#[test]
fn damaged_llmc_shards_name_file_and_offset() {
    let d = copy("llmc");
    let p = d.path().join("tiny_val_000000.bin");
    let raw = std::fs::read(&p).unwrap();
    std::fs::write(&p, &raw[..raw.len() - 3]).unwrap();
    let e = format!("{:#}", prepare_for_model(&cfg(d.path(), "llmc"), 50257).unwrap_err());
    let len = raw.len() - 3;
    assert!(e.contains("tiny_val_000000.bin is truncated") && e.contains(&format!("byte offset {len}")), "{e}");
    std::fs::write(&p, &raw[..100]).unwrap();
    let e = format!("{:#}", llmc::open(&p).unwrap_err());
    assert!(e.contains("is truncated") && e.contains("byte offset 100"), "{e}");
    let mut bad = raw.clone();
    bad[4] = 7;
    std::fs::write(&p, &bad).unwrap();
    let e = format!("{:#}", llmc::open(&p).unwrap_err());
    assert!(e.contains("version 7 at byte offset 4"), "{e}");
    bad = raw.clone();
    bad[0] ^= 1;
    std::fs::write(&p, &bad).unwrap();
    let e = format!("{:#}", prepare_for_model(&cfg(d.path(), "llmc"), 50257).unwrap_err());
    assert!(e.contains("tiny_val_000000.bin is not an llm.c shard") && e.contains("byte offset 0"), "{e}");
    // A file that is neither train nor val is named rather than ignored.
    std::fs::write(&p, &raw).unwrap();
    std::fs::copy(&p, d.path().join("extra.bin")).unwrap();
    let e = format!("{:#}", prepare_for_model(&cfg(d.path(), "llmc"), 50257).unwrap_err());
    assert!(e.contains("extra.bin") && e.contains("neither train nor val"), "{e}");
}

#[test]
fn damaged_megatron_files_name_file_and_offset() {
    let d = copy("megatron");
    let prefix = d.path().join("corpus_val_text_document");
    let (bin, idx) = megatron::paths(&prefix);
    let raw_bin = std::fs::read(&bin).unwrap();
    let raw_idx = std::fs::read(&idx).unwrap();
    megatron::open(&prefix).unwrap();
    let check = |want: &[&str]| {
        let e = format!("{:#}", megatron::open(&prefix).err().expect("damage must be refused"));
        assert!(want.iter().all(|w| e.contains(w)), "{e}\nwants {want:?}");
    };
    std::fs::write(&bin, &raw_bin[..raw_bin.len() - 2]).unwrap();
    check(&["corpus_val_text_document.bin is truncated", &format!("byte offset {}", raw_bin.len() - 2)]);
    std::fs::write(&bin, &raw_bin).unwrap();
    let mut bad = raw_idx.clone();
    bad[3] = b'X';
    std::fs::write(&idx, &bad).unwrap();
    check(&["corpus_val_text_document.idx is not a Megatron index"]);
    bad = raw_idx.clone();
    bad[17] = 6; // float64
    std::fs::write(&idx, &bad).unwrap();
    check(&["dtype code 6 at byte offset 17"]);
    // Sequence 2's pointer (the third i64 after the 5 sizes) moved by one byte.
    bad = raw_idx.clone();
    let at = 34 + 4 * 5 + 8 * 2;
    bad[at] ^= 1;
    std::fs::write(&idx, &bad).unwrap();
    check(&["points sequence 2", &format!("byte offset {at}")]);
    std::fs::write(&idx, &raw_idx[..raw_idx.len() - 8]).unwrap();
    check(&["corpus_val_text_document.idx is truncated", &format!("byte offset {}", raw_idx.len() - 8)]);
    bad = raw_idx.clone();
    let last = raw_idx.len() - 8;
    bad[last] = 9;
    std::fs::write(&idx, &bad).unwrap();
    check(&["document index entry 5 = 9", &format!("byte offset {last}")]);
    // As int16 the fixture's small ids read the same; a negative one is named as stored, not
    // as the id 65529 its bit pattern would read as.
    bad = raw_idx.clone();
    bad[17] = 3;
    std::fs::write(&idx, &bad).unwrap();
    megatron::open(&prefix).unwrap();
    let mut neg = raw_bin.clone();
    neg[4..6].copy_from_slice(&(-7i16).to_le_bytes());
    std::fs::write(&bin, &neg).unwrap();
    check(&["token id -7 (int16, as stored) at byte offset 4"]);
}

/// The loader's order depends on the tokens alone, not on how many files hold them.
#[test]
fn loader_order_is_the_same_whatever_the_file_split() {
    let d = copy("llmc");
    let ds = prepare_for_model(&cfg(d.path(), "llmc"), 50257).unwrap();
    let whole = Tokens::from(
        boost_data::TokenShard::open(&{
            let p = d.path().join("whole.tmp");
            boost_data::write_shard(&p, &ds.train.to_vec(), 50257).unwrap();
            p
        })
        .unwrap(),
    );
    let (a, b) = (Loader::new(ds.train.clone(), 16, 5).unwrap(), Loader::new(whole, 16, 5).unwrap());
    assert_eq!(a.windows(), b.windows());
    let n = a.windows() as usize * 3;
    let (mut xa, mut ya, mut xb, mut yb) = (vec![0; n * 16], vec![0; n * 16], vec![0; n * 16], vec![0; n * 16]);
    a.fill(0, n, &mut xa, &mut ya);
    b.fill(0, n, &mut xb, &mut yb);
    assert_eq!((xa, ya), (xb, yb));
}
