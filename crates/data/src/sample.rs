//! A deterministic sample of documents, so that tokenizer training has a bounded input.

use crate::loader::{fisher_yates, keyed_rng};

/// At most `max_bytes` bytes of `docs` (all of them if `max_bytes` is 0 or they fit): whole
/// documents taken in the order of a Fisher–Yates shuffle keyed by `seed ‖ 0 ‖ "BOOST-bpe-sample"`,
/// while they fit; the first document that does not fit is cut (at a character boundary) to fill
/// the rest. The chosen documents keep their input order, so the sample depends only on the
/// documents, `max_bytes` and `seed`.
pub fn sample_documents<'a>(docs: &[&'a str], max_bytes: usize, seed: u64) -> Vec<&'a str> {
    let total: usize = docs.iter().map(|d| d.len()).sum();
    if max_bytes == 0 || total <= max_bytes {
        return docs.to_vec();
    }
    let mut order: Vec<usize> = (0..docs.len()).collect();
    fisher_yates(&mut order, &mut keyed_rng(seed, 0, b"BOOST-bpe-sample"));
    let mut chosen: Vec<(usize, &'a str)> = Vec::new();
    let mut left = max_bytes;
    for i in order {
        let d = docs[i];
        if d.len() <= left {
            chosen.push((i, d));
            left -= d.len();
        } else {
            let mut cut = left;
            while !d.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut > 0 {
                chosen.push((i, &d[..cut]));
            }
            break;
        }
    }
    chosen.sort_unstable_by_key(|&(i, _)| i);
    chosen.into_iter().map(|(_, d)| d).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_is_bounded_deterministic_and_whole_when_small() {
        let docs: Vec<String> = (0..50).map(|i| format!("document {i} ").repeat(10 + i)).collect();
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        assert_eq!(sample_documents(&refs, 0, 1), refs);
        assert_eq!(sample_documents(&refs, usize::MAX, 1), refs);
        let a = sample_documents(&refs, 5000, 1);
        assert_eq!(a, sample_documents(&refs, 5000, 1));
        assert_eq!(a.iter().map(|d| d.len()).sum::<usize>(), 5000);
        assert_ne!(a, sample_documents(&refs, 5000, 2));
        // One huge multi-byte document is cut at a character boundary.
        let big = "é".repeat(1000);
        let s = sample_documents(&[big.as_str()], 101, 1);
        assert_eq!(s[0].len(), 100);
    }
}
