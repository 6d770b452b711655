//! Several training streams blended by weight (`data.mix`), deterministically.
//!
//! Training sequence `i` of the blend is drawn from the dataset `k` that maximises
//! `w_k · (i + 1) − c_k`, where `w_k` are the normalised weights and `c_k` the sequences dataset
//! `k` gave among the first `i` (ties go to the first dataset): the "largest deficit" schedule,
//! which keeps every prefix within one sequence of its share. Within dataset `k` the sequence is
//! its `c_k`-th of that dataset's own shuffled stream ([`Loader`]). So the sequence at position
//! `i` depends only on the datasets, the weights, the seed and `i`: any layout reads the same
//! blend, and the number of sequences consumed still resumes it exactly.

use crate::loader::Loader;
use anyhow::{Result, bail};
use std::sync::Mutex;

/// The schedule's state after `next` sequences.
#[derive(Clone)]
struct Cursor {
    next: u64,
    counts: Vec<u64>,
}

/// Training sequences drawn from several loaders by weight.
pub struct Mixture {
    names: Vec<String>,
    parts: Vec<Loader>,
    weights: Vec<f64>,
    cursor: Mutex<Cursor>,
}

impl Mixture {
    /// Blends `parts` (name, loader, weight). The weights must be positive and finite; they are
    /// normalised. All loaders must have the same sequence length.
    pub fn new(parts: Vec<(String, Loader, f64)>) -> Result<Mixture> {
        if parts.is_empty() {
            bail!("data.mix lists no datasets");
        }
        for (name, l, w) in &parts {
            if !(w.is_finite() && *w > 0.0) {
                bail!("data.mix: the weight of \"{name}\" is {w}; weights must be positive numbers, e.g. 0.7");
            }
            if l.seq_len() != parts[0].1.seq_len() {
                bail!("data.mix: \"{name}\" has a different sequence length");
            }
        }
        let total: f64 = parts.iter().map(|p| p.2).sum();
        let k = parts.len();
        let (mut names, mut loaders, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        for (n, l, w) in parts {
            names.push(n);
            loaders.push(l);
            weights.push(w / total);
        }
        Ok(Mixture { names, parts: loaders, weights, cursor: Mutex::new(Cursor { next: 0, counts: vec![0; k] }) })
    }

    /// The datasets' names, in `data.mix` order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The datasets' loaders, in `data.mix` order.
    pub fn parts(&self) -> &[Loader] {
        &self.parts
    }

    /// The normalised weights.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Tokens per sequence.
    pub fn seq_len(&self) -> usize {
        self.parts[0].seq_len()
    }

    fn choose(&self, c: &Cursor) -> usize {
        let i1 = (c.next + 1) as f64;
        let mut best = 0;
        let mut best_deficit = f64::NEG_INFINITY;
        for (k, (&w, &n)) in self.weights.iter().zip(&c.counts).enumerate() {
            let deficit = w * i1 - n as f64;
            if deficit > best_deficit {
                best = k;
                best_deficit = deficit;
            }
        }
        best
    }

    /// Moves `c` to position `seq` (replaying from the start when it is behind).
    fn seek(&self, c: &mut Cursor, seq: u64) {
        if seq < c.next {
            *c = Cursor { next: 0, counts: vec![0; self.parts.len()] };
        }
        while c.next < seq {
            let k = self.choose(c);
            c.counts[k] += 1;
            c.next += 1;
        }
    }

    /// How many of the first `n` sequences each dataset gave: its position in its own stream.
    pub fn positions(&self, n: u64) -> Vec<u64> {
        let mut c = self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        self.seek(&mut c, n);
        c.counts.clone()
    }

    /// The dataset and its own sequence index of blended sequence `seq`.
    pub fn locate(&self, seq: u64) -> (usize, u64) {
        let mut c = self.cursor.lock().unwrap_or_else(|e| e.into_inner());
        self.seek(&mut c, seq);
        let k = self.choose(&c);
        (k, c.counts[k])
    }

    /// Fills `n_seqs` blended training sequences from position `first_seq`, in the layout of
    /// [`Loader::fill`].
    pub fn fill(&self, first_seq: u64, n_seqs: usize, inputs: &mut [u32], targets: &mut [u32]) {
        let s = self.seq_len();
        assert_eq!(inputs.len(), n_seqs * s, "inputs must hold n_seqs * seq_len tokens");
        assert_eq!(targets.len(), n_seqs * s, "targets must hold n_seqs * seq_len tokens");
        for q in 0..n_seqs {
            let (k, j) = self.locate(first_seq + q as u64);
            self.parts[k].fill(j, 1, &mut inputs[q * s..(q + 1) * s], &mut targets[q * s..(q + 1) * s]);
        }
    }
}

/// The training stream of a run: one dataset's loader, or a blend.
pub enum TrainStream {
    /// A single dataset.
    One(Loader),
    /// `data.mix`.
    Mix(Mixture),
}

impl TrainStream {
    /// Fills `n_seqs` training sequences from position `first_seq` ([`Loader::fill`]).
    pub fn fill(&self, first_seq: u64, n_seqs: usize, inputs: &mut [u32], targets: &mut [u32]) {
        match self {
            TrainStream::One(l) => l.fill(first_seq, n_seqs, inputs, targets),
            TrainStream::Mix(m) => m.fill(first_seq, n_seqs, inputs, targets),
        }
    }

