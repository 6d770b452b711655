//! The report of `boost bench` as Markdown: the step table, where MFU goes, and each side's
//! step split by kind of work.

use crate::peer::StepSplit;
use crate::stats::median;
use crate::step::BenchReport;

/// The peer's GEMM peak over ours below which the table notes that the ratio reflects the
/// peer's BLAS.
pub const SLOW_PEER_BLAS: f64 = 0.75;

/// The report as a Markdown table.
pub fn table(r: &BenchReport) -> String {
    let mut s = format!(
        "{}; {}\nseq {} × micro-batch {}, {} threads, GEMM peak {:.1} GFLOP/s (f32) at the start\n\n| arch | params | step (median) | tokens/s | GEMM | attention | other | MFU (against the peak beside its steps) | peak RSS | PyTorch tokens/s | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        r.cpu, r.simd, r.seq, r.micro_batch, r.threads, r.gemm_peak_gflops
    );
    for a in &r.results {
        let pt = a.torch.as_ref().and_then(|v| v["tokens_per_sec"].as_f64());
        s += &format!(
            "| {} | {:.1}M | {:.3} s | {:.0} | {:.0}% | {:.0}% | {:.0}% | {:.1}% ({:.0} GFLOP/s) | {:.0} MiB | {} | {} |\n",
            a.arch,
            a.params as f64 / 1e6,
            a.step_time_s,
            a.tokens_per_sec,
            100.0 * a.gemm_s / a.step_time_s,
            100.0 * a.attention_s / a.step_time_s,
            100.0 * a.other_s / a.step_time_s,
            100.0 * a.mfu,
            a.gemm_peak_gflops,
            a.peak_rss_mib,
            pt.map(|x| format!("{x:.0}")).unwrap_or("—".into()),
            a.torch_ratio.map(|x| format!("{x:.2}×")).unwrap_or("—".into()),
        );
    }
    let torch_peaks: Vec<String> = r
        .results
        .iter()
        .filter_map(|a| {
            let p = a.torch_gemm_peak_gflops?;
            let mfu = a.torch_mfu.map(|x| format!(", its MFU {:.1}%", 100.0 * x)).unwrap_or_default();
            Some(format!("{} {p:.0} GFLOP/s{mfu}", a.arch))
        })
        .collect();
    if !torch_peaks.is_empty() {
        s += &format!(
            "\nPyTorch's GEMM peak (torch.mm on the same squares and threads, beside its steps): {}\n",
            torch_peaks.join("; ")
        );
    }
    // A peer whose BLAS runs far below our peak (MKL's AVX2 kernels on an AMD CPU with
    // AVX-512) makes the ratio measure its library as much as the engine: say so.
    let slow: Vec<String> = r
        .results
        .iter()
        .filter_map(|a| {
            let share = a.torch_gemm_peak_gflops? / a.gemm_peak_gflops;
            (share < SLOW_PEER_BLAS).then(|| format!("{} {:.0}%", a.arch, 100.0 * share))
        })
        .collect();
    if !slow.is_empty() {
        s += &format!(
            "note: PyTorch's GEMM peak is {} of ours on this CPU: its BLAS takes a slower path, and the ratio reflects that as much as the engine\n",
            slow.join(", ")
        );
    }
    s += &mfu_lines(r);
    if let Some(x) = r.lowrank_speedup {
        s += &format!("\nlow-rank / full-rank tokens/s: {x:.2}×\n");
    }
    if !r.core_speeds.is_empty() {
        let speeds: Vec<String> = r.core_speeds.iter().map(|(c, v)| format!("CPU {c} {v:.2}")).collect();
        s += &format!("\nGEMM panels by core speed (1: an equal share): {}\n", speeds.join(", "));
    }
    s + &split_table(r)
}

