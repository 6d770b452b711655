//! Token shards: a 32-byte header followed by the token ids (see the crate docs and `FORMAT.md`).

use anyhow::{Context, Result, bail};
use memmap2::Mmap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The 8 magic bytes at the start of every shard.
pub const MAGIC: &[u8; 8] = b"BOOSTTOK";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the header in bytes; the tokens start at this offset.
pub const HEADER_LEN: usize = 32;

/// The token width a shard uses for a vocabulary: 2 bytes when every id fits in a `u16`, else 4.
pub fn width_for_vocab(vocab: u32) -> u32 {
    if vocab <= 1 << 16 { 2 } else { 4 }
}

/// The decoded 32-byte header of a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes per token: 2 (`u16`) or 4 (`u32`).
    pub width: u32,
    /// Number of tokens after the header.
    pub count: u64,
    /// Vocabulary size: every id must be below it.
    pub vocab: u32,
}

impl Header {
    /// Encodes the header as its 32 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.width.to_le_bytes());
        b[16..24].copy_from_slice(&self.count.to_le_bytes());
        b[24..28].copy_from_slice(&self.vocab.to_le_bytes());
        // bytes 28..32: reserved, zero
        b
    }

    /// Parses and validates a header; `path` only serves the error messages.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Header> {
        let p = path.display();
        if bytes.len() < HEADER_LEN {
            bail!(
                "{p} is too short to be a token shard: {} bytes, the header alone takes {HEADER_LEN}; \
                 rebuild it with `boost data`",
                bytes.len()
            );
        }
        if &bytes[0..8] != MAGIC {
            bail!(
                "{p} is not a BOOST token shard: bytes 0..8 are {:?} instead of the magic \"BOOSTTOK\"; \
                 build shards with `boost data`",
                String::from_utf8_lossy(&bytes[0..8])
            );
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        let version = u32_at(8);
        if version != VERSION {
            bail!(
                "{p} has shard format version {version} (byte offset 8), but this build reads version \
                 {VERSION}; rebuild it with `boost data`"
            );
        }
        let width = u32_at(12);
        if width != 2 && width != 4 {
            bail!(
                "{p} has token width {width} bytes (byte offset 12); only 2 (u16) and 4 (u32) are valid; \
                 rebuild it with `boost data`"
            );
        }
        let count = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let vocab = u32_at(24);
        if width == 2 && vocab > 1 << 16 {
            bail!(
                "{p} stores 2-byte tokens but declares a vocabulary of {vocab} (byte offset 24), more than \
                 65536; rebuild it with `boost data`"
            );
        }
        Ok(Header { width, count, vocab })
    }

    /// The exact file length this header implies.
    pub fn file_len(&self) -> Option<u64> {
        self.count.checked_mul(self.width as u64).and_then(|b| b.checked_add(HEADER_LEN as u64))
    }
}

/// Writes `tokens` as a shard at `path`, atomically: the data goes to a temporary file in the
/// same directory, which is then renamed over `path`.
///
/// The width is 2 bytes when `vocab <= 65536`, else 4. Every id must be below `vocab`.
pub fn write_shard(path: &Path, tokens: &[u32], vocab: u32) -> Result<()> {
    if let Some((i, &t)) = tokens.iter().enumerate().find(|&(_, &t)| t >= vocab) {
        bail!("cannot write {}: token {t} at offset {i} is not below the vocabulary size {vocab}", path.display());
    }
    let width = width_for_vocab(vocab);
    let header = Header { width, count: tokens.len() as u64, vocab };
    let dir = boost_files::temp::parent_dir(path);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (tmp, file) = boost_files::temp::temp_file_in(&dir, ".shard-")?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        w.write_all(&header.to_bytes())?;
        let mut buf = Vec::with_capacity(1 << 16);
        for chunk in tokens.chunks(1 << 14) {
            buf.clear();
            if width == 2 {
                for &t in chunk {
                    buf.extend_from_slice(&(t as u16).to_le_bytes());
                }
            } else {
                for &t in chunk {
                    buf.extend_from_slice(&t.to_le_bytes());
                }
            }
            w.write_all(&buf)?;
        }
        w.flush().with_context(|| format!("cannot write {}", path.display()))?;
    }
    file.sync_all().ok();
    drop(file);
    tmp.persist(path).with_context(|| format!("cannot move the new shard into place at {}", path.display()))
}

/// A read-only, memory-mapped token shard. Cloning is cheap (the mapping is shared).
#[derive(Clone)]
pub struct TokenShard {
    map: Arc<Mmap>,
    header: Header,
    path: PathBuf,
    /// Byte offset of the first token: [`HEADER_LEN`] here, other values for the foreign formats.
    body: usize,
}

impl std::fmt::Debug for TokenShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("path", &self.path).field("header", &self.header).finish()
    }
}

