//! The training-data loader: fixed windows of a shard, visited in a seeded order per epoch.
//!
//! With sequence length `S`, window `w` (for `w` in `0..n`, `n = (len - 1) / S`) covers tokens
//! `[w·S, w·S + S + 1)`: the first `S` are the inputs, the last `S` the targets. The training
//! stream is infinite: sequence `i` (a `u64`) reads window `perm_e[i mod n]` of epoch
//! `e = i / n`, where `perm_e` is a Fisher–Yates shuffle of `0..n` driven by ChaCha8 keyed by
//! `(seed, e)` (see [`epoch_permutation`]). So the sequence read at position `i` depends only on
//! `(shard, S, seed, i)`, never on what was read before: a trainer that stores the number of
//! sequences consumed resumes exactly, and data-parallel ranks can each read their own slice.

use crate::tokens::Tokens;
use anyhow::{Result, bail};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use std::sync::Mutex;

/// A ChaCha8 generator keyed by a 64-bit seed, a 64-bit counter and a 16-byte label:
/// key bytes `seed.to_le_bytes() ‖ counter.to_le_bytes() ‖ label`.
pub(crate) fn keyed_rng(seed: u64, counter: u64, label: &[u8; 16]) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[0..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&counter.to_le_bytes());
    key[16..32].copy_from_slice(label);
    ChaCha8Rng::from_seed(key)
}

/// A uniform integer in `0..n` (`n > 0`) by Lemire's multiply-and-reject method on `next_u64`;
/// spelled out here so the order never depends on a library's sampling algorithm.
pub(crate) fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    debug_assert!(n > 0);
    let mut m = (rng.next_u64() as u128) * (n as u128);
    let mut low = m as u64;
    if low < n {
        let threshold = n.wrapping_neg() % n;
        while low < threshold {
            m = (rng.next_u64() as u128) * (n as u128);
            low = m as u64;
        }
    }
    (m >> 64) as u64
}

/// Shuffles in place: for `i` from `len-1` down to `1`, swap `v[i]` with `v[below(i+1)]`.
pub(crate) fn fisher_yates<T>(v: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..v.len()).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

const LOADER_LABEL: &[u8; 16] = b"BOOST-loader\0\0\0\0";

/// The window order of epoch `epoch`: `0..n` shuffled by Fisher–Yates with
/// ChaCha8 keyed by `seed ‖ epoch ‖ "BOOST-loader\0\0\0\0"` (little-endian integers).
pub fn epoch_permutation(seed: u64, epoch: u64, n: u32) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..n).collect();
    fisher_yates(&mut perm, &mut keyed_rng(seed, epoch, LOADER_LABEL));
    perm
}

struct PermCache {
    epoch: Option<u64>,
    perm: Vec<u32>,
}

/// Random-access reader of training sequences (shuffled, infinite) and validation windows
/// (in order) from one token stream (one shard or several read end to end, [`Tokens`]).
pub struct Loader {
    shard: Tokens,
    seq_len: usize,
    seed: u64,
    n: u64,
    cache: Mutex<PermCache>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("shard", &self.shard.path())
            .field("seq_len", &self.seq_len)
            .field("seed", &self.seed)
            .field("windows", &self.n)
            .finish()
    }
}

impl Loader {
    /// A loader of sequences of `seq_len` tokens. Fails when the shard has fewer than
    /// `seq_len + 1` tokens.
    pub fn new(shard: impl Into<Tokens>, seq_len: usize, seed: u64) -> Result<Loader> {
        let shard: Tokens = shard.into();
        if seq_len == 0 {
            bail!("train.seq_len must be at least 1");
        }
        if shard.len() < seq_len + 1 {
            bail!(
                "{} has {} tokens, fewer than train.seq_len + 1 = {}: one sequence needs seq_len \
                 inputs and the token after them; lower train.seq_len or use more data",
                shard.describe(),
                shard.len(),
                seq_len + 1
            );
        }
        let n = ((shard.len() - 1) / seq_len) as u64;
        if n > u32::MAX as u64 {
            bail!(
                "{} has {n} windows of train.seq_len = {seq_len}; at most {} are supported",
                shard.describe(),
                u32::MAX
            );
        }
        Ok(Loader { shard, seq_len, seed, n, cache: Mutex::new(PermCache { epoch: None, perm: Vec::new() }) })
    }

