//! Summaries of repeated timings.

/// The upper median of `v` (0 when empty): the middle value, or the higher of the middle two.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if s.is_empty() { 0.0 } else { s[s.len() / 2] }
}
