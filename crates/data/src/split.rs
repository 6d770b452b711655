//! The train/validation split of a document stream, decided one document at a time.
//!
//! `n_val = round(val_fraction · n)` (clamped to `1..=n-1`) of the `n` documents go to
//! validation, chosen by selection sampling (Knuth's Algorithm S): document `t` is a validation
//! document with probability `(n_val − chosen) / (n − t)`, drawn from ChaCha8 keyed by
//! `seed ‖ 0 ‖ "BOOST-split"`. Every `n_val`-subset is equally likely, the count is exact, and
//! the decision for a document needs only the documents before it, so a corpus of any size is
//! split while it streams by.

use crate::loader::keyed_rng;
use anyhow::{Result, bail};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::Rng;

/// Which split a document goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subset {
    /// The training split.
    Train,
    /// The validation split.
    Val,
}

impl Subset {
    /// `"train"` or `"val"`, as in file names and `meta.json`.
    pub fn name(self) -> &'static str {
        match self {
            Subset::Train => "train",
            Subset::Val => "val",
        }
    }
}

/// Assigns `n` documents, in order, to the two splits.
pub struct Splitter {
    rng: ChaCha8Rng,
    n: u64,
    n_val: u64,
    seen: u64,
    chosen: u64,
}

impl Splitter {
    /// A splitter for `n_docs` documents. Fails with fewer than 2 documents or a fraction
    /// outside `(0, 1)`.
    pub fn new(n_docs: u64, val_fraction: f64, seed: u64) -> Result<Splitter> {
        if n_docs < 2 {
            bail!(
                "the corpus has {n_docs} document(s); a train/validation split needs at least 2 \
                 (each text file is one document, each JSONL line or Parquet row one document)"
            );
        }
        if !(val_fraction > 0.0 && val_fraction < 1.0) {
            bail!("data.val_fraction must lie strictly between 0 and 1, got {val_fraction}");
        }
        let n_val = ((val_fraction * n_docs as f64).round() as u64).clamp(1, n_docs - 1);
        Ok(Splitter { rng: keyed_rng(seed, 0, b"BOOST-split\0\0\0\0\0"), n: n_docs, n_val, seen: 0, chosen: 0 })
    }

    /// How many documents go to validation.
    pub fn val_count(&self) -> u64 {
        self.n_val
    }

    /// The split of the next document. Panics after `n` documents (the caller counted them).
    pub fn next_split(&mut self) -> Subset {
        assert!(self.seen < self.n, "more documents than the {} counted", self.n);
        let left = self.n - self.seen;
        let need = self.n_val - self.chosen;
        self.seen += 1;
        // u in [0, 1) with 53 random bits; selected when left · u < need.
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if (left as f64) * u < need as f64 {
            self.chosen += 1;
            Subset::Val
        } else {
            Subset::Train
        }
    }
}

/// Splits documents `0..n_docs` into (train, validation) index lists, each in ascending order,
/// as a [`Splitter`] assigns them. Fails with fewer than 2 documents.
pub fn split_documents(n_docs: usize, val_fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    let mut s = Splitter::new(n_docs as u64, val_fraction, seed)?;
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for i in 0..n_docs {
        match s.next_split() {
            Subset::Train => train.push(i),
            Subset::Val => val.push(i),
        }
    }
    Ok((train, val))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_is_equally_likely_to_be_held_out() {
        // 20 documents, 5 held out, over 4000 seeds: each document is held out 1000 times in
        // expectation (binomial, sd ≈ 27); 6 sd either side bounds a false failure below 1e-8.
        let mut hits = [0u32; 20];
        for seed in 0..4000 {
            let (_, val) = split_documents(20, 0.25, seed).unwrap();
            assert_eq!(val.len(), 5);
            for i in val {
                hits[i] += 1;
            }
        }
        for (i, &h) in hits.iter().enumerate() {
            assert!((840..=1160).contains(&h), "document {i} held out {h} times of 4000 (expected 1000)");
        }
    }
}
