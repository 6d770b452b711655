//! `boost bench --gemm-shapes`: every GEMM shape a training step calls, with its rate against
//! the GEMM peak measured in the same run, from the profiled step itself (so the shapes, the
//! transposes and the thread split are exactly the engine's), and each shape's rate alone.

use crate::stats::median;
use boost_tensor::cpu::Cpu;
use boost_tensor::cpu::pool::hold_pool;
use boost_tensor::profile::{GemmShape, GemmTotals};
use boost_tensor::{Backend, Mat, MatMut};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use std::time::Instant;

/// One GEMM shape of a step and its rates.
#[derive(Debug, Clone, Serialize)]
pub struct GemmRow {
    /// `c (m×n) = op(a) (m×k) · op(b) (k×n)`: written as the fields m, n, k, trans_a, trans_b
    /// and accumulate of the row.
    #[serde(flatten, serialize_with = "shape_fields")]
    pub shape: GemmShape,
    pub calls_per_step: f64,
    pub ms_per_step: f64,
    pub gflops: f64,
    /// `gflops` over the measured peak.
    pub of_peak: f64,
    /// This shape's share of the step's GEMM time.
    pub share: f64,
    /// The same product alone ([`time_alone`]): its own operands, called back to back, so
    /// those that fit stay in the caches. None until measured.
    pub alone_gflops: Option<f64>,
    /// `alone_gflops` over the GEMM peak measured right before and after this product alone.
    pub alone_of_peak: Option<f64>,
}

/// A shape's fields as the row's own (the tensor crate does not serialize).
fn shape_fields<S: Serializer>(s: &GemmShape, ser: S) -> Result<S::Ok, S::Error> {
    let mut f = ser.serialize_struct("GemmShape", 6)?;
    f.serialize_field("m", &s.m)?;
    f.serialize_field("n", &s.n)?;
    f.serialize_field("k", &s.k)?;
    f.serialize_field("trans_a", &s.trans_a)?;
    f.serialize_field("trans_b", &s.trans_b)?;
    f.serialize_field("accumulate", &s.accumulate)?;
    f.end()
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
                shape: s,
                calls_per_step: t.calls as f64 / steps,
                ms_per_step: 1e3 * secs / steps,
                gflops,
                of_peak: gflops / peak_gflops,
                share: if total > 0.0 { secs / total } else { 0.0 },
                alone_gflops: None,
                alone_of_peak: None,
            }
        })
        .collect();
    rows.sort_by(|a, b| b.ms_per_step.total_cmp(&a.ms_per_step));
    rows
}

/// Rate each row's product alone: operands of its shape and layout allocated here, one call
/// to warm up, then the median of `calls` calls back to back through the engine's GEMM (the
/// same panels and threads as in the step). Each rate is also taken against `peak()`
/// measured right before and right after that shape (the larger of the two): a host whose
/// speed drifts moves a shape's rate and its neighbouring peaks alike, so the shares of the
/// peak compare with the step's where raw rates would not. What the step loses against the
/// product alone is its context: mostly operands that a step reads from memory, long after
/// it wrote them (docs/PERFORMANCE.md, "Why the weight gradients run slower in a step than
/// alone").
pub fn time_alone(rows: &mut [GemmRow], calls: usize, peak: impl Fn() -> f64) {
    let be = Cpu::<f32>::new();
    let mut before = peak();
    for r in rows.iter_mut() {
        let GemmShape { m, n, k, trans_a, trans_b, accumulate } = r.shape;
        // Values that stay normal after any number of accumulating calls.
        let a = vec![0.5f32; m * k];
        let b = vec![0.25f32; k * n];
        let mut c = vec![0.0f32; m * n];
        let av = if trans_a { Mat::new(&a, k, m).t() } else { Mat::new(&a, m, k) };
        let bv = if trans_b { Mat::new(&b, n, k).t() } else { Mat::new(&b, k, n) };
        // Called as the step calls them: in the pool, its workers held awake.
        let secs: Vec<f64> = hold_pool(|| {
            (0..=calls.max(1))
                .map(|_| {
                    let t = Instant::now();
                    be.gemm(MatMut::new(&mut c, m, n), av, bv, 1.0, accumulate);
                    t.elapsed().as_secs_f64()
                })
                .skip(1)
                .collect()
        });
        let gflops = r.shape.flops() / median(&secs).max(1e-12) / 1e9;
        let after = peak();
        r.alone_gflops = Some(gflops);
        r.alone_of_peak = Some(gflops / before.max(after));
        before = after;
    }
}

/// The rows as a Markdown table, `legend` naming the model's dimensions; the columns of the
/// rate alone appear once [`time_alone`] has filled them.
pub fn table(arch: &str, legend: &str, rows: &[GemmRow]) -> String {
    let alone = rows.iter().any(|r| r.alone_gflops.is_some());
    let (head, rule) =
        if alone { (" alone GFLOP/s | alone of peak | step / alone (of peak) |", "---|---|---|") } else { ("", "") };
    let mut s = format!(
        "\n{arch} GEMM shapes ({legend}); ᵀ: operand read transposed, +=: accumulates\n\n| m × k · k × n | calls/step | ms/step | GFLOP/s | of peak | share of GEMM time |{head}\n|---|---|---|---|---|---|{rule}\n"
    );
    for r in rows {
        let alone = match (r.alone_gflops, r.alone_of_peak) {
            (Some(g), Some(p)) => format!(" {g:.1} | {:.0}% | {:.0}% |", 100.0 * p, 100.0 * r.of_peak / p),
            _ => String::new(),
        };
        s += &format!(
            "| {}{} × {} · {} × {}{}{} | {:.0} | {:.1} | {:.1} | {:.0}% | {:.1}% |{alone}\n",
            r.shape.m,
            if r.shape.trans_a { "ᵀ" } else { "" },
            r.shape.k,
            r.shape.k,
            r.shape.n,
            if r.shape.trans_b { "ᵀ" } else { "" },
            if r.shape.accumulate { " +=" } else { "" },
            r.calls_per_step,
            r.ms_per_step,
            r.gflops,
            100.0 * r.of_peak,
            100.0 * r.share
        );
    }
    if let Some(ms) = ms_saved_alone(rows) {
        let total: f64 = rows.iter().map(|r| r.ms_per_step).sum();
        s += &format!(
            "\nEvery product at its share of the peak alone: the step's GEMMs would take {ms:.1} ms less ({:.0}% of their time; a negative figure means the host slowed while the products were timed alone).\n",
            100.0 * ms / total
        );
    }
    s
}