/// Where each model's MFU goes: the GEMMs' and attention's rates against the peak beside its
/// steps, and the time a step spends in other kernels and outside any kernel timer (FLOP-free
/// time, which only lowers MFU).
fn mfu_lines(r: &BenchReport) -> String {
    let mut s = String::from("\nWhere MFU goes (rates against the peak beside the steps):\n");
    for a in &r.results {
        let untimed = (a.step_time_s - a.gemm_s - a.attention_s - a.other_s).max(0.0);
        s += &format!(
            "- {}: GEMMs {:.0} GFLOP/s ({:.0}%), attention {:.0} GFLOP/s ({:.0}%), other kernels {:.0} ms and untimed {:.0} ms a step\n",
            a.arch,
            a.gemm_gflops,
            100.0 * a.gemm_gflops / a.gemm_peak_gflops,
            a.attention_gflops,
            100.0 * a.attention_gflops / a.gemm_peak_gflops,
            1e3 * a.other_s,
            1e3 * untimed,
        );
    }
    s
}

/// Each side's step by kind of work, from the pairs of steps after the timed ones (medians
/// over the pairs; the ratio is the median of the pairs' ratios): which part of the step the
/// ratio to the peer comes from.
fn split_table(r: &BenchReport) -> String {
    let rows: Vec<_> = r.results.iter().filter(|a| !a.torch_split.is_empty()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nms a step, ours · PyTorch's (PyTorch's ÷ ours), medians over pairs of steps after the timed ones: ours from the kernel timers, PyTorch's under torch.profiler (self time of aten::mm/addmm/bmm, of the attention kernels, of the other operators)\n\n| arch | pairs | GEMM | attention | other | whole step (PyTorch's profiled) |\n|---|---|---|---|---|---|\n",
    );
    for a in rows {
        let pairs = &a.torch_split;
        let cell = |f: fn(&StepSplit) -> f64| {
            let ours = median(&pairs.iter().map(|p| f(&p.ours)).collect::<Vec<_>>());
            let theirs = median(&pairs.iter().map(|p| f(&p.torch)).collect::<Vec<_>>());
            let ratio = median(&pairs.iter().map(|p| f(&p.torch) / f(&p.ours)).collect::<Vec<_>>());
            format!("{:.0} · {:.0} ({ratio:.2}×)", 1e3 * ours, 1e3 * theirs)
        };
        s += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            a.arch,
            pairs.len(),
            cell(|x| x.gemm_s),
            cell(|x| x.attention_s),
            cell(|x| x.other_s),
            cell(|x| x.step_s),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::ArchResult;

    /// A report of one model: a 1 s step with 0.6 s of GEMMs at 200 GFLOP/s and 0.1 s of
    /// attention at 50, against a peak of 250 beside its steps.
    fn report() -> BenchReport {
        let a = ArchResult {
            arch: "cola".into(),
            params: 1,
            matmul_params: 1,
            step_time_s: 1.0,
            step_times_s: vec![1.0],
            tokens_per_sec: 1.0,
            gemm_s: 0.6,
            attention_s: 0.1,
            other_s: 0.25,
            gemm_gflops: 200.0,
            attention_gflops: 50.0,
            model_flops_per_token: 1.0,
            gemm_peaks_gflops: vec![250.0; 4],
            gemm_peak_gflops: 250.0,
            mfu: 0.5,
            mfu_full_attention: 0.5,
            peak_rss_mib: 1.0,
            torch: None,
            torch_ratio: None,
            torch_gemm_peaks_gflops: Vec::new(),
            torch_gemm_peak_gflops: None,
            torch_mfu: None,
            torch_step_ratios: Vec::new(),
            torch_split: Vec::new(),
            gemm_shapes: Vec::new(),
        };
        BenchReport {
            cpu: "cpu".into(),
            simd: "simd".into(),
            threads: 2,
            seq: 256,
            micro_batch: 8,
            gemm_peak_gflops: 240.0,
            results: vec![a],
            lowrank_speedup: None,
            core_speeds: Vec::new(),
        }
    }

    #[test]
    fn the_table_says_where_mfu_goes() {
        let t = table(&report());
        let line = "- cola: GEMMs 200 GFLOP/s (80%), attention 50 GFLOP/s (20%), other kernels 250 ms and untimed 50 ms a step";
        assert!(t.contains(line), "{t}");
    }
}
