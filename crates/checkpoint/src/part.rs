//! One rank's part of a sharded checkpoint: safetensors files of the rectangles it owns,
//! streamed to disk one block of rows at a time (hashed as they go, synced, then re-read to check
//! the hash), and a sidecar `part.*.json` listing them, written last so its presence means
//! the part is complete.

use super::shard::{FileSum, SliceRef, row_blocks};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::Path;

/// A rectangle to store: canonical name (with its `m.`/`v.` prefix), global shape, rows and
/// columns.
#[derive(Debug, Clone)]
pub struct Slice {
    pub name: String,
    pub shape: Vec<usize>,
    pub rows: Range<usize>,
    pub cols: Range<usize>,
}

/// A file of a part and the rectangles it holds, in order.
#[derive(Debug, Clone)]
pub struct PartFile {
    pub file: String,
    pub slices: Vec<Slice>,
}

/// The sidecar of a complete part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sidecar {
    pub files: Vec<FileSum>,
    /// (canonical name, global shape, where its rectangle is).
    pub slices: Vec<(String, Vec<usize>, SliceRef)>,
}

/// The name of the sidecar of rank (stage, tp, dp), and of the marker a failed rank leaves.
pub fn sidecar_name(stage: usize, tp: usize, dp: usize) -> String {
    format!("part.pp{stage:02}.tp{tp:02}.dp{dp:02}.json")
}

pub fn failed_name(stage: usize, tp: usize, dp: usize) -> String {
    format!("part.pp{stage:02}.tp{tp:02}.dp{dp:02}.failed")
}

