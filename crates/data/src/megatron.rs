//! Megatron-LM / nanotron indexed datasets: a `PREFIX.bin` of tokens and a `PREFIX.idx`
//! describing them. The `.idx` (little-endian) holds
//!
//! | offset      | size | field                                                         |
//! |------------:|-----:|---------------------------------------------------------------|
//! | 0           | 9    | magic `MMIDIDX\x00\x00`                                       |
//! | 9           | 8    | `u64` version = 1                                             |
//! | 17          | 1    | `u8` dtype code: 3 int16, 4 int32, 8 uint16 are read          |
//! | 18          | 8    | `u64` sequence count S                                        |
//! | 26          | 8    | `u64` document-index count D (documents + 1)                  |
//! | 34          | 4·S  | `i32` sizes: tokens per sequence                              |
//! | 34+4S       | 8·S  | `i64` pointers: byte offset of each sequence in `.bin`        |
//! | 34+12S      | 8·D  | `i64` document index: first sequence of each document, then S |
//!
//! The sequences are stored back to back, so the `.bin` is one token stream; it is read as such.

use crate::shard::TokenShard;
use anyhow::{Context, Result, bail};
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The 9 bytes an `.idx` file starts with.
pub const MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";
const FIXED: usize = 34;

/// The token width of a Megatron dtype code, or `None` for a code that is not a token type here.
fn width_of(code: u8) -> Option<u32> {
    match code {
        3 | 8 => Some(2),
        4 => Some(4),
        _ => None,
    }
}

/// The `.bin` and `.idx` paths of a prefix.
pub fn paths(prefix: &Path) -> (PathBuf, PathBuf) {
    (prefix.with_extension("bin"), prefix.with_extension("idx"))
}

fn map(path: &Path) -> Result<(Mmap, u64)> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = file.metadata().with_context(|| format!("cannot stat {}", path.display()))?.len();
    if len == 0 {
        // An empty file cannot be mapped; map a placeholder so the checks report it.
        return Ok((memmap2::MmapOptions::new().len(1).map_anon()?.make_read_only()?, 0));
    }
    // SAFETY: read-only mapping of a data file the run does not write; see `TokenShard::open`.
    Ok((unsafe { Mmap::map(&file) }.with_context(|| format!("cannot memory-map {}", path.display()))?, len))
}

/// int16 tokens are signed: a negative one is damage, and is named as stored, not as the
/// large id its bit pattern would read as (−7 as 65529).
fn refuse_negative_int16(tokens: &[u8], bin: &Path) -> Result<()> {
    let neg = tokens.chunks_exact(2).position(|c| i16::from_le_bytes([c[0], c[1]]) < 0);
    if let Some(k) = neg {
        let v = i16::from_le_bytes([tokens[2 * k], tokens[2 * k + 1]]);
        bail!(
            "{} holds token id {v} (int16, as stored) at byte offset {}: a token id cannot be negative; the file is \
             damaged or was written with another dtype than its .idx says",
            bin.display(),
            2 * k
        );
    }
    Ok(())
}

/// One indexed dataset, opened and checked: its tokens and its document count.
pub struct Indexed {
    /// The `.bin` tokens as one stream (ids are checked once the vocabulary is known).
    pub tokens: TokenShard,
    /// Documents listed in the `.idx`.
    pub documents: u64,
}

/// Opens `PREFIX.bin` + `PREFIX.idx`, checking the header, that every size is non-negative,
/// that the pointers lay the sequences back to back, that the document index rises from 0 to S,
/// and that the `.bin` holds exactly the tokens the sizes add up to.
pub fn open(prefix: &Path) -> Result<Indexed> {
    let (bin, idx) = paths(prefix);
    let (map_idx, len) = map(&idx)?;
    let i = idx.display();
    let b = &map_idx[..len as usize];
    let short = |need: u64, what: &str| -> Result<()> {
        if len < need {
            bail!("{i} is truncated: it ends at byte offset {len}, before the {what} that ends at byte offset {need}");
        }
        Ok(())
    };
    short(FIXED as u64, "header")?;
    if &b[0..9] != MAGIC {
        bail!(
            "{i} is not a Megatron index: bytes 0..9 are {:?} instead of the magic \"MMIDIDX\\0\\0\"",
            String::from_utf8_lossy(&b[0..9])
        );
    }
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    if u64_at(9) != 1 {
        bail!("{i} has index version {} at byte offset 9; version 1 is read", u64_at(9));
    }
    let code = b[17];
    let Some(width) = width_of(code) else {
        bail!(
            "{i} has dtype code {code} at byte offset 17; token ids are read as int16 (3), int32 (4) or \
             uint16 (8)"
        );
    };
    let (s, d) = (u64_at(18), u64_at(26));
    let end = s.checked_mul(12).and_then(|x| x.checked_add(d.checked_mul(8)?)).and_then(|x| x.checked_add(34));
    let Some(end) = end else {
        bail!("{i} declares {s} sequences and {d} document entries (byte offsets 18, 26): impossible counts")
    };
    short(end, "sizes, pointers and document index")?;
    if len != end {
        bail!("{i} has {} bytes after its document index, which ends at byte offset {end}", len - end);
    }
    let (s, d) = (s as usize, d as usize);
    let (sizes, pointers, docs) = (FIXED, FIXED + 4 * s, FIXED + 12 * s);
    let mut expect: i64 = 0;
    for k in 0..s {
        let size = i32::from_le_bytes(b[sizes + 4 * k..sizes + 4 * k + 4].try_into().unwrap());
        let ptr = i64::from_le_bytes(b[pointers + 8 * k..pointers + 8 * k + 8].try_into().unwrap());
        if size < 0 {
            bail!("{i} gives sequence {k} a negative size {size} at byte offset {}", sizes + 4 * k);
        }
        if ptr != expect {
            bail!(
                "{i} points sequence {k} at {ptr} (byte offset {}), but the sequences before it end at \
                 {expect}; only back-to-back sequences are read",
                pointers + 8 * k
            );
        }
        expect += size as i64 * width as i64;
    }
    let mut prev = -1i64;
    for k in 0..d {
        let v = i64::from_le_bytes(b[docs + 8 * k..docs + 8 * k + 8].try_into().unwrap());
        let bad = (k == 0 && v != 0) || v < prev || v > s as i64 || (k + 1 == d && v != s as i64);
        if bad {
            bail!(
                "{i} has document index entry {k} = {v} at byte offset {}; the entries must rise from 0 \
                 to the sequence count {s}",
                docs + 8 * k
            );
        }
        prev = v;
    }
    let (map_bin, bin_len) = map(&bin)?;
    if bin_len != expect as u64 {
        let what = if (bin_len as i64) < expect { "is truncated" } else { "has the wrong length" };
        bail!(
            "{} {what}: {i} lists {expect} bytes of tokens but the file ends at byte offset {bin_len}",
            bin.display()
        );
    }
    let count = expect as u64 / width as u64;
    if code == 3 {
        refuse_negative_int16(&map_bin[..bin_len as usize], &bin)?;
    }
    Ok(Indexed {
        tokens: TokenShard::from_map(map_bin, &bin, 0, width, count, u32::MAX),
        documents: d.saturating_sub(1) as u64,
    })
}
