//! One token stream made of several shards read end to end, so a dataset may hold many files
//! and the loader still sees one sequence of tokens: its windows, and so the training order,
//! depend only on the tokens and never on how they are split into files.

use crate::shard::TokenShard;
use std::path::Path;
use std::sync::Arc;

/// The concatenation of one or more shards (each memory-mapped; pages are read on first use).
/// Cloning is cheap.
#[derive(Clone, Debug)]
pub struct Tokens {
    parts: Arc<[TokenShard]>,
    /// `starts[k]` is the stream index of part `k`'s first token; one more entry holds the total.
    starts: Arc<[usize]>,
}

impl From<TokenShard> for Tokens {
    fn from(shard: TokenShard) -> Tokens {
        Tokens::new(vec![shard])
    }
}

impl Tokens {
    /// The shards in order. An empty list gives an empty stream.
    pub fn new(parts: Vec<TokenShard>) -> Tokens {
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut at = 0usize;
        for p in &parts {
            starts.push(at);
            at += p.len();
        }
        starts.push(at);
        Tokens { parts: parts.into(), starts: starts.into() }
    }

    /// Total number of tokens.
    pub fn len(&self) -> usize {
        *self.starts.last().unwrap_or(&0)
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per token of the first shard (every shard of a BOOST dataset has one width).
    pub fn width(&self) -> u32 {
        self.parts.first().map_or(0, |p| p.width())
    }

    /// The vocabulary size the ids were checked against (that of the first shard).
    pub fn vocab(&self) -> u32 {
        self.parts.first().map_or(0, |p| p.vocab())
    }

    /// The shards, in stream order.
    pub fn parts(&self) -> &[TokenShard] {
        &self.parts
    }

    /// The first shard's file, to name the data in messages (a directory's shards share it).
    pub fn path(&self) -> &Path {
        self.parts.first().map(|p| p.path()).unwrap_or(Path::new("(no shards)"))
    }

    /// The files, for messages: the first one's path, and how many follow it.
    pub fn describe(&self) -> String {
        match self.parts.len() {
            0 | 1 => self.path().display().to_string(),
            n => format!("{} (and {} more shards)", self.path().display(), n - 1),
        }
    }

    /// Copies tokens `start .. start + out.len()` into `out`, across shard boundaries. Panics
    /// when the range exceeds the stream.
    pub fn read(&self, start: usize, out: &mut [u32]) {
        let end = start.checked_add(out.len()).filter(|&e| e <= self.len()).unwrap_or_else(|| {
            panic!("token range {start}..{}+{} out of range for a stream of {} tokens", start, out.len(), self.len())
        });
        if out.is_empty() {
            return;
        }
        // The last part starting at or before `start`; empty parts are skipped by the loop.
        let mut k = self.starts.partition_point(|&s| s <= start) - 1;
        let (mut at, mut done) = (start, 0);
        while at < end {
            let (lo, hi) = (self.starts[k], self.starts[k + 1]);
            if at < hi {
                let n = (hi - at).min(end - at);
                self.parts[k].read(at - lo, &mut out[done..done + n]);
                at += n;
                done += n;
            }
            k += 1;
        }
    }

    /// Token at stream index `i`. Panics when `i >= len()`.
    pub fn get(&self, i: usize) -> u32 {
        let mut one = [0u32];
        self.read(i, &mut one);
        one[0]
    }

    /// Reads all tokens into a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = vec![0u32; self.len()];
        self.read(0, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::write_shard;

    #[test]
    fn reads_across_boundaries_and_skips_empty_parts() {
        let d = tempfile::tempdir().unwrap();
        let all: Vec<u32> = (0..50).collect();
        // Parts of 7, 0, 20, 1 and 22 tokens.
        let cuts = [0usize, 7, 7, 27, 28, 50];
        let parts: Vec<TokenShard> = cuts
            .windows(2)
            .enumerate()
            .map(|(k, c)| {
                let p = d.path().join(format!("p{k}.bin"));
                write_shard(&p, &all[c[0]..c[1]], 100).unwrap();
                TokenShard::open(&p).unwrap()
            })
            .collect();
        let t = Tokens::new(parts);
        assert_eq!(t.len(), 50);
        assert_eq!(t.to_vec(), all);
        for start in 0..50 {
            for len in 0..=(50 - start) {
                let mut out = vec![u32::MAX; len];
                t.read(start, &mut out);
                assert_eq!(out, all[start..start + len], "{start}+{len}");
            }
        }
        assert_eq!(t.get(27), 27);
        assert!(t.path().ends_with("p0.bin"));
    }
}