    /// Number of windows `n = (len - 1) / seq_len`: the sequences in one epoch.
    pub fn windows(&self) -> u64 {
        self.n
    }

    /// Tokens per sequence.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The tokens read from.
    pub fn shard(&self) -> &Tokens {
        &self.shard
    }

    /// The seed of the training order.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The window read for training sequence `seq`.
    pub fn window_of(&self, seq: u64) -> u64 {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        self.lookup(&mut cache, seq)
    }

    fn lookup(&self, cache: &mut PermCache, seq: u64) -> u64 {
        let epoch = seq / self.n;
        if cache.epoch != Some(epoch) {
            // Regenerate in place: after the first epoch the buffer is reused, not reallocated.
            cache.perm.clear();
            cache.perm.extend(0..self.n as u32);
            fisher_yates(&mut cache.perm, &mut keyed_rng(self.seed, epoch, LOADER_LABEL));
            cache.epoch = Some(epoch);
        }
        cache.perm[(seq % self.n) as usize] as u64
    }

    fn copy_window(&self, w: u64, inputs: &mut [u32], targets: &mut [u32]) {
        let start = w as usize * self.seq_len;
        self.shard.read(start, inputs);
        self.shard.read(start + 1, targets);
    }

    /// Fills `n_seqs` training sequences starting at stream position `first_seq`, row-major:
    /// sequence `k` goes to `inputs[k·S..(k+1)·S]` and `targets[k·S..(k+1)·S]`. Both slices must
    /// hold exactly `n_seqs · S` tokens. Allocates nothing (beyond a one-time permutation buffer).
    pub fn fill(&self, first_seq: u64, n_seqs: usize, inputs: &mut [u32], targets: &mut [u32]) {
        let s = self.seq_len;
        assert_eq!(inputs.len(), n_seqs * s, "inputs must hold n_seqs * seq_len tokens");
        assert_eq!(targets.len(), n_seqs * s, "targets must hold n_seqs * seq_len tokens");
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        for k in 0..n_seqs {
            let w = self.lookup(&mut cache, first_seq + k as u64);
            self.copy_window(w, &mut inputs[k * s..(k + 1) * s], &mut targets[k * s..(k + 1) * s]);
        }
    }

