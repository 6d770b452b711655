//! JSONL files, plain or compressed, read a line at a time.

use super::{Compression, Document, kind};
use anyhow::{Context, Result, bail};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// A reader that adds the bytes it reads to a shared counter (progress over stored bytes).
struct Counting<'a, R> {
    inner: R,
    read: &'a AtomicU64,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The decompressed lines of `path`.
fn open<'a>(path: &Path, c: Compression, read: &'a AtomicU64) -> Result<Box<dyn BufRead + 'a>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let raw = BufReader::with_capacity(1 << 20, Counting { inner: file, read });
    Ok(match c {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(1 << 20, flate2::bufread::MultiGzDecoder::new(raw))),
        Compression::Zstd => Box::new(BufReader::with_capacity(
            1 << 20,
            zstd::stream::read::Decoder::with_buffer(raw)
                .with_context(|| format!("cannot start decompressing {}", path.display()))?,
        )),
    })
}

fn is_blank(line: &[u8]) -> bool {
    // A line that is not UTF-8 counts as a document: reading it reports the error.
    std::str::from_utf8(line).is_ok_and(|s| s.trim().is_empty())
}

/// The number of non-blank lines.
pub(super) fn count(path: &Path, c: Compression) -> Result<u64> {
    let unused = AtomicU64::new(0);
    let mut r = open(path, c, &unused)?;
    let mut line = Vec::new();
    let mut n = 0u64;
    let mut at = 0u64;
    loop {
        line.clear();
        at += 1;
        let got = r.read_until(b'\n', &mut line).with_context(|| read_error(path, c, at))?;
        if got == 0 {
            return Ok(n);
        }
        n += !is_blank(&line) as u64;
    }
}

fn read_error(path: &Path, c: Compression, line: u64) -> String {
    match c {
        Compression::None => format!("{}:{line}: cannot read the line", path.display()),
        _ => format!("{}:{line}: cannot decompress the line (is the file truncated or corrupt?)", path.display()),
    }
}

/// Visits each non-blank line's document; errors name the file and the 1-based line.
pub(super) fn for_each(
    path: &Path,
    c: Compression,
    field: &str,
    read: &AtomicU64,
    visit: &mut dyn FnMut(Document) -> Result<()>,
) -> Result<()> {
    let mut r = open(path, c, read)?;
    let mut bytes = Vec::new();
    let mut n = 0u64;
    loop {
        bytes.clear();
        n += 1;
        if r.read_until(b'\n', &mut bytes).with_context(|| read_error(path, c, n))? == 0 {
            return Ok(());
        }
        let line = std::str::from_utf8(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{}:{n}: the line is not UTF-8 (first bad byte at column {})",
                path.display(),
                e.valid_up_to() + 1
            )
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{n}: not valid JSON", path.display()))?;
        let serde_json::Value::Object(mut obj) = value else {
            bail!("{}:{n}: expected a JSON object, found {}", path.display(), kind(&value));
        };
        match obj.remove(field) {
            Some(serde_json::Value::String(text)) => visit(Document { name: format!("{}:{n}", path.display()), text })?,
            Some(other) => bail!("{}:{n}: field \"{field}\" is {}, not a string", path.display(), kind(&other)),
            None => bail!("{}:{n}: no field \"{field}\" (choose the field with --text-field)", path.display()),
        }
    }
}