impl TokenShard {
    /// Maps a shard and validates its header and its exact length.
    pub fn open(path: impl AsRef<Path>) -> Result<TokenShard> {
        let path = path.as_ref();
        let file = File::open(path)
            .with_context(|| format!("cannot open the token shard {}; build it with `boost data`", path.display()))?;
        let file_len = file.metadata().with_context(|| format!("cannot stat {}", path.display()))?.len();
        if file_len < HEADER_LEN as u64 {
            bail!(
                "{} is too short to be a token shard: {file_len} bytes, the header alone takes \
                 {HEADER_LEN}; rebuild it with `boost data`",
                path.display()
            );
        }
        // SAFETY: the mapping is read-only; shards are written once, to a temporary file that is
        // renamed into place, so a mapped file is never modified while it is open.
        let map = unsafe { Mmap::map(&file) }.with_context(|| format!("cannot memory-map {}", path.display()))?;
        let header = Header::parse(&map[..], path)?;
        let want = header.file_len();
        if want != Some(file_len) {
            let want_s = match want {
                Some(w) => format!("{w} bytes"),
                None => "an impossible length".to_string(),
            };
            let what = if want.is_some_and(|w| w > file_len) { "is truncated" } else { "has the wrong length" };
            bail!(
                "{} {what}: header says {} tokens ({want_s}) but the file has {file_len} bytes \
                 (token count at byte offset 16); rebuild it with `boost data`",
                path.display(),
                header.count
            );
        }
        Ok(TokenShard { map: Arc::new(map), header, path: path.to_path_buf(), body: HEADER_LEN })
    }

    /// A shard over a mapped file of another format whose `count` tokens of `width` bytes start
    /// at byte `body`; the caller has checked that they fit in the map.
    pub(crate) fn from_map(map: Mmap, path: &Path, body: usize, width: u32, count: u64, vocab: u32) -> TokenShard {
        debug_assert!(body as u64 + count * width as u64 <= map.len() as u64);
        TokenShard { map: Arc::new(map), header: Header { width, count, vocab }, path: path.to_path_buf(), body }
    }

    /// The same tokens checked against another vocabulary size.
    pub(crate) fn with_vocab(mut self, vocab: u32) -> TokenShard {
        self.header.vocab = vocab;
        self
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.header.count as usize
    }

    /// Whether the shard holds no tokens.
    pub fn is_empty(&self) -> bool {
        self.header.count == 0
    }

    /// Vocabulary size recorded in the header.
    pub fn vocab(&self) -> u32 {
        self.header.vocab
    }

    /// Bytes per token (2 or 4).
    pub fn width(&self) -> u32 {
        self.header.width
    }

    /// The file this shard was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Byte offset of the first token in the file.
    pub fn body_offset(&self) -> usize {
        self.body
    }

    fn body(&self) -> &[u8] {
        &self.map[self.body..]
    }

    /// Token at index `i`. Panics when `i >= len()`.
    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        assert!(i < self.len(), "token index {i} out of range for a shard of {} tokens", self.len());
        let b = self.body();
        if self.header.width == 2 {
            u16::from_le_bytes([b[2 * i], b[2 * i + 1]]) as u32
        } else {
            u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())
        }
    }

    /// Copies tokens `start .. start + out.len()` into `out`. Panics when the range exceeds the shard.
    pub fn read(&self, start: usize, out: &mut [u32]) {
        let end = start.checked_add(out.len()).filter(|&e| e <= self.len()).unwrap_or_else(|| {
            panic!("token range {start}..{}+{} out of range for a shard of {} tokens", start, out.len(), self.len())
        });
        let w = self.header.width as usize;
        let bytes = &self.body()[start * w..end * w];
        if w == 2 {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = u16::from_le_bytes([c[0], c[1]]) as u32;
            }
        } else {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }

    /// Reads all tokens into a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = vec![0u32; self.len()];
        self.read(0, &mut v);
        v
    }

    /// Scans every token (O(N)) and fails on the first id that is not below the vocabulary size,
    /// naming its offset.
    pub fn check_ids(&self) -> Result<()> {
        let vocab = self.header.vocab;
        let mut buf = vec![0u32; 1 << 16];
        let mut start = 0;
        while start < self.len() {
            let n = buf.len().min(self.len() - start);
            self.read(start, &mut buf[..n]);
            if let Some(k) = buf[..n].iter().position(|&t| t >= vocab) {
                bail!(
                    "{} holds token id {} at offset {} but its vocabulary size is {vocab}; \
                     the shard does not match its tokenizer; rebuild it with `boost data`",
                    self.path.display(),
                    buf[k],
                    start + k
                );
            }
            start += n;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "shard_tests.rs"]
mod tests;
