//! `boost bench --gemm-shapes`: every GEMM shape a training step calls, with its rate against
//! the GEMM peak measured in the same run, from the profiled step itself (so the shapes, the
//! transposes and the thread split are exactly the engine's).

use boost_tensor::profile::{GemmShape, GemmTotals};
use serde::Serialize;

/// One GEMM shape of a step: `c (m×n) = op(a) (m×k) · op(b) (k×n)`.
#[derive(Debug, Clone, Serialize)]
pub struct GemmRow {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `a` read transposed (the stored matrix is k×m).
    pub trans_a: bool,
    /// `b` read transposed (the stored matrix is n×k).
    pub trans_b: bool,
    /// `c` accumulates (`c += …`, as weight gradients do).
    pub accumulate: bool,
    pub calls_per_step: f64,
    pub ms_per_step: f64,
    pub gflops: f64,
    /// `gflops` over the measured peak.
    pub of_peak: f64,
    /// This shape's share of the step's GEMM time.
    pub share: f64,
}

/// Merge the shapes of several measurements and rate them; the slowest in total first.
pub fn rows(measured: &[Vec<(GemmShape, GemmTotals)>], steps: f64, peak_gflops: f64) -> Vec<GemmRow> {
    let mut merged: Vec<(GemmShape, GemmTotals)> = Vec::new();
    for (shape, t) in measured.iter().flatten() {
        match merged.iter_mut().find(|e| e.0 == *shape) {
            Some(e) => {
                e.1.time += t.time;
                e.1.calls += t.calls;
                e.1.flops += t.flops;
            }
            None => merged.push((*shape, *t)),
        }
    }
    let total: f64 = merged.iter().map(|e| e.1.time.as_secs_f64()).sum();
    let mut rows: Vec<GemmRow> = merged
        .into_iter()
        .map(|(s, t)| {
            let secs = t.time.as_secs_f64();
            let gflops = if secs > 0.0 { t.flops / secs / 1e9 } else { 0.0 };
            GemmRow {
                m: s.m,
                n: s.n,
                k: s.k,
                trans_a: s.trans_a,
                trans_b: s.trans_b,
                accumulate: s.accumulate,
                calls_per_step: t.calls as f64 / steps,
                ms_per_step: 1e3 * secs / steps,
                gflops,
                of_peak: gflops / peak_gflops,
                share: if total > 0.0 { secs / total } else { 0.0 },
            }
        })
        .collect();
    rows.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));
    rows
}

/// The rows as a Markdown table, `legend` naming the model's dimensions.
pub fn table(arch: &str, legend: &str, rows: &[GemmRow]) -> String {
    let mut s = format!(
        "\n{arch} GEMM shapes ({legend}); ᵀ: operand read transposed, +=: accumulates\n\n| m × k · k × n | calls/step | ms/step | GFLOP/s | of peak | share of GEMM time |\n|---|---|---|---|---|---|\n"
    );
    for r in rows {
        s += &format!(
            "| {}{} × {} · {} × {}{}{} | {:.0} | {:.1} | {:.1} | {:.0}% | {:.1}% |\n",
            r.m,
            if r.trans_a { "ᵀ" } else { "" },
            r.k,
            r.k,
            r.n,
            if r.trans_b { "ᵀ" } else { "" },
            if r.accumulate { " +=" } else { "" },
            r.calls_per_step,
            r.ms_per_step,
            r.gflops,
            100.0 * r.of_peak,
            100.0 * r.share
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn shape(m: usize) -> GemmShape {
        GemmShape { m, n: 4, k: 8, trans_a: false, trans_b: true, accumulate: false }
    }

    #[test]
    fn measurements_merge_by_shape_and_rate_against_the_peak() {
        let t = |ms: u64, calls: u64, m: usize| GemmTotals {
            time: Duration::from_millis(ms),
            calls,
            flops: calls as f64 * shape(m).flops(),
        };
        let a = vec![(shape(2), t(10, 2, 2)), (shape(1), t(30, 1, 1))];
        let b = vec![(shape(2), t(30, 2, 2))];
        let r = rows(&[a, b], 2.0, 1e-6);
        // Shape 2: 40 ms over 2 steps, 4 calls of 2·2·4·8 = 128 FLOPs.
        assert_eq!((r[0].m, r[0].calls_per_step), (2, 2.0));
        assert!((r[0].ms_per_step - 20.0).abs() < 1e-9);
        assert!((r[0].gflops - 512.0 / 0.04 / 1e9).abs() < 1e-15);
        assert!((r[0].of_peak - r[0].gflops / 1e-6).abs() < 1e-9);
        assert!((r[0].share - 40.0 / 70.0).abs() < 1e-12);
        assert_eq!(r[1].m, 1);
        assert!(table("cola", "T = 2", &r).contains("| 2 × 8 · 8 × 4ᵀ | 2 | 20.0 |"));
    }
}
