//! Bounded fuzzing of what a reader meets on disk: a real small dataset's shards and meta.json,
//! mutated, truncated or extended. Opening and reading give `Ok` or an error naming the file,
//! never a panic or a hang.

mod common;

use boost_data::{Dataset, Loader, TokenShard, build};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The pristine dataset, built once.
fn pristine() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("ds");
        build(&common::docs(), &common::opts(), &out).unwrap();
        (d, out)
    })
    .1
}

#[derive(Debug, Clone)]
enum Damage {
    /// Overwrite bytes at these offsets (taken modulo the file length).
    Bytes(Vec<(usize, u8)>),
    /// Overwrite a little-endian integer field of the shard header.
    Field(usize, u64),
    /// Keep only this many bytes (modulo the file length + 1).
    Truncate(usize),
    /// Append these bytes.
    Append(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8).prop_map(Damage::Bytes),
        (proptest::sample::select(vec![8usize, 12, 16, 24, 28]), any::<u64>()).prop_map(|(o, v)| Damage::Field(o, v)),
        (proptest::sample::select(vec![8usize, 12, 16, 24]), 0u64..70000).prop_map(|(o, v)| Damage::Field(o, v)),
        any::<usize>().prop_map(Damage::Truncate),
        proptest::collection::vec(any::<u8>(), 1..16).prop_map(Damage::Append),
    ]
}

fn apply(bytes: &mut Vec<u8>, damage: &Damage) {
    match damage {
        Damage::Bytes(edits) if !bytes.is_empty() => {
            let n = bytes.len();
            for &(o, b) in edits {
                bytes[o % n] = b;
            }
        }
        Damage::Bytes(_) => {}
        Damage::Field(o, v) => {
            let width = if *o == 16 { 8 } else { 4 };
            if bytes.len() >= o + width {
                bytes[*o..o + width].copy_from_slice(&v.to_le_bytes()[..width]);
            }
        }
        Damage::Truncate(n) => {
            let keep = n % (bytes.len() + 1);
            bytes.truncate(keep);
        }
        Damage::Append(extra) => bytes.extend_from_slice(extra),
    }
}

/// A copy of the dataset with `file` damaged.
fn damaged_copy(file: &str, damage: &Damage) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("ds");
    std::fs::create_dir(&dir).unwrap();
    for e in std::fs::read_dir(pristine()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let path = dir.join(file);
    let mut bytes = std::fs::read(&path).unwrap();
    apply(&mut bytes, damage);
    std::fs::write(&path, bytes).unwrap();
    (d, dir)
}

/// Everything a trainer does with a shard, checked for panics.
fn read_all(shard: &TokenShard) {
    let _ = shard.to_vec();
    let _ = shard.check_ids();
    if let Ok(l) = Loader::new(shard.clone(), 4, 1) {
        let (mut x, mut y) = (vec![0; 8], vec![0; 8]);
        l.fill(0, 2, &mut x, &mut y);
        l.fill(1_000_003, 2, &mut x, &mut y);
    }
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn damaged_shards_are_read_or_refused_naming_the_file(
        file in proptest::sample::select(vec!["train.bin", "val.bin"]),
        damage in damage(),
    ) {
        let (_keep, dir) = damaged_copy(file, &damage);
        let path = dir.join(file);
        match TokenShard::open(&path) {
            Ok(shard) => read_all(&shard),
            Err(e) => {
                let e = format!("{e:#}");
                prop_assert!(e.contains(&path.display().to_string()), "{e}");
            }
        }
        if let Err(e) = Dataset::open(&dir) {
            let e = format!("{e:#}");
            prop_assert!(e.contains(file), "{e}");
        }
    }

    #[test]
    fn damaged_meta_json_is_refused_naming_the_file(damage in damage()) {
        let (_keep, dir) = damaged_copy("meta.json", &damage);
        match Dataset::open(&dir) {
            Ok(ds) => {
                ds.train.parts().iter().for_each(read_all);
                ds.val.parts().iter().for_each(read_all);
            }
            Err(e) => {
                let e = format!("{e:#}");
                prop_assert!(e.contains("meta.json"), "{e}");
            }
        }
    }

    #[test]
    fn meta_json_with_other_numbers_is_refused(
        key in proptest::sample::select(vec!["vocab_size", "eos_id", "train_tokens", "val_tokens", "format_version"]),
        value in prop_oneof![0u64..1000, any::<u64>()],
    ) {
        let (_keep, dir) = damaged_copy("meta.json", &Damage::Bytes(vec![]));
        let path = dir.join("meta.json");
        let mut meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let old = meta[key].as_u64().unwrap();
        meta[key] = value.into();
        std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
        match Dataset::open(&dir) {
            // Every one of these is checked against the shards or the tokenizer.
            Ok(_) => prop_assert!(value == old, "{key} = {value} was accepted"),
            Err(e) => {
                let e = format!("{e:#}");
                prop_assert!(e.contains("meta.json"), "{e}");
            }
        }
    }
}

/// The case the fuzzing above once drew: one byte of meta.json turned to a space inside a
/// file name, so that meta.json still parses but lists a file that never was. The error
/// names the missing file and the meta.json that listed it.
#[test]
fn meta_json_naming_a_file_that_is_not_there_is_named() {
    let (_keep, dir) = damaged_copy("meta.json", &Damage::Bytes(vec![]));
    let path = dir.join("meta.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"train.bin\""), "{text}");
    std::fs::write(&path, text.replacen("\"train.bin\"", "\" rain.bin\"", 1)).unwrap();
    let Err(e) = Dataset::open(&dir) else { panic!("a dataset missing its train file was opened") };
    let e = format!("{e:#}");
    assert!(e.contains(" rain.bin missing") && e.contains(&path.display().to_string()), "{e}");
}