    /// Fills `n` validation windows in order, starting at window `first_window` and wrapping
    /// around after the last one; same layout as [`Loader::fill`].
    pub fn fill_val(&self, first_window: u64, n: usize, inputs: &mut [u32], targets: &mut [u32]) {
        let s = self.seq_len;
        assert_eq!(inputs.len(), n * s, "inputs must hold n * seq_len tokens");
        assert_eq!(targets.len(), n * s, "targets must hold n * seq_len tokens");
        for k in 0..n {
            let w = (first_window + k as u64) % self.n;
            self.copy_window(w, &mut inputs[k * s..(k + 1) * s], &mut targets[k * s..(k + 1) * s]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{TokenShard, write_shard};

    fn shard_of(len: u32, vocab: u32) -> (tempfile::TempDir, TokenShard) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("train.bin");
        let toks: Vec<u32> = (0..len).map(|i| i % vocab).collect();
        write_shard(&p, &toks, vocab).unwrap();
        (d, TokenShard::open(&p).unwrap())
    }

    #[test]
    fn windows_and_targets_are_shifted_by_one() {
        let (_d, sh) = shard_of(23, 1000);
        let l = Loader::new(sh, 5, 7).unwrap();
        assert_eq!(l.windows(), 4); // (23 - 1) / 5
        let (mut x, mut y) = (vec![0; 5], vec![0; 5]);
        l.fill_val(1, 1, &mut x, &mut y);
        assert_eq!(x, [5, 6, 7, 8, 9]);
        assert_eq!(y, [6, 7, 8, 9, 10]);
        // wrap-around
        let (mut x, mut y) = (vec![0; 10], vec![0; 10]);
        l.fill_val(3, 2, &mut x, &mut y);
        assert_eq!(x, [15, 16, 17, 18, 19, 0, 1, 2, 3, 4]);
        assert_eq!(y[4], 20);
        // the last window ends at the last token needed: 4 * 5 + 1 = 21 <= 23
        let (mut x, mut y) = (vec![0; 5], vec![0; 5]);
        for i in 0..12u64 {
            l.fill(i, 1, &mut x, &mut y);
            let w = l.window_of(i);
            assert_eq!(x[0] as u64, w * 5);
            assert!(y.iter().zip(&x).all(|(t, i)| *t == i + 1));
        }
    }

    #[test]
    fn every_window_once_per_epoch() {
        let (_d, sh) = shard_of(1001, 50_000);
        let l = Loader::new(sh, 7, 99).unwrap();
        let n = l.windows();
        assert_eq!(n, 142);
        for e in 0..4u64 {
            let mut seen = vec![0u32; n as usize];
            for i in e * n..(e + 1) * n {
                seen[l.window_of(i) as usize] += 1;
            }
            assert!(seen.iter().all(|&c| c == 1), "epoch {e}");
        }
        let p0: Vec<u64> = (0..n).map(|i| l.window_of(i)).collect();
        let p1: Vec<u64> = (n..2 * n).map(|i| l.window_of(i)).collect();
        assert_ne!(p0, p1, "epochs should be shuffled differently");
        assert_ne!(p0, (0..n).collect::<Vec<_>>(), "the order should be shuffled");
    }

    #[test]
    fn deterministic_and_resumable() {
        let (_d, sh) = shard_of(5000, 300);
        let s = 16;
        let a = Loader::new(sh.clone(), s, 1234).unwrap();
        let b = Loader::new(sh.clone(), s, 1234).unwrap();
        let c = Loader::new(sh, s, 1235).unwrap();
        let n = a.windows() as usize; // 312
        // One uninterrupted read of 2.5 epochs in batches of 8.
        let total = n * 5 / 2 / 8 * 8;
        let mut xa = vec![0; total * s];
        let mut ya = vec![0; total * s];
        for k in 0..total / 8 {
            a.fill((k * 8) as u64, 8, &mut xa[k * 8 * s..(k + 1) * 8 * s], &mut ya[k * 8 * s..(k + 1) * 8 * s]);
        }
        // A fresh loader resuming from saved positions, in differently sized reads that cross
        // epoch boundaries, reproduces the same stream.
        let mut pos = 0usize;
        let mut step = 1usize;
        while pos < total {
            let m = step.min(total - pos);
            let (mut x, mut y) = (vec![0; m * s], vec![0; m * s]);
            let fresh = Loader::new(b.shard().clone(), s, 1234).unwrap();
            fresh.fill(pos as u64, m, &mut x, &mut y);
            assert_eq!(x, xa[pos * s..(pos + m) * s], "inputs from position {pos}");
            assert_eq!(y, ya[pos * s..(pos + m) * s], "targets from position {pos}");
            pos += m;
            step = step * 3 % 97 + 1;
        }
        // Reading backwards through the same loader gives the same answers.
        let (mut x, mut y) = (vec![0; s], vec![0; s]);
        for i in (0..total).rev().step_by(37) {
            b.fill(i as u64, 1, &mut x, &mut y);
            assert_eq!(x, xa[i * s..(i + 1) * s]);
        }
        // Another seed gives another order.
        let order = |l: &Loader| (0..n as u64).map(|i| l.window_of(i)).collect::<Vec<_>>();
        assert_ne!(order(&a), order(&c));
        // The permutation is a fixed function of (seed, epoch, n).
        assert_eq!(order(&a).iter().map(|&w| w as u32).collect::<Vec<_>>(), epoch_permutation(1234, 0, n as u32));
    }

    #[test]
    fn short_shard_names_file_and_key() {
        let (_d, sh) = shard_of(10, 100);
        let e = Loader::new(sh.clone(), 10, 1).unwrap_err().to_string();
        assert!(e.contains("train.bin") && e.contains("train.seq_len"), "{e}");
        assert_eq!(Loader::new(sh, 9, 1).unwrap().windows(), 1);
    }

    #[test]
    fn below_is_uniform_enough() {
        let mut rng = keyed_rng(1, 2, b"test-below\0\0\0\0\0\0");
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[below(&mut rng, 6) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_400..10_600).contains(&c)), "{counts:?}");
    }
}