/// The GEMM time a step would save if every product ran at its share of the peak alone:
/// Σ ms × (1 − step share / share alone). None until [`time_alone`] has run.
pub fn ms_saved_alone(rows: &[GemmRow]) -> Option<f64> {
    rows.iter().map(|r| r.alone_of_peak.map(|p| r.ms_per_step * (1.0 - r.of_peak / p))).sum()
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
        assert_eq!((r[0].shape.m, r[0].calls_per_step), (2, 2.0));
        assert!((r[0].ms_per_step - 20.0).abs() < 1e-9);
        assert!((r[0].gflops - 512.0 / 0.04 / 1e9).abs() < 1e-15);
        assert!((r[0].of_peak - r[0].gflops / 1e-6).abs() < 1e-9);
        assert!((r[0].share - 40.0 / 70.0).abs() < 1e-12);
        assert_eq!(r[1].shape.m, 1);
        assert!(table("cola", "T = 2", &r).contains("| 2 × 8 · 8 × 4ᵀ | 2 | 20.0 |"));
        assert!(!table("cola", "T = 2", &r).contains("alone"), "no alone columns before timing");
    }

    /// A row's JSON keeps the shape's fields at its top level, beside the rates.
    #[test]
    fn a_row_writes_its_shape_flat() {
        let t = GemmTotals { time: Duration::from_millis(10), calls: 2, flops: shape(3).flops() };
        let json = serde_json::to_value(&rows(&[vec![(shape(3), t)]], 1.0, 1.0)[0]).unwrap();
        let keys = ["m", "n", "k", "trans_a", "trans_b", "accumulate", "calls_per_step"];
        let got: Vec<String> = keys.iter().map(|k| json[k].to_string()).collect();
        assert_eq!(got, ["3", "4", "8", "false", "true", "false", "2.0"], "{json}");
        assert!(json.get("shape").is_none(), "{json}");
    }

    /// Timing alone fills every row with a positive rate, and the table shows it with the
    /// step's rate as a share of it.
    #[test]
    fn each_shape_is_timed_alone_and_compared_with_the_step() {
        let t = GemmTotals { time: Duration::from_millis(10), calls: 1, flops: 0.0 };
        let shapes = [
            GemmShape { m: 64, n: 48, k: 96, trans_a: true, trans_b: false, accumulate: true },
            GemmShape { m: 40, n: 72, k: 24, trans_a: false, trans_b: true, accumulate: false },
        ];
        let mut r = rows(&[shapes.iter().map(|s| (*s, GemmTotals { flops: s.flops(), ..t })).collect()], 1.0, 1.0);
        // Peaks of 5, 2 and 3 GFLOP/s around the two shapes: each takes its larger neighbour.
        let peaks = [5.0, 2.0, 3.0];
        let next = std::cell::Cell::new(0);
        time_alone(&mut r, 3, || {
            next.set(next.get() + 1);
            peaks[next.get() - 1]
        });
        assert_eq!(next.get(), 3, "one peak before each shape and one after the last");
        for (row, p) in r.iter().zip([5.0, 3.0]) {
            let g = row.alone_gflops.expect("timed");
            assert!(g.is_finite() && g > 0.0, "{g}");
            assert_eq!(row.alone_of_peak, Some(g / p));
        }
        let text = table("cola", "T = 64", &r);
        assert!(text.contains("| alone GFLOP/s | alone of peak | step / alone (of peak) |"), "{text}");
        let (g, p) = (r[0].alone_gflops.unwrap(), r[0].alone_of_peak.unwrap());
        let want = format!("| {g:.1} | {:.0}% | {:.0}% |", 100.0 * p, 100.0 * r[0].of_peak / p);
        assert!(text.contains(&want), "{text}");
        // Σ ms × (1 − share in the step / share alone), here from set rates.
        let (mut a, mut b) = (r[0].clone(), r[1].clone());
        (a.ms_per_step, a.of_peak, a.alone_of_peak) = (10.0, 0.5, Some(0.8));
        (b.ms_per_step, b.of_peak, b.alone_of_peak) = (4.0, 0.6, Some(0.5));
        let saved = ms_saved_alone(&[a.clone(), b.clone()]).unwrap();
        assert!((saved - (10.0 * (1.0 - 0.5 / 0.8) + 4.0 * (1.0 - 0.6 / 0.5))).abs() < 1e-12, "{saved}");
        assert!(
            table("cola", "T = 64", &[a, b]).contains(&format!("would take {saved:.1} ms less (21% of their time;"))
        );
        assert_eq!(ms_saved_alone(&rows(&[vec![(shapes[0], t)]], 1.0, 1.0)), None, "not timed alone");
    }
}
