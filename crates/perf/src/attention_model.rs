//! Attention efficiency by head dimension and sequence length (docs/COST_MODEL.md §6).
//!
//! A preset may list the fraction of peak a flash-attention kernel reaches, forward and
//! backward together, at measured (head_dim, seq) points. The efficiency of a call is read at
//! the listed head dimension nearest to its own (by ratio), interpolated linearly in ln(seq)
//! between the two listed sequence lengths around its own, and held at the first or last
//! point outside them. Without a table, `attention_efficiency` holds for every shape.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// One measured point of the attention kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionPoint {
    pub head_dim: u64,
    pub seq: u64,
    /// Fraction of the device's dense peak on executed FLOPs (causal half of S², backward
    /// 2.5× the forward).
    pub efficiency: f64,
}

/// The table's efficiency at `head_dim`, `seq`; `None` for an empty table.
pub fn efficiency(table: &[AttentionPoint], head_dim: u64, seq: u64) -> Option<f64> {
    let distance = |h: u64| (h.max(1) as f64 / head_dim.max(1) as f64).ln().abs();
    let nearest = table.iter().map(|p| p.head_dim).min_by(|a, b| distance(*a).total_cmp(&distance(*b)))?;
    let mut row: Vec<&AttentionPoint> = table.iter().filter(|p| p.head_dim == nearest).collect();
    row.sort_by_key(|p| p.seq);
    let (first, last) = (row[0], row[row.len() - 1]);
    if seq <= first.seq {
        return Some(first.efficiency);
    }
    if seq >= last.seq {
        return Some(last.efficiency);
    }
    let i = row.iter().position(|p| p.seq >= seq).expect("seq is below the last point");
    let (lo, hi) = (row[i - 1], row[i]);
    let x = |s: u64| (s as f64).ln();
    let w = (x(seq) - x(lo.seq)) / (x(hi.seq) - x(lo.seq));
    Some(lo.efficiency + w * (hi.efficiency - lo.efficiency))
}

/// Every point has a positive head dimension and sequence, an efficiency in (0, 1], and no
/// two points share (head_dim, seq).
pub fn validate(table: &[AttentionPoint]) -> Result<()> {
    for (i, p) in table.iter().enumerate() {
        let key = |f: &str| format!("compute.attention_table[{i}].{f}");
        if p.head_dim == 0 {
            bail!("hardware key `{}` must be at least 1", key("head_dim"));
        }
        if p.seq == 0 {
            bail!("hardware key `{}` must be at least 1", key("seq"));
        }
        if !(p.efficiency > 0.0 && p.efficiency <= 1.0) {
            bail!(
                "hardware key `{}` is a fraction of the peak, above 0 and at most 1, got {}",
                key("efficiency"),
                p.efficiency
            );
        }
        if table[..i].iter().any(|q| (q.head_dim, q.seq) == (p.head_dim, p.seq)) {
            bail!(
                "hardware key `compute.attention_table` lists head_dim = {}, seq = {} twice (entry {i})",
                p.head_dim,
                p.seq
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(head_dim: u64, seq: u64, efficiency: f64) -> AttentionPoint {
        AttentionPoint { head_dim, seq, efficiency }
    }

    #[test]
    fn the_table_hits_its_points_and_interpolates_in_log_seq() {
        let t = [point(64, 1024, 0.3), point(64, 4096, 0.5), point(128, 1024, 0.4), point(128, 4096, 0.6)];
        assert_eq!(efficiency(&t, 128, 4096), Some(0.6));
        assert_eq!(efficiency(&t, 64, 1024), Some(0.3));
        // 2048 is halfway between 1024 and 4096 in ln(seq).
        assert!((efficiency(&t, 128, 2048).unwrap() - 0.5).abs() < 1e-12);
        assert!((efficiency(&t, 64, 2048).unwrap() - 0.4).abs() < 1e-12);
        // Held outside the listed sequences; the nearest head dimension by ratio.
        assert_eq!(efficiency(&t, 128, 256), Some(0.4));
        assert_eq!(efficiency(&t, 128, 65536), Some(0.6));
        assert_eq!(efficiency(&t, 96, 4096), Some(0.6));
        assert_eq!(efficiency(&t, 80, 4096), Some(0.5));
        assert_eq!(efficiency(&t, 256, 1024), Some(0.4));
        assert_eq!(efficiency(&[], 128, 4096), None);
    }

    #[test]
    fn bad_points_are_refused_by_key() {
        let e = validate(&[point(128, 4096, 0.5), point(64, 4096, 1.5)]).unwrap_err().to_string();
        assert!(e.contains("compute.attention_table[1].efficiency"), "{e}");
        let e = validate(&[point(0, 4096, 0.5)]).unwrap_err().to_string();
        assert!(e.contains("compute.attention_table[0].head_dim"), "{e}");
        let e = validate(&[point(64, 0, 0.5)]).unwrap_err().to_string();
        assert!(e.contains("compute.attention_table[0].seq"), "{e}");
        let e = validate(&[point(64, 512, 0.5), point(64, 512, 0.6)]).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        assert!(validate(&[point(64, 512, 1.0)]).is_ok());
    }
}
