//! Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p
//! (nucleus) from a seeded ChaCha stream, so a fixed seed gives the same text.

use anyhow::{Result, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0: greedy (the most likely token); otherwise logits are divided by it.
    pub temperature: f64,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the fewest most likely tokens whose probability sums to at least p, in (0, 1].
    pub top_p: f64,
    pub seed: u64,
}

impl Sampling {
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            bail!("--temperature {} must be a number ≥ 0 (0 is greedy)", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            bail!("--top-p {} must be in (0, 1] (1 keeps every token)", self.top_p);
        }
        Ok(())
    }
}

pub struct Sampler {
    how: Sampling,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(how: Sampling) -> Result<Self> {
        how.validate()?;
        Ok(Self { how, rng: ChaCha8Rng::seed_from_u64(how.seed) })
    }

    /// The next token id of `logits` (one per vocabulary entry).
    pub fn next(&mut self, logits: &[f64]) -> u32 {
        let argmax = |l: &[f64]| l.iter().enumerate().fold(0, |b, (i, x)| if *x > l[b] { i } else { b });
        if self.how.temperature == 0.0 {
            return argmax(logits) as u32;
        }
        // Candidates by descending logit (index order breaks ties, so the order is fixed).
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if self.how.top_k > 0 {
            order.truncate(self.how.top_k);
        }
        let max = logits[order[0]];
        let mut probs: Vec<f64> = order.iter().map(|&i| ((logits[i] - max) / self.how.temperature).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        // Nucleus: the shortest prefix whose mass reaches top_p.
        let mut mass = 0.0;
        let keep = probs.iter().position(|p| {
            mass += p;
            mass >= self.how.top_p
        });
        let keep = keep.map_or(probs.len(), |k| k + 1);
        let kept: f64 = probs[..keep].iter().sum();
        // A uniform draw in [0, 1) from the top 53 bits.
        let u01 = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let mut u = u01 * kept;
        for (k, p) in probs[..keep].iter().enumerate() {
            if u < *p {
                return order[k] as u32;
            }
            u -= p;
        }
        order[keep - 1] as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f64, top_k: usize, top_p: f64, seed: u64) -> Sampler {
        Sampler::new(Sampling { temperature, top_k, top_p, seed }).unwrap()
    }

    #[test]
    fn greedy_top_k_top_p_and_seeds() {
        let logits = [0.0, 3.0, 1.0, 2.9, -1.0];
        assert_eq!(sampler(0.0, 0, 1.0, 1).next(&logits), 1, "greedy takes the largest");
        // top-k 1 is greedy at any temperature.
        assert!((0..50).all(|s| sampler(2.0, 1, 1.0, s).next(&logits) == 1));
        // top-k 2 only ever picks the two largest.
        assert!((0..200).all(|s| [1, 3].contains(&sampler(5.0, 2, 1.0, s).next(&logits))));
        // A tiny top-p keeps only the most likely token.
        assert!((0..50).all(|s| sampler(1.0, 0, 1e-6, s).next(&logits) == 1));
        // The same seed gives the same draws; the draws cover more than one token.
        let draw = |seed| {
            let mut s = sampler(3.0, 0, 1.0, seed);
            (0..20).map(|_| s.next(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert!(draw(7).iter().any(|&t| t != draw(7)[0]));
    }

    #[test]
    fn bad_settings_are_refused() {
        for (t, p) in [(-1.0, 1.0), (f64::NAN, 1.0), (1.0, 0.0), (1.0, 1.5)] {
            let e = Sampler::new(Sampling { temperature: t, top_k: 0, top_p: p, seed: 0 }).err().unwrap();
            let msg = e.to_string();
            assert!(msg.contains("--temperature") || msg.contains("--top-p"), "{msg}");
        }
    }
}