    /// Sequences in one pass over the data (the sum over a blend's datasets).
    pub fn windows(&self) -> u64 {
        match self {
            TrainStream::One(l) => l.windows(),
            TrainStream::Mix(m) => m.parts().iter().map(Loader::windows).sum(),
        }
    }

    /// Each dataset's name and position in its own stream after `position` blended sequences
    /// (empty for a single dataset, whose position is `position`).
    pub fn positions(&self, position: u64) -> Vec<(String, u64)> {
        match self {
            TrainStream::One(_) => Vec::new(),
            TrainStream::Mix(m) => m.names().iter().cloned().zip(m.positions(position)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{TokenShard, write_shard};

    fn loader(dir: &std::path::Path, name: &str, base: u32, seed: u64) -> Loader {
        let p = dir.join(name);
        let tokens: Vec<u32> = (0..401).map(|t| base + t % 97).collect();
        write_shard(&p, &tokens, 1000).unwrap();
        Loader::new(TokenShard::open(&p).unwrap(), 4, seed).unwrap()
    }

    fn mix(dir: &std::path::Path, w: [f64; 3]) -> Mixture {
        Mixture::new(vec![
            ("a".into(), loader(dir, "a.bin", 0, 1), w[0]),
            ("b".into(), loader(dir, "b.bin", 200, 2), w[1]),
            ("c".into(), loader(dir, "c.bin", 400, 3), w[2]),
        ])
        .unwrap()
    }

    #[test]
    fn every_prefix_keeps_its_share_within_one_sequence() {
        let d = tempfile::tempdir().unwrap();
        let m = mix(d.path(), [0.5, 0.3, 0.2]);
        for n in 0..2000u64 {
            let pos = m.positions(n);
            assert_eq!(pos.iter().sum::<u64>(), n);
            for (k, &p) in pos.iter().enumerate() {
                let want = m.weights()[k] * n as f64;
                assert!((p as f64 - want).abs() <= 1.0, "n {n}: dataset {k} gave {p}, share {want}");
            }
        }
    }

    #[test]
    fn a_sequence_depends_only_on_its_position() {
        let d = tempfile::tempdir().unwrap();
        let m = mix(d.path(), [2.0, 1.0, 1.0]);
        let s = m.seq_len();
        // Read 64 sequences in one pass, then again as 4 ranks reading interleaved slices in a
        // scrambled order (each seek backwards replays the schedule).
        let (mut x, mut y) = (vec![0; 64 * s], vec![0; 64 * s]);
        m.fill(0, 64, &mut x, &mut y);
        for first in [48u64, 0, 32, 16, 8, 56, 24, 40] {
            let (mut a, mut b) = (vec![0; 8 * s], vec![0; 8 * s]);
            m.fill(first, 8, &mut a, &mut b);
            let r = first as usize * s..(first as usize + 8) * s;
            assert_eq!((&a[..], &b[..]), (&x[r.clone()], &y[r]));
        }
        // Each sequence is that dataset's own sequence at the dataset's position.
        for q in 0..64u64 {
            let (k, j) = m.locate(q);
            let (mut a, mut b) = (vec![0; s], vec![0; s]);
            m.parts()[k].fill(j, 1, &mut a, &mut b);
            assert_eq!(a, x[q as usize * s..(q as usize + 1) * s]);
            let base = [0, 200, 400][k];
            assert!(a.iter().all(|&t| (base..base + 97).contains(&t)));
        }
    }

    #[test]
    fn bad_weights_are_named() {
        let d = tempfile::tempdir().unwrap();
        for w in [0.0, -1.0, f64::NAN] {
            let e = Mixture::new(vec![("web".into(), loader(d.path(), "a.bin", 0, 1), w)]).err().unwrap();
            assert!(e.to_string().contains("\"web\"") && e.to_string().contains("data.mix"), "{e}");
        }
    }
}
