//! A deterministic, bounded sample of a document stream, so that tokenizer training has a
//! bounded input however large the corpus.
//!
//! Each document `i` gets a key, the first `u64` of ChaCha8 keyed by
//! `seed ‖ i ‖ "BOOST-bpe-sample"`. The sample is the documents in key order, whole while they
//! fit in `max_bytes`; the first one that does not fit is cut (at a character boundary) to fill
//! the rest. It is returned in input order. [`Sampler`] keeps only the candidates, never more than
//! about `2 · max_bytes`, so the sample of a stream depends only on the documents, `max_bytes`
//! and `seed`.

use crate::loader::keyed_rng;
use rand_chacha::rand_core::Rng;
use std::collections::BinaryHeap;

const LABEL: &[u8; 16] = b"BOOST-bpe-sample";

/// A candidate: ordered by key (then index), so the heap's top is the one to drop first.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    key: u64,
    index: u64,
    text: String,
}

/// Collects the sample of documents offered one at a time.
pub struct Sampler {
    max_bytes: usize,
    seed: u64,
    heap: BinaryHeap<Candidate>,
    bytes: usize,
    offered: usize,
}

impl Sampler {
    /// A sampler keeping at most `max_bytes` bytes (0: everything).
    pub fn new(max_bytes: usize, seed: u64) -> Sampler {
        Sampler { max_bytes, seed, heap: BinaryHeap::new(), bytes: 0, offered: 0 }
    }

    /// Offers document `index` (indices must be distinct).
    pub fn offer(&mut self, index: u64, text: &str) {
        self.offered += text.len();
        if self.max_bytes == 0 {
            self.heap.push(Candidate { key: 0, index, text: text.to_string() });
            return;
        }
        let key = keyed_rng(self.seed, index, LABEL).next_u64();
        // Only the first max_bytes of any document can ever be used.
        let text = cut(text, self.max_bytes).to_string();
        self.bytes += text.len();
        self.heap.push(Candidate { key, index, text });
        // Drop the largest key while the others alone fill the budget.
        while let Some(top) = self.heap.peek() {
            if self.bytes - top.text.len() < self.max_bytes {
                break;
            }
            self.bytes -= top.text.len();
            self.heap.pop();
        }
    }

    /// Bytes offered so far.
    pub fn offered_bytes(&self) -> usize {
        self.offered
    }

    /// The sample, in input order.
    pub fn finish(self) -> Vec<String> {
        let mut chosen = self.heap.into_sorted_vec();
        if self.max_bytes > 0 {
            let mut left = self.max_bytes;
            for c in &mut chosen {
                let keep = cut(&c.text, left).len();
                c.text.truncate(keep);
                left -= keep;
            }
            chosen.retain(|c| !c.text.is_empty());
        }
        chosen.sort_unstable_by_key(|c| c.index);
        chosen.into_iter().map(|c| c.text).collect()
    }
}

/// The longest prefix of `s` of at most `n` bytes that ends at a character boundary.
fn cut(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut at = n;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

/// The sample of `docs` (document `i` is `docs[i]`) of at most `max_bytes` bytes; all of them
/// if `max_bytes` is 0 or they fit.
pub fn sample_documents(docs: &[&str], max_bytes: usize, seed: u64) -> Vec<String> {
    let mut s = Sampler::new(max_bytes, seed);
    for (i, d) in docs.iter().enumerate() {
        s.offer(i as u64, d);
    }
    s.finish()
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

    #[test]
    fn the_sample_is_whole_documents_in_key_order_then_one_cut() {
        let docs: Vec<String> = (0..200).map(|i| "x".repeat(10 + (i * 7) % 90)).collect();
        let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let max = 3000;
        let got = sample_documents(&refs, max, 9);
        // The same rule written directly: sort every index by key, fill, cut the first misfit.
        let mut order: Vec<(u64, usize)> =
            (0..refs.len()).map(|i| (keyed_rng(9, i as u64, LABEL).next_u64(), i)).collect();
        order.sort_unstable();
        let (mut want, mut left) = (Vec::new(), max);
        for (_, i) in order {
            let take = refs[i].len().min(left);
            if take > 0 {
                want.push((i, &refs[i][..take]));
            }
            left -= take;
            if take < refs[i].len() {
                break;
            }
        }
        want.sort_unstable();
        let want: Vec<&str> = want.into_iter().map(|(_, s)| s).collect();
        assert_eq!(got, want);
    }
}