/// Pause after the first rectangle of each file, to hold a write open for a test of a kill
/// in the middle of it (`BOOST_CHECKPOINT_WRITE_DELAY_MS`; unset in normal use).
fn test_delay() -> Option<std::time::Duration> {
    let ms: u64 = std::env::var("BOOST_CHECKPOINT_WRITE_DELAY_MS").ok()?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// Write `files` into `dir` and then the sidecar `sidecar`. `fetch(f, i, rows)` gives the
/// row-major data of rows `rows` (counted from the rectangle's first) of slice `i` of file
/// `f`, taken once, in blocks of at most [`BLOCK`](super::shard::BLOCK) elements as they are written.
pub fn write_part(
    dir: &Path,
    files: &[PartFile],
    sidecar: &str,
    meta: &[(&str, String)],
    fetch: &mut dyn FnMut(usize, usize, Range<usize>) -> Vec<f32>,
) -> Result<()> {
    let mut sums = Vec::new();
    let mut slices = Vec::new();
    for (f, pf) in files.iter().enumerate() {
        if pf.slices.is_empty() {
            continue;
        }
        let keys = keys_of(&pf.slices);
        let sum = write_file(&dir.join(&pf.file), &pf.slices, &keys, meta, &mut |i, rows| fetch(f, i, rows))?;
        verify_file(dir, &sum)?;
        sums.push(sum);
        for (s, key) in pf.slices.iter().zip(keys) {
            let r = SliceRef {
                file: pf.file.clone(),
                key,
                rows: [s.rows.start, s.rows.end],
                cols: [s.cols.start, s.cols.end],
            };
            slices.push((s.name.clone(), s.shape.clone(), r));
        }
    }
    let text = serde_json::to_string(&Sidecar { files: sums, slices })?;
    let tmp = dir.join(format!("{sidecar}.tmp"));
    write_synced(&tmp, text.as_bytes())?;
    let path = dir.join(sidecar);
    fs::rename(&tmp, &path).with_context(|| format!("cannot move {} into place", path.display()))
}

/// Mark rank (stage, tp, dp)'s part as failed, so the rank that completes the checkpoint
/// stops waiting for it.
pub fn write_failed(dir: &Path, name: &str, why: &str) {
    fs::write(dir.join(name), why).ok();
}

/// Safetensors keys: the canonical name, with `#k` for a second and later rectangle of the
/// same tensor (a ZeRO-1 chunk boundary can cut one piece into three).
fn keys_of(slices: &[Slice]) -> Vec<String> {
    let mut seen = std::collections::HashMap::<&str, usize>::new();
    slices
        .iter()
        .map(|s| {
            let n = seen.entry(&s.name).or_insert(0);
            *n += 1;
            if *n == 1 { s.name.clone() } else { format!("{}#{}", s.name, *n - 1) }
        })
        .collect()
}

/// A writer that hashes what passes through it.
struct Hashing<W: Write> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.hash.update(&b[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The safetensors header of `slices` (fp32, in order), padded to 8 bytes as the format
/// recommends.
fn header(slices: &[Slice], keys: &[String], meta: &[(&str, String)]) -> Result<Vec<u8>> {
    let mut h = serde_json::Map::new();
    let md: serde_json::Map<String, serde_json::Value> =
        meta.iter().map(|(k, v)| (k.to_string(), serde_json::Value::String(v.clone()))).collect();
    h.insert("__metadata__".into(), serde_json::Value::Object(md));
    let mut off = 0usize;
    for (s, key) in slices.iter().zip(keys) {
        let n = s.rows.len() * s.cols.len();
        // A vector's rectangle is a vector; a matrix's a matrix.
        let shape = if s.shape.len() == 1 { vec![s.cols.len()] } else { vec![s.rows.len(), s.cols.len()] };
        h.insert(
            key.clone(),
            serde_json::json!({ "dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n] }),
        );
        off += 4 * n;
    }
    let mut bytes = serde_json::to_vec(&serde_json::Value::Object(h))?;
    while bytes.len() % 8 != 0 {
        bytes.push(b' ');
    }
    Ok(bytes)
}

pub(super) fn write_file(
    path: &Path,
    slices: &[Slice],
    keys: &[String],
    meta: &[(&str, String)],
    fetch: &mut dyn FnMut(usize, Range<usize>) -> Vec<f32>,
) -> Result<FileSum> {
    let f = fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = Hashing { inner: BufWriter::with_capacity(1 << 20, f), hash: Sha256::new(), bytes: 0 };
    let err = |e: std::io::Error| anyhow::anyhow!("cannot write {} ({e})", path.display());
    let head = header(slices, keys, meta)?;
    w.write_all(&(head.len() as u64).to_le_bytes()).map_err(err)?;
    w.write_all(&head).map_err(err)?;
    let mut scratch = Vec::with_capacity(1 << 16);
    for (i, s) in slices.iter().enumerate() {
        let cols = s.cols.len();
        for rows in row_blocks(s.rows.len(), cols) {
            let data = fetch(i, rows.clone());
            if data.len() != rows.len() * cols {
                bail!(
                    "{}: rows {rows:?} of {} have {} values, not {} (internal error)",
                    path.display(),
                    s.name,
                    data.len(),
                    rows.len() * cols
                );
            }
            // Converted to little-endian bytes through a small scratch buffer.
            for chunk in data.chunks(1 << 14) {
                scratch.clear();
                scratch.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
                w.write_all(&scratch).map_err(err)?;
            }
        }
        if i == 0
            && let Some(d) = test_delay()
        {
            w.flush().map_err(err)?;
            std::thread::sleep(d);
        }
    }
    w.flush().map_err(err)?;
    let (hash, bytes) = (w.hash.finalize(), w.bytes);
    let file = w.inner.into_inner().map_err(|e| anyhow::anyhow!("cannot write {} ({})", path.display(), e.error()))?;
    file.sync_all().map_err(err)?;
    let name = path.file_name().expect("a file").to_string_lossy().into_owned();
    Ok(FileSum { file: name, bytes, sha256: hash.iter().map(|b| format!("{b:02x}")).collect() })
}

/// Re-read a written file from disk: its size and hash must be what was written.
fn verify_file(dir: &Path, sum: &FileSum) -> Result<()> {
    let path = dir.join(&sum.file);
    let len = fs::metadata(&path).with_context(|| format!("cannot stat {}", path.display()))?.len();
    if len != sum.bytes {
        bail!("{} has {len} bytes after writing {}: the disk lost part of it", path.display(), sum.bytes);
    }
    if crate::manifest::sha256_file(&path)? != sum.sha256 {
        bail!("{} does not read back as written (checksum mismatch)", path.display());
    }
    Ok(())
}

pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    f.sync_all().with_context(|| format!("cannot write {} (sync)", path.display()))?;
    Ok(())
}
