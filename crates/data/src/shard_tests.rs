//! Tests of the BOOST token shard: round trips, and every malformed header or length refused.

use super::*;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn round_trip_u16() {
    let d = tmp();
    let p = d.path().join("x.bin");
    let toks: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 65536).collect();
    write_shard(&p, &toks, 65536).unwrap();
    let s = TokenShard::open(&p).unwrap();
    assert_eq!(s.width(), 2);
    assert_eq!(s.len(), 1000);
    assert_eq!(s.vocab(), 65536);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 32 + 2000);
    assert_eq!(s.to_vec(), toks);
    assert_eq!(s.get(999), toks[999]);
    let mut buf = [0u32; 10];
    s.read(500, &mut buf);
    assert_eq!(buf, toks[500..510]);
    s.check_ids().unwrap();
    // The header bytes are as documented.
    let raw = std::fs::read(&p).unwrap();
    assert_eq!(&raw[0..8], b"BOOSTTOK");
    assert_eq!(raw[8..12], 1u32.to_le_bytes());
    assert_eq!(raw[12..16], 2u32.to_le_bytes());
    assert_eq!(raw[16..24], 1000u64.to_le_bytes());
    assert_eq!(raw[24..28], 65536u32.to_le_bytes());
    assert_eq!(raw[28..32], [0, 0, 0, 0]);
    assert_eq!(raw[32..34], (toks[0] as u16).to_le_bytes());
}

#[test]
fn round_trip_u32_and_empty() {
    let d = tmp();
    let p = d.path().join("y.bin");
    let toks: Vec<u32> = vec![0, 65536, 100_000, 151_935, 3];
    write_shard(&p, &toks, 151_936).unwrap();
    let s = TokenShard::open(&p).unwrap();
    assert_eq!(s.width(), 4);
    assert_eq!(s.to_vec(), toks);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 32 + 20);
    let e = d.path().join("e.bin");
    write_shard(&e, &[], 300).unwrap();
    let s = TokenShard::open(&e).unwrap();
    assert!(s.is_empty());
    s.check_ids().unwrap();
    // Overwriting replaces the file, leaving no temporary behind.
    write_shard(&p, &[1, 2], 300).unwrap();
    assert_eq!(TokenShard::open(&p).unwrap().to_vec(), [1, 2]);
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn truncated_and_padded_files_are_rejected() {
    let d = tmp();
    let p = d.path().join("train.bin");
    write_shard(&p, &vec![1u32; 1000], 300).unwrap();
    let raw = std::fs::read(&p).unwrap();
    std::fs::write(&p, &raw[..1500]).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(
        e.contains("train.bin is truncated: header says 1000 tokens (2032 bytes) but the file has 1500 bytes")
            && e.contains("boost data"),
        "{e}"
    );
    let mut longer = raw.clone();
    longer.push(0);
    std::fs::write(&p, &longer).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(e.contains("wrong length") && e.contains("2033 bytes"), "{e}");
    std::fs::write(&p, &raw[..20]).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(e.contains("too short"), "{e}");
}

#[test]
fn bad_magic_version_and_width_are_rejected() {
    let d = tmp();
    let p = d.path().join("v.bin");
    write_shard(&p, &[1, 2, 3], 300).unwrap();
    let raw = std::fs::read(&p).unwrap();

    let mut bad = raw.clone();
    bad[0..8].copy_from_slice(b"NOTTOKEN");
    std::fs::write(&p, &bad).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(e.contains("v.bin is not a BOOST token shard") && e.contains("NOTTOKEN"), "{e}");

    let mut bad = raw.clone();
    bad[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(e.contains("v.bin has shard format version 2") && e.contains("version 1"), "{e}");

    let mut bad = raw.clone();
    bad[12..16].copy_from_slice(&3u32.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    let e = TokenShard::open(&p).unwrap_err().to_string();
    assert!(e.contains("token width 3"), "{e}");
}

#[test]
fn ids_at_or_above_vocab_are_reported_with_offset() {
    let d = tmp();
    let p = d.path().join("ids.bin");
    write_shard(&p, &[1, 2, 299, 5], 300).unwrap();
    // Lower the declared vocabulary to 200 behind the writer's back.
    let mut raw = std::fs::read(&p).unwrap();
    raw[24..28].copy_from_slice(&200u32.to_le_bytes());
    std::fs::write(&p, &raw).unwrap();
    let s = TokenShard::open(&p).unwrap();
    let e = s.check_ids().unwrap_err().to_string();
    assert!(e.contains("ids.bin holds token id 299 at offset 2") && e.contains("vocabulary size is 200"), "{e}");
    // The writer refuses such ids in the first place.
    let e = write_shard(&p, &[1, 300], 300).unwrap_err().to_string();
    assert!(e.contains("token 300 at offset 1"), "{e}");
}
