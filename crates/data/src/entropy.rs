//! The unigram entropy of a token stream: the loss of a model that predicts token frequencies and
//! ignores context, the loss to beat.

/// Entropy in nats of the token frequencies: `-Σ p ln p`.
pub fn unigram_entropy(tokens: &[u32], vocab: usize) -> f64 {
    let mut counts = vec![0u64; vocab.max(1)];
    count_tokens(tokens, &mut counts);
    entropy_of_counts(&counts)
}

/// Adds the occurrences of each id in `tokens` to `counts` (grown if an id is past its end).
pub(crate) fn count_tokens(tokens: &[u32], counts: &mut Vec<u64>) {
    for &t in tokens {
        let t = t as usize;
        if t >= counts.len() {
            counts.resize(t + 1, 0);
        }
        counts[t] += 1;
    }
}

/// Entropy in nats of the distribution proportional to `counts` (0 when all are zero).
pub(crate) fn entropy_of_counts(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return 0.0;
    }
    let n = n as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.ln()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_of_uniform_and_constant() {
        assert_eq!(unigram_entropy(&[3, 3, 3], 4), 0.0);
        let h = unigram_entropy(&[0, 1, 2, 3], 4);
        assert!((h - 4f64.ln()).abs() < 1e-12);
    }
}
