//! llm.c token shards (`dev/data/*.py` in llm.c): a header of 256 little-endian `i32`, then the
//! tokens. Header word 0 is the magic 20240520, word 1 the version (1: `u16` tokens, GPT-2;
//! 2: `u32` tokens, Llama 3), word 2 the token count; the other words are zero. Documents are
//! joined by the end-of-text token (50256 for GPT-2), which llm.c puts before each document.

use crate::shard::TokenShard;
use anyhow::{Context, Result, bail};
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;

/// Header word 0 of every llm.c shard.
pub const MAGIC: i32 = 20240520;
/// Bytes before the first token: 256 `i32`.
pub const HEADER_LEN: usize = 1024;
/// GPT-2's end-of-text id, which llm.c's GPT-2 shards put before every document.
pub const GPT2_EOT: u32 = 50256;

/// Whether `path` starts with the llm.c magic (a cheap test for format detection).
pub fn looks_like(path: &Path) -> bool {
    use std::io::Read;
    let mut b = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut b)).is_ok() && i32::from_le_bytes(b) == MAGIC
}

/// Maps an llm.c shard, checking its magic, version and exact length; ids are checked
/// against the vocabulary later, when it is known ([`crate::foreign`]).
pub fn open(path: &Path) -> Result<TokenShard> {
    let p = path.display();
    let file = File::open(path).with_context(|| format!("cannot open the llm.c shard {p}"))?;
    let len = file.metadata().with_context(|| format!("cannot stat {p}"))?.len();
    if len < HEADER_LEN as u64 {
        bail!(
            "{p} is truncated: {len} bytes, but an llm.c shard starts with a {HEADER_LEN}-byte header \
             (the file ends at byte offset {len})"
        );
    }
    // SAFETY: read-only mapping of a data file the run does not write; see `TokenShard::open`.
    let map = unsafe { Mmap::map(&file) }.with_context(|| format!("cannot memory-map {p}"))?;
    let word = |k: usize| i32::from_le_bytes(map[4 * k..4 * k + 4].try_into().unwrap());
    if word(0) != MAGIC {
        bail!(
            "{p} is not an llm.c shard: the i32 at byte offset 0 is {} instead of the magic {MAGIC}; \
             set data.format to the layout of data.dir",
            word(0)
        );
    }
    let width = match word(1) {
        1 => 2u32,
        2 => 4u32,
        v => bail!(
            "{p} has llm.c version {v} at byte offset 4; version 1 (uint16 tokens) and 2 (uint32 tokens) \
             are read"
        ),
    };
    let count = word(2);
    if count < 0 {
        bail!("{p} declares {count} tokens at byte offset 8; the file is corrupt");
    }
    let want = HEADER_LEN as u64 + count as u64 * width as u64;
    if want > len {
        bail!(
            "{p} is truncated: its header (token count at byte offset 8) says {count} tokens of {width} \
             bytes, {want} bytes in all, but the file ends at byte offset {len}, within token {}",
            (len - HEADER_LEN as u64) / width as u64
        );
    }
    if want < len {
        bail!(
            "{p} has the wrong length: its header (token count at byte offset 8) says {count} tokens of \
             {width} bytes, {want} bytes in all, but the file has {} more bytes from byte offset {want}",
            len - want
        );
    }
    // The vocabulary is set once the dataset is resolved; until then no id is rejected.
    Ok(TokenShard::from_map(map, path, HEADER_LEN, width, count as u64, u32::MAX))
}
